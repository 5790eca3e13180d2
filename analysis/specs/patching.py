"""``patching``: activation or attribution patching of one checkpoint (:mod:`analysis.causal.patching`); the
study's ``patching`` measurement (where the IOI information sits, layer by layer)."""

from __future__ import annotations

from analysis.causal.patching import MODES, SITES
from analysis.specs import shared
from analysis.specs.base import Measure, Param, Result, Spec

METHODS = ("activation", "attribution")


def patch(model, *, pairs, site, mode, method, metric, per_pair, progress=False) -> Result:
    """The patching table (and with ``per_pair`` one row per pair too)."""
    from analysis.causal.patching import activation_patching, attribution_patching

    fn = activation_patching if method == "activation" else attribution_patching
    kw = dict(site=site, mode=mode, metric=metric)
    tables = {"patching": fn(model, pairs, progress=progress, **kw)}
    if per_pair:
        tables["patching_per_pair"] = fn(model, pairs, per_pair=True, **kw)
    return Result(tables=tables)


def heatmap_figure(result: Result):
    from analysis.figures.patching import heatmap

    p = result.params
    df = result.tables["patching"]
    return heatmap(df, title=f"{result.names[0]}: {p['method']} patching of {p['site']} ({p['mode']}, "
                             f"{df.attrs['n_pairs']} pairs)").figure


def summarize(df, k: int = 5) -> str:
    """The ``k`` patches that move the metric furthest from the patched run's own baseline (the corrupted run in
    ``denoise`` mode, the clean run in ``noise`` mode), one per line, after the baselines."""
    a = df.attrs
    eff = (df.value - a["baseline"]).abs()
    top = df.loc[eff.sort_values(ascending=False).index[:k]]
    patched = "corrupted" if a["mode"] == "denoise" else "clean"
    lines = [f"{a['method']} patching ({a['mode']}: into the {patched} run) of {a['site']} over {a['n_pairs']} "
             f"pairs, metric {a['metric']}: clean {a['clean']:.3f}, corrupt {a['corrupt']:.3f}"]
    if a["metric"] == "normalized_logit_diff":
        gap = a["raw_clean"] - a["raw_corrupt"]
        lines[0] += (f" (raw logit differences: clean {a['raw_clean']:+.3f}, corrupt {a['raw_corrupt']:+.3f}, gap "
                     f"{gap:+.3f})")
    lines.append(f"Largest changes from the {patched} run's own value {a['baseline']:.3f}:")
    for _, r in top.iterrows():
        where = [f"layer {r.layer}"] + ([f"head {r['head']}"] if r["head"] is not None and str(r["head"]) != "<NA>"
                                        else [])
        if str(r.pos) != "<NA>":
            where.append(f"pos {r.pos} {a['str_tokens'][int(r.pos)]!r}")
        lines.append(f"  {', '.join(where)}: {r.value:.3f} ({r.value - a['baseline']:+.3f})")
    return "\n".join(lines)


def measure(model, reference, sizes):
    """Where the IOI information sits: the clean-corrupt gap and, above the smallest gap read, the flow by layer."""
    import warnings

    from analysis.causal.flow import information_flow
    from analysis.causal.patching import MIN_GAP, activation_patching
    from analysis.errors import AnalysisWarning
    from analysis.specs.rows import rows
    from analysis.tasks import task_pairs

    with warnings.catch_warnings():  # a small gap is recorded below and its flow left out
        warnings.simplefilter("ignore", AnalysisWarning)
        df = activation_patching(model, task_pairs(model, "ioi", 16), metric="normalized_logit_diff")
    gap = df.attrs["raw_clean"] - df.attrs["raw_corrupt"]
    items = [("clean_corrupt_gap", "ioi", gap)]
    if abs(gap) >= MIN_GAP:
        f = information_flow(df).to_frame()
        items += [(m, f"layer {int(r.layer)}", getattr(r, m)) for r in f.itertuples() for m in ("source", "final")]
    return rows("patching", items)


SPEC = Spec(
    name="patching", group="causal methods", models="one",
    help="activation or attribution patching of one checkpoint",
    examples="""
  fixedid-analyze patching --ckpt fixedid-demo/checkpoints/canonical --task ioi
  fixedid-analyze patching --ckpt fixedid-demo/checkpoints/gf2 --task agreement --site z --method attribution
  fixedid-analyze patching --ckpt fixedid-demo/checkpoints/learned \\
      --clean "When Mary and John went to the park, John gave a ball to" \\
      --corrupt "When Mary and John went to the park, Mary gave a ball to" --answer Mary --wrong John
""",
    params=shared.pair_params() + (
        Param("site", "resid_pre", "the activation patched, at every layer (and position; per head for z)",
              choices=tuple(SITES)),
        Param("mode", "denoise", "denoise: clean activations into the corrupted run; noise: corrupted activations "
              "into the clean run", choices=MODES),
        Param("method", "activation", "activation: one forward per patch; attribution: its first-order estimate "
              "from one backward", choices=METHODS),
        shared.metric(),
        Param("per_pair", False, "also write one row per pair (patching_per_pair.csv)", switch=True)),
    compute=patch, prepare=shared.prepare_pairs, check=shared.check_pairs,
    figures={"patching": heatmap_figure},
    summary=lambda r: summarize(r.tables["patching"]),
    library=("analysis.causal.patching:activation_patching", "analysis.causal.patching:attribution_patching",
             "analysis.tasks:task_pairs"),
    measures=(Measure("patching", measure),),
)


__all__ = ["SPEC", "METHODS", "patch", "summarize", "measure"]
