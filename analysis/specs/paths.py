"""``paths``: path patching of senders (heads, MLPs, the input) into chosen receivers (:mod:`analysis.causal.paths`)."""

from __future__ import annotations

from analysis.causal.patching import MODES
from analysis.causal.paths import NORMS
from analysis.specs import shared
from analysis.specs.base import Param, Result, Spec


def patch_paths(model, *, pairs, senders, receivers, mode, norm, metric, per_pair) -> Result:
    """The path-patching table (and with ``per_pair`` one row per pair too)."""
    from analysis.causal.paths import path_patching

    kw = dict(senders=senders, receivers=receivers, mode=mode, metric=metric, norm=norm)
    tables = {"paths": path_patching(model, pairs, **kw)}
    if per_pair:
        tables["paths_per_pair"] = path_patching(model, pairs, per_pair=True, **kw)
    return Result(tables=tables)


def paths_figure(result: Result):
    from analysis.figures.circuits import paths_figure as draw

    p, df = result.params, result.tables["paths"]
    return draw(df, title=f"{result.names[0]}: path patching ({p['mode']}, {df.attrs['n_pairs']} pairs, norm "
                          f"{p['norm']})")


def summarize(df, k: int = 6) -> str:
    a = df.attrs
    eff = (df.value - a["baseline"]).abs()
    top = df.loc[eff.sort_values(ascending=False).index[:k]]
    patched = "corrupted" if a["mode"] == "denoise" else "clean"
    lines = [f"path patching ({a['mode']}: senders' writes into the {patched} run, norm {a['norm']}) into "
             f"{', '.join(a['receivers'])} over {a['n_pairs']} pairs, metric {a['metric']}: clean {a['clean']:.3f}, "
             f"corrupt {a['corrupt']:.3f}", f"Largest changes from the {patched} run's own value {a['baseline']:.3f}:"]
    for _, r in top.iterrows():
        lines.append(f"  {r.sender:>8s}: {r.value:.3f} ({r.value - a['baseline']:+.3f}) "
                     f"[{r.value_lo:.3f}, {r.value_hi:.3f}]")
    return "\n".join(lines)


SPEC = Spec(
    name="paths", group="circuits", models="one",
    help="path patching: senders (heads, MLPs, input) into chosen receivers (q/k/v of heads, MLPs, logits)",
    examples="""
  fixedid-analyze paths --ckpt fixedid-demo/checkpoints/canonical --task ioi --sender heads --receivers logits
  fixedid-analyze paths --ckpt fixedid-demo/checkpoints/gf2 --task ioi --sender L0H3 --receivers L1H2.q,L1H3.k
""",
    params=shared.pair_params() + (
        Param("senders", "all", "sender labels (embed, L0H3, L0H*, L0.mlp; comma-separated) or a set: all upstream "
              "senders, heads or mlps", option="--sender"),
        Param("receivers", "logits", "receiver labels: logits, L1H2.q/.k/.v/.qkv, L1H*.q, L1.mlp (comma-separated)"),
        Param("mode", "denoise", "denoise: the senders' clean writes into the corrupted run; noise: their corrupted "
              "writes into the clean run", choices=MODES),
        Param("norm", "recompute", "the receivers' norm: recomputed from the patched stream or its scale frozen",
              choices=NORMS),
        shared.metric(),
        Param("per_pair", False, "also write one row per pair (paths_per_pair.csv)", switch=True)),
    compute=patch_paths, prepare=shared.prepare_pairs, check=shared.check_pairs,
    figures={"paths": paths_figure},
    summary=lambda r: summarize(r.tables["paths"]),
    library=("analysis.causal.paths:path_patching",),
)


__all__ = ["SPEC", "patch_paths"]
