"""Figures of probes and erasure: score against depth per target group with its controls, and the loss cost of a
LEACE erasure against its placebo."""

from __future__ import annotations

from analysis.figures.style import short_hook

def _depth_axis(ax, hooks, title):
    import numpy as np

    ax.set_xticks(np.arange(len(hooks)), [short_hook(h) for h in hooks], rotation=30, ha="right", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("hook point (depth)")
    ax.grid(color="0.9")


def target_group(name: str) -> str:
    return name.split(":")[0]


GROUP_LABELS = {"code_bit": "code bits", "canonical_bit": "canonical id bits", "xor": "XOR of two id bits",
                "token": "token identity (top K)", "prev_token": "previous token (top K)",
                "position": "position (R^2)", "freq_bucket": "frequency bucket", "pos_tag": "part of speech",
                "number": "grammatical number", "depth": "clause depth", "ioi_role": "IOI role of a name",
                "fact_entity": "fact entity"}


def _group_panels(df):
    """(variants, df with a ``group`` column, target groups, a colour per group, figure, axes): one panel per
    variant on shared axes, for the figures that draw a line per target group."""
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(df.variant))
    df = df.assign(group=df.target.map(target_group))
    groups = list(dict.fromkeys(df.group))
    colours = {g: plt.cm.tab10(i) for i, g in enumerate(groups)}
    fig, axes = plt.subplots(1, len(variants), figsize=(4.2 * len(variants) + 1.6, 3.6), squeeze=False,
                             sharey=True, layout="constrained")
    return variants, df, groups, colours, fig, axes


def probe_figure(df):
    """Score against depth, one panel per variant (same axes); a line per target group (mean over its fitted
    targets), dashed: the control task, dotted: the random-init model."""
    variants, df, groups, colours, fig, axes = _group_panels(df)
    for ax, v in zip(axes[0], variants):
        d = df[(df.variant == v) & (df.status == "fitted")]
        hooks = list(dict.fromkeys(df[df.variant == v].hook))
        for g in groups:
            s = d[d.group == g].groupby("depth")[["score", "control", "random_init"]].mean()
            if s.empty:
                continue
            ax.plot(s.index, s.score, marker="o", color=colours[g], label=GROUP_LABELS.get(g, g))
            ax.plot(s.index, s.control, linestyle="--", color=colours[g], alpha=0.6)
            if s.random_init.notna().any():
                ax.plot(s.index, s.random_init, linestyle=":", color=colours[g], alpha=0.8)
        _depth_axis(ax, hooks, v)
    axes[0, 0].set_ylabel("held-out accuracy" + (" (position: R^2)" if "position" in groups else ""))
    key = "solid: probe, dashed: control task" + (",\ndotted: random-init model" if df.random_init.notna().any()
                                                   else "")
    axes[0, -1].legend(frameon=False, fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), title=key,
                       title_fontsize=7)
    fig.suptitle(f"linear probes across depth ({df.attrs.get('n_tokens', '')} tokens)".replace(" ( tokens)", ""),
                 fontsize=10)
    return fig


def selectivity_figure(df):
    """Selectivity (probe score minus the control task's, Hewitt and Liang, 2019) against depth, one panel per
    variant (same axes), a line per target group (mean over its fitted targets): how much of a probe's score the
    representation earns beyond what the probe could memorise per token type."""
    variants, df, groups, colours, fig, axes = _group_panels(df)
    for ax, v in zip(axes[0], variants):
        d = df[(df.variant == v) & (df.status == "fitted")]
        for g in groups:
            s = d[d.group == g].groupby("depth").selectivity.mean()
            if s.notna().any():
                ax.plot(s.index, s, marker="o", color=colours[g], label=GROUP_LABELS.get(g, g))
        ax.axhline(0, color="0.4", linewidth=0.8)
        _depth_axis(ax, list(dict.fromkeys(df[df.variant == v].hook)), v)
    axes[0, 0].set_ylabel("selectivity (probe - control task)" + ("\n(position: R^2 difference)"
                                                                  if "position" in groups else ""))
    axes[0, -1].legend(frameon=False, fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle("probe selectivity across depth: accuracy above a control task keyed on the token type",
                 fontsize=10)
    return fig


def xor_figure(df):
    """The XOR panel: held-out accuracy of the probes for XORs of two id bits against depth, one line per GF(2)
    weight in the model's own code (how many code bits XOR together to give the target), the majority baseline
    dashed; variants side by side on one axis."""
    import matplotlib.pyplot as plt

    d = df[df.target.str.startswith("xor:") & (df.status == "fitted")]
    variants = list(dict.fromkeys(d.variant))
    fig, axes = plt.subplots(1, len(variants), figsize=(3.8 * len(variants) + 1.4, 3.4), squeeze=False,
                             sharey=True, layout="constrained")
    weights = sorted({int(w) for w in d.gf2_weight.dropna()})
    colours = {w: plt.cm.viridis(i / max(1, len(weights) - 1)) for i, w in enumerate(weights)}
    for ax, v in zip(axes[0], variants):
        g = d[d.variant == v]
        hooks = list(dict.fromkeys(g.hook))
        for w in weights:
            s = g[g.gf2_weight == w].groupby("depth")[["score", "majority"]].mean()
            if not s.empty:
                n = g[(g.gf2_weight == w) & (g.depth == g.depth.min())].shape[0]
                ax.plot(s.index, s.score, marker="o", color=colours[w], label=f"weight {w} ({n} pair{'s' * (n != 1)})")
        if g.gf2_weight.isna().all():  # the learned variant: no code, so no weight
            s = g.groupby("depth")[["score"]].mean()
            ax.plot(s.index, s.score, marker="o", color="tab:gray", label="all pairs (no code)")
        maj = g.groupby("depth").majority.mean()
        ax.plot(maj.index, maj, linestyle="--", color="k", linewidth=1, label="majority baseline")
        _depth_axis(ax, hooks, v)
        ax.legend(frameon=False, fontsize=7)
    axes[0, 0].set_ylabel("held-out accuracy")
    fig.suptitle("probes for XORs of two id bits, by GF(2) weight in the model's own code", fontsize=10)
    return fig


def erasure_figure(df):
    """Loss change under LEACE against the placebo draws (with 95% intervals), and the concept's probe accuracy
    before and after, per variant."""
    import matplotlib.pyplot as plt
    import numpy as np

    variants = list(dict.fromkeys(df.variant))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9.5, 3.6), layout="constrained")
    for i, v in enumerate(variants):
        g = df[df.variant == v]
        le, pl = g[g.condition == "leace"], g[g.condition == "placebo"]
        for x, part, colour in ((i - 0.15, le, "tab:red"), (i + 0.15, pl, "0.55")):
            m = part.delta_loss.to_numpy()
            err = np.vstack([m - part.delta_loss_lo.to_numpy(), part.delta_loss_hi.to_numpy() - m])
            ax.errorbar(np.full(len(m), x), m, yerr=err, fmt="o", color=colour, capsize=2, ms=4,
                        label=None if i else ("LEACE" if part is le else "placebo (random directions)"))
        none = g[g.condition == "none"].iloc[0]
        bx.bar(i - 0.2, none.probe, 0.2, color="tab:blue", label=None if i else "before")
        bx.bar(i, le.probe.iloc[0], 0.2, color="tab:red", label=None if i else "after LEACE")
        bx.bar(i + 0.2, pl.probe.mean(), 0.2, color="0.55", label=None if i else "after placebo (mean)")
        bx.plot([i - 0.35, i + 0.35], [none.majority] * 2, color="k", linewidth=1,
                label=None if i else "majority baseline")
    for a in (ax, bx):
        a.set_xticks(range(len(variants)), variants)
        a.grid(axis="y", color="0.9")
        a.set_axisbelow(True)
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_ylabel("loss change (nats/token), 95% interval")
    ax.legend(frameon=False, fontsize=8)
    bx.set_ylabel("held-out probe accuracy")
    bx.set_ylim(0, 1.05)
    bx.legend(frameon=False, fontsize=7, loc="lower right")
    first = df.iloc[0]
    fig.suptitle(f"erasing {first.concept} at {first.hook}", fontsize=10)
    return fig
