"""Causal methods: activation and attribution patching, path patching, direct logit attribution, distributed alignment search, information flow, ablations, input-code interventions, bit x layer maps, GF(2) recodings, LEACE erasure, context use, attribution graphs through transcoders."""

from analysis.causal.ablation import ablation
from analysis.causal.attribution_graph import attribution_graph
from analysis.causal.bitmap import bit_layer_map
from analysis.causal.components import component_effects
from analysis.causal.das import das_sweep
from analysis.causal.context import component_shares, context_curve, segmentation_cost, window_hooks
from analysis.causal.dla import direct_logit_attribution
from analysis.causal.dla import partition as dla_partition
from analysis.causal.erasure import erasure
from analysis.causal.flow import information_flow
from analysis.causal.interventions import input_intervention
from analysis.causal.paths import path_patching
from analysis.causal.patching import activation_patching, attribution_patching, to_tensor
from analysis.causal.recoding import permuted_inputs, recoded, recoding_sweep

__all__ = ["ablation", "attribution_graph", "bit_layer_map", "component_effects", "das_sweep", "component_shares", "window_hooks",
           "direct_logit_attribution", "dla_partition", "path_patching", "context_curve", "segmentation_cost", "erasure",
           "information_flow", "input_intervention", "activation_patching", "attribution_patching", "to_tensor",
           "permuted_inputs", "recoded", "recoding_sweep"]
