"""``interventions``: edits of the input code, component ablations, bit flips split by where they land, and bit x
layer maps (:mod:`analysis.causal.interventions`, :mod:`~analysis.causal.ablation`, :mod:`~analysis.causal.flipsplit`,
:mod:`~analysis.causal.bitmap`); the study's ``interventions`` measurement."""

from __future__ import annotations

from analysis.causal.interventions import DEFAULT_SCALES
from analysis.corpus import MEASURE_TOKENS
from analysis.errors import AnalysisError
from analysis.specs import shared, types
from analysis.specs.base import Measure, Param, Result, Spec
from analysis.specs.interventions_text import largest_lines, noise_lines, split_lines

KINDS = ("bitflip", "midpoint", "swap", "noise", "ablate", "bit-layer", "flip-split")

#: The options each kind reads; giving one that the kind ignores is refused (the others keep the library's default).
USES = {"bitflip": ("bits", "pos"), "midpoint": ("bits", "pos"), "swap": ("positions", "token"),
        "noise": ("scales", "draws", "pos"), "ablate": ("component", "ablation", "layers", "heads", "pos"),
        "bit-layer": ("bits", "pos", "site", "metric"), "flip-split": ("bits", "pos")}
OPTIONS = sorted({o for uses in USES.values() for o in uses})


def check(params: dict) -> None:
    """Refuse an option the kind does not read, and a source of inputs the kind cannot use."""
    kind, uses = params["kind"], USES[params["kind"]]
    for opt in OPTIONS:
        if params.get(opt) is not None and opt not in uses:
            raise AnalysisError(f"--{opt} does not apply to --kind {kind} (its options: "
                                f"{', '.join('--' + o for o in uses)})")
    if params["task"] and params["data"]:
        raise AnalysisError("give --task (prompts) or --data (corpus), not both")
    if kind == "bit-layer" and not params["task"] and params["data"] is None:
        raise AnalysisError("bit-layer maps need prompts of one length: give --task NAME (or --data FILE.npy of "
                            "token ids with --pos)")


def intervene(model, *, kind, task, data, tokens, n_pairs, seed, progress=False, **options) -> Result:
    """One kind of intervention on one model: its summary and per-item tables (``bit_layer`` for bit-layer)."""
    given = {k: v for k, v in options.items() if k in USES[kind] and v is not None}
    if kind == "bit-layer":
        return _bit_layer(model, task, data, tokens, n_pairs, seed, progress, given)
    from analysis.causal.ablation import ablation
    from analysis.causal.flipsplit import flip_split
    from analysis.causal.interventions import input_intervention

    common = dict(data=None if task else data, task=task, tokens=tokens, n_pairs=n_pairs, seed=seed,
                  progress=progress)
    if kind == "ablate":
        r = ablation(model, **common, **({"how": given.pop("ablation")} if "ablation" in given else {}), **given)
    elif kind == "flip-split":
        r = flip_split(model, **common, **given)
    else:
        r = input_intervention(model, kind, **common, **given)
    tables = {"interventions": r.summary.dropna(axis=1, how="all"),
              "interventions_items": r.items.dropna(axis=1, how="all")}
    attrs = {"summary": r.summary, **r.attrs}
    if kind == "flip-split":
        from analysis.causal.flipsplit import split_table
        from analysis.figures.interventions import effect_measure

        tables["flip_split"] = split_table(r.summary, effect_measure(r.summary))
    if kind == "swap" and task:
        from analysis.tasks import task_pairs

        b = task_pairs(model, task, n_pairs, seed=seed)
        attrs["str_tokens"] = [model.tokenizer.decode([int(i)]) for i in b.clean[0]]
    return Result(tables=tables, attrs=attrs)


def _bit_layer(model, task, data, tokens, n_pairs, seed, progress, given) -> Result:
    from analysis.causal.bitmap import bit_layer_map
    from analysis.corpus import corpus_tokens

    source = corpus_tokens(model, data, tokens=tokens) if data is not None else task
    df = bit_layer_map(model, source, n_pairs=n_pairs, seed=seed, progress=progress, **given)
    return Result(tables={"bit_layer": df}, attrs={"map": df})


def _parts(result: Result) -> dict:
    return result.parts or {result.names[0]: result}


def _what(result: Result) -> tuple[str, str]:
    p = result.params
    first = next(iter(_parts(result).values())).attrs
    where = f"{first['n_items']} {p['task']} prompts" if p["task"] else f"{first['n_tokens']:,} corpus tokens"
    what = (f"{p['ablation'] or 'mean'} ablation of each {p['component'] or 'head'}" if p["kind"] == "ablate"
            else f"{p['kind']} edits")
    if p["kind"] != "swap" and p["pos"] is not None:
        what += f" at position {p['pos']}"
    return what, where


def effect_figure(result: Result):
    from analysis.figures.interventions import effect_measure, effect_plot, flip_split_plot

    kind = result.params["kind"]
    if kind == "bit-layer":
        return None
    what, where = _what(result)
    parts = _parts(result)
    if kind == "flip-split":
        first = next(iter(parts.values())).attrs["summary"]
        if result.tables["flip_split"].bit_constant.astype(bool).all():
            return None  # every column asked for is constant over the vocabulary: nothing varies to split
        return flip_split_plot(result.tables["flip_split"], title=f"{what}, {where}",
                               measure_label=effect_measure(first))
    str_tokens = next(iter(parts.values())).attrs.get("str_tokens")
    return effect_plot({v: r.attrs["summary"] for v, r in parts.items()}, title=f"{what}, {where}",
                       str_tokens=str_tokens)


def decode_figure(result: Result):
    from analysis.figures.interventions import noise_decode_plot

    if result.params["kind"] != "noise":
        return None
    what, where = _what(result)
    return noise_decode_plot({v: r.attrs["summary"] for v, r in _parts(result).items()}, title=f"{what}, {where}")


def bit_layer_figure(result: Result):
    from analysis.figures.interventions import bit_layer_figure as draw

    if result.params["kind"] != "bit-layer":
        return None
    return draw({v: r.attrs["map"] for v, r in _parts(result).items()})


def summarize(result: Result) -> str:
    from analysis.figures.interventions import effect_measure
    from analysis.specs.interventions_text import bit_layer_lines

    p, parts = result.params, _parts(result)
    if p["kind"] == "bit-layer":
        return bit_layer_lines({v: r.attrs["map"] for v, r in parts.items()}, p["site"] or "resid_pre",
                               p["metric"] or "kl")
    what, where = _what(result)
    summaries = {v: r.attrs["summary"] for v, r in parts.items()}
    measure = effect_measure(next(iter(summaries.values())))
    if p["kind"] == "flip-split":
        return split_lines(result.tables["flip_split"], measure, what, where)
    if p["kind"] == "noise":
        return noise_lines(summaries, measure, what, where)
    return largest_lines(summaries, measure, what, where)


def measure(model, reference, sizes):
    """Bit flips over the code columns that vary (constant ones apart), split into the part that lands on another
    token's code and the part that lands on none, each beside a swap to the landing token and to a random one; input
    noise at several scales, compared at matched nearest-row decoding accuracy."""
    from analysis.causal.interventions import input_intervention, matched_decoding
    from analysis.corpus import corpus_tokens
    from analysis.specs.rows import rows

    x = corpus_tokens(model, tokens=sizes.tokens)
    items = _flip_items(model, x) if model.cfg.has_code else []
    n = input_intervention(model, "noise", x, scales=(0.25, 0.5, 1.0, 2.0, 4.0), draws=1).summary
    items += [("noise_delta_loss", "scale 0.5", n[n.scale == 0.5].delta_loss.mean()),
              ("noise_decode_acc", "scale 0.5", n[n.scale == 0.5].decode_acc.mean())]
    for r in matched_decoding(n, (0.9, 0.5)).itertuples():
        items.append(("noise_delta_loss", f"decode {100 * r.decode_acc:.0f}%", r.delta_loss))
    return rows("interventions", items)


def _flip_items(model, x) -> list:
    """Per group of bits the mean and largest flip effect and on-support share; the varying bits' flips split into
    their landing and off-code parts, at matched landing shares and beside random swaps."""
    from analysis.causal.flipsplit import flip_split, split_table
    from analysis.causal.interventions import bit_groups, input_intervention
    from analysis.causal.landing import STUDY_SHARES, matched_landing, split_parts

    s = input_intervention(model, "bitflip", x).summary
    groups = bit_groups(s).set_index("group")
    items = []
    for group in groups.index:
        g = groups.loc[group]
        items += [("bitflip_delta_loss", f"mean over {group} bits", g.mean_delta_loss),
                  ("bitflip_delta_loss", f"largest {group} bit", g.max_delta_loss),
                  ("bitflip_on_support", f"mean over {group} bits", g.mean_on_support)]
    varying = s[~s.bit_constant.astype(bool)].bit.astype(int).tolist()
    if not varying:
        return items
    sp = split_table(flip_split(model, x, bits=varying).summary)
    on = sp[sp.on_support > 0]
    items += [("flip_split_delta_loss", part, sp[part].mean()) for part in ("flip", "on", "off")]
    parts = split_parts(sp).assign(delta_loss=sp.flip, bits="varying")  # one group: the varying bits
    for r in matched_landing(parts, STUDY_SHARES, by="bits").itertuples():
        items.append(("flip_at_landing", f"landing {100 * r.landing_at:.0f}%", r.delta_loss))
    if len(on):  # over the bits that land on tokens: the on-support part (a swap to the landing token) beside a
        # swap to a random token at the same positions, so both average the same bits
        items += [("flip_split_delta_loss", f"{label} (bits landing on tokens)", on[part].mean())
                  for part, label in (("on", "on"), ("random", "random swap"))]
    return items


SPEC = Spec(
    name="interventions", group="causal methods",
    help="edit the input code, ablate components, split bit flips by where they land, or map where a code bit's "
         "information goes (bit x layer)",
    examples="""
  fixedid-analyze interventions --ckpt fixedid-demo/checkpoints/canonical \\
      --ckpt fixedid-demo/checkpoints/gf2 --kind bitflip
  fixedid-analyze interventions --ckpt fixedid-demo/checkpoints/learned --kind ablate --component head \\
      --ablation resample --task ioi
  fixedid-analyze interventions --ckpt fixedid-demo/checkpoints/gf2 --kind bit-layer --task ioi
""",
    params=(
        Param("kind", "bitflip", "bitflip, midpoint, swap or noise: an edit of the input code; ablate: a component; "
              "bit-layer: where a flipped bit's information goes, layer by layer; flip-split: each flip split into its "
              "on- and off-support parts", choices=KINDS),
        Param("task", None, "measure on this built-in task's prompts (default: corpus windows)"),
        shared.data(), shared.tokens(MEASURE_TOKENS, "corpus tokens to evaluate"),
        shared.n_pairs(64, "prompts of --task"), shared.seed("seed of the prompts and of random draws"),
        Param("bits", None, "comma-separated code columns (default: every bit)", type=types.int_list),
        Param("pos", None, "edit this position only (negative: from the end; default: all; bit-layer: the position "
              "flipped)", type=int),
        Param("positions", None, "swap: comma-separated positions (default: each)", type=types.int_list),
        Param("token", None, "swap: this token id's row (default: a random other token)", type=int),
        Param("scales", None, "noise: s.d. relative to the input rows' RMS (default "
              f"{','.join(f'{s:g}' for s in DEFAULT_SCALES)})", type=types.float_list),
        Param("draws", None, "noise: draws per scale (default 1)", type=types.positive_int),
        Param("component", None, "ablate: what (default head)", choices=("head", "attn", "mlp", "block")),
        Param("ablation", None, "ablate: how (default mean)", choices=("zero", "mean", "resample")),
        Param("layers", None, "ablate: comma-separated layers (default all)", type=types.int_list),
        Param("heads", None, "ablate: comma-separated heads (default all)", type=types.int_list),
        Param("site", None, "bit-layer: the site patched (default resid_pre)"),
        Param("metric", None, "bit-layer: the metric (default kl)", choices=("kl", "logit_diff"))),
    compute=intervene, check=check,
    figures={"interventions": effect_figure, "interventions_decode": decode_figure, "bit_layer": bit_layer_figure},
    summary=summarize,
    library=("analysis.causal.interventions:input_intervention", "analysis.causal.ablation:ablation",
             "analysis.causal.flipsplit:flip_split", "analysis.causal.bitmap:bit_layer_map"),
    measures=(Measure("interventions", measure),),
)


__all__ = ["SPEC", "KINDS", "USES", "check", "intervene", "measure"]
