import os
import tempfile

# Tests never touch the network and never write to the user's caches.
_HF_HOME = tempfile.mkdtemp(prefix="fixedid-test-hf-")
os.environ["HF_HOME"] = _HF_HOME
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["MPLBACKEND"] = "Agg"
os.environ.setdefault("FIXEDID_CACHE", tempfile.mkdtemp(prefix="fixedid-test-cache-"))

# Under pytest-xdist (-n N) each worker gets an equal share of the cores, and so do the processes it starts (notebook
# kernels, torchrun ranks, study workers): torch would otherwise start one thread per core in every one of them, and
# oversubscribed cores run torch many times slower.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = _share
    import torch

    torch.set_num_threads(int(_share))


# ---- test-sized checkpoints of the built-in language, shared by the analysis tests (a module may set SEED)
import pytest  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    from fixedid.data import SyntheticLanguage
    from fixedid.data.tokenizer import train_words

    return train_words(SyntheticLanguage(0).documents(400), 4096)


@pytest.fixture(scope="module", params=["canonical", "gf2"])
def model(request, tmp_path_factory, tokenizer):
    from tests._helpers import tiny_checkpoint

    return tiny_checkpoint(tmp_path_factory, tokenizer, request.param, seed=getattr(request.module, "SEED", 3))


@pytest.fixture(scope="module")
def learned(request, tmp_path_factory, tokenizer):
    from tests._helpers import tiny_checkpoint

    return tiny_checkpoint(tmp_path_factory, tokenizer, "learned", seed=getattr(request.module, "SEED", 3))
