"""The demo's probes section: where, across depth, the token id's bits, the grammatical number of a word and the IOI
role of a name become linearly readable in each variant, with the control task beside every score."""

from __future__ import annotations

import pandas as pd

from analysis.readouts.activations import collect
from analysis.figures.style import short_hook
from analysis.readouts.probes import probe_table

TOKENS = 4096  # validation tokens (about a fifth of whole sequences held out for testing)
FAMILIES = ("canonical_bits", "number", "ioi_role")
GROUPS = {"canonical_bit": "canonical id bits (mean over the bits that vary)",
          "number": "grammatical number (sg / pl words)", "ioi_role": "IOI role of a name (io / s1 / s2 / io2)"}


def _where(hook: str) -> str:
    if hook == "hook_embed":
        return "at the input"
    if hook.startswith("blocks."):
        return f"entering block {hook.split('.')[1]}"
    return "at the final norm"


def probe_tables(models: dict) -> pd.DataFrame:
    frames = []
    for v, m in models.items():
        df = probe_table(collect(m, tokens=TOKENS), FAMILIES, shuffled=False)
        frames.append(df.assign(variant=v))
    df = pd.concat(frames, ignore_index=True)
    return df[["variant"] + [c for c in df.columns if c != "variant"]]


def probe_reading(df: pd.DataFrame) -> list[str]:
    """Report lines generated from the table."""
    d = df[df.status == "fitted"].assign(group=df.target.str.split(":").str[0])
    hooks = list(dict.fromkeys(d.hook))
    short = {h: short_hook(h) for h in hooks}
    lines = ["## Probes: what is linearly readable across depth", "",
             f"Logistic probes on {TOKENS:,} validation tokens, tested on held-out whole sequences, at the input, the "
             "residual stream entering each block and the final norm. Cells: held-out accuracy, and in brackets the "
             "control task's (each token type mapped to a fixed random label; a probe that only memorises token "
             "types scores as well on it). The id's bits and a word's number are properties of the token type, so "
             "the control tells how much a probe gets from memorising types; a name's IOI role is not (the same name "
             "takes every role), so there the reference is the majority baseline, and the control, which 64 name "
             "types make easy, says nothing.", "", "![probes across depth](probes.png)", "",
             "| variant | target | " + " | ".join(short[h] for h in hooks) + " |",
             "|---|---|" + "---:|" * len(hooks)]
    for v in dict.fromkeys(d.variant):
        for g, label in GROUPS.items():
            part = d[(d.variant == v) & (d.group == g)]
            if part.empty:
                continue
            by = part.groupby("hook")[["score", "control"]].mean()
            lines.append(f"| {v} | {label} | " + " | ".join(f"{by.loc[h, 'score']:.2f} ({by.loc[h, 'control']:.2f})"
                                                             for h in hooks) + " |")
    lines.append("")
    first, last = hooks[0], hooks[-1]
    for v in dict.fromkeys(d.variant):
        bits = d[(d.variant == v) & (d.group == "canonical_bit")].groupby("hook").score.mean()
        role = d[(d.variant == v) & (d.group == "ioi_role")].set_index("hook")
        lines.append(f"- {v}: the id's bits read at {bits[first]:.2f} at the input and {bits[last]:.2f} at the final "
                     f"norm; a name's IOI role at {role.loc[first, 'score']:.2f} at the input (majority "
                     f"{role.loc[first, 'majority']:.2f}), at most {role.score.max():.2f} deeper "
                     f"({_where(role.score.idxmax())}).")
    lines += ["", "Readable is not used: `fixedid-analyze erasure` removes a concept at one hook point and measures "
              "the cost against a random-direction placebo. One seed per variant.", ""]
    return lines
