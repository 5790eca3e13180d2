"""``context``: how much each variant leans on context - the loss with the context limited to k tokens, attention and
MLP outputs replaced from other windows, alternative segmentations (:mod:`analysis.causal.context`,
:mod:`analysis.causal.components`); the study's ``context`` measurement."""

from __future__ import annotations

from analysis.causal.components import HOWS
from analysis.causal.context import DEFAULT_KS, MASKS
from analysis.errors import AnalysisError
from analysis.specs import shared, types
from analysis.specs.base import Measure, Param, Result, Spec

#: The component ablations read at most this many tokens (each replaces every layer's output, one at a time).
ABLATION_TOKENS = 8192


def check(params: dict) -> None:
    if params["how"] == "mean" and params["draws"] != 1:
        raise AnalysisError("--draws must be 1 with --ablation mean (the mean has no draws)")


def context_use(model, *, data, tokens, ks, positions, mask, how, draws, seed, segmentation,
                progress=False) -> Result:
    """The context curve, the component effects and (with ``segmentation``) the cost of split words."""
    from analysis.causal.components import component_effects
    from analysis.causal.context import context_curve, segmentation_cost
    from analysis.corpus import corpus_texts

    tables = {"context_curve": context_curve(model, data, ks=ks, positions=positions, tokens=tokens, mask=mask,
                                             progress=progress),
              "context_effects": component_effects(model, data, how=how, draws=draws, seed=seed,
                                                   tokens=min(tokens, ABLATION_TOKENS), progress=progress)}
    if segmentation:
        tables["segmentation"] = segmentation_cost(model, corpus_texts(model, data))
    return Result(tables=tables, attrs={k: v.attrs for k, v in tables.items()})


def context_figure(result: Result):
    from analysis.figures.context import context_figure as draw

    parts = result.parts
    return draw({n: p.tables["context_curve"] for n, p in parts.items()},
                {n: p.tables["context_effects"] for n, p in parts.items()})


def summarize(result: Result) -> str:
    p = result.params
    lines = ["next-token loss with the context limited to k tokens (whole window in brackets); loss increase (nats, "
             f"95% interval over windows) from {p['how']} ablation of attention and MLP:"]
    for n, part in result.parts.items():
        c, e = part.tables["context_curve"], part.tables["context_effects"].set_index("effect")
        whole = c[c["mask"] == "none"].loss.iloc[0]
        for mask in p["mask"]:
            cells = ", ".join(f"k={int(r.k)} {r.loss:.2f}" for r in c[c["mask"] == mask].itertuples())
            lines.append(f"  {n} {mask}: {cells} ({whole:.2f})")
        cells = "; ".join(f"{eff} {e.delta_loss[eff]:+.3f} [{e.delta_loss_lo[eff]:+.3f}, {e.delta_loss_hi[eff]:+.3f}]"
                          for eff in ("all attn", "all mlp", "all attn + all mlp", "attn x mlp"))
        lines.append(f"  {n} ablation: {cells}")
        if "segmentation" in part.tables:
            a = part.attrs["segmentation"]
            lines.append(f"    {a['n_words']} words split in two: {a['extra_nats']:+.2f} nats per word "
                         f"[{a['extra_nats_lo']:+.2f}, {a['extra_nats_hi']:+.2f}]")
    return "\n".join(lines)


def measure(model, reference, sizes):
    """The loss with the context limited to 1, 4 and 16 tokens (window mask and crop), and the loss increase when
    attention or MLP outputs are resampled from other windows, with each one's share."""
    from analysis.causal.components import component_effects
    from analysis.causal.context import context_curve
    from analysis.corpus import corpus_tokens
    from analysis.specs.rows import rows

    x = corpus_tokens(model, tokens=sizes.tokens)
    curve = context_curve(model, x, ks=(1, 4, 16), positions=min(32, x.shape[1] // 2), mask=("window", "crop"))
    eff = component_effects(model, x, how="resample", seed=0)
    items = [("loss", "whole window" if r.mask == "none" else f"{r.mask} k={int(r.k)}", r.loss)
             for r in curve.itertuples()]
    items += [("ablation_delta_loss", r.effect, r.delta_loss) for r in eff.itertuples()]
    items += [("ablation_share", r.effect, r.share) for r in eff.itertuples() if r.share == r.share]
    return rows("context", items)


SPEC = Spec(
    name="context", group="causal methods",
    help="context use: loss with the context limited to k tokens (window mask / crop), attention and MLP ablations "
         "from other windows with their interactions, alternative segmentations",
    examples="""
  fixedid-analyze context --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical \\
      --ckpt fixedid-demo/checkpoints/gf2 --tokens 4096
""",
    params=(
        shared.data("a .txt or .jsonl file (.npy for the curve and ablations only; default: the checkpoint's own "
                    "validation data)"),
        shared.tokens(16_384, f"tokens for the curve and the ablations (the ablations use at most "
                              f"{ABLATION_TOKENS})", low=2),
        Param("ks", DEFAULT_KS, "context lengths", type=types.positive_int_list),
        Param("positions", 32, "measured positions per window", type=types.positive_int),
        Param("mask", MASKS, "how the context is limited: window (each attention read spans the last k positions, "
              "true positions), crop (only the last k tokens), or both", type=types.subset_of(MASKS)),
        Param("how", "resample", "resample (another window's output at the same position) or mean (the per-position "
              "mean over a disjoint half of the windows)", choices=HOWS, option="--ablation"),
        Param("draws", 1, "resample pairings averaged per window", type=types.positive_int),
        shared.seed("seed of the pairing or the split"),
        Param("segmentation", False, "also the cost of alternative segmentations (needs a tokenizer with pieces "
              "smaller than its words, such as BPE)", switch=True)),
    compute=context_use, check=check,
    figures={"context": context_figure},
    summary=summarize,
    library=("analysis.causal.context:context_curve",),
    measures=(Measure("context", measure),),
)


__all__ = ["SPEC", "ABLATION_TOKENS", "context_use", "measure"]
