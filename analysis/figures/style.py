"""One figure style for every figure the toolkit draws: a fixed colour per variant, paper column sizes, PDF beside PNG.

Colours are the Okabe-Ito palette (safe for the common colour-vision deficiencies): ``learned`` blue, ``canonical``
orange, ``gf2`` bluish green, ``canonical-matched`` vermillion, ``gf2-matched`` sky blue in every figure; further
variants (extra GF(2) recodings ``gf2-r1``...) take the palette's remaining colours in order of appearance. Sizes: one paper column is 3.4 in wide, two
columns 7.0 in (the usual two-column conference layout). :func:`save` writes PNG (200 dpi) and vector PDF through a
temp file and a rename.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from fixedid.atomic import atomic_path

VARIANT_COLOURS = {"learned": "#0072B2", "canonical": "#E69F00", "gf2": "#009E73", "canonical-matched": "#D55E00",
                   "gf2-matched": "#56B4E9"}
#: Okabe-Ito colours not taken by the named variants, for any further variant in order of appearance.
EXTRA_COLOURS = ("#CC79A7", "#F0E442", "#000000", "#999999")
ONE_COLUMN = 3.4  # inches
TWO_COLUMNS = 7.0


def variant_colour(name: str, others: list | None = None) -> str:
    """The colour of a variant: fixed for the three study variants; for another name its place among ``others``
    (the other extra variants of the figure, in order) picks one of :data:`EXTRA_COLOURS`."""
    if name in VARIANT_COLOURS:
        return VARIANT_COLOURS[name]
    extras = [v for v in dict.fromkeys(others or []) if v not in VARIANT_COLOURS]
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
