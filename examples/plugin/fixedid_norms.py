"""An example analysis from outside the toolkit: how large the residual stream is at every depth of a checkpoint.

The whole plugin is this module and the entry point in pyproject.toml. ``SPEC`` describes the analysis once; fixedid
builds the command-line verb (``fixedid-analyze norms``, with ``--ckpt``, ``--device``, ``--dtype``, ``--out``,
``--overwrite`` and one-line refusals of bad values), runs it on each checkpoint, writes ``norms.csv`` and
``norms.png``/``.pdf``, and measures it in a study (``fixedid-study run --analyses norms``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from analysis.specs import Param, Result, Spec, types


def residual_norms(model, *, tokens: int = 4096, data=None) -> pd.DataFrame:
    """Per depth of the residual stream (the input, then after each block): the mean L2 norm of a token's vector, with
    a 95% interval over sequences (t), over ``tokens`` tokens of ``data`` (default: the checkpoint's validation
    text)."""
    from scipy import stats

    from analysis.corpus import corpus_tokens
    from analysis.engine import names

    x = corpus_tokens(model, data, tokens=tokens)
    hooks = [names.EMBED] + [names.resid_post(i) for i in range(model.cfg.n_layers)]
    with torch.no_grad():
        _, cache = model.run_with_cache(x, names_filter=lambda n: n in hooks)
    rows = []
    for depth, hook in enumerate(hooks):
        per_seq = cache[hook].float().norm(dim=-1).mean(-1).cpu().numpy()  # [sequences]
        half = stats.t.ppf(0.975, len(per_seq) - 1) * per_seq.std(ddof=1) / np.sqrt(len(per_seq))
        rows.append({"depth": depth, "hook": hook, "norm": per_seq.mean(), "norm_lo": per_seq.mean() - half,
                     "norm_hi": per_seq.mean() + half, "n_sequences": len(per_seq)})
    return pd.DataFrame(rows)


def compute(model, *, tokens, data) -> Result:
    """One checkpoint's table (the driver stacks several with a ``variant`` column)."""
    return Result(tables={"norms": residual_norms(model, tokens=tokens, data=data)})


def figure(result: Result):
    """The norm against depth, one line per checkpoint, with its interval."""
    import matplotlib.pyplot as plt

    from analysis.figures.style import variant_colours

    df = result.tables["norms"]
    colours = variant_colours(list(dict.fromkeys(df.variant)))
    fig, ax = plt.subplots(figsize=(5.0, 3.0))
    for variant, g in df.groupby("variant", sort=False):
        ax.plot(g.depth, g.norm, marker="o", label=variant, color=colours.get(variant))
        ax.fill_between(g.depth, g.norm_lo, g.norm_hi, alpha=0.2, color=colours.get(variant))
    ax.set_xticks(sorted(df.depth.unique()))
    ax.set_xlabel("depth (0: the input rows; L: after block L)")
    ax.set_ylabel("mean L2 norm of a token's vector")
    ax.set_title("The residual stream's size across depth (95% intervals over sequences)", fontsize=9)
    ax.legend(frameon=False, fontsize=8)
    return fig


def summary(result: Result) -> str:
    """One line per checkpoint: the norm at the input and after the last block."""
    df = result.tables["norms"]
    return "\n".join(f"{v}: norm {g.norm.iloc[0]:.2f} at the input, {g.norm.iloc[-1]:.2f} after the last block"
                     for v, g in df.groupby("variant", sort=False))


SPEC = Spec(
    name="norms", group="readouts",
    help="the residual stream's mean norm at every depth (an example plugin)",
    examples="""
  fixedid-analyze norms --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/gf2
  fixedid-analyze norms --ckpt fixedid-demo/checkpoints/canonical --tokens 1024
""",
    params=(Param("tokens", 4096, "tokens measured", type=types.positive_int),
            Param("data", None, "a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)")),
    compute=compute,
    figures={"norms": figure},
    summary=summary,
    library=("fixedid_norms:residual_norms",),
)
