"""Sparse dictionaries (SAEs, transcoders, skip transcoders) at any hook point of any checkpoint."""

from analysis.features.dictionary import ARCHS, KINDS, DictionaryConfig, SparseDictionary
from analysis.features.metrics import dictionary_metrics
from analysis.features.run import dictionary_config, fit_dictionary, split_windows
from analysis.features.saelens_format import load_dictionary, save_dictionary
from analysis.features.survey import feature_survey
from analysis.features.train import train_dictionary

__all__ = ["ARCHS", "KINDS", "DictionaryConfig", "SparseDictionary", "dictionary_metrics", "dictionary_config",
           "fit_dictionary", "split_windows", "load_dictionary", "save_dictionary", "train_dictionary", "feature_survey"]
