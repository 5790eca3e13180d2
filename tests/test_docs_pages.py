"""What a newcomer reads first: the README lists every notebook and links the pages that exist; the glossary defines
the terms the pages use and the concepts page links them; the demo's stated time is the recipe's arithmetic."""

import re
from pathlib import Path

from tests._helpers import prose_blocks

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def _links(text: str) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text) if "://" not in t]


def test_the_readme_lists_every_notebook_and_links_pages_that_exist():
    listed = re.findall(r"\]\((notebooks/\w+\.ipynb)\)", README)
    assert listed == [f"notebooks/{p.name}" for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    links = _links(README)
    assert not [t for t in links if not (ROOT / t).exists()], "README links a file that does not exist"
    for page in ("docs/getting-started.md", "docs/concepts.md", "docs/glossary.md", "docs/results.md",
                 "docs/claims.md", "CHANGELOG.md"):
        assert page in links, page
    howtos = {f"docs/howto/{p.name}" for p in (ROOT / "docs" / "howto").glob("*.md")}
    assert howtos <= set(links), sorted(howtos - set(links))


def test_the_glossary_defines_the_terms_and_concepts_links_them():
    glossary = (ROOT / "docs" / "glossary.md").read_text()
    heads = re.findall(r"^## (.+)$", glossary, re.M)
    assert heads == sorted(heads, key=str.lower), "the glossary is alphabetical"
    for term in ("IOI", "Transvection", "GL(n, 2)", "LEACE", "CKA", "DAS", "EAP", "Trained key", "Cell",
                 "matched decodability"):
        assert any(term in h for h in heads), term
    anchors = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in heads}
    concepts = (ROOT / "docs" / "concepts.md").read_text()
    used = re.findall(r"\]\(glossary\.md#([\w-]+)\)", concepts)
    assert len(used) >= 8 and set(used) <= anchors, sorted(set(used) - anchors)
    concept_anchors = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-")
                       for h in re.findall(r"^#+ (.+)$", concepts, re.M)}
    back = re.findall(r"\]\(concepts\.md#([\w-]+)\)", glossary)
    assert back and set(back) <= concept_anchors, sorted(set(back) - concept_anchors)


def test_the_demos_stated_time_is_the_recipes_arithmetic():
    from fixedid.train import TrainConfig

    cfg = TrainConfig.load("tiny")
    tokens = 3 * cfg.train.steps * cfg.train.batch_size * cfg.model_config("canonical", 2).context
    page = re.sub(r"\s+", " ", (ROOT / "docs" / "getting-started.md").read_text())
    m = re.search(r"about ([\d.]+)M tokens divided by .*? plus a minute for the measurements: (\d+) minutes at "
                  r"([\d,]+) tokens per second, (\d+) at ([\d,]+)\.", page)
    assert m, "getting-started no longer states the demo's time as arithmetic"
    assert float(m.group(1)) == round(tokens / 1e6, 1)
    for minutes, rate in ((m.group(2), m.group(3)), (m.group(4), m.group(5))):
        assert int(minutes) == round((tokens / int(rate.replace(",", "")) + 60) / 60), (minutes, rate)


def _png_width(path: Path) -> int:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return int.from_bytes(head[16:20], "big")


def test_every_howto_shows_its_figure_next_to_the_command_that_drew_it():
    import json

    sources = json.loads((ROOT / "docs" / "figures" / "sources.json").read_text())
    pages = sorted(p.stem for p in (ROOT / "docs" / "howto").glob("*.md"))
    assert sorted(sources) == pages, "one figure per how-to page"
    for page, src in sources.items():
        text = (ROOT / "docs" / "howto" / f"{page}.md").read_text()
        m = re.search(rf"!\[[^\]]+\]\(\.\./figures/{re.escape(page)}\.png\)\n\nDrawn by `([^`]+)`", text)
        assert m, f"{page}.md does not show ../figures/{page}.png with the command that drew it"
        assert m.group(1) == src["command"], page
        assert _png_width(ROOT / "docs" / "figures" / f"{page}.png") >= 700, page


def test_committed_figures_in_the_gallery_are_the_committed_results():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gallery", ROOT / "experiments" / "gallery" / "make.py")
    gallery = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gallery)
    copied = {page: f for page, (c, f) in gallery.FIGURES.items() if "/" in f}
    assert copied
    for page, figure in copied.items():
        assert (ROOT / "docs" / "figures" / f"{page}.png").read_bytes() == (ROOT / figure).read_bytes(), page


def test_the_landing_page_gallery_links_each_figure_to_its_howto():
    index = (ROOT / "docs" / "index.md").read_text()
    shown = re.findall(r"\[!\[[^\]]+\]\(figures/([\w-]+)\.png\)\]\(howto/([\w-]+)\.md\)", index)
    assert len(shown) >= 6 and all(fig == page for fig, page in shown), shown


def _pages() -> list[Path]:
    """Every page a reader opens: the README and the docs' Markdown (not the build's generated copies)."""
    docs = [p for p in (ROOT / "docs").rglob("*.md") if not {"generated", "_build"} & set(p.parts)]
    return [ROOT / "README.md"] + sorted(docs)


def test_pages_are_reference_not_lab_notebooks():
    """No paragraph or bullet over 150 words, no issue numbers, and the two long reference pages one screen each."""
    for page in _pages():
        text = page.read_text()
        long = [len(b.split()) for b in prose_blocks(text) if len(b.split()) > 150]
        assert not long, f"{page.relative_to(ROOT)}: paragraphs of {long} words"
        assert not re.search(r"\b[Ii]ssues? #?\d+\b|(?<![\w/&])#\d{2,3}\b", text), page.relative_to(ROOT)
    assert len((ROOT / "docs" / "recipes.md").read_text().splitlines()) <= 250
    assert len((ROOT / "docs" / "benchmarks.md").read_text().splitlines()) <= 200
    page = "Intro.\n\n- " + "word " * 151 + "\n- short bullet\n  that wraps\n1. a step\n\n| a | " + "cell " * 200 + "|\n"
    assert [len(b.split()) for b in prose_blocks(page)] == [1, 151, 4, 2]  # the checker sees a long bullet


def test_every_trained_key_a_page_names_is_a_recipes():
    from fixedid.train import TrainConfig
    from fixedid.train.config import packaged_configs

    keys = {TrainConfig.load(name).trained_key()[:12] for name in packaged_configs()}
    for page in _pages():
        named = set(re.findall(r"\b[0-9a-f]{12}\b", page.read_text()))
        assert named <= keys, f"{page.relative_to(ROOT)} names {sorted(named - keys)}, no packaged recipe's key"
