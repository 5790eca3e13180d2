"""How a notebook displays (nothing here analyses): :func:`setup` makes every figure a small PNG wide enough to read
and every table plain text; the notebooks under ``notebooks/`` open with it."""

from __future__ import annotations

import io
import struct
import sys
import zlib

import matplotlib.image as mimage
import numpy as np
from matplotlib.figure import Figure
from matplotlib.text import Text

#: The narrowest a figure is rendered (pixels): at this width a figure reads on a screen without zooming.
MIN_WIDTH_PX = 700
#: The smallest a letter is rendered (pixels): 7 pt on a screen of 96 pixels per inch, the PNG shown at its size.
MIN_TEXT_PX = 7 * 96 / 72
#: The lowest resolution a figure is rendered at (dots per inch), whatever its width and letters.
MIN_DPI = 100
_PAD = 0.1  # inches of margin around the tight bounding box (savefig's default pad_inches)


def smallest_text(fig: Figure) -> float:
    """The size (points) of the smallest visible, non-empty text of ``fig`` (10 if it has none)."""
    fig.draw_without_rendering()  # ticks and their labels exist once drawn
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return float(min(sizes, default=10.0))


def figure_dpi(fig: Figure) -> float:
    """The resolution at which ``fig``, cut to its tight bounding box, is at least :data:`MIN_WIDTH_PX` wide and its
    smallest text at least :data:`MIN_TEXT_PX` tall (and at least :data:`MIN_DPI`)."""
    width = fig.get_tightbbox().width + 2 * _PAD  # inches
    return max(MIN_DPI, MIN_WIDTH_PX / width, MIN_TEXT_PX * 72 / smallest_text(fig))


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def _palette(as_rgb: np.ndarray, counts: np.ndarray, frequent: int = 160) -> np.ndarray:
    """256 of the colours ``as_rgb``: the ``frequent`` commonest (a figure's flat areas), then, one at a time, the
    colour farthest from every one chosen so far (so that a gradient, a colour bar, keeps its hues)."""
    order = np.argsort(-counts, kind="stable")
    if len(order) <= 256:
        return as_rgb[order]
    chosen = list(order[:frequent])
    gap = _nearest(as_rgb, as_rgb[chosen])[1]
    while len(chosen) < 256:
        i = int(gap.argmax())
        chosen.append(i)
        gap = np.minimum(gap, ((as_rgb - as_rgb[i]) ** 2).sum(1))
    return as_rgb[chosen]


def _nearest(colours: np.ndarray, palette: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the nearest palette colour, its squared distance) for every colour, in chunks."""
    idx, dist = [], []
    for i in range(0, len(colours), 4096):
        d = ((colours[i:i + 4096, None, :] - palette[None]) ** 2).sum(-1)
        idx.append(d.argmin(1))
        dist.append(d.min(1))
    return np.concatenate(idx), np.concatenate(dist)


def palette_png(rgb: np.ndarray) -> bytes:
    """An ``[height, width, 3]`` uint8 image as an 8-bit palette PNG of at most 256 colours (the commonest, then the
    ones farthest from those chosen), each pixel drawn in the nearest of them: a figure's few flat colours stay exact,
    gradients and anti-aliased edges move a little."""
    h, w, _ = rgb.shape
    flat = rgb.reshape(-1, 3).astype(np.int64)
    colours, inverse, counts = np.unique(flat[:, 0] << 16 | flat[:, 1] << 8 | flat[:, 2], return_inverse=True,
                                         return_counts=True)
    as_rgb = np.stack([colours >> 16, colours >> 8 & 255, colours & 255], axis=1)
    palette = _palette(as_rgb, counts)
    nearest = _nearest(as_rgb, palette)[0]
    rows = np.concatenate([np.zeros((h, 1), np.uint8), nearest.astype(np.uint8)[inverse].reshape(h, w)], axis=1)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 3, 0, 0, 0))
            + _chunk(b"PLTE", palette.astype(np.uint8).tobytes()) + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 9))
            + _chunk(b"IEND", b""))


def figure_png(fig: Figure) -> bytes:
    """``fig`` as a palette PNG at :func:`figure_dpi` (or a little more, until it is :data:`MIN_WIDTH_PX` wide), cut
    to its tight bounding box: about a third of a full-colour PNG's bytes (the notebooks are stored with their
    figures)."""
    dpi = figure_dpi(fig)
    while True:  # the tight box moves a little with the resolution (text, constrained layout): widen until it holds
        full = io.BytesIO()
        fig.savefig(full, format="png", dpi=dpi, bbox_inches="tight", pad_inches=_PAD, facecolor="white")
        full.seek(0)
        rgb = (mimage.imread(full, format="png")[..., :3] * 255).round().astype(np.uint8)
        if rgb.shape[1] >= MIN_WIDTH_PX:
            return palette_png(rgb)
        dpi *= max(1.03, MIN_WIDTH_PX / rgb.shape[1])


def figure_text(fig: Figure) -> str:
    """What a text-only reader of the notebook sees instead of ``fig``: its title (never ``<Figure size ...>``)."""
    title = fig.get_suptitle()
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    return f"[figure: {(title or '; '.join(titles) or 'untitled').strip()}]"


def setup() -> None:
    """Display figures as palette PNGs at least :data:`MIN_WIDTH_PX` wide with no letter under :data:`MIN_TEXT_PX`
    (:func:`figure_png`) and as their title in plain text (:func:`figure_text`), tables as plain text that scrolls
    rather than wraps. Outside IPython only the table settings apply."""
    import pandas as pd

    pd.set_option("display.notebook_repr_html", False)
    pd.set_option("display.expand_frame_repr", False)
    ipython = sys.modules.get("IPython")  # loaded where a shell runs; never imported here
    shell = ipython.get_ipython() if ipython else None
    if shell is None:
        return
    shell.run_line_magic("matplotlib", "inline")
    shell.run_line_magic("config", "InlineBackend.figure_formats = ['png']")
    formatters = shell.display_formatter.formatters
    formatters["image/png"].for_type(Figure, figure_png)
    formatters["text/plain"].for_type(Figure, lambda fig, p, cycle: p.text(figure_text(fig)))


__all__ = ["MIN_WIDTH_PX", "MIN_TEXT_PX", "MIN_DPI", "setup", "figure_png", "figure_dpi", "figure_text",
           "smallest_text", "palette_png"]
