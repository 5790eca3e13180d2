"""The checkpoints a notebook (or any exploration) studies: the demo's variants, or the ones an environment names."""

from __future__ import annotations

import os
from pathlib import Path

from fixedid import train
from fixedid.train.config import TrainConfig

from analysis.errors import AnalysisError

ENV = "FIXEDID_CHECKPOINTS"
#: The demo's variants, trained on the tiny recipe and cached.
VARIANTS = ("learned", "canonical", "gf2")


def _named(value: str) -> dict[str, Path]:
    value = value.strip()
    if "=" not in value:
        run = Path(value).expanduser()
        if not run.is_dir():
            raise AnalysisError(f"{ENV}={value}: no such directory; name a fixedid-train run directory or give "
                                "name=path,name=path")
        found = {p.name: p for p in sorted(run.iterdir()) if (p / "meta.json").is_file()}
        order = ["learned", "canonical", "gf2"]
        found = dict(sorted(found.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else 9, kv[0])))
        if not found:
            raise AnalysisError(f"{ENV}={value}: no checkpoint (a directory with meta.json) inside it")
        return found
    out = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, sep, path = part.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise AnalysisError(f"{ENV}: {part!r} is not name=path")
        p = Path(path.strip()).expanduser()
        if not (p / "meta.json").is_file():
            raise AnalysisError(f"{ENV}: {p} is not a checkpoint directory (no meta.json)")
        out[name.strip()] = p
    return out


def cache_root(arg: str | None) -> Path:
    """Where trained variants are cached: ``arg``, else ``$FIXEDID_CACHE``, else ``~/.cache/fixedid``."""
    return Path(arg or os.environ.get("FIXEDID_CACHE") or Path.home() / ".cache" / "fixedid").expanduser()


def ensure_variants(config: str | TrainConfig, cache: Path, *, variants=VARIANTS, quiet: bool = False) -> Path:
    """The trained ``variants`` (default: the three) of ``config`` (a TrainConfig, a TOML path or a packaged config
    name) in ``cache/demo-<key>`` (:meth:`~fixedid.train.TrainConfig.trained_key`: everything that changes what is
    trained, ``steps`` and the kept snapshots included): reused when complete, resumed when a training was
    interrupted, else trained."""
    cfg = config if isinstance(config, TrainConfig) else TrainConfig.load(config)
    variants = tuple(variants)
    run_dir = cache / f"demo-{cfg.trained_key()[:12]}"
    if train.run_complete(run_dir, cfg, variants):
        if not quiet:
            print(f"using the cached variants in {run_dir}")
        return run_dir
    if not quiet:
        what = "the three variants" if variants == VARIANTS else ", ".join(variants)
        print(f"training {what} into {run_dir} (cached for the next run)")
    train.train(cfg, run_dir, variants, resume=(run_dir / "run.json").exists(), quiet=quiet)
    if not train.run_complete(run_dir, cfg, variants):
        raise AnalysisError(f"{run_dir} finished training before the snapshots [train] keep = {cfg.train.keep} "
                            "were asked for; remove it to retrain")
    return run_dir


def study_variants(config: str = "tiny", *, cache: str | None = None, quiet: bool = False,
                   train: bool = False) -> dict[str, Path]:
    """Checkpoint directories by variant name: ``$FIXEDID_CHECKPOINTS`` when set, else the demo's variants of
    ``config`` from the cache (``cache``, else ``$FIXEDID_CACHE``, else ``~/.cache/fixedid``).

    Where the cache lacks them (or holds an interrupted training), :class:`~analysis.errors.AnalysisError` says to
    run ``fixedid-analyze demo`` first, which trains and caches them, or to set ``FIXEDID_CHECKPOINTS``; with
    ``train=True`` they are trained (or the interrupted training resumed) into the cache instead, as the demo
    trains them."""
    if os.environ.get(ENV):
        return _named(os.environ[ENV])
    root = cache_root(cache)
    if not train:  # (the keyword hides the module train here: _cached does the lookup)
        run_dir, complete = _cached(config, root)
        if not complete:
            demo = "fixedid-analyze demo" + ("" if config == "tiny" else f" --config {config}") + \
                ("" if cache is None else f" --cache {cache}")
            raise AnalysisError(f"the demo's variants of {config!r} are not in {run_dir}: run `{demo}` first (it "
                                f"trains and caches them, 5-10 minutes on 2 CPU cores), or set {ENV} to checkpoints "
                                "you have (a fixedid-train --out directory, or learned=PATH,canonical=PATH,...); "
                                "study_variants(train=True) trains them here")
        if not quiet:
            print(f"using the cached variants in {run_dir}")
    else:
        run_dir = ensure_variants(config, root, quiet=quiet)
    return {v: run_dir / v for v in VARIANTS}


def _cached(config: str, root: Path) -> tuple[Path, bool]:
    """The cache directory of ``config``'s demo variants (as :func:`ensure_variants` names it) and whether it holds
    the three, trained to the config's last step."""
    cfg = TrainConfig.load(config)
    run_dir = root / f"demo-{cfg.trained_key()[:12]}"
    return run_dir, train.run_complete(run_dir, cfg, VARIANTS)


def load_variants(config: str = "tiny", *, cache: str | None = None, quiet: bool = False, train: bool = False,
                  device=None, dtype=None) -> dict:
    """:func:`study_variants` (which trains nothing unless ``train=True``), loaded with :func:`analysis.load` (eval
    mode, tokenizer attached; ``device`` and ``dtype`` as there)."""
    from analysis.loading import load

    paths = study_variants(config, cache=cache, quiet=quiet, train=train)
    return {name: load(path, device=device, dtype=dtype) for name, path in paths.items()}


def over_variants(models: dict, fn):
    """``fn(model)`` for every variant, stacked into one tidy table with ``variant`` as its first column (``fn`` may
    return a DataFrame or anything with a ``summary`` DataFrame, such as an intervention result)."""
    import pandas as pd

    frames = []
    for name, model in models.items():
        out = fn(model)
        df = getattr(out, "summary", out)
        if not isinstance(df, pd.DataFrame):
            raise AnalysisError(f"over_variants: fn returned {type(out).__name__} for {name}, not a DataFrame")
        frames.append(df.assign(variant=name))
    if not frames:
        raise AnalysisError("over_variants needs at least one model")
    df = pd.concat(frames, ignore_index=True)
    return df[["variant"] + [c for c in df.columns if c != "variant"]]


__all__ = ["ENV", "VARIANTS", "cache_root", "ensure_variants", "study_variants", "load_variants", "over_variants"]
