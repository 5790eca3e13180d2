"""The notebooks run top to bottom (nbclient, a time limit per cell) on three test-sized variants trained once per
test session, pointed at them through FIXEDID_CHECKPOINTS; they are stored without outputs and open and close as
the project asks (what they show, what they do not establish)."""

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT = 240  # seconds per cell on 2 CPU cores

CONFIG = """
[model]
preset = "tiny"
d_model = 32
n_layers = 2
n_heads = 2
d_ff = 64
context = 64
init_std = 0.09

[data]
source = "synthetic"
val_split = "validation"
tokenizer = "words"
vocab_size = 4096
tokenizer_train_bytes = 200000
train_tokens = 60000
val_tokens = 16384

[train]
steps = 16
batch_size = 8
lr = 3e-3
warmup_steps = 2
eval_every = 8
eval_batches = 2
save_every = 8
log_every = 4
keep = [8]
"""


@pytest.fixture(scope="session")
def notebook_run(tmp_path_factory):
    """Three test-sized variants (learned, canonical, gf2), trained once for the session as the demo trains."""
    from analysis.variants import ensure_variants
    from fixedid.train.config import TrainConfig

    root = tmp_path_factory.mktemp("notebook-run")
    cfg = root / "nb.toml"
    cfg.write_text(CONFIG)
    return ensure_variants(TrainConfig.load(str(cfg)), root / "cache", quiet=True)


def test_notebooks_are_stored_clean_and_say_what_they_show_and_do_not():
    # every notebook the README lists is here (and tests/test_readme.py: every one here is listed)
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    listed = re.search(r"`notebooks/` holds .*?\n\n", readme, re.S).group(0)
    assert sorted(re.findall(r"`(\d\d_\w+)`", listed)) == [p.stem for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), f"{path.name} has outputs"
        assert "what this shows" in nb.cells[0].source.lower(), path.name
        assert "does not establish" in nb.cells[-1].source.lower(), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, notebook_run, monkeypatch, tmp_path):
    from nbclient import NotebookClient

    monkeypatch.setenv("FIXEDID_CHECKPOINTS", str(notebook_run))
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
