"""CHANGELOG.md keeps the Keep a Changelog 1.1.0 form: [Unreleased] on top, then released versions newest first as
``## [X.Y.Z] - YYYY-MM-DD``; under each, only the standard headings, each at most once and in the standard order,
every entry a bullet under one of them; no issue or pull-request numbers; no entry over 150 words."""

import datetime
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHANGELOG = ROOT / "CHANGELOG.md"
STANDARD = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
MAX_WORDS = 150
VERSION = re.compile(r"## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})")
ISSUE_REF = re.compile(r"\b(?:issues?|PR|pull request)s?\s*#?\d+|(?<![\w&/])#\d+\b", re.I)


def blocks(lines: list[str]) -> list[str]:
    """The bullets and paragraphs of a run of lines: a bullet runs from its ``- `` to the next bullet, heading or
    blank line; a paragraph to the next blank line or heading."""
    out, cur = [], []
    for line in lines + [""]:
        if not line.strip() or line.startswith("#") or line.startswith("- "):
            if cur:
                out.append("\n".join(cur))
            cur = [line] if line.startswith("- ") else []
        else:
            cur.append(line)
    return out


def sections(text: str) -> list[tuple[str, list[tuple[str, list[str]]], list[str]]]:
    """``(version header, [(section heading, its lines)], lines before the first section)`` per ``## `` header."""
    out = []
    for line in text.splitlines():
        if line.startswith("## "):
            out.append((line, [], []))
        elif out and line.startswith("### "):
            out[-1][1].append((line[4:].strip(), []))
        elif out:
            (out[-1][1][-1][1] if out[-1][1] else out[-1][2]).append(line)
    return out


def version_problems(versions: list[str]) -> list[str]:
    """Headers not of the two forms, [Unreleased] anywhere but first, versions or dates not newest first."""
    found, released = [], []
    for i, header in enumerate(versions):
        m = VERSION.fullmatch(header)
        if header == "## [Unreleased]":
            if i:
                found.append("[Unreleased] is not the first version")
            continue
        if not m:
            found.append(f"malformed version header: {header!r}")
            continue
        try:
            date = datetime.date.fromisoformat(m[4])
        except ValueError:
            found.append(f"not a date: {header!r}")
            continue
        released.append(((int(m[1]), int(m[2]), int(m[3])), date, header))
    for (v1, d1, h1), (v2, d2, h2) in zip(released, released[1:]):
        if not (v1 > v2 and d1 >= d2):
            found.append(f"not newest first: {h1!r} before {h2!r}")
    return found


def problems(text: str) -> list[str]:
    """Every departure of ``text`` from the form this file's docstring states."""
    found = []
    if "https://keepachangelog.com/en/1.1.0/" not in text:
        found.append("no link to Keep a Changelog 1.1.0")
    parsed = sections(text)
    found += version_problems([header for header, _, _ in parsed])
    for header, secs, lead in parsed:
        names = [name for name, _ in secs]
        if not secs:
            found.append(f"{header}: no sections")
        if any(b.startswith("- ") for b in blocks(lead)):
            found.append(f"{header}: entries under no heading")
        for i, name in enumerate(names):
            if name not in STANDARD:
                found.append(f"{header}: non-standard heading {name!r}")
            elif name in names[:i]:
                found.append(f"{header}: {name!r} more than once")
        order = [STANDARD.index(n) for n in dict.fromkeys(names) if n in STANDARD]
        if order != sorted(order):
            found.append(f"{header}: headings out of order: {names}")
        for name, lines in secs:
            bs = blocks(lines)
            if not bs:
                found.append(f"{header} / {name}: empty")
            found += [f"{header} / {name}: not a bullet: {b[:60]!r}" for b in bs if not b.startswith("- ")]
    for b in blocks(text.splitlines()):
        words = len(b.removeprefix("- ").split())
        if words > MAX_WORDS:
            found.append(f"{words} words: {b[:60]!r}")
    found += [f"issue reference {m[0]!r}" for m in ISSUE_REF.finditer(text)]
    return sorted(set(found))


def test_the_changelog_has_the_keep_a_changelog_form():
    assert problems(CHANGELOG.read_text()) == []


def test_the_changelog_has_unreleased_and_a_release():
    headers = [h for h, _, _ in sections(CHANGELOG.read_text())]
    assert headers[0] == "## [Unreleased]" and len(headers) >= 2


BAD = """# Changelog

[Keep a Changelog](https://keepachangelog.com/en/1.1.0/)

## [0.1.0] - 2026-12-04

### Added

- a

## [Unreleased]

### Changed

- b (issue 49), see #12

### Added

- c

### Changed (more)

- d

A paragraph in a section.

### Measured

- """ + "word " * 151 + """

## [0.2.0] - 2026-12-01

- under no heading

### Fixed

## [1.0] - 2027-01-01

### Added

- e
"""


@pytest.mark.parametrize("expected", [
    "[Unreleased] is not the first version",
    "malformed version header: '## [1.0] - 2027-01-01'",
    "not newest first: '## [0.1.0] - 2026-12-04' before '## [0.2.0] - 2026-12-01'",
    "## [Unreleased]: headings out of order: ['Changed', 'Added', 'Changed (more)', 'Measured']",
    "## [Unreleased]: non-standard heading 'Changed (more)'",
    "## [Unreleased]: non-standard heading 'Measured'",
    "## [Unreleased] / Changed (more): not a bullet: 'A paragraph in a section.'",
    "## [0.2.0] - 2026-12-01: entries under no heading",
    "## [0.2.0] - 2026-12-01 / Fixed: empty",
    "issue reference 'issue 49'",
    "issue reference '#12'",
])
def test_the_checks_catch_each_departure(expected):
    assert expected in problems(BAD)


def test_the_checks_catch_a_repeated_heading_and_a_long_entry():
    text = BAD.replace("### Changed (more)", "### Changed")
    found = problems(text)
    assert "## [Unreleased]: 'Changed' more than once" in found
    assert any(p.startswith("151 words: ") for p in found)


def test_the_docs_page_includes_the_changelog():
    assert "```{include} ../CHANGELOG.md" in (ROOT / "docs" / "changelog.md").read_text()


def test_the_pooled_recoding_numbers_are_the_committed_studys():
    """The `gf2 (pooled)` entry's facts and IOI numbers, recomputed from the seeds 0-4 study's measurements: the
    interval by `crossed_mean`, the recodings' variance component by hand from the two-way ANOVA's mean squares."""
    import pandas as pd

    from analysis.stats import crossed_mean

    text = " ".join(CHANGELOG.read_text().split())
    m = re.search(r"learned is (\S+) \[(\S+), (\S+)\] on facts, where the recodings' variance component is estimated "
                  r"at (\S+) \(a standard deviation of (\S+) in accuracy\), and (\S+) \[(\S+), (\S+)\] on IOI, where "
                  r"it is estimated below 0 and set to 0", text)
    assert m, "the pooled recodings' sentence is not in the changelog"
    said = [float(g) for g in m.groups()]
    rows = pd.read_csv(ROOT / "experiments/benchmarks/results/study-tiny/measurements.csv")
    rows = rows[(rows.analysis == "behaviours") & (rows.metric == "accuracy")]
    rows = rows[rows.step == rows.step.max()]

    def pooled(task):
        wide = rows[rows.key == task].pivot_table(index="seed", columns="variant", values="value")
        table = wide[["gf2", "gf2-r1", "gf2-r2"]].to_numpy() - wide[["learned"]].to_numpy()
        n, k = table.shape
        resid = table - table.mean(1, keepdims=True) - table.mean(0, keepdims=True) + table.mean()
        ms_rec = n * ((table.mean(0) - table.mean()) ** 2).sum() / (k - 1)
        ms_res = (resid ** 2).sum() / ((n - 1) * (k - 1))
        return crossed_mean(table), (ms_rec - ms_res) / n

    (facts, facts_var), (ioi, ioi_var) = pooled("facts"), pooled("ioi")
    assert facts["n"] == ioi["n"] == 5 and facts["k"] == ioi["k"] == 3
    assert said[:3] == pytest.approx([facts["mean"], facts["lo"], facts["hi"]], abs=5e-4)
    assert said[3] == pytest.approx(facts_var, abs=5e-6) and said[4] == pytest.approx(facts_var ** 0.5, abs=5e-4)
    assert said[5:] == pytest.approx([ioi["mean"], ioi["lo"], ioi["hi"]], abs=5e-4)
    assert ioi_var < 0


def test_the_confirmatory_numbers_are_the_committed_claims():
    """The confirmatory study's entry: its counts of supported claims and the two control estimates it quotes, from
    the committed `claims.csv`."""
    import pandas as pd

    text = " ".join(CHANGELOG.read_text().split())
    m = re.search(r"(\d+) of the (\d+) frozen claims held: (\d+) of (\d+) primary .*? and (\d+) of (\d+) control "
                  r"\(the facts gap is not capacity: learned - canonical-matched (\S+) \[(\S+), (\S+)\], "
                  r"Holm p (\S+)\)\. The learned-head interaction is (\S+) \[(\S+), (\S+)\]\.", text)
    assert m, "the confirmatory study's sentence is not in the changelog"
    claims = pd.read_csv(ROOT / "experiments/benchmarks/results/study-tiny-confirmatory/claims.csv")
    frozen = claims[claims.family.isin(["primary", "control"])]
    held = frozen.verdict == "supported"
    counts = [held.sum(), len(frozen)]
    for family in ("primary", "control"):
        counts += [(held & (frozen.family == family)).sum(), (frozen.family == family).sum()]
    assert [int(g) for g in m.groups()[:6]] == counts
    row = claims.set_index("id").loc
    cap, head = row["facts-not-capacity"], row["facts-needs-learned-head"]
    assert cap.verdict == "supported" and head.kind == "interaction"
    quoted = [float(g) for g in m.groups()[6:]]
    assert quoted[:4] == pytest.approx([cap.estimate, cap.ci_low, cap.ci_high, cap.p_adjusted], abs=5e-4)
    assert quoted[4:] == pytest.approx([head.estimate, head.ci_low, head.ci_high], abs=5e-4)
