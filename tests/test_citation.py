"""The licence and the citation file agree with the package: MIT, as pyproject says, and the version it reports."""

import re
import tomllib
from pathlib import Path

import yaml

import fixedid

ROOT = Path(__file__).parent.parent


def test_the_licence_file_is_the_licence_pyproject_names():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"]["text"] == "MIT"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    assert "Permission is hereby granted, free of charge" in text and 'PROVIDED "AS IS"' in text


def test_the_citation_names_this_version_and_the_seed_paper():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert str(cff["version"]) == fixedid.__version__
    assert cff["license"] == "MIT" and cff["authors"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(cff["date-released"]))
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{fixedid.__version__}] - {cff['date-released']}" in changelog, "the release date is the CHANGELOG's"
    (paper,) = [r for r in cff["references"] if "arXiv:2610.04002" in str(r.get("identifiers"))]
    assert paper["authors"][0]["family-names"] == "Bochkov" and paper["year"] == 2026
