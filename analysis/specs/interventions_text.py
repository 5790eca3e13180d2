"""The lines ``fixedid-analyze interventions`` prints: the largest effects per variant, the noise scales, the bit
flips' split, and the bit x layer maps."""

from __future__ import annotations

import pandas as pd


def _label(row) -> str:
    parts = []
    for c in ("layer", "head", "bit", "pos", "scale"):
        v = row.get(c)
        if v is not None and not pd.isna(v):
            parts.append(f"{c} {v:g}" if c == "scale" else f"{c} {int(v)}")
    return ", ".join(parts) or "all"


def largest_lines(summaries: dict, measure: str, what: str, where: str) -> str:
    """The five largest effects per variant, the code columns constant over the vocabulary counted apart."""
    lines = [f"{what} over {where}: {measure} (mean [95% interval]), largest per variant"]
    for v, s in summaries.items():
        full = s
        const = s["bit_constant"].fillna(False).astype(bool) if "bit_constant" in s else None
        if const is not None:  # a column no token differs in is another kind of edit: counted apart
            s = s[~const]
        s = s.reindex(s[measure].abs().sort_values(ascending=False).index)[:5]
        parts = [f"{_label(row)} {row[measure]:+.3f} [{row[f'{measure}_lo']:+.3f}, {row[f'{measure}_hi']:+.3f}]"
                 + (f" (on support {row.on_support:.0%})" if "bit" in row and pd.notna(row.get("on_support"))
                    and pd.notna(row.get("bit")) else "")
                 for _, row in s.iterrows()]
        line = f"  {v}: " + "; ".join(parts)
        if const is not None and const.any():
            line += (f"  [{int(const.sum())} columns constant over the vocabulary left out: mean "
                     f"{full[const][measure].mean():+.3f}]")
        lines.append(line)
    return "\n".join(lines)


def noise_lines(summaries: dict, measure: str, what: str, where: str) -> str:
    """Per variant and noise scale: the effect (mean over draws) and the nearest-row decoding accuracy."""
    lines = [f"{what} over {where}: {measure} (mean over draws) and decode_acc (share of noised rows still nearest "
             "their own input row) per scale"]
    for v, s in summaries.items():
        g = s.groupby("scale")[[measure, "decode_acc"]].mean()
        lines.append(f"  {v}: " + "; ".join(f"scale {sc:g} {row[measure]:+.3f} (decode {row.decode_acc:.0%})"
                                           for sc, row in g.iterrows()))
    return "\n".join(lines)


def split_lines(split: pd.DataFrame, measure: str, what: str, where: str) -> str:
    """Each varying bit's flip as its on-support and off-support parts, a random swap beside it."""
    lines = [f"{what} over {where}: {measure} of each varying bit's flip = on-support part (a swap to the token it "
             "lands on) + off-support part; a random swap at the on-support positions beside it"]
    for v, g in split.groupby("variant", sort=False):
        vary = g[~g.bit_constant.astype(bool)]
        cells = [f"bit {int(r.bit)} {r.flip:+.3f} (every row off support)" if r.on_support == 0 else
                 f"bit {int(r.bit)} {r.flip:+.3f} (every row on support; random {r.random:+.3f})" if r.on_support == 1
                 else f"bit {int(r.bit)} {r.flip:+.3f} = on {r.on:+.3f} ({r.on_support:.0%}) + off {r.off:+.3f}, "
                 f"random {r.random:+.3f}" for r in vary.itertuples()]
        lines.append(f"  {v}: " + "; ".join(cells) + (f"  [{len(g) - len(vary)} constant columns left out]"
                                                      if len(g) > len(vary) else ""))
    return "\n".join(lines)


def bit_layer_lines(maps: dict, site: str, metric: str) -> str:
    """Per variant and layer, the share of the flip's effect restored at the flipped and the final position."""
    first = next(iter(maps.values())).attrs
    lines = [f"bit x layer maps: bit flipped at position {first['flip_pos']} "
             f"{first['str_tokens'][first['flip_pos']]!r}, clean {site} patched in, metric {metric}; fraction of the "
             "flip's effect restored (mean over the bits that vary over the vocabulary)"]
    for v, d in maps.items():
        last = d.attrs["n_pos"] - 1
        d = d[~d.bit_constant]
        at_p = d[d.pos == d.attrs["flip_pos"]].groupby("layer").restored.mean()
        at_last = d[d.pos == last].groupby("layer").restored.mean()
        cells = ", ".join(f"L{layer}: {at_p[layer]:.2f} / {at_last[layer]:.2f}" for layer in at_p.index)
        lines.append(f"  {v} (at the flipped / final position): {cells}")
    return "\n".join(lines)


__all__ = ["bit_layer_lines", "largest_lines", "noise_lines", "split_lines"]
