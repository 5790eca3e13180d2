"""The demo's recoding section: is each fixed-code variant tied to its code, and how does that compare with the
control that every variant has (cycling input rows between token ids)?"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.corpus import corpus_tokens
from analysis.causal.landing import matched_landing
from analysis.causal.recoding import WALK, matched_hamming
from analysis.specs import get_spec, run_spec

TOKENS = 8192  # validation tokens per map
TRANSVECTIONS = WALK
TOKEN_CYCLES = (0, 8, 32, 128)
DRAWS = 3
TASKS = ("ioi", "agreement")
HAMMING = (0.5, 1.0, 2.0, 3.0)  # mean bits moved at which the variants are compared
EQUAL_K = 4  # the walk length of the unmatched comparison the study made


def recoding_table(models: dict) -> pd.DataFrame:
    """Transvection walks and the other variant's code for the fixed-code variants, token-row cycles for all."""
    spec, frames = get_spec("recoding"), []
    for v, m in models.items():
        runs = [("token-permutation", TOKEN_CYCLES, DRAWS)]
        if m.cfg.has_code:
            runs = [("transvection", TRANSVECTIONS, DRAWS), ("other-variant", None, 1)] + runs
        x = corpus_tokens(m, tokens=TOKENS)  # one set of validation windows for all of a model's sweeps
        for family, ks, draws in runs:
            frames.append(run_spec(spec, {v: m}, family=family, ks=ks, draws=draws, data=x, tasks=TASKS, n_pairs=32,
                                   split=family == "transvection", draw=False).tables["recoding"])
    return pd.concat(frames, ignore_index=True)


def _dist(g) -> str:
    if g.hamming.isna().all():
        return "n/a | n/a"
    return f"{g.hamming.mean():.2f} | {100 * g.on_support.mean():.0f}%"


def recoding_reading(df: pd.DataFrame, hamming_figure: str | None = None) -> list[str]:
    """Report lines generated from the table; ``hamming_figure``: the file name of
    :func:`analysis.figures.recoding.disturbance_plot` to link, if written."""
    def mean(variant, family, k):
        g = df[(df.variant == variant) & (df.family == family) & (df.k == k)]
        return g.delta_loss.mean(), g.delta_loss.min(), g.delta_loss.max(), g

    fixed = list(dict.fromkeys(df[df.family == "transvection"].variant))
    lines = ["## Recoding: is a fixed-code variant tied to its code?", "",
             f"Each fixed-code variant reads its own code rows through an invertible GF(2) map with no retraining: "
             f"walks of k random transvections from its own code ({DRAWS} draws per k), and the other fixed "
             f"variant's code. The control that applies to every variant cycles the input rows of k random token "
             f"ids. Loss change in nats per token over {TOKENS:,} validation tokens (mean, range over draws); "
             f"accuracy on {', '.join(TASKS)} prompts under the map; the disturbance itself: the mean number of code "
             f"bits a token's row moves (Hamming distance) and the share of token rows whose new code is some token's "
             f"code, both weighted by the tokens' frequencies in those windows.", "",
             "![loss change under transvection walks](recoding.png)", "",
             "| variant | map | token rows changed | bits moved | on a token's code | loss change | "
             + " | ".join(TASKS) + " |", "|---|---|---:|---:|---:|---:|" + "---:|" * len(TASKS)]
    acc = [f"acc_{t}" for t in TASKS]
    for v in dict.fromkeys(df.variant):
        rows = [("transvection", k) for k in TRANSVECTIONS[1:]] if v in fixed else []
        rows += [("other-variant", 0)] if v in fixed else []
        rows += [("token-permutation", k) for k in TOKEN_CYCLES[1:]]
        for family, k in rows:
            m, lo, hi, g = mean(v, family, k)
            what = {"transvection": f"{k} transvection{'s' * (k > 1)}", "other-variant": "other variant's code",
                    "token-permutation": f"{k} token rows cycled"}[family]
            spread = f" [{lo:+.2f}, {hi:+.2f}]" if len(g) > 1 else ""
            lines.append(f"| {v} | {what} | {100 * g.changed.mean():.0f}% | {_dist(g)} | {m:+.2f}{spread} | "
                         + " | ".join(f"{100 * g[a].mean():.0f}%" for a in acc) + " |")
    lines.append("")
    for v in fixed:
        one, _, _, g1 = mean(v, "transvection", 1)
        far, *_ = mean(v, "transvection", TRANSVECTIONS[-1])
        other, *_ = mean(v, "other-variant", 0)
        cyc, *_ = mean(v, "token-permutation", TOKEN_CYCLES[-1])
        lines.append(f"- {v}: one transvection costs {one:+.2f} nats (changing {100 * g1.changed.mean():.0f}% of the "
                     f"token rows, {g1.hamming.mean():.2f} bits on average), {TRANSVECTIONS[-1]} cost {far:+.2f}; the "
                     f"other variant's code costs {other:+.2f} (cycling {TOKEN_CYCLES[-1]} token rows: {cyc:+.2f}).")
    for v in [v for v in dict.fromkeys(df.variant) if v not in fixed]:
        cyc, *_ = mean(v, "token-permutation", TOKEN_CYCLES[-1])
        lines.append(f"- {v} (no code to recode): cycling {TOKEN_CYCLES[-1]} token rows costs {cyc:+.2f} nats.")
    if len(fixed) > 1:
        lines += [""] + matched_lines(df, fixed) + [""] + landing_lines(df, fixed)
        if hamming_figure:
            lines += ["", f"![loss change and code support against the Hamming distance]({hamming_figure})"]
    lines += ["", "A large loss change says the trained weights are tied to the code they were trained on; it does "
              "not say which weights, nor whether a short fine-tuning would re-bind them; equal bits moved is equal "
              "distance in the code, not in what the model computes from it.", ""]
    return lines


def matched_lines(df: pd.DataFrame, fixed: list[str]) -> list[str]:
    """The fixed variants' transvection curves at common Hamming distances, and what changes against equal k."""
    m = matched_hamming(df[df.variant.isin(fixed)], HAMMING).set_index(["variant", "hamming"])
    lines = ["### At matched disturbance", "",
             "Each variant's walk curve (mean over draws per k) interpolated at common mean Hamming distances from "
             "its own code; no extrapolation beyond the distances a variant's walks reached:", "",
             "| bits moved | " + " | ".join(f"{v}: loss change (on a token's code)" for v in fixed) + " |",
             "|---:|" + "---:|" * len(fixed)]
    for h in HAMMING:
        cells = []
        for v in fixed:
            r = m.loc[(v, h)]
            cells.append("not reached" if np.isnan(r.delta_loss)
                         else f"{r.delta_loss:+.3f} ({100 * r.on_support:.0f}%)")
        lines.append(f"| {h:g} | " + " | ".join(cells) + " |")
    walks = df[(df.family == "transvection") & (df.k == EQUAL_K)]
    eq = walks.groupby("variant")[["delta_loss", "hamming", "on_support"]].mean()
    if not set(fixed) <= set(eq.index):
        return lines
    lines += ["", f"At equal k = {EQUAL_K} (the unmatched comparison) the walks moved "
              + ", ".join(f"{v}'s codes by {eq.loc[v, 'hamming']:.2f} bits ({100 * eq.loc[v, 'on_support']:.0f}% of "
                          f"rows on a token's code) at a cost of {eq.loc[v, 'delta_loss']:+.3f}" for v in fixed) + "."]
    a, b = fixed[:2]
    both = [h for h in HAMMING if np.isfinite(m.loc[(a, h), "delta_loss"]) and np.isfinite(m.loc[(b, h), "delta_loss"])]
    if not both:
        return lines + ["No common distance was reached by both variants' walks, so no matched comparison is made."]
    middle = eq.loc[[a, b], "hamming"].mean()  # the common distance nearest to where the equal-k walks went
    h = min(both, key=lambda d: (abs(d - middle), d))
    da, db = m.loc[(a, h), "delta_loss"], m.loc[(b, h), "delta_loss"]
    gap_k = eq.loc[a, "delta_loss"] - eq.loc[b, "delta_loss"]
    gap_h = da - db
    if np.sign(gap_k) != np.sign(gap_h):
        verdict = "the order of the two variants reverses"
    elif abs(gap_h) < abs(gap_k):
        verdict = "the gap between them shrinks"
    else:
        verdict = "the gap between them does not shrink"
    lines.append(f"What this changes: at equal k the difference {a} - {b} is {gap_k:+.3f} nats; at a matched "
                 f"distance of {h:g} bits it is {gap_h:+.3f}: {verdict}. Equal k compared walks that moved the codes "
                 f"by different numbers of bits and left different shares of rows on other tokens' codes (at "
                 f"{h:g} bits: {a} {100 * m.loc[(a, h), 'on_support']:.0f}%, {b} "
                 f"{100 * m.loc[(b, h), 'on_support']:.0f}%, so matching the distance does not match the support).")
    return lines


def landing_lines(df: pd.DataFrame, fixed: list[str]) -> list[str]:
    """The fixed variants' walks of each length at a matched landing share (the mean of their own shares)."""
    walks = df[(df.family == "transvection") & (df.k > 0) & df.variant.isin(fixed)]
    if "share_on" not in walks.columns or walks.share_on.isna().all():
        return []
    lines = ["### At a matched landing share", "",
             "The same walks measured in two parts: applied only to the token ids whose new code is another token's "
             "(a swap) and only to those whose new code is no token's. Each variant's parts, pooled over its draws, "
             "are scaled to a common share of moved occurrences landing on another token's code (the mean of the "
             "variants' own shares at that k), moving as many occurrences as the variant's walks did "
             "(analysis.causal.landing; it assumes each part scales with the share it moves, which does not hold "
             "where the loss saturates). Loss change in nats per token:", "",
             "| k | common landing share | " + " | ".join(f"{v}: own share, occurrences moved, loss change "
                                                         f"(at the common share)" for v in fixed) + " |",
             "|---:|---:|" + "---:|" * len(fixed)]
    found = {}
    for k in TRANSVECTIONS[1:]:
        g = walks[(walks.k == k) & (walks.share_on + walks.share_off > 0)]
        if set(g.variant) != set(fixed):
            continue  # some variant's walks of this length moved no token's code: nothing to match
        m = matched_landing(g, by="variant").set_index("variant")
        found[k] = m
        cells = [f"{100 * m.loc[v, 'landing_own']:.0f}%, {100 * m.loc[v, 'moved']:.0f}%, "
                 f"{m.loc[v, 'measure_own']:+.2f} ("
                 + ("n/a" if np.isnan(m.loc[v, "delta_loss"]) else f"{m.loc[v, 'delta_loss']:+.2f}") + ")"
                 for v in fixed]
        lines.append(f"| {k} | {100 * m.landing_at.iloc[0]:.0f}% | " + " | ".join(cells) + " |")
    if not found:
        return []
    if EQUAL_K in found and len(fixed) > 1:
        m, (a, b) = found[EQUAL_K], fixed[:2]
        raw = m.loc[a, "measure_own"] - m.loc[b, "measure_own"]
        matched = m.loc[a, "delta_loss"] - m.loc[b, "delta_loss"]
        lines += ["", f"At k = {EQUAL_K} the difference {a} - {b} is {raw:+.3f} nats as measured and {matched:+.3f} at "
                  f"a matched landing share of {100 * m.landing_at.iloc[0]:.0f}%; the walks still move different "
                  f"shares of the occurrences ({a} {100 * m.loc[a, 'moved']:.0f}%, {b} "
                  f"{100 * m.loc[b, 'moved']:.0f}%). The section's comparison (\"What this changes\" above) uses the "
                  "matched Hamming distance; this one is beside it."]
    return lines
