"""Views for other tools: the TransformerLens bridge (:mod:`analysis.interop.bridge`), the nnsight view
(:mod:`analysis.interop.nnsight_view`), the Hugging Face interchange (:mod:`analysis.interop.hf`), foreign checkpoints
(:mod:`analysis.interop.codeinfer`, :mod:`analysis.interop.statedict`) and CircuitsVis
(:mod:`analysis.interop.circuitsvis_view`); every reach into a third party's internals lives here."""

from analysis.interop.codeinfer import CodeInferredWarning, InferredCode, infer_code
from analysis.interop.hf import export_hf, import_hf, is_hf_dir
from analysis.interop.statedict import import_state_dict, read_key_map, read_model_config, read_state_dict

__all__ = ["export_hf", "import_hf", "is_hf_dir", "CodeInferredWarning", "InferredCode", "infer_code",
           "import_state_dict", "read_key_map", "read_model_config", "read_state_dict"]
