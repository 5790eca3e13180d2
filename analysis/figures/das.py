"""Figures of distributed alignment search (:mod:`analysis.causal.das`): interchange-intervention accuracy against
depth, one panel per subspace rank, with the controls fitted and evaluated beside it."""

from __future__ import annotations

import pandas as pd

from analysis.figures.style import subplots

#: method -> (label, colour, line style, split shown): the fitted subspace on held-out pairs; the arbitrary-label
#: control on the pairs it was fitted to (what the method's expressivity alone reaches).
LINES = {
    "das": ("DAS subspace (held out)", "#0072B2", "-", "test"),
    "random_init": ("DAS on the untrained init (held out)", "#E69F00", "--", "test"),
    "placebo": ("norm-matched random subspace", "#009E73", ":", "test"),
    "arbitrary_labels": ("arbitrary labels (fitted pairs)", "#CC79A7", "-.", "train"),
    "full": ("whole stream at the position", "#000000", (0, (1, 1)), "test"),
    "code_direction": ("the input code's bit direction (rank 1)", "#8C564B", (0, (3, 1, 1, 1)), "test"),
}

#: The title's words for each intervened position.
POSITIONS = {"diff": "token where base and source differ", "last": "final token"}


def _layer_labels(layers, n_layers: int) -> list[str]:
    return [f"L{L} in" if L < n_layers else "out" for L in layers]


def das_figure(df: pd.DataFrame, n_layers: int, *, title: str | None = None):
    """IIA (with its Wilson interval) against the layer whose entering stream is intervened on, a panel per rank;
    ``title`` (e.g. the checkpoint's name) leads the figure's title."""
    ranks = sorted(df[df.method == "das"]["rank"].unique())
    fig, axes = subplots(2 if len(ranks) > 1 else 1, height=3.0, ncols=len(ranks), sharey=True)
    layers = sorted(df.layer.unique())
    for ax, rank in zip(axes[0], ranks):
        for method, (label, colour, style, split) in LINES.items():
            rows = df[(df.method == method) & (df.split == split)]
            if method in ("full", "code_direction"):  # references of every panel, not of a rank
                rows = rows.sort_values("layer")
            else:
                rows = rows[rows["rank"] == rank].sort_values("layer")
            if rows.empty:
                continue
            ax.plot(rows.layer, rows.iia, color=colour, ls=style, lw=1.3, marker="o", ms=2.5, label=label)
            if method == "das":
                ax.fill_between(rows.layer, rows.iia_lo, rows.iia_hi, color=colour, alpha=0.15, lw=0)
        ax.axhline(0.5, color="#888888", lw=0.6, ls="--")
        ax.set_xticks(layers, _layer_labels(layers, n_layers), fontsize=7)
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(f"rank {rank}", fontsize=8)
        ax.set_xlabel("residual stream intervened on", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0, 0].set_ylabel("interchange accuracy\n(0.5: a coin; 0: the base's own answer)", fontsize=8)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=6.5, frameon=False)
    a = df.attrs
    fig.suptitle(f"{title + ': ' if title else ''}DAS of {df.variable.iloc[0]} at the {POSITIONS[df.position.iloc[0]]} "
                 f"({a.get('n_train', '?')} fitted / {a.get('n_test', '?')} held-out examples)", fontsize=8.5)
    return fig

