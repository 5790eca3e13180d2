"""The results page reads on the code host without a build: its claims table is a committed Markdown page, kept equal
to what the generator writes from the confirmatory study's claims.csv."""

import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_the_committed_claims_page_is_the_committed_claims_csv():
    sys.path.insert(0, str(ROOT / "docs"))
    import _generate

    page = (ROOT / "docs" / "claims.md").read_text()
    assert page == _generate.claims_page(), "docs/claims.md is stale: run python docs/_generate.py"
    table = page.split("\n## ", 1)[1]
    assert "| claim |" in table and "**supported**" in table  # the table itself, not an include of a built file


def test_the_results_page_links_only_committed_pages():
    page = (ROOT / "docs" / "results.md").read_text()
    assert "generated/results/claims" not in page and "](claims.md)" in page
    for study in ("study-tiny-confirmatory", "study-tiny"):
        assert f"experiments/benchmarks/results/{study}/report.md" in page
        assert (ROOT / "experiments" / "benchmarks" / "results" / study / "report.md").exists()
