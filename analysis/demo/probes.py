"""The demo's probes section: where, across depth, the token id's bits, the grammatical number of a word and the IOI
role of a name become linearly readable in each variant, each score beside its reference (the control task and the
held-out-types split for the id's bits and the bits of a random relabelling of the ids; the lexical baseline for the
contextual labels), and the GF(2) weight of each id bit in the model's own code."""

from __future__ import annotations

import pandas as pd

from analysis.readouts.activations import collect
from analysis.figures.style import short_hook
from analysis.readouts.probes import probe_table

TOKENS = 4096  # validation tokens (about a fifth of whole sequences held out for testing)
FAMILIES = ("canonical_bits", "perm_bits", "number", "ioi_role")
GROUPS = {"canonical_bit": "canonical id bits (mean over the bits that vary)",
          "perm_bit": "bits of a random relabelling of the ids (mean)",
          "number": "grammatical number (sg / pl words)", "ioi_role": "IOI role of a name (io / s1 / s2 / io2)"}


def _where(hook: str) -> str:
    if hook == "hook_embed":
        return "at the input"
    if hook.startswith("blocks."):
        return f"entering block {hook.split('.')[1]}"
    return "at the final norm"


def probe_tables(models: dict) -> pd.DataFrame:
    """The demo's probes across depth for every variant (id bits, part of speech, IOI role, with the control task), as
    one table with a ``variant`` column."""
    frames = []
    for v, m in models.items():
        df = probe_table(collect(m, tokens=TOKENS), FAMILIES, shuffled=False, splits=("sequence", "type"))
        frames.append(df.assign(variant=v))
    df = pd.concat(frames, ignore_index=True)
    return df[["variant"] + [c for c in df.columns if c != "variant"]]


def _weights(d: pd.DataFrame) -> str:
    """The GF(2) weights of the varying canonical bits, bit by bit, as one phrase."""
    w = d[(d.group == "canonical_bit") & (d.split == "sequence")].drop_duplicates("target")
    if w.gf2_weight.isna().all():
        return ""
    bits = sorted(w.itertuples(), key=lambda r: int(r.target.split(":")[1]))
    if all(int(r.gf2_weight) == 1 for r in bits):
        return "1 for every one (each is a code bit itself)"
    return ", ".join(f"bit {int(r.target.split(':')[1])}: {int(r.gf2_weight)}" for r in bits)


def _intro(hooks: list[str], short: dict) -> list[str]:
    """The section's heading, what the probes and their references are, the figure and the table's header."""
    return ["## Probes: what is linearly readable across depth", "",
            f"Logistic probes on {TOKENS:,} validation tokens at the input, the residual stream entering each block "
            "and the final norm, each with its L2 strength chosen by 3-fold cross-validation over the training "
            "sequences. Cells: held-out accuracy, and in brackets its reference. The id's bits and the bits of a "
            "random relabelling of the ids are properties of the token type: beside the score on held-out "
            "sequences stands the control task (each token type mapped to a fixed random label; a probe that only "
            "memorises types scores as well on it), and a second row tests on token types never seen in training "
            "(reference: the majority class). Ids are frequency ranks, so the id's bits also carry frequency; the "
            "relabelled bits carry none and no code structure, so what a probe reads of them is memorised. A "
            "word's number and a name's IOI role are labels of a token in context: their reference is the lexical "
            "baseline (each token type's majority label in training), what the token's identity alone gives; a "
            "name takes every role, so there the baseline is near the majority, while a word's number is mostly "
            "lexical.", "", "![probes across depth](probes.png)", "",
            "| variant | target | " + " | ".join(short[h] for h in hooks) + " |",
            "|---|---|" + "---:|" * len(hooks)]


def _table_rows(d: pd.DataFrame, hooks: list[str]) -> list[str]:
    """One table row per variant, target group and split: the mean score at each hook point and its reference."""
    lines = []
    for v in dict.fromkeys(d.variant):
        for g, label in GROUPS.items():
            for split in ("sequence", "type"):
                part = d[(d.variant == v) & (d.group == g) & (d.split == split)]
                if part.empty:
                    continue
                ref = "majority" if split == "type" else ("lexical" if (part.level == "context").all() else "control")
                by = part.groupby("hook")[["score", ref]].mean()
                name = label + (", held-out token types" if split == "type" else "")
                lines.append(f"| {v} | {name} | " + " | ".join(f"{by.loc[h, 'score']:.2f} ({by.loc[h, ref]:.2f})"
                                                                if h in by.index else "" for h in hooks) + " |")
    return lines


def _variant_line(v: str, dv: pd.DataFrame, first: str, last: str) -> str:
    """One variant's reading: its id bits at the input and the final norm (held-out sequences, token types and the
    relabelled bits), a name's IOI role, and the GF(2) weights of its id bits."""
    seq = dv[dv.split == "sequence"]
    bits = seq[seq.group == "canonical_bit"].groupby("hook").score.mean()
    typed = dv[(dv.split == "type") & (dv.group == "canonical_bit")].groupby("hook").score.mean()
    perm = seq[seq.group == "perm_bit"].groupby("hook").score.mean()
    role = seq[seq.group == "ioi_role"].set_index("hook")
    text = (f"- {v}: the id's bits read at {bits[first]:.2f} at the input and {bits[last]:.2f} at the final "
            f"norm on held-out sequences")
    if last in typed.index:
        text += f", {typed[first]:.2f} and {typed[last]:.2f} on held-out token types"
    if last in perm.index:
        text += f" (relabelled bits: {perm[first]:.2f} and {perm[last]:.2f})"
    text += (f"; a name's IOI role at {role.loc[first, 'score']:.2f} at the input (lexical baseline "
             f"{role.loc[first, 'lexical']:.2f}), at most {role.score.max():.2f} deeper "
             f"({_where(role.score.idxmax())}).")
    weights = _weights(dv)
    if weights:
        text += (f" GF(2) weight of each varying id bit in its own code (the fewest code bits whose XOR gives "
                 f"it over the vocabulary; 1: a code bit itself): {weights}.")
    return text


def probe_reading(df: pd.DataFrame) -> list[str]:
    """Report lines generated from the table."""
    d = df[df.status == "fitted"].assign(group=df.target.str.split(":").str[0])
    hooks = list(dict.fromkeys(d.hook))
    short = {h: short_hook(h) for h in hooks}
    lines = _intro(hooks, short) + _table_rows(d, hooks)
    lines.append("")
    first, last = hooks[0], hooks[-1]
    for v in dict.fromkeys(d.variant):
        lines.append(_variant_line(v, d[d.variant == v], first, last))
    missed = int((df.converged == False).sum())  # noqa: E712 (NA stays out)
    if missed:
        lines.append(f"- {missed} of {int(df.converged.notna().sum())} rows rest on a probe fit that did not "
                     "converge (column `converged` of probes.csv).")
    lines += ["", "Readable is not used: `fixedid-analyze erasure` removes a concept at one hook point and measures "
              "the cost against a placebo. One seed per variant.", ""]
    return lines
