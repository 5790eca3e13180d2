"""Views for other tools: the TransformerLens bridge (:mod:`.bridge`), the nnsight view (:mod:`.nnsight_view`) and the Hugging Face interchange (:mod:`.hf`); every reach into a third party's internals lives here."""

from analysis.interop.hf import export_hf, import_hf, is_hf_dir

__all__ = ["export_hf", "import_hf", "is_hf_dir"]
