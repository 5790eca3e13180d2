"""The documentation site: it builds in strict mode (a broken link, an unresolved cross-reference or a public name
without a docstring fails), its API reference covers every export, and every command in the README and the docs
reads only paths that exist in a clone or that a command before it created."""

import importlib
import inspect
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md")
                                      if "generated" not in p.parts and "_build" not in p.parts)

#: Options whose value a command reads (a checkpoint, a file, a directory); NAME= is stripped from --ckpt.
READS = {"--ckpt", "--reference", "--results", "--hf", "--data", "--pairs", "--state", "--key-map", "--tokenizer"}
COMMANDS = ("fixedid-analyze", "fixedid-train", "fixedid-study", "cp", "cat", "mkdir", "torchrun", "source", "jupyter",
            "dask")


def test_the_site_builds_in_strict_mode(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-W", "--keep-going", "-n", "-b", "html",
                           str(ROOT / "docs"), str(tmp_path / "html")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-5000:]
    html = tmp_path / "html"
    assert (html / "cli.html").is_file() and (html / "generated" / "api" / "analysis.html").is_file()
    cli = (html / "cli.html").read_text()
    from analysis.cli.main import command_specs

    assert all(f"fixedid-analyze {verb}" in cli for verb in command_specs())


def fenced_commands(text: str) -> list[list[str]]:
    """The commands of the fenced bash blocks of a page, in order: continuation lines joined, comments dropped,
    ``&&`` chains split, a ``.venv/bin/`` prefix removed; heredoc bodies skipped."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        block = re.sub(r"<<'?(\w+)'?\n.*?\n\1\n", "<<HEREDOC\n", block, flags=re.S)
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            for part in re.split(r"&&|;", line):
                words = shlex.split(part, comments=True)
                if words:
                    words[0] = words[0].removeprefix(".venv/bin/")
                    out.append(words)
    return out


def created_and_read(words: list[str]) -> tuple[list[str], list[str]]:
    """(paths this command creates, paths it reads) of one command."""
    cmd, args = words[0], words[1:]
    value = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
    reads = [args[i + 1].split("=", 1)[-1] if a == "--ckpt" and "=" in args[i + 1] and not Path(
        args[i + 1]).exists() else args[i + 1] for i, a in enumerate(args[:-1]) if a in READS]
    if cmd == "fixedid-train" and "/" in value.get("--config", "") or value.get("--config", "").endswith(".toml"):
        reads.append(value["--config"])
    created = []
    if cmd == "fixedid-analyze" and args and args[0] == "demo":
        out = value.get("--out", "fixedid-demo")
        created += [out] + [f"{out}/checkpoints/{v}" for v in ("learned", "canonical", "gf2")]
    elif cmd == "fixedid-train" and "--out" in value and "--dry-run" not in args:
        variants = value.get("--variants", "learned,canonical,gf2").split(",")
        created += [value["--out"]] + [f"{value['--out']}/{v}" for v in variants]
    elif "--out" in value:
        created.append(value["--out"])
    if cmd == "cp":
        created.append(args[-1])
        reads.append(args[-2])
    if cmd == "mkdir":
        created += [a for a in args if not a.startswith("-")]
    if ">" in words:
        created.append(words[words.index(">") + 1])
    return created, reads


def exists(path: str, created: list[str]) -> bool:
    p = path.rstrip("/")
    return (ROOT / p).exists() or any(p == c.rstrip("/") or p.startswith(c.rstrip("/") + "/") for c in created)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_command_reads_only_paths_that_exist_by_then(page):
    text = page.read_text()
    # every page but the README and Getting started assumes the demo has run, as Getting started says
    created = [] if page.name in ("README.md", "getting-started.md") else [
        "fixedid-demo", *(f"fixedid-demo/checkpoints/{v}" for v in ("learned", "canonical", "gf2"))]
    for words in fenced_commands(text):
        assert words[0] in COMMANDS or words[0].startswith(("python", "export", "sbatch", "pip")), \
            f"{page.name}: {' '.join(words)}: not a command of the project (placeholders belong in prose)"
        made, reads = created_and_read(words)
        for path in reads:
            assert exists(path, created), f"{page.name}: {' '.join(words)} reads {path}, which no command before it " \
                                          "creates"
        created += made


def test_the_quick_start_uses_the_demos_checkpoints():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    quick = readme[readme.index("## Quick start"):readme.index("## The model in a notebook")]
    commands = fenced_commands(quick)
    assert len(commands) >= 5 and all(w[0] in ("fixedid-analyze", "source") for w in commands)
    ckpts = [w[i + 1] for w in commands for i, a in enumerate(w[:-1]) if a == "--ckpt"]
    assert ckpts and all(re.fullmatch(r"fixedid-demo/checkpoints/(learned|canonical|gf2)", c) for c in ckpts)
    assert "runs/tiny/" not in readme and not re.search(r"20\d\d-\d\d-\d\d", readme)


def exports():
    import fixedid

    sys.path.insert(0, str(ROOT / "docs"))
    import _generate

    for name in _generate.modules():
        mod = importlib.import_module(name)
        if hasattr(mod, "__path__"):
            for export in getattr(mod, "__all__", []):
                yield name, export, _generate.home(name, export)
    assert fixedid.__all__


def test_the_api_reference_documents_every_export():
    sys.path.insert(0, str(ROOT / "docs"))
    import _generate

    modules = set(_generate.modules())
    seen = 0
    for package, name, home in exports():
        seen += 1
        where, _, attr = home.rpartition(".")
        if where not in modules:  # a class attribute or nested name: its class's module
            where = where.rpartition(".")[0]
        assert where in modules, f"{package}.{name} is documented at {home}, which the API reference leaves out"
        obj = getattr(importlib.import_module(package), name)
        if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj):
            assert (obj.__doc__ or "").strip(), f"{package}.{name} has no docstring"
        else:  # data: a #: comment above its assignment in the module that assigns it
            source = Path(inspect.getsourcefile(importlib.import_module(where))).read_text().splitlines()
            line = next(i for i, s in enumerate(source) if re.match(rf"{attr}\s*(:[^=]*)?=", s))
            assert source[line - 1].lstrip().startswith("#:"), f"{package}.{name} ({home}) has no #: doc comment"
    assert seen > 100
