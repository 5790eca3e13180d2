"""Rules of the code base that a reviewer would otherwise have to remember: hook and module names of the model are
spelled in one place (:mod:`analysis.engine.names`), no function of the packages runs past 60 lines, and a module's
docstring is one paragraph."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("analysis", "fixedid")
#: The one place that spells hook names (and the model, which defines them).
NAMERS = {"analysis/engine/names.py", "fixedid/model.py"}
MAX_LINES = 60


def sources():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _spells_a_hook_name(node: ast.JoinedStr) -> bool:
    text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return text.startswith(("blocks.", "hook_", "ln_final."))  # a message that quotes a name starts otherwise


def test_hook_names_are_built_by_the_engine_only():
    found = [f"{rel}:{node.lineno}" for rel, tree in sources() if rel not in NAMERS
             for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) and _spells_a_hook_name(node)]
    assert not found, f"hook names formatted outside analysis.engine.names (use its functions): {found}"


def test_the_checker_sees_a_formatted_hook_name():
    assert _spells_a_hook_name(ast.parse('f"blocks.{i}.hook_resid_pre"').body[0].value)
    assert not _spells_a_hook_name(ast.parse('f"layer {i}"').body[0].value)


def test_no_function_runs_past_60_lines():
    long = [f"{rel}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)" for rel, tree in sources()
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_LINES]
    assert not long, "split these functions:\n" + "\n".join(long)


def test_a_module_docstring_is_one_paragraph():
    """What a module is for, in a paragraph; the long explanations live in docs/methods/."""
    long = [rel for rel, tree in sources() if (doc := ast.get_docstring(tree)) and "\n\n" in doc.strip()]
    assert not long, f"module docstrings of more than one paragraph (move the rest to docs/methods/): {long}"
