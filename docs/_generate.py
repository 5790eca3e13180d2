"""The generated part of the documentation site (``docs/generated/``, not in git), written before each build:

- ``api/``: one page per module of ``fixedid`` and ``analysis`` (autodoc: every public name, documented where it is
  defined) and one page per package listing what it exports (its ``__all__``), linked to those definitions;
- ``notebooks/``: the notebooks of ``notebooks/``, rendered with their stored outputs;
- ``results/``: the committed studies' reports with their figures: ``confirmatory/`` (seeds 5-9,
  ``experiments/benchmarks/results/study-tiny-confirmatory``) and ``exploratory/`` (seeds 0-4, ``study-tiny``).

One page is generated but committed, so that it reads on the code host without a build: ``docs/claims.md``, the
confirmatory study's claims table as the report prints it (``python docs/_generate.py`` rewrites it; a test holds it
equal to :func:`claims_page`).

It also holds the two build hooks: :func:`undocumented` (a public name without a docstring is a warning, so an error
under ``-W``) and :func:`resolve_reexport` (``analysis.load`` resolves to ``analysis.loading.load``).
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fixedid", "analysis")
#: Modules the API reference leaves out: command-line verbs (the CLI reference documents them from their parsers)
#: and ``__main__`` routers.
SKIP = ("analysis.cli.", "fixedid.train.__main__", "analysis.__main__")
KEEP = ("analysis.cli.args", "analysis.cli.main", "analysis.cli.study", "analysis.cli.tools")
#: The committed studies the results page renders: {page folder: study directory}.
RESULTS = {"confirmatory": ROOT / "experiments" / "benchmarks" / "results" / "study-tiny-confirmatory",
           "exploratory": ROOT / "experiments" / "benchmarks" / "results" / "study-tiny"}


@functools.lru_cache(maxsize=None)
def modules() -> tuple[str, ...]:
    """Every module and package of the API reference, packages first within each package."""
    names = []
    for root in PACKAGES:
        pkg = importlib.import_module(root)
        names.append(root)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, root + ".")]
    return tuple(sorted((n for n in names if not n.startswith(SKIP) or n in KEEP), key=lambda n: n.split(".")))


def is_package(name: str) -> bool:
    """Whether the module ``name`` is a package."""
    return hasattr(importlib.import_module(name), "__path__")


def home(package: str, name: str) -> str:
    """The documented location of ``package.name``: where the object is defined (for data: the submodule that
    holds the same object)."""
    obj = getattr(importlib.import_module(package), name)
    if inspect.ismodule(obj):
        return obj.__name__
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return f"{obj.__module__}.{obj.__qualname__}"
    for mod in modules():
        if mod.startswith(package + ".") and getattr(importlib.import_module(mod), name, None) is obj \
                and name in assigned(mod):
            return f"{mod}.{name}"
    return f"{package}.{name}"


@functools.lru_cache(maxsize=None)
def assigned(module: str) -> frozenset[str]:
    """The names a module assigns at its top level (not those it imports)."""
    tree = ast.parse(Path(inspect.getsourcefile(importlib.import_module(module))).read_text())
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return frozenset(names)


def summary(obj) -> str:
    """The first paragraph of an object's docstring, on one line ("" for data)."""
    doc = inspect.getdoc(obj) if (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj)) else None
    return " ".join((doc or "").split("\n\n")[0].split()) if doc else ""


@functools.lru_cache(maxsize=None)
def methods_pages() -> dict[str, str]:
    """``{module: methods page}``: the modules whose long explanation a page of ``docs/methods/`` holds."""
    found = {}
    for page in sorted((ROOT / "docs" / "methods").glob("*.md")):
        for line in page.read_text().splitlines():
            if line.startswith("## `") and line.endswith("`"):
                found[line[4:-1]] = page.stem
    return found


def module_page(name: str) -> str:
    """The MyST page of a module: its autodoc (and a link to its long explanation in ``docs/methods/``); for a
    package, its exports and its modules."""
    mod = importlib.import_module(name)
    lines = [f"# `{name}`", ""]
    if name in methods_pages():
        lines += [f"{{ref}}`The method in detail <methods-{name.replace('.', '-')}>`.", ""]
    if is_package(name):
        lines += ["```{eval-rst}", f".. automodule:: {name}", "   :no-members:", "```", ""]
        exported = getattr(mod, "__all__", [])
        if exported:
            lines += ["## Exports", ""]
            for n in exported:
                text = summary(getattr(mod, n))
                ref = f"`{n}`" if n.startswith("__") else f"{{py:obj}}`{n} <{home(name, n)}>`"  # dunders: no page
                lines.append(f"- {ref}" + (f": {text}" if text else ""))
            lines.append("")
        children = [m for m in modules() if m.rsplit(".", 1)[0] == name and m != name]
        packages = [m for m in children if is_package(m)]
        if packages:
            lines += ["## Subpackages", "", "```{toctree}", ":maxdepth: 1", ""] + packages + ["```", ""]
        if len(children) > len(packages):
            lines += ["## Modules", ""] + [f"- {{doc}}`{m}`: {summary(importlib.import_module(m))}"
                                            for m in children if m not in packages] + [""]
    else:
        # a module's page is reached from its package's list, not the site navigation: the navigation lists
        # packages only, as furo builds it for every page from the whole tree (with ~190 modules in it, the
        # larger part of the build's time)
        lines = ["---", "orphan: true", "---", ""] + lines + ["```{eval-rst}", f".. automodule:: {name}", "```", ""]
    return "\n".join(lines)


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (so Sphinx rebuilds only what changed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def copy_if_changed(src: Path, dst: Path) -> None:
    """Copy ``src`` unless ``dst`` already holds its bytes."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists() or dst.read_bytes() != src.read_bytes():
        shutil.copyfile(src, dst)


def cli_reference() -> str:
    """The three commands' reference (sphinx-argparse, from the parsers), then each verb's examples."""
    from analysis.cli import study
    from analysis.cli.main import command_specs
    from fixedid.train import cli as train

    def block(prog, module, examples):
        lines = [f"## {prog}", "", "```{eval-rst}", ".. argparse::", f"   :module: {module}", "   :func: build_parser",
                 f"   :prog: {prog}", "   :noepilog:", "```", ""]
        for title, text in examples.items():
            lines += [f"### Examples: {title}", "", "```bash"]
            lines += [line[2:] if line.startswith("  ") else line for line in text.strip("\n").splitlines()]
            lines += ["```", ""]
        return lines

    lines = block("fixedid-analyze", "analysis.cli.main",
                  {f"fixedid-analyze {name}": spec.examples for name, spec in command_specs().items()})
    lines += block("fixedid-train", "fixedid.train.cli", {"fixedid-train": train.EXAMPLES})
    lines += block("fixedid-study", "analysis.cli.study", {"fixedid-study": study.EXAMPLES})
    return "\n".join(lines)


def generate(out: Path) -> None:
    """Write the API pages, the CLI reference, the notebooks and the results page under ``out``."""
    write_if_changed(out / "cli-reference.md", cli_reference())
    api = out / "api"
    for name in modules():
        write_if_changed(api / f"{name}.md", module_page(name))
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        copy_if_changed(path, out / "notebooks" / path.name)
    (out / "results" / "report.md").unlink(missing_ok=True)  # the one-study layout before 2026-12-06
    shutil.rmtree(out / "results" / "figures", ignore_errors=True)
    for name, study in RESULTS.items():
        write_if_changed(out / "results" / name / "report.md", (study / "report.md").read_text())
        for fig in sorted((study / "figures").glob("*.png")):
            copy_if_changed(fig, out / "results" / name / "figures" / fig.name)
    (out / "results" / "claims.md").unlink(missing_ok=True)  # generated at build time before it was committed


#: The committed claims page (:func:`claims_page`), read on the code host as well as on the site.
CLAIMS_PAGE = ROOT / "docs" / "claims.md"


def claims_page() -> str:
    """The confirmatory study's claims as its report prints them (:func:`analysis.study.claims.claim_lines`), from its
    ``claims.csv`` and, for what the report prints beside some claims, its ``measurements.csv``."""
    from analysis.outputs import read_csv
    from analysis.study.claims import claim_lines
    from analysis.study.report import read_measurements

    table = read_csv(RESULTS["confirmatory"] / "claims.csv")
    lines = claim_lines(table, "`experiments/claims/confirmatory.toml` (frozen before seeds 5-9 were trained)",
                        measurements=read_measurements(RESULTS["confirmatory"]))
    body = [line.replace("### ", "## ", 1) if line.startswith("### ") else line for line in lines[2:]]
    return "\n".join(["# The confirmatory claims", ""] + body) + "\n"


def undocumented(app, what, name, obj, options, lines) -> None:
    """autodoc hook: a public module, class, function, method or property without a docstring is a warning."""
    from sphinx.util import logging

    if what in ("module", "class", "exception", "function", "method", "property") and not any(
            line.strip() for line in lines) and not name.rsplit(".", 1)[-1].startswith("_"):
        logging.getLogger("fixedid.docs").warning(f"undocumented public name {name}: give it a docstring")


def skip_foreign(app, what, name, obj, skip, options):
    """autodoc hook: leave out what a module imported from a third party (``matplotlib.colors.TwoSlopeNorm``)."""
    module = getattr(obj, "__module__", None)
    if (inspect.isclass(obj) or inspect.isfunction(obj)) and module and not module.startswith(PACKAGES):
        return True
    return None


def resolve_reexport(app, env, node, contnode):
    """Resolve a reference through an exported name (``analysis.load``, ``fixedid.train.TrainConfig.trained_key``)
    to where it is documented (``analysis.loading.load``, ``fixedid.train.config.TrainConfig.trained_key``)."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    parts = target.split(".")
    if parts[0] not in PACKAGES:
        return None
    for cut in range(len(parts) - 1, 0, -1):  # the longest importable module, then the exported name in it
        try:
            mod = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        if hasattr(mod, parts[cut]):
            break
        return None
    else:
        return None
    where = ".".join([home(".".join(parts[:cut]), parts[cut])] + parts[cut + 1:])
    if where == target:
        return None
    domain = env.get_domain("py")
    node = node.deepcopy()
    node["reftarget"] = where
    return domain.resolve_xref(env, node.get("refdoc"), app.builder, node.get("reftype"), where, node, contnode)


if __name__ == "__main__":  # rewrite the committed page from the committed claims.csv
    write_if_changed(CLAIMS_PAGE, claims_page())
