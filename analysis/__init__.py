"""analysis: studies fixedid checkpoints (hookable wrappers, patching, interventions, probes, figures)."""
