"""CKA matrices between the hook points of two checkpoints (:mod:`analysis.readouts.similarity`)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from analysis.figures.style import short_hook

def cka_figure(frames: dict, *, title: str | None = None):
    """One heatmap per comparison (``name -> cka_matrix result``): hook points of A down, of B across, colour the
    debiased CKA (0..1), each cell annotated with it."""
    n = len(frames)
    fig, axes = plt.subplots(1, n, figsize=(3.6 * n + 1.0, 3.6), squeeze=False, layout="constrained")
    for ax, (name, df) in zip(axes[0], frames.items()):
        m = df.pivot_table(index="layer_a", columns="layer_b", values="debiased")
        im = ax.imshow(m.to_numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
        labels = {int(r.layer_a): short_hook(r.hook_a) for r in df.itertuples()}
        ax.set_yticks(range(m.shape[0]), [labels[i] for i in m.index], fontsize=7)
        labels_b = {int(r.layer_b): short_hook(r.hook_b) for r in df.itertuples()}
        ax.set_xticks(range(m.shape[1]), [labels_b[i] for i in m.columns], fontsize=7, rotation=45, ha="right")
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                v = m.iat[i, j]
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if v < 0.6 else "black")
        a, b = name.split(" vs ") if " vs " in name else (df.attrs.get("interface_a"), df.attrs.get("interface_b"))
        ax.set_ylabel(f"{a}", fontsize=9)
        ax.set_xlabel(f"{b}", fontsize=9)
        ax.set_title(name, fontsize=9)
    bar = fig.colorbar(im, ax=list(axes[0]), shrink=0.85)
    bar.set_label("debiased linear CKA", fontsize=8)
    first = next(iter(frames.values()))
    fig.suptitle(title or f"representational similarity over {first.attrs['n_tokens']:,} tokens", fontsize=10)
    return fig
