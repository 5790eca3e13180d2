"""Figures of probes: score against depth per target group with its references (the control task for type-level
targets, the lexical baseline for contextual labels, the random-init model), what a probe earns beyond its
reference, type-level targets on held-out token types, and the XOR probes by coset-minimal GF(2) weight (erasure's
figure is in :mod:`analysis.figures.erasure`)."""

from __future__ import annotations

from analysis.figures.style import short_hook

def _depth_axis(ax, hooks, title):
    import numpy as np

    ax.set_xticks(np.arange(len(hooks)), [short_hook(h) for h in hooks], rotation=30, ha="right", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("hook point (depth)")
    ax.grid(color="0.9")


def _mean_by_depth(rows, column: str = "score"):
    """(depths, mean of ``column`` at each depth) of some probe rows."""
    s = rows.groupby("depth")[column].mean()
    return s.index, s


def target_group(name: str) -> str:
    """The family of a probe target (``"xor:3^5"`` -> ``"xor"``), which the figures group targets by."""
    return name.split(":")[0]


#: The legend label of each probe-target family.
GROUP_LABELS = {"code_bit": "code bits", "canonical_bit": "canonical id bits", "xor": "XOR of two id bits",
                "perm_bit": "bits of a random relabelling", "token": "token identity (top K)",
                "prev_token": "previous token (top K)", "position": "position (R^2)",
                "freq_bucket": "frequency bucket", "pos_tag": "part of speech", "number": "grammatical number",
                "depth": "clause depth", "ioi_role": "IOI role of a name", "fact_entity": "fact entity"}
#: Target groups that are a function of the token id (the rest are contextual), for tables without a ``level``.
TYPE_LEVEL = ("code_bit", "canonical_bit", "xor", "perm_bit", "token", "freq_bucket")


def _prepared(df):
    """The table with ``group`` and ``level`` columns and the sequence split only (the held-out-types rows have a
    figure of their own)."""
    df = df.assign(group=df.target.map(target_group))
    if "level" not in df:
        df = df.assign(level=df.group.map(lambda g: "type" if g in TYPE_LEVEL else "context"))
    if "lexical" not in df:
        df = df.assign(lexical=float("nan"))
    by_seq = df[df.split == "sequence"] if "split" in df else df
    by_seq.attrs = df.attrs
    return by_seq


def _group_panels(df, nrows: int = 1):
    """(variants, the prepared df, target groups, a colour per group, figure, axes): one panel per variant on
    shared axes, for the figures that draw a line per target group."""
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(df.variant))
    df = _prepared(df)
    groups = list(dict.fromkeys(df.group))
    colours = {g: plt.cm.tab10(i % 10) for i, g in enumerate(groups)}
    fig, axes = plt.subplots(nrows, len(variants), figsize=(2.7 * len(variants) + 1.9, 2.9 * nrows), squeeze=False,
                             sharey="row", layout="constrained")
    return variants, df, groups, colours, fig, axes


def probe_figure(df):
    """Score against depth, one panel per variant (same axes); a line per target group (mean over its fitted
    targets, the sequence split), dashed: its reference - the control task for a type-level target, the lexical
    baseline (each type's majority label) for a contextual label -, dotted: the random-init model."""
    variants, df, groups, colours, fig, axes = _group_panels(df)
    for ax, v in zip(axes[0], variants):
        d = df[(df.variant == v) & (df.status == "fitted")]
        hooks = list(dict.fromkeys(df[df.variant == v].hook))
        for g in groups:
            part = d[d.group == g]
            if part.empty:
                continue
            s = part.groupby("depth")[["score", "control", "lexical", "random_init"]].mean()
            ref = s.lexical if (part.level == "context").all() else s.control
            ax.plot(s.index, s.score, marker="o", color=colours[g], label=GROUP_LABELS.get(g, g))
            ax.plot(s.index, ref, linestyle="--", color=colours[g], alpha=0.6)
            if s.random_init.notna().any():
                ax.plot(s.index, s.random_init, linestyle=":", color=colours[g], alpha=0.8)
        _depth_axis(ax, hooks, v)
    axes[0, 0].set_ylabel("held-out accuracy" + (" (position: R^2)" if "position" in groups else ""))
    levels = set(df.level)
    ref = " or ".join(([] if "type" not in levels else ["control task (type-level targets)"])
                      + ([] if "context" not in levels else ["lexical baseline (contextual labels)"]))
    key = f"solid: probe\ndashed: {ref}".replace(" or ", "\nor ") + (
        "\ndotted: random-init model" if df.random_init.notna().any() else "")
    axes[0, -1].legend(frameon=False, fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), title=key,
                       title_fontsize=7)
    fig.suptitle(f"linear probes across depth, held-out sequences ({df.attrs.get('n_tokens', '')} tokens)"
                 .replace(" ( tokens)", ""), fontsize=10)
    return fig


def selectivity_figure(df):
    """What a probe earns beyond its reference, against depth, one panel per variant (same axes), a line per target
    group (mean over its fitted targets): for type-level targets the selectivity (score minus the control task's,
    Hewitt and Liang, 2019: beyond what the probe could memorise per token type), for contextual labels the score
    minus the lexical baseline (beyond what the token's identity alone gives), on a row of its own."""
    d0 = _prepared(df)
    rows = [lv for lv in ("type", "context") if (d0.level == lv).any()]
    variants, df, groups, colours, fig, axes = _group_panels(df, nrows=len(rows))
    for r, level in enumerate(rows):
        for ax, v in zip(axes[r], variants):
            d = df[(df.variant == v) & (df.status == "fitted") & (df.level == level)]
            for g in groups:
                part = d[d.group == g]
                if part.empty:
                    continue
                gain = part.selectivity if level == "type" else part.score - part.lexical
                s = gain.groupby(part.depth).mean()
                if s.notna().any():
                    ax.plot(s.index, s, marker="o", color=colours[g], label=GROUP_LABELS.get(g, g))
            ax.axhline(0, color="0.4", linewidth=0.8)
            _depth_axis(ax, list(dict.fromkeys(df[df.variant == v].hook)), v)
        axes[r, 0].set_ylabel("probe - control task\n(selectivity)" if level == "type"
                              else "probe - lexical baseline\n(each type's majority label)")
        if level == "context" and "position" in groups:
            axes[r, 0].set_ylabel(axes[r, 0].get_ylabel() + "\n(position: R^2 difference)")
    handles = {}
    for ax in axes.ravel():  # one legend for both rows: each group's line once
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    title = {("type",): "type-level targets", ("context",): "contextual labels"}.get(
        tuple(rows), "top row: type-level targets\nbottom row: contextual labels")
    fig.legend(handles.values(), handles.keys(), frameon=False, fontsize=7, loc="outside right center", title=title,
               title_fontsize=7)
    fig.suptitle("what a probe earns beyond its reference, across depth (held-out sequences)", fontsize=10)
    return fig


def type_split_figure(df):
    """Type-level targets tested on held-out sequences (solid) and on token types never seen in training (dashed),
    one panel per variant, a line per target group, with the held-out types' majority baseline (dotted, grey): a
    target a probe only memorises per type is high on the first and near the baseline on the second."""
    import matplotlib.pyplot as plt

    df = df.assign(group=df.target.map(target_group))
    typed = set(df[(df.split == "type")].target)
    d = df[df.target.isin(typed) & (df.status == "fitted")]
    variants = list(dict.fromkeys(d.variant))
    groups = list(dict.fromkeys(d.group))
    colours = {g: plt.cm.tab10(i % 10) for i, g in enumerate(groups)}
    fig, axes = plt.subplots(1, len(variants), figsize=(2.7 * len(variants) + 1.9, 2.9), squeeze=False,
                             sharey=True, layout="constrained")
    for ax, v in zip(axes[0], variants):
        g_v = d[d.variant == v]
        for g in groups:
            for split, style in (("sequence", "-"), ("type", "--")):
                s = g_v[(g_v.group == g) & (g_v.split == split)].groupby("depth").score.mean()
                if not s.empty:
                    ax.plot(s.index, s, marker="o" if split == "sequence" else "s", ms=4, linestyle=style,
                            color=colours[g], label=GROUP_LABELS.get(g, g) if split == "sequence" else None)
        maj = g_v[g_v.split == "type"].groupby("depth").majority.mean()
        ax.plot(maj.index, maj, linestyle=":", color="0.4", linewidth=1, label="majority (held-out types)")
        _depth_axis(ax, list(dict.fromkeys(df[df.variant == v].hook)), v)
    axes[0, 0].set_ylabel("held-out accuracy")
    axes[0, -1].legend(frameon=False, fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5),
                       title="solid: held-out sequences\ndashed: held-out token types", title_fontsize=7)
    fig.suptitle("type-level targets: memorised per type, or read from the representation?", fontsize=10)
    return fig


def xor_figure(df):
    """The XOR panel: held-out accuracy of the probes for XORs of two id bits against depth, one line per GF(2)
    weight in the model's own code (the fewest code bits whose XOR gives the target over the vocabulary: the
    coset minimum), the majority baseline dashed, and where the table has it the held-out-types split dotted;
    variants side by side, one legend under them for every panel."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    d = df[df.target.str.startswith("xor:") & (df.status == "fitted")]
    by_type = d[d.split == "type"] if "split" in d else d.iloc[:0]
    d = d[d.split == "sequence"] if "split" in d else d
    variants = list(dict.fromkeys(d.variant))
    fig, axes = plt.subplots(1, len(variants), figsize=(2.6 * len(variants) + 0.6, 3.6), squeeze=False,
                             sharey=True, layout="constrained")
    weights = sorted({int(w) for w in d.gf2_weight.dropna()})
    colours = {w: plt.cm.viridis(0.9 * i / max(1, len(weights) - 1)) for i, w in enumerate(weights)}
    pairs = {}
    for ax, v in zip(axes[0], variants):
        g, t = d[d.variant == v], by_type[by_type.variant == v]
        lines = {w: (g[g.gf2_weight == w], t[t.gf2_weight == w], colours[w]) for w in weights}
        if g.gf2_weight.isna().all():  # the learned variant: no code, so no weight
            lines = {None: (g, t, "tab:gray")}
        for w, (gw, tw, colour) in lines.items():
            if not gw.empty:
                ax.plot(*_mean_by_depth(gw), marker="o", ms=4, color=colour)
                pairs.setdefault(w, set()).add(gw[gw.depth == gw.depth.min()].shape[0])
            if not tw.empty:
                ax.plot(*_mean_by_depth(tw), linestyle=":", color=colour)
        ax.plot(*_mean_by_depth(g, "majority"), linestyle="--", color="k", linewidth=1)
        if not t.empty:
            ax.plot(*_mean_by_depth(t, "majority"), linestyle="--", color="0.6", linewidth=1)
        _depth_axis(ax, list(dict.fromkeys(g.hook)), v)
    handles = [Line2D([], [], color=colours.get(w, "tab:gray"), marker="o", ms=4,
                      label="no code (learned): all pairs" if w is None else
                      f"weight {w} ({'/'.join(map(str, sorted(n)))} pair{'s' * (max(n) != 1)})")
               for w, n in sorted(pairs.items(), key=lambda kv: -1 if kv[0] is None else kv[0])]
    handles.append(Line2D([], [], color="k", linestyle="--", linewidth=1, label="majority baseline"))
    if not by_type.empty:
        handles += [Line2D([], [], color="0.3", linestyle=":", label="dotted: on held-out token types"),
                    Line2D([], [], color="0.6", linestyle="--", linewidth=1, label="majority, held-out types")]
    fig.legend(handles=handles, frameon=False, fontsize=7, loc="outside lower center", ncols=min(4, len(handles)),
               title="solid: held-out sequences; colour: GF(2) weight of the XOR in the variant's code",
               title_fontsize=7)
    axes[0, 0].set_ylabel("held-out accuracy")
    fig.suptitle("probes for XORs of two id bits, by GF(2) weight in the model's own code\n(the fewest code bits "
                 "that XOR to the target over the vocabulary)", fontsize=10)
    return fig


