"""The notebooks are stored with their outputs (executed on the demo's checkpoints, so they read without running):
small, text and PNG only, no errors, no machine path or figure repr in an output, every figure at least 700 px wide,
the display set up in one call, opening with what they teach and how long they take and closing with what they do
not establish, each listed on docs/notebooks.md. They also run top to bottom (nbclient, a time limit per cell) on
three test-sized variants trained once per test session, pointed at them through FIXEDID_CHECKPOINTS, with the two
demo-scale cells at smaller sizes (``SMALLER``); the executed copies are never written back."""

import base64
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
#: An absolute path of the machine that executed the notebook (a home, a temporary or a work directory).
MACHINE_PATH = re.compile(r"(?<![\w.])(/home/|/tmp/|/root/|/work/|/Users/|/var/folders/|[A-Z]:\\)")
MIN_PNG_WIDTH = 700  # pixels (analysis.figures.notebook renders every figure at least this wide)
#: The display setup every notebook once spelled out in a cell of its own, now :func:`analysis.figures.notebook.setup`.
SETUP_LINES = ("display_formatter", "def small_png", "%matplotlib", "%config", "notebook_repr_html", "rcParams")


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


def _texts(output) -> list[str]:
    """What a reader of a stored output may see as text: a stream's text, a result's plain text."""
    if output.output_type == "stream":
        return [output.text]
    return [output.data["text/plain"]] if "text/plain" in output.get("data", {}) else []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_stored_outputs_hold_no_machine_path_and_no_figure_repr(path):
    nb = nbformat.read(path, as_version=4)
    for i, c in enumerate(nb.cells):
        for text in (t for o in c.get("outputs", []) for t in _texts(o)):
            assert "<Figure size" not in text, f"{path.name}, cell {i}: a figure's repr in the output"
            found = MACHINE_PATH.search(text)
            assert not found, f"{path.name}, cell {i}: a machine path in the output: {text[found.start():][:80]!r}"


def test_the_path_pattern_finds_machine_paths_and_nothing_else():
    for text in ("using the cached variants in /root/.cache/fixedid/demo-1", "/tmp/x", "see /home/me/runs",
                 "/work/main/.venv/lib/tqdm/auto.py:21: TqdmWarning", "C:\\Users\\me"):
        assert MACHINE_PATH.search(text), text
    for text in ("experiments/features/results/", "blocks.1/hook", "runs/tmp/x", "runs/tiny/gf2"):
        assert not MACHINE_PATH.search(text), text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_stored_figure_is_at_least_700_px_wide(path):
    nb = nbformat.read(path, as_version=4)
    widths = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            if "image/png" in o.get("data", {}):
                png = base64.b64decode(o.data["image/png"])
                assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", f"{path.name}: not a PNG"
                widths.append(int.from_bytes(png[16:20], "big"))  # the header's width field
    assert all(w >= MIN_PNG_WIDTH for w in widths), f"{path.name}: figures {widths} px wide"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_display_is_set_up_in_one_call(path):
    code = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert "from analysis.figures.notebook import setup" in code[0] and re.search(r"^setup\(\)", code[0], re.M)
    assert sum(bool(re.search(r"^setup\(\)", s, re.M)) for s in code) == 1, f"{path.name}: setup() once, first"
    spelled = [line for s in code for line in SETUP_LINES if line in s]
    assert not spelled, f"{path.name}: the display setup spelled out in a cell ({spelled})"


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
