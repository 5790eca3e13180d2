"""analysis: studies fixedid checkpoints.

``analysis.load(path)`` gives the checkpoint's own model with notebook conveniences and views for TransformerLens
(``.to_transformer_lens()``) and nnsight (``.to_nnsight()``); the ``fixedid-analyze`` command line wraps every
analysis and writes CSV and figures.

The package is laid out by role; a module imports only from its own layer or the layers below it (imports inside
functions included; ``tests/analysis/test_layers.py`` holds it), and nothing imports ``analysis`` from ``fixedid``:

1. the foundation, at the root: :mod:`analysis.errors`, :mod:`analysis.stats` (every interval and test),
   :mod:`analysis.outputs` (atomic CSV and JSON), :mod:`analysis.corpus`, :mod:`analysis.labels`, :mod:`analysis.pairs`,
   :mod:`analysis.tasks`, and the hook and module names, :mod:`analysis.engine.names` (imports nothing);
2. :mod:`analysis.interop`: TransformerLens, nnsight and Hugging Face - every reach into a third party's internals;
3. the model, at the root: :mod:`analysis.model` (:class:`~analysis.model.HookedFixedIdLM`), :mod:`analysis.loading`
   (:func:`~analysis.loading.load`), :mod:`analysis.variants` (the checkpoints a notebook studies);
4. :mod:`analysis.engine`: sites, batched staged forwards, the effect of an edit, metrics;
5. :mod:`analysis.readouts` (activations, probes, similarity, the logit lens, head geometry),
   :mod:`analysis.evaluation` (behaviours on the built-in tasks, the lm-eval adapter and its tasks) and
   :mod:`analysis.features` (sparse dictionaries: SAEs and transcoders), independent of each other;
6. :mod:`analysis.causal`: patching, information flow, ablations, input-code interventions, bit x layer maps, GF(2)
   recodings, erasure, context use;
7. :mod:`analysis.figures`: the only package that draws (one style, one module per family of figures);
8. :mod:`analysis.specs`: one description per analysis (its parameters, computation, figures and study measurements)
   and the registry that finds them, plugins' included;
9. :mod:`analysis.study` (the pipeline over seeds and its report) and :mod:`analysis.demo` (the main job);
10. :mod:`analysis.cli`: the ``fixedid-analyze`` driver over the specs, ``fixedid-study``.

Measurement functions return tidy DataFrames and never draw. Importing a module changes no global state: the lm-eval
model ``fixedid`` is registered when the adapter is first used (:func:`analysis.evaluation.lmeval.register`).
"""

from analysis.causal.patching import activation_patching, attribution_patching, to_tensor
from analysis.causal.recoding import permuted_inputs, recoded, recoding_sweep
from analysis.errors import AnalysisError, AnalysisWarning
from analysis.evaluation.behaviours import NGramLM, behaviour_table, pair_scores, prepare_pairs, score_pairs
from analysis.interop.codeinfer import CodeInferredWarning, InferredCode, infer_code
from analysis.interop.statedict import import_state_dict
from analysis.loading import load
from analysis.model import HookedFixedIdLM
from analysis.pairs import PairBatch, make_pairs, read_pairs_jsonl

__all__ = ["AnalysisError", "AnalysisWarning", "HookedFixedIdLM", "load", "PairBatch", "make_pairs", "read_pairs_jsonl",
           "activation_patching", "attribution_patching", "to_tensor", "NGramLM", "behaviour_table", "pair_scores",
           "prepare_pairs", "score_pairs", "recoded", "permuted_inputs", "recoding_sweep", "infer_code", "InferredCode",
           "CodeInferredWarning", "import_state_dict"]
