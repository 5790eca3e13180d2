"""The main job on the embedded default: three tiny variants, one IOI patching study, side-by-side figures, a report.

``fixedid-analyze demo`` trains the ``learned``, ``canonical`` and ``gf2`` tiny variants on the built-in synthetic
language (or reuses them from the cache, keyed by the training config's fingerprint; an interrupted training is
resumed), runs activation patching of the residual stream on the same IOI pairs for each, and writes to ``--out``:
``ioi_patching.csv`` (all variants, tidy), ``ioi_baselines.csv``, ``ioi_resid_pre.png/.pdf`` (side by side),
``ioi_logit_diff.png/.pdf`` and ``report.md``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from fixedid import train
from fixedid.clitools import write_text_atomic
from fixedid.trainconfig import TrainConfig

from .errors import AnalysisError
from .figures import save_figure, side_by_side, write_csv
from .metrics import logit_diff
from .model import load
from .patching import activation_patching
from .tasks import task_pairs

VARIANTS = ("learned", "canonical", "gf2")
N_PAIRS = 16


def default_config() -> Path:
    path = Path(__file__).resolve().parents[1] / "experiments" / "configs" / "tiny.toml"
    if not path.exists():
        raise AnalysisError(f"the demo's training config {path} is missing (it ships with the source tree); pass "
                            "--config experiments/configs/tiny.toml from a clone")
    return path


def cache_root(arg: str | None) -> Path:
    return Path(arg or os.environ.get("FIXEDID_CACHE") or Path.home() / ".cache" / "fixedid").expanduser()


def _trained(run_dir: Path, steps: int) -> bool:
    for v in VARIANTS:
        try:
            if json.loads((run_dir / v / "meta.json").read_text()).get("step") != steps:
                return False
        except (OSError, ValueError):
            return False
    return True


def ensure_variants(config: Path, cache: Path) -> Path:
    cfg = TrainConfig.load(config)
    run_dir = cache / f"demo-{cfg.fingerprint()[:12]}"
    if _trained(run_dir, cfg.train.steps):
        print(f"using the cached variants in {run_dir}")
        return run_dir
    print(f"training the three tiny variants into {run_dir} (cached for the next run)")
    args = ["--config", str(config), "--out", str(run_dir)] + (["--resume"] if (run_dir / "run.json").exists()
                                                               else [])
    code = train.run(train.parse_args(args))
    if code:
        raise AnalysisError(f"training the demo variants failed (exit {code})")
    return run_dir


def baselines(model, batch) -> dict:
    with torch.no_grad():
        clean = logit_diff(model(batch.clean), batch.answer, batch.wrong)
        corrupt = logit_diff(model(batch.corrupt), batch.answer, batch.wrong)
    return {"clean_logit_diff": clean.mean().item(), "corrupt_logit_diff": corrupt.mean().item(),
            "clean_accuracy": (clean > 0).float().mean().item(), "val_loss": model.meta.get("val_loss"),
            "trainable_params": model.param_counts()["trainable"]}


def logit_diff_figure(base: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    x = np.arange(len(base))
    ax.bar(x - 0.18, base.clean_logit_diff, 0.36, label="clean prompt", color="#2166ac")
    ax.bar(x + 0.18, base.corrupt_logit_diff, 0.36, label="corrupted prompt", color="#b2182b")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(x, base.variant)
    ax.set_ylabel("logit(IO) - logit(S)")
    ax.set_title(f"IOI behaviour of the three variants ({N_PAIRS} pairs)", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    return fig


def strongest(df: pd.DataFrame) -> pd.Series:
    return df.loc[(df.value - df.attrs["corrupt"]).abs().idxmax()]


def learned_ioi(b: dict) -> bool:
    """Whether a variant shows the behaviour at all: IO preferred in >= 75% of pairs and a gap of >= 1 logit."""
    return b["clean_accuracy"] >= 0.75 and b["clean_logit_diff"] - b["corrupt_logit_diff"] >= 1.0


def reading(variant: str, b: dict, df: pd.DataFrame) -> str:
    """A few sentences on one variant, written from the measured numbers only."""
    toks = df.attrs["str_tokens"]
    top = strongest(df)
    where = f"layer {top.layer}, position {top.pos} ({toks[int(top.pos)]!r})"
    if not learned_ioi(b):
        return (f"**{variant}** has not learned IOI at this scale: the clean logit difference is "
                f"{b['clean_logit_diff']:.2f} (IO preferred in {100 * b['clean_accuracy']:.0f}% of pairs) against "
                f"{b['corrupt_logit_diff']:.2f} corrupted, so the normalised patching map divides by a gap of "
                f"{abs(b['clean_logit_diff'] - b['corrupt_logit_diff']):.2f} logits and should not be read as a "
                "circuit (its panel is marked and saturates).")
    late = df[(df.layer == df.layer.max())]
    final = late.loc[late.pos.idxmax()].value
    return (f"**{variant}** prefers the indirect object in {100 * b['clean_accuracy']:.0f}% of pairs (logit "
            f"difference {b['clean_logit_diff']:.2f} clean, {b['corrupt_logit_diff']:.2f} corrupted). The strongest "
            f"single residual-stream patch is at {where}, restoring {top.value:.2f} of the clean-corrupt gap; in the "
            f"last layer the final position carries {final:.2f} of it.")


def write_report(out: Path, run_dir: Path, base: pd.DataFrame, results: dict, pairs) -> Path:
    toks = next(iter(results.values())).attrs["str_tokens"]
    ex = pairs.texts[0]
    lines = [
        "# IOI activation patching across the three input interfaces", "",
        f"Models: the `tiny` variants in `{run_dir}` (one recipe, one seed, one data order; only the input interface "
        "differs). Task: indirect-object identification from the built-in synthetic language, "
        f"{len(pairs)} clean/corrupt pairs of {len(toks)} tokens, e.g.", "",
        f"- clean: `{ex['clean']}` -> ` {ex['answer']}`", f"- corrupt: `{ex['corrupt']}` (the second subject becomes "
        "the indirect object, so the answer flips)", "",
        "Method: activation patching, denoising - the clean residual stream before each block, one position at a "
        "time, is written into the corrupted run; the metric is the logit difference (IO - S) normalised so the "
        "corrupted run scores 0 and the clean run 1.", "",
        "| variant | trainable params | val loss | clean logit diff | corrupt logit diff | IO preferred (clean) |",
        "|---|---:|---:|---:|---:|---:|"]
    for _, r in base.iterrows():
        vl = f"{r.val_loss:.3f}" if pd.notna(r.val_loss) else "n/a"
        lines.append(f"| {r.variant} | {r.trainable_params:,} | {vl} | {r.clean_logit_diff:.2f} | "
                     f"{r.corrupt_logit_diff:.2f} | {100 * r.clean_accuracy:.0f}% |")
    lines += ["", "![IOI logit differences](ioi_logit_diff.png)", "",
              "![Residual-stream patching, side by side](ioi_resid_pre.png)", "", "## Reading", ""]
    lines += [reading(v, base.set_index("variant").loc[v].to_dict(), df) + "\n" for v, df in results.items()]
    lines += ["## What this does not show", "",
              "Positions before the second subject are identical in the two prompts, so patching them is a no-op by "
              "construction (white columns). One seed and one tiny scale per variant: differences between the maps "
              "are not tested against seed spread, and the fixed-code variants also have fewer parameters than the "
              "learned one (no capacity reallocation). Patching one site at a time misses redundant routes; "
              "`fixedid-analyze patching --mode noise` probes necessity rather than sufficiency.", ""]
    return write_text_atomic(out / "report.md", "\n".join(lines))


def run_demo(args) -> int:
    config = Path(args.config) if args.config else default_config()
    run_dir = ensure_variants(config, cache_root(args.cache))
    out = Path(args.out)
    models = {v: load(run_dir / v) for v in VARIANTS}
    pairs = task_pairs(models["canonical"], "ioi", N_PAIRS, seed=0)  # one tokenizer, so the same pairs for all
    results, rows = {}, []
    for v, m in models.items():
        results[v] = activation_patching(m, pairs, site="resid_pre", metric="normalized_logit_diff", progress=True)
        rows.append({"variant": v, **baselines(m, pairs)})
    base = pd.DataFrame(rows)
    tidy = pd.concat([df.assign(variant=v) for v, df in results.items()], ignore_index=True)
    write_csv(tidy[["variant", "site", "layer", "pos", "head", "value"]], out / "ioi_patching.csv")
    write_csv(base, out / "ioi_baselines.csv")
    titles = {r.variant: r.variant if learned_ioi(r.to_dict()) else f"{r.variant} (IOI not learned: map is noise)"
              for _, r in base.iterrows()}
    save_figure(side_by_side(results, titles=titles, suptitle="IOI: clean residual stream patched into the "
                             "corrupted run (1 = clean behaviour restored)"), out, "ioi_resid_pre")
    save_figure(logit_diff_figure(base), out, "ioi_logit_diff")
    report = write_report(out, run_dir, base, results, pairs)
    for _, r in base.iterrows():
        print(f"{r.variant:>9}: IOI logit diff clean {r.clean_logit_diff:+.2f}, corrupt {r.corrupt_logit_diff:+.2f}, "
              f"IO preferred {100 * r.clean_accuracy:.0f}%")
    print(f"wrote {report} with its figures and CSVs in {out}")
    return 0
