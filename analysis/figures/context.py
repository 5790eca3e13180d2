"""Context use: loss against the context allowed, and the loss increase from replacing attention / MLP outputs with
those of other windows (:mod:`analysis.causal.context`, :mod:`analysis.causal.components`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.figures.style import subplots, variant_colours

#: Line style, marker and legend label of each context mask.
MASK_STYLES = {"window": ("-", "o", "window mask (each read spans k)"), "crop": ("--", "s", "crop (last k tokens)")}
#: The joint and interaction effects of a component-effects panel, in the order drawn.
JOINT_ORDER = ["all attn", "all mlp", "all attn + all mlp", "attn x mlp", "attn across layers", "mlp across layers"]
#: The axis label of each joint or interaction effect.
JOINT_LABELS = {"all attn": "all attn", "all mlp": "all MLP", "all attn + all mlp": "attn + MLP",
                "attn x mlp": "attn x MLP", "attn across layers": "attn layers", "mlp across layers": "MLP layers"}


def _effects(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`~analysis.causal.components.component_effects` as it is, or the single rows of ``component_shares``."""
    if "effect" in df:
        return df
    return df.assign(effect=[f"{c} L{int(layer)}" for c, layer in zip(df.component, df.layer)], kind="single")


def _dots(ax, effects: dict, kinds, order, colours, labels=None):
    variants = list(effects)
    width = 0.7 / max(1, len(variants))
    for j, v in enumerate(variants):
        d = _effects(effects[v])
        d = d[d.kind.isin(kinds)].set_index("effect").reindex(order)
        x = np.arange(len(order)) + (j - (len(variants) - 1) / 2) * width
        err = np.vstack([d.delta_loss - d.delta_loss_lo, d.delta_loss_hi - d.delta_loss]).clip(min=0)
        ax.errorbar(x, d.delta_loss, yerr=np.nan_to_num(err), fmt="o", markersize=3, capsize=2, linewidth=1,
                    color=colours[v], label=v)
    ax.axhline(0, color="0.4", linewidth=0.8)
    ax.set_xticks(range(len(order)), [(labels or {}).get(e, e) for e in order], fontsize=7, rotation=30, ha="right",
                  rotation_mode="anchor")
    ax.tick_params(axis="y", labelsize=7)
    ax.set_ylabel("loss increase (nats)", fontsize=8)
    ax.grid(axis="y", color="0.9")
    ax.set_axisbelow(True)


def context_figure(curves: dict, effects: dict | None = None):
    """Loss against the context allowed (log2 axis; solid: window mask, dashed: crop, dotted: the whole window), and,
    with ``effects`` (``{variant: component_effects(...)}``), the loss increase of the joint ablations with the
    interaction terms and of each single-layer ablation, 95% intervals over windows, variants side by side."""
    colours = variant_colours(list(curves) + list(effects or {}))
    if effects:
        fig, axes = subplots(2, height=5.0, nrows=2, ncols=2)
        gs = axes[1, 0].get_gridspec()
        axes[1, 0].remove()
        axes[1, 1].remove()
        ax, cx, bx = axes[0, 0], axes[0, 1], fig.add_subplot(gs[1, :])
    else:
        fig, axes = subplots(1, height=2.6)
        ax = axes[0, 0]
    for v, df in curves.items():
        df = df if "mask" in df else df.assign(mask=np.where(df.k.isna(), "none", "crop"))
        for mask, (ls, marker, _) in MASK_STYLES.items():
            d = df[df["mask"] == mask]
            if len(d):
                ax.plot(d.k, d.loss, linestyle=ls, marker=marker, markersize=3, color=colours[v], linewidth=1.2)
                ax.fill_between(d.k, d.loss_lo, d.loss_hi, color=colours[v], alpha=0.12, linewidth=0)
        full = df[df["mask"] == "none"]
        if len(full):
            ax.axhline(float(full.loss.iloc[0]), color=colours[v], linestyle=":", linewidth=1)
    used = {m for df in curves.values() if "mask" in df for m in df["mask"]} or {"crop"}
    handles = [ax.plot([], [], color="0.3", linestyle=ls, marker=mk, markersize=3, label=lab)[0]
               for m, (ls, mk, lab) in MASK_STYLES.items() if m in used]
    handles.append(ax.plot([], [], color="0.3", linestyle=":", label="whole window")[0])
    handles += [ax.plot([], [], color=colours[v], linewidth=1.5, label=v)[0] for v in curves]
    ax.legend(handles=handles, fontsize=6, frameon=False, ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    ax.set_xscale("log", base=2)
    ks = sorted({float(k) for df in curves.values() for k in df.k.dropna()})
    if ks:
        ax.set_xticks(ks, [f"{k:g}" for k in ks])
        ax.minorticks_off()
    ax.set_xlabel("context k (tokens)", fontsize=8)
    ax.set_ylabel("next-token loss (nats)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(color="0.9")
    ax.set_title("the same positions, context limited to k", fontsize=8)
    if effects:
        ablation = "/".join(sorted({str(df.ablation.iloc[0]) for df in effects.values()
                                    if "ablation" in df and len(df)}))
        joint = [e for e in JOINT_ORDER if any(e in set(_effects(df).effect) for df in effects.values())]
        if joint:
            _dots(cx, effects, ["joint", "interaction"], joint, colours, JOINT_LABELS)
            split = sum(e in JOINT_ORDER[:3] for e in joint) - 0.5
            cx.axvspan(split, len(joint) - 0.5, color="0.94", linewidth=0, zorder=0)
            cx.set_xlim(-0.5, len(joint) - 0.5)
            cx.set_title(f"{ablation} ablation: joint | interactions (shaded)", fontsize=8)
        else:
            cx.set_axis_off()
        singles = list(dict.fromkeys(e for df in effects.values()
                                     for e in _effects(df).query("kind == 'single'").effect))
        singles = sorted(singles, key=lambda e: (e.split()[0] != "attn", int(e.split("L")[-1])))
        _dots(bx, effects, ["single"], singles, colours)
        bx.set_title(f"one layer's attention or MLP output from another window ({ablation} ablation; 95% CI over "
                     "windows)", fontsize=8)
    return fig
