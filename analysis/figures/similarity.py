"""CKA matrices between the hook points of two checkpoints (:mod:`analysis.readouts.similarity`), and similarity by
depth with its references: ceilings, cross-seed levels, initialisation and the permutation null
(:mod:`analysis.readouts.references`)."""

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


#: The axis label of each similarity measure.
MEASURE_LABELS = {"debiased_cka": "debiased linear CKA", "linear_cka": "linear CKA",
                  "procrustes": "Procrustes similarity"}


def _panels(table):
    """The panels of :func:`~analysis.figures.similarity.references_figure`: one per pair of variants compared across
    interfaces, or, with one variant, one per variant (its ceiling and initialisation alone)."""
    variants = list(dict.fromkeys(list(table.variant_a) + list(table.variant_b)))
    cross = table[table.reference.str.startswith("cross_interface")]
    met = {frozenset(p) for p in zip(cross.variant_a, cross.variant_b)}
    pairs = [(a, b) for i, a in enumerate(variants) for b in variants[i + 1:] if frozenset((a, b)) in met]
    return pairs or [(v, None) for v in variants]


def _series(ax, rows, offset, colour, style, label, handles: dict, alpha=1.0) -> None:
    """One reference kind in a panel: a line through the means over seed pairs, each pair's points with their
    intervals, nudged apart; its legend handle goes into ``handles``."""
    import numpy as np
    from matplotlib.lines import Line2D

    if rows.empty:
        return
    g = rows.groupby("layer").value.mean()
    ax.plot(g.index + offset, g.to_numpy(), linestyle=style, color=colour, linewidth=1.3, alpha=alpha)
    keys = list(dict.fromkeys(zip(rows.seed_a, rows.seed_b)))
    for i, key in enumerate(keys):
        r = rows[(rows.seed_a == key[0]) & (rows.seed_b == key[1])].sort_values("layer")
        dx = offset + (i - (len(keys) - 1) / 2) * 0.025
        err = np.clip(np.vstack([r.value - r.lo, r.hi - r.value]), 0, None) if r.lo.notna().any() else None
        ax.errorbar(r.layer + dx, r.value, yerr=err, fmt="o", markersize=2.5, color=colour, alpha=alpha,
                    elinewidth=0.8, capsize=1.5, linestyle="none")
    handles[label] = Line2D([], [], color=colour, linestyle=style, marker="o", markersize=3, alpha=alpha)


def _references_panel(ax, t, va, vb, colours: dict, handles: dict) -> None:
    """The references of variants ``va`` and ``vb`` (None: ``va`` alone) in one measure's rows ``t``: the null band,
    each variant's ceiling and initialisation, and A vs B across seeds and of the same seed."""
    from matplotlib.patches import Patch

    both = [va] + ([vb] if vb else [])
    pair = ((t.variant_a == va) & (t.variant_b == vb)) | ((t.variant_a == vb) & (t.variant_b == va))
    on = pair if vb else (t.variant_a == va) & (t.variant_b == va)
    null = t[on & (t.reference == "permutation_null")].groupby("layer").agg(lo=("lo", "min"), hi=("hi", "max"))
    if len(null):
        ax.fill_between(null.index, null.lo, null.hi, color="0.75", alpha=0.6, linewidth=0)
        handles["null (one side's tokens permuted)"] = Patch(color="0.75", alpha=0.6)
    for i, v in enumerate(both):
        ceiling = t[(t.reference == "same_interface_cross_seed") & (t.variant_a == v)]
        _series(ax, ceiling, -0.12 + 0.06 * i, colours[v], "--", f"{v}: two seeds (ceiling)", handles)
        own = t[(t.reference == "own_initialisation") & (t.variant_a == v)]
        _series(ax, own, 0.15 + 0.04 * i, colours[v], "-.", f"{v} vs its initialisation", handles, alpha=0.45)
    if vb:
        _series(ax, t[pair & (t.reference == "cross_interface_cross_seed")], 0.0, "black", "-",
                "A vs B, different seeds", handles)
        _series(ax, t[pair & (t.reference == "cross_interface_same_seed")], 0.07, "0.45", ":",
                "A vs B, the same seed", handles)


def _dress_panel(ax, row: int, col: int, va, vb, measure: str, hooks) -> None:
    """The zero line, limits, grid, ticks and (on the outer panels) title and label of one panel."""
    ax.axhline(0, color="0.5", linewidth=0.6)
    ax.set_ylim(-0.08, 1.05)
    ax.grid(color="0.92")
    if row == 0:
        ax.set_title(f"A = {va}, B = {vb}" if vb else va, fontsize=9)
    if col == 0:
        ax.set_ylabel(MEASURE_LABELS.get(measure, measure), fontsize=9)
    ax.set_xticks(hooks.layer, [short_hook(h) for h in hooks.hook], rotation=30, ha="right", fontsize=8)
    ax.tick_params(axis="y", labelsize=8)


def _references_legend(fig, table, handles: dict, n_panels: int, title: str | None) -> None:
    """The legend (references in a fixed order) and the title, with the tokens compared."""
    rank = ("null", "ceiling", "different seeds", "the same seed", "initialisation")
    labels = sorted(handles, key=lambda k: next(i for i, w in enumerate(rank) if w in k))
    fig.legend([handles[k] for k in labels], labels, loc="outside lower center",
               ncol=min(4 if n_panels > 1 else 2, len(labels)),
               frameon=False, fontsize=7)
    n_tok = table.n_tokens.iloc[0] if "n_tokens" in table else None
    where = "" if n_tok is None else f" over {int(n_tok):,} tokens"
    if table.attrs.get("skip_first"):
        where += " (position 0 left out)"
    fig.suptitle(title or f"similarity with its references{where}\n(bars: 95% bootstrap interval over windows)",
                 fontsize=10)


def references_figure(table, measures=("debiased_cka", "procrustes"), *, title: str | None = None):
    """Similarity by depth with its references (:func:`analysis.readouts.references.similarity_references`'s
    table): a row of panels per measure, a panel per pair of variants A, B. In each: the permutation null (grey
    band: the lowest 2.5% to the highest 97.5% quantile of the pairs' nulls), the ceiling of each variant (two seeds
    of one variant, dashed, in its colour), A vs B across seeds (black, solid) and of the same seed (grey, dotted),
    each model against its initialisation (dash-dot, faint); lines join the means over seed pairs, points are the
    pairs with their 95% bootstrap intervals over windows."""
    from analysis.figures.style import TWO_COLUMNS, variant_colours

    measures = [m for m in measures if (table.measure == m).any()]
    panels = _panels(table)
    colours = variant_colours(list(dict.fromkeys(list(table.variant_a) + list(table.variant_b))))
    hooks = table.drop_duplicates("layer").sort_values("layer")
    fig, axes = plt.subplots(len(measures), len(panels), squeeze=False, sharex=True, layout="constrained",
                             figsize=(max(TWO_COLUMNS if len(panels) > 1 else 4.4, 2.9 * len(panels) + 0.6),
                                      2.5 * len(measures) + 0.9))
    handles = {}
    for row, measure in enumerate(measures):
        t = table[table.measure == measure]
        for col, (va, vb) in enumerate(panels):
            _references_panel(axes[row, col], t, va, vb, colours, handles)
            _dress_panel(axes[row, col], row, col, va, vb, measure, hooks)
    for ax in axes[-1]:
        ax.set_xlabel("hook point (depth)", fontsize=9)
    _references_legend(fig, table, handles, len(panels), title)
    return fig
