"""The study's crosscoders (``--analyses crosscoders``; heavy, so never made unless named): for each seed, a crosscoder
over each pair of the study's own variants at every depth of the residual stream, and the same-variant reference of
each variant against the next seed, written as measurements a claims file can test."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pandas as pd

from fixedid.atomic import write_text_atomic

#: The name that selects the crosscoders in a study's ``analyses`` (besides those of ``ANALYSES``).
CROSSCODERS = "crosscoders"
#: The recipe: latents per dimension, active latents per token, training tokens per sample-size unit.
EXPANSION, K, TRAIN_TOKENS_PER_UNIT = 8, 8, 4


def _where(out: Path, steps: int) -> Path:
    return out / "crosscoders" / f"step{steps}"


def crosscoders_done(out: Path, steps: int, models: dict) -> bool:
    """Whether the crosscoders of ``models`` (``{(seed, variant): checkpoint dir}``) are measured at ``steps``."""
    where = _where(out, steps)
    try:
        return (where / "pairs.csv").exists() and json.loads((where / "models.json").read_text()) == _names(models)
    except (OSError, ValueError):
        return False


def _names(models: dict) -> list[str]:
    return sorted(f"{v}@seed{s}" for s, v in models)


def measure_crosscoders(out: Path, steps: int, models: dict, *, tokens: int, quiet: bool = True) -> Path | None:
    """Train and read the crosscoders of ``models`` (``{(seed, variant): final checkpoint dir}``); write each one's
    rows as a measurement (``OUT/measurements/seed<S>/<a>+<b>/step<N>/crosscoders.csv``: metrics ``shared``,
    ``lopsided`` and ``exclusive_<variant>``, keyed by the hook; the reference's label is ``<v>+<v>``, its
    ``exclusive_<v>`` the mean of its two sides) and the table of every crosscoder
    (``OUT/crosscoders/step<N>/pairs.csv``). Returns the directory, or None when no seed has two variants."""
    from analysis.features.crosscoder_survey import Recipe
    from analysis.features.run import split_windows
    from analysis.features.survey import residual_sites
    from analysis.loading import load

    seeds = sorted({s for s, _ in models})
    if crosscoders_done(out, steps, models) or not any(sum(1 for s2, _ in models if s2 == s) >= 2 for s in seeds):
        return None if not models else _where(out, steps)
    order = list(dict.fromkeys(v for _, v in models))  # the caller's variant order names the pairs
    loaded = {k: load(models[k]) for k in sorted(models, key=lambda k: (k[0], order.index(k[1])))}
    first = next(iter(loaded.values()))
    windows, held = split_windows(first, train_tokens=TRAIN_TOKENS_PER_UNIT * tokens, eval_tokens=tokens)
    recipe = Recipe(windows, held, expansion=EXPANSION, k=K)
    rows = []
    for hook in residual_sites(first):
        rows += _variant_pairs(recipe, loaded, seeds, hook) + _seed_pairs(recipe, loaded, seeds, hook)
    table = pd.DataFrame(rows)
    for (seed, label), g in table.groupby(["seed", "label"]):
        _write(_measurements(g), out / "measurements" / f"seed{seed}" / label / f"step{steps}" / "crosscoders.csv")
    where = _where(out, steps)
    _write(table, where / "pairs.csv")
    write_text_atomic(where / "models.json", json.dumps(_names(models)))
    return where


def _variant_pairs(recipe, loaded: dict, seeds, hook: str) -> list[dict]:
    rows = []
    for s in seeds:
        variants = [v for s2, v in loaded if s2 == s]
        for a, b in itertools.combinations(variants, 2):
            found = recipe.pair({a: loaded[(s, a)], b: loaded[(s, b)]}, hook)
            rows.append({"seed": s, "label": f"{a}+{b}", "hook": hook, "kind": "variants", **found,
                         f"exclusive_{a}": found["exclusive_a"], f"exclusive_{b}": found["exclusive_b"]})
    return rows


def _seed_pairs(recipe, loaded: dict, seeds, hook: str) -> list[dict]:
    """Each variant against itself at the next seed (cyclically): the reference its exclusive fractions are read
    against."""
    rows = []
    for i, s in enumerate(seeds):
        t = seeds[(i + 1) % len(seeds)]
        if t == s:
            continue
        for v in [v for s2, v in loaded if s2 == s and (t, v) in loaded]:
            found = recipe.pair({f"{v} s{s}": loaded[(s, v)], f"{v} s{t}": loaded[(t, v)]}, hook)
            rows.append({"seed": s, "label": f"{v}+{v}", "hook": hook, "kind": "two seeds", **found,
                         f"exclusive_{v}": (found["exclusive_a"] + found["exclusive_b"]) / 2})
    return rows


def _measurements(g: pd.DataFrame) -> pd.DataFrame:
    """One crosscoder set's rows as the study's long-format measurements."""
    metrics = ["shared", "lopsided"] + [c for c in g.columns if c.startswith("exclusive_") and c not in ("exclusive_a",
                                                                                             "exclusive_b")]
    items = [(m, r["hook"], r[m]) for r in g.to_dict("records") for m in metrics if pd.notna(r[m])]
    return pd.DataFrame([{"analysis": CROSSCODERS, "metric": m, "key": k, "value": float(v)} for m, k, v in items])


def _write(df: pd.DataFrame, path: Path) -> None:
    from analysis.outputs import write_csv

    path.parent.mkdir(parents=True, exist_ok=True)
    write_csv(df, path)


__all__ = ["CROSSCODERS", "EXPANSION", "K", "TRAIN_TOKENS_PER_UNIT", "crosscoders_done", "measure_crosscoders"]
