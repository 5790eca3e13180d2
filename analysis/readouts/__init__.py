"""What a model holds, read without changing it: activations, linear probes (and their batched solver), CKA similarity, the logit lens, the output head's geometry."""

from analysis.readouts.activations import collect, load_activations
from analysis.readouts.head import head_geometry
from analysis.readouts.lens import logit_lens
from analysis.readouts.probes import fit_probes, probe_table
from analysis.readouts.similarity import cka_matrix, debiased_cka, linear_cka

__all__ = ["collect", "load_activations", "head_geometry", "logit_lens", "fit_probes", "probe_table", "cka_matrix",
           "debiased_cka", "linear_cka"]
