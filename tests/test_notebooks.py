"""The notebooks are stored with their outputs (executed on the demo's checkpoints, so they read without running):
small, text and PNG only, no errors, opening with what they teach and how long they take and closing with what they do
not establish, each listed on docs/notebooks.md. They also run top to bottom (nbclient, a time limit per cell) on
three test-sized variants trained once per test session, pointed at them through FIXEDID_CHECKPOINTS, with the two
demo-scale cells at smaller sizes (``SMALLER``); the executed copies are never written back."""

import re
from pathlib import Path

import nbformat
import pytest

from tests._fixtures import STUDY_CONFIG

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT = 240  # seconds per cell on 2 CPU cores
#: The two demo-scale cells run smaller here (every line of every cell still runs, on the same code paths): each
#: text must appear in exactly one code cell of its notebook, so a notebook edited away from it fails here rather than
#: running at full size unnoticed. Measured alone: 04 44 s -> 26 s, 08 33 s -> 15 s on 2 cores.
SMALLER = {"04_probes_similarity": [("acts = collect(m, tokens=4096)", "acts = collect(m, tokens=1024)")],
           "08_features": [("train_tokens=65_536, eval_tokens=8_192", "train_tokens=16_384, eval_tokens=2_048")],
           "09_model_diffing": [("TOKENS, EVAL_TOKENS = 65_536, 8_192", "TOKENS, EVAL_TOKENS = 8_192, 2_048")]}
MAX_BYTES = 300 * 1024  # a stored notebook, outputs included
MIME_TYPES = {"text/plain", "image/png"}  # no HTML, SVG, JavaScript or widgets


@pytest.fixture(scope="session")
def notebook_run(tmp_path_factory):
    """Three test-sized variants (learned, canonical, gf2), trained once for the session as the demo trains."""
    from analysis.variants import ensure_variants
    from fixedid.train.config import TrainConfig

    root = tmp_path_factory.mktemp("notebook-run")
    cfg = root / "nb.toml"
    cfg.write_text(STUDY_CONFIG)
    return ensure_variants(TrainConfig.load(str(cfg)), root / "cache", quiet=True)


def test_every_notebook_is_listed_on_the_notebooks_page_and_only_those():
    page = (ROOT / "docs" / "notebooks.md").read_text()
    toctree = re.search(r"```\{toctree\}\n(.*?)```", page, re.S)
    assert toctree and ":hidden:" in toctree.group(1)
    entries = [s.strip() for s in toctree.group(1).splitlines() if s.strip() and not s.strip().startswith(":")]
    assert entries == [f"generated/notebooks/{p.stem}" for p in NOTEBOOKS]
    # one line per notebook: its title, what it teaches and how long it takes
    lines = [s for s in page.splitlines() if "(generated/notebooks/" in s]
    assert [re.search(r"\(generated/notebooks/(\w+)\.ipynb\)", s).group(1) for s in lines] == [p.stem for p in NOTEBOOKS]
    assert all(re.search(r"About \d+ (seconds|minutes?)\.$", s) for s in lines), "each line ends with how long it takes"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_executed_small_and_says_what_it_teaches(path):
    assert path.stat().st_size < MAX_BYTES, f"{path.name}: {path.stat().st_size / 1024:.0f} KB"
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    # executed top to bottom in one kernel: counts 1, 2, 3, ... and every cell has run
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), f"{path.name} is not stored executed"
    for c in code:
        assert "train=True" not in c.source and "ensure_variants" not in c.source, "a notebook cell never trains"
        for out in c.outputs:
            assert out.output_type in ("stream", "execute_result", "display_data"), f"{path.name}: {out.output_type}"
            if out.output_type == "stream":
                assert "\r" not in out.text, f"{path.name}: a progress bar in the stored output"
            else:
                assert set(out.data) <= MIME_TYPES, f"{path.name}: {sorted(set(out.data) - MIME_TYPES)}"
    first = nb.cells[0].source.lower()
    assert nb.cells[0].cell_type == "markdown"
    assert "what you will learn" in first and "how long it takes" in first and "what this shows" in first, path.name
    assert "does not establish" in nb.cells[-1].source.lower(), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, notebook_run, monkeypatch, tmp_path):
    from nbclient import NotebookClient

    monkeypatch.setenv("FIXEDID_CHECKPOINTS", str(notebook_run))
    nb = nbformat.read(path, as_version=4)
    for old, new in SMALLER.get(path.stem, []):
        cells = [c for c in nb.cells if c.cell_type == "code" and c.source.count(old) == 1]
        assert len(cells) == 1, f"{path.name}: {old!r} is not in exactly one code cell (update SMALLER)"
        cells[0].source = cells[0].source.replace(old, new)
    NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
