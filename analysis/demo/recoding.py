"""The demo's recoding section: is each fixed-code variant tied to its code, and how does that compare with the
control that every variant has (cycling input rows between token ids)?"""

from __future__ import annotations

import pandas as pd

from analysis.corpus import corpus_tokens
from analysis.causal.recoding import recoding_sweep

TOKENS = 8192  # validation tokens per map
TRANSVECTIONS = (0, 1, 2, 4, 8, 16)
TOKEN_CYCLES = (0, 8, 32, 128)
DRAWS = 3
TASKS = ("ioi", "agreement")


def recoding_table(models: dict) -> pd.DataFrame:
    """Transvection walks and the other variant's code for the fixed-code variants, token-row cycles for all."""
    frames = []
    for v, m in models.items():
        runs = [("token-permutation", TOKEN_CYCLES, DRAWS)]
        if m.cfg.has_code:
            runs = [("transvection", TRANSVECTIONS, DRAWS), ("other-variant", None, 1)] + runs
        x = corpus_tokens(m, tokens=TOKENS)  # one set of validation windows for all of a model's sweeps
        for family, ks, draws in runs:
            df = recoding_sweep(m, family, ks, draws=draws, data=x, tasks=TASKS, n_pairs=32)
            frames.append(df.assign(variant=v, base_loss=df.attrs["base_loss"]))
    df = pd.concat(frames, ignore_index=True)
    return df[["variant"] + [c for c in df.columns if c != "variant"]]


def recoding_reading(df: pd.DataFrame) -> list[str]:
    """Report lines generated from the table."""
    def mean(variant, family, k):
        g = df[(df.variant == variant) & (df.family == family) & (df.k == k)]
        return g.delta_loss.mean(), g.delta_loss.min(), g.delta_loss.max(), g

    fixed = list(dict.fromkeys(df[df.family == "transvection"].variant))
    lines = ["## Recoding: is a fixed-code variant tied to its code?", "",
             f"Each fixed-code variant reads its own code rows through an invertible GF(2) map with no retraining: "
             f"walks of k random transvections from its own code ({DRAWS} draws per k), and the other fixed "
             f"variant's code. The control that applies to every variant cycles the input rows of k random token "
             f"ids. Loss change in nats per token over {TOKENS:,} validation tokens (mean, range over draws); "
             f"accuracy on {', '.join(TASKS)} prompts under the map.", "",
             "![loss change under transvection walks](recoding.png)", "",
             "| variant | map | token rows changed | loss change | " + " | ".join(TASKS) + " |",
             "|---|---|---:|---:|" + "---:|" * len(TASKS)]
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
            lines.append(f"| {v} | {what} | {100 * g.changed.mean():.0f}% | {m:+.2f}{spread} | "
                         + " | ".join(f"{100 * g[a].mean():.0f}%" for a in acc) + " |")
    lines.append("")
    for v in fixed:
        one, _, _, g1 = mean(v, "transvection", 1)
        far, *_ = mean(v, "transvection", TRANSVECTIONS[-1])
        other, *_ = mean(v, "other-variant", 0)
        cyc, *_ = mean(v, "token-permutation", TOKEN_CYCLES[-1])
        lines.append(f"- {v}: one transvection costs {one:+.2f} nats (changing {100 * g1.changed.mean():.0f}% of the "
                     f"token rows), {TRANSVECTIONS[-1]} cost {far:+.2f}; the other variant's code costs {other:+.2f} "
                     f"(cycling {TOKEN_CYCLES[-1]} token rows: {cyc:+.2f}).")
    for v in [v for v in dict.fromkeys(df.variant) if v not in fixed]:
        cyc, *_ = mean(v, "token-permutation", TOKEN_CYCLES[-1])
        lines.append(f"- {v} (no code to recode): cycling {TOKEN_CYCLES[-1]} token rows costs {cyc:+.2f} nats.")
    one = {v: mean(v, "transvection", 1)[3].changed.mean() for v in fixed}
    if len(set(round(c, 2) for c in one.values())) > 1:
        shares = ", ".join(f"{100 * c:.0f}% of {v}'s" for v, c in one.items())
        lines += ["", f"Equal k is not equal disturbance: one transvection changed {shares} token rows. A transvection "
                  "changes the rows whose added bit is 1; in the canonical code of frequency-ranked ids the high bits "
                  "are 1 for fewer (and rarer) tokens, or for none when the vocabulary leaves them constant, while a "
                  "gf2 code mixes every column. Compare at equal 'token rows changed' too."]
    else:
        lines += ["", "One transvection changed the same share of token rows in every code, so equal k is equal "
                  "disturbance in rows (not necessarily in how frequent the changed tokens are)."]
    lines += ["A large loss change says the trained weights are tied to the code they were trained on; it does not say "
              "which weights, nor whether a short fine-tuning would re-bind them.", ""]
    return lines
