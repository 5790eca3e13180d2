"""The demo's circuits section: each variant's IOI circuit - the edges EAP scores highest on the demo's IOI pairs,
how much of the behaviour the top edges carry when every other edge is ablated (the faithfulness curve), the
circuit as a graph, and where its key heads attend on the first clean prompt."""

from __future__ import annotations

import pandas as pd

from analysis.causal.circuits import circuit_checks, default_ks, faithfulness_curve
from analysis.causal.edges import edge_attribution, node_scores

K = 24  # edges kept in the circuit that is checked and drawn
KEY_HEADS = 2  # heads per variant whose attention is shown
METRIC = "logit_diff"  # raw scores: the report quotes them in logits


def circuit_tables(models: dict, pairs) -> dict:
    """Per variant: ``scores`` (every edge), ``curve``, ``checks`` (the top-K circuit) and ``key_heads``."""
    out = {}
    for v, m in models.items():
        scores = edge_attribution(m, pairs, metric=METRIC)
        kept = scores.loc[scores.score.abs().sort_values(ascending=False, kind="stable").index[:K]]
        heads = node_scores(kept)
        heads = heads[heads.sender_kind == "head"]
        key = list(heads.loc[heads.score.abs().sort_values(ascending=False).index[:KEY_HEADS], "sender"])
        ks = sorted(set(default_ks(len(scores))) | {K})
        out[v] = {"scores": scores, "curve": faithfulness_curve(m, pairs, scores, ks=ks, metric=METRIC),
                  "checks": circuit_checks(m, pairs, kept, minimality=False, metric=METRIC), "kept": kept, "key_heads": key}
    return out


def circuit_reading(tables: dict, figures: dict) -> list[str]:
    """The report's section (``figures``: the file names of the curve, each circuit graph and each attention view)."""
    lines = ["## The IOI circuit of each variant", "",
             f"Edge attribution (EAP, denoising) scores every writer -> reader edge on the IOI pairs above; the top "
             f"{K} edges by |score| are the circuit. Every other edge is then ablated - each reader reads the "
             "corrupted prompt's write of the ablated writers - and the recovered share is (m - m_corrupt) / "
             "(m_clean - m_corrupt) of the logit difference: 1 is the clean behaviour. The faithfulness curve does "
             "the same for every k.", "", f"![faithfulness]({figures['curve']})", ""]
    for v, t in tables.items():
        c, curve = t["checks"].attrs, t["curve"]
        half = curve[curve.recovered >= 0.5]
        k50 = int(half.k.iloc[0]) if len(half) else None
        lines.append(f"- {v}: the top {K} of {len(t['scores'])} edges recover {c['recovered']:.2f} (the other "
                     f"edges alone {c['complement']:.2f}); the curve first recovers half at "
                     f"{'k = ' + str(k50) if k50 is not None else 'no k tried'} (k: 0, powers of two, {K}, all); area "
                     f"{curve.attrs['area']:.2f}. Key heads: {', '.join(t['key_heads']) or 'none among the top'}.")
    lines.append("")
    for v in tables:
        lines += [f"![{v} circuit]({figures['graph'][v]})", ""]
        if v in figures["attention"]:
            lines += [f"![{v} key heads]({figures['attention'][v]})", ""]
    lines += ["Each kept edge's share of the circuit (the drop when it alone is ablated too) is what `fixedid-analyze "
              "circuit` adds. The scores are a linearisation at the corrupted run (`fixedid-analyze edges --exact` measures their "
              "rank agreement with patching each edge alone); a circuit's recovered share depends on what replaces "
              "the ablated edges, and one seed per variant cannot say whether two circuits differ by interface or "
              "by seed (the study's circuit overlap does).", ""]
    return lines


def circuit_csv(tables: dict) -> dict:
    """The section's tables, each with a ``variant`` column: ``edges``, ``faithfulness``, ``circuit``."""
    def part(t, key):
        if key == "circuit":
            return t["kept"].merge(t["checks"], on=["sender", "receiver"])
        if key == "curve":  # the logit differences the shares are of: a share of a tiny gap is noise
            return t[key].assign(clean=t[key].attrs["clean"], corrupt=t[key].attrs["corrupt"])
        return t[key]

    def stack(key):
        frames = [part(t, key).assign(variant=v) for v, t in tables.items()]
        df = pd.concat(frames, ignore_index=True)
        return df[["variant"] + [c for c in df.columns if c != "variant"]]

    return {"edges": stack("scores"), "faithfulness": stack("curve"), "circuit": stack("circuit")}


__all__ = ["circuit_tables", "circuit_reading", "circuit_csv", "K"]
