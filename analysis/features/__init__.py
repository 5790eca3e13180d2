"""Sparse dictionaries (SAEs, transcoders, skip transcoders) at any hook point of any checkpoint.

- :mod:`analysis.features.dictionary`: the dictionary (TopK through eai-sparsify; BatchTopK, JumpReLU, ReLU native);
- :mod:`analysis.features.stream`: activations streamed from the model into a bounded, shuffled buffer;
- :mod:`analysis.features.train`: training (unit-norm decoder, dead-latent revival, progress, checkpoints);
- :mod:`analysis.features.metrics`: L0, FVU, dead fraction, spliced and zero-ablated loss, loss recovered, KL;
- :mod:`analysis.features.saelens_format`: SAELens's on-disk layout, written and read;
- :mod:`analysis.features.run`: train and measure on held-out text in one call (``fixedid-analyze sae``);
- :mod:`analysis.features.code_reading`: latents read against the code (best latent's AUROC per bit, token features);
- :mod:`analysis.features.matching`: latents of two dictionaries matched by activation correlation and decoder cosine;
- :mod:`analysis.features.survey`: all of it across depth, models and their random-init twins
  (``fixedid-analyze features``).
"""

from analysis.features.dictionary import ARCHS, KINDS, DictionaryConfig, SparseDictionary
from analysis.features.metrics import dictionary_metrics
from analysis.features.run import dictionary_config, fit_dictionary, split_windows
from analysis.features.saelens_format import load_dictionary, save_dictionary
from analysis.features.survey import feature_survey
from analysis.features.train import train_dictionary

__all__ = ["ARCHS", "KINDS", "DictionaryConfig", "SparseDictionary", "dictionary_metrics", "dictionary_config",
           "fit_dictionary", "split_windows", "load_dictionary", "save_dictionary", "train_dictionary", "feature_survey"]
