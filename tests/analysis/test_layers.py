"""The architecture as a test: every import in ``analysis`` runs down its layer order (imports inside functions
included), ``fixedid`` never imports ``analysis``, and neither package has an import cycle. The order is the one
``docs/methods/analysis.md`` documents; a module imports from its own layer or below, and siblings marked independent
(readouts | evaluation | features, study | demo) do not import each other."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Bottom to top. Each layer: module or package prefixes; a tuple of groups = independent siblings.
LAYERS = [
    (["analysis.errors", "analysis.stats", "analysis.outputs", "analysis.corpus", "analysis.labels", "analysis.pairs",
      "analysis.tasks", "analysis.engine.names"],),
    (["analysis.interop"],),
    (["analysis.model", "analysis.loading", "analysis.variants"],),
    (["analysis.engine"],),
    (["analysis.readouts"], ["analysis.evaluation"], ["analysis.features"]),
    (["analysis.causal"],),
    (["analysis.figures"],),
    (["analysis.specs"],),
    (["analysis.study"], ["analysis.demo"]),
    (["analysis.cli", "analysis.__main__"],),
]


def module_names(package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = {**module_names("analysis"), **module_names("fixedid")}


def imports_of(name: str, path: Path) -> set[str]:
    """Every project module ``name`` imports, anywhere in the file: ``from pkg import mod`` counts as ``pkg.mod``."""
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[:len(base) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:  # a name inside a module: the module
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def place(name: str):
    """(layer index, group index) of an analysis module, or None for the package's public surface."""
    for i, groups in enumerate(LAYERS):
        for g, prefixes in enumerate(groups):
            if any(name == p or name.startswith(p + ".") for p in prefixes):
                return i, g
    return None


def test_every_analysis_module_has_a_layer():
    loose = [m for m in MODULES if m.startswith("analysis.") and place(m) is None]
    assert not loose, f"modules outside the layer order (add them to LAYERS and docs/methods/analysis.md): {loose}"


def test_imports_run_down_the_layers():
    bad = []
    for name, deps in GRAPH.items():
        if not name.startswith("analysis.") or name == "analysis":
            continue
        here = place(name)
        for d in deps:
            if d == "analysis":
                bad.append(f"{name} imports the analysis package's public surface")
                continue
            there = place(d) if d.startswith("analysis.") else None
            if there is None:
                continue
            if there[0] > here[0] or (there[0] == here[0] and there[1] != here[1]):
                bad.append(f"{name} (layer {here[0]}) imports {d} (layer {there[0]})")
    assert not bad, "\n".join(bad)


def test_fixedid_never_imports_analysis():
    bad = [f"{n} imports {d}" for n, deps in GRAPH.items() if n.startswith("fixedid") for d in deps
           if d.split(".")[0] == "analysis"]
    assert not bad, bad


def find_cycle(graph: dict) -> list[str] | None:
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


@pytest.mark.parametrize("package", ["analysis", "fixedid"])
def test_no_import_cycles(package):
    graph = {n: {d for d in deps if d.split(".")[0] == package} for n, deps in GRAPH.items()
             if n.split(".")[0] == package}
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_checker_sees_what_it_guards():
    # the scan is only as good as its parser: an upward import inside a function and a package-relative import
    assert "analysis.loading" in GRAPH["analysis.variants"]  # inside load_variants
    assert "analysis.figures.style" in GRAPH["analysis.figures.output"]
    assert "fixedid.train.config" in GRAPH["fixedid.train.loop"]  # from .config import TrainConfig
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert place("analysis.cli.main")[0] > place("analysis.causal.patching")[0] > place("analysis.stats")[0]


def test_importing_every_module_changes_no_global_state():
    # in a fresh interpreter: no backend forced on matplotlib, no lm-eval registration, no logger levels
    import subprocess
    import sys

    code = f"""
import importlib, logging, os
os.environ.pop("MPLBACKEND", None)
for name in {sorted(m for m in MODULES if not m.endswith("__main__"))!r}:
    importlib.import_module(name)
import matplotlib
from lm_eval.api.registry import model_registry
assert matplotlib.rcParams._get_backend_or_none() is None, matplotlib.rcParams._get_backend_or_none()
assert "fixedid" not in model_registry
assert all(logging.getLogger(n).level == logging.NOTSET for n in ("lm-eval", "lm_eval"))
print("clean")
"""
    env = {k: v for k, v in __import__("os").environ.items() if k != "MPLBACKEND"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr[-2000:]
