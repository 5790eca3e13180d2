"""One figure style for every figure the toolkit draws: a fixed colour per variant, paper column sizes, PDF beside PNG."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt

from fixedid.atomic import atomic_path

#: The fixed colour (Okabe-Ito) of each variant and control the toolkit trains.
VARIANT_COLOURS = {"learned": "#0072B2", "canonical": "#E69F00", "gf2": "#009E73", "canonical-matched": "#D55E00",
                   "gf2-matched": "#56B4E9", "permuted": "#CC79A7", "frozen_random": "#000000",
                   "learned-randomhead": "#999999", "canonical-randomhead": "#F0E442"}
#: Colours for names none of the above fixes, in order of appearance (matplotlib's tab10 hues the palette lacks).
EXTRA_COLOURS = ("#8C564B", "#9467BD", "#BCBD22", "#17BECF")
#: Width of a one-column figure (inches).
ONE_COLUMN = 3.4
#: Width of a two-column figure (inches).
TWO_COLUMNS = 7.0


def recoding_shade(r: int) -> str:
    """The colour of GF(2) recoding ``r`` >= 1: ``gf2``'s green mixed with black (odd ``r``) or white (even ``r``),
    a third of the way for recodings 1 and 2, five ninths for 3 and 4, and so on (each pair a third closer)."""
    if r < 1:
        raise ValueError(f"recoding {r}: the shades are for recodings 1, 2, ... (recoding 0 is gf2's own colour)")
    base = [int(VARIANT_COLOURS["gf2"][i:i + 2], 16) for i in (1, 3, 5)]
    towards = 0 if r % 2 else 255
    share = 1 - (2 / 3) ** ((r + 1) // 2)
    return "#" + "".join(f"{round(c + (towards - c) * share):02X}" for c in base)


def _recoding(name: str) -> int | None:
    """``N`` for a name ``gf2-r<N>``, else None (only ``N >= 1`` names a further recoding: recoding 0 is ``gf2``)."""
    m = re.fullmatch(r"gf2-r(\d+)", name)
    return int(m.group(1)) if m else None


def variant_colour(name: str, others: list | None = None) -> str:
    """The colour of a variant: fixed for the variants the toolkit trains (see the module docstring), a shade of
    ``gf2``'s for ``gf2-r<N>``; for another name its place among ``others`` (the figure's variants, in order) picks
    one of :data:`~analysis.figures.style.EXTRA_COLOURS`."""
    if name in VARIANT_COLOURS:
        return VARIANT_COLOURS[name]
    if _recoding(name):
        return recoding_shade(_recoding(name))
    extras = [v for v in dict.fromkeys(others or []) if v not in VARIANT_COLOURS and not _recoding(v)]
    return EXTRA_COLOURS[extras.index(name) % len(EXTRA_COLOURS)] if name in extras else EXTRA_COLOURS[0]


def variant_colours(variants) -> dict:
    """``{variant: colour}`` for the variants of one figure."""
    variants = list(dict.fromkeys(variants))
    return {v: variant_colour(v, variants) for v in variants}


def subplots(columns: int = 2, height: float = 2.6, nrows: int = 1, ncols: int = 1, **kw):
    """``plt.subplots`` at the width of one or two paper columns (constrained layout, axes always 2-D)."""
    width = ONE_COLUMN if columns == 1 else TWO_COLUMNS
    return plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False, layout="constrained", **kw)


__all__ = ["VARIANT_COLOURS", "EXTRA_COLOURS", "ONE_COLUMN", "TWO_COLUMNS", "variant_colour", "variant_colours",
           "subplots", "save_figure", "short_hook"]


def save_figure(fig, out_dir, stem: str) -> list[Path]:
    """Write ``stem.png`` (200 dpi) and ``stem.pdf`` under ``out_dir``, each through a temp file and a rename."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        with atomic_path(out_dir / f"{stem}.{ext}") as tmp:
            fig.savefig(tmp, dpi=200, bbox_inches="tight", format=ext)
        paths.append(out_dir / f"{stem}.{ext}")
    plt.close(fig)
    return paths


def short_hook(hook: str) -> str:
    """``input``, ``L1 in`` (the residual stream entering block 1), ``L1 out`` (leaving it), ``final norm``."""
    return (hook.replace("hook_embed", "input").replace("blocks.", "L").replace(".hook_resid_pre", " in")
            .replace(".hook_resid_post", " out").replace("ln_final.hook_normalized", "final norm"))
