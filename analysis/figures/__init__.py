"""Every figure the toolkit draws, in one style (:mod:`analysis.figures.style`: palette, paper sizes, PNG beside PDF),
one module per family; only the study, the demo and the CLI import it."""

from analysis.figures.style import save_figure, short_hook, subplots, variant_colours

__all__ = ["save_figure", "short_hook", "subplots", "variant_colours"]
