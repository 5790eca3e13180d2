import os
import tempfile

# Tests never touch the network and never write to the user's caches.
_HF_HOME = tempfile.mkdtemp(prefix="fixedid-test-hf-")
os.environ["HF_HOME"] = _HF_HOME
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["MPLBACKEND"] = "Agg"
os.environ.setdefault("FIXEDID_CACHE", tempfile.mkdtemp(prefix="fixedid-test-cache-"))
