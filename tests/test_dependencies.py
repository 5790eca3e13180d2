"""What the packages import is what pyproject.toml declares: every third-party module that fixedid or analysis
imports (inside functions too) comes from a declared dependency, and every declared dependency is imported."""

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWN = {"fixedid", "analysis"}


def imported_top_level_modules() -> set[str]:
    names = set()
    for package in OWN:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return {n for n in names if n not in OWN and n not in sys.stdlib_module_names and n != "__future__"}


def declared() -> set[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {re.split(r"[<>=!~ ;\[]", d, maxsplit=1)[0].lower().replace("_", "-") for d in deps}


def test_every_import_is_declared_and_every_declaration_imported():
    dists = packages_distributions()
    used = {}
    for module in imported_top_level_modules():
        assert module in dists, f"{module} is imported but no installed distribution provides it"
        used[module] = {d.lower().replace("_", "-") for d in dists[module]}
    undeclared = {m: d for m, d in used.items() if not d & declared()}
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
    unused = declared() - set().union(*used.values())
    assert not unused, f"declared but never imported: {unused}"
