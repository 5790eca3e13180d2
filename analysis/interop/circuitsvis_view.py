"""CircuitsVis attention views, offline: a standalone HTML page (or a notebook cell) that draws every head."""

from __future__ import annotations

import html
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fixedid.atomic import write_text_atomic

from analysis.errors import AnalysisError


@dataclass
class View:
    """One ``AttentionHeads`` view: ``patterns`` ``[heads, dest, src]``, the prompt's ``tokens`` and one name per
    head (``L1H3``)."""

    title: str
    patterns: np.ndarray
    tokens: list[str]
    head_names: list[str]


def _bundle() -> tuple[str, object]:
    try:
        import circuitsvis
        from circuitsvis.utils.convert_props import convert_props
    except ImportError as e:
        raise AnalysisError(f"the attention view needs CircuitsVis 1.43 (pip install circuitsvis): {e}") from None
    path = Path(circuitsvis.__file__).parent / "dist" / "cdn" / "iife.js"
    if not path.is_file():
        raise AnalysisError(f"this CircuitsVis install has no offline bundle at {path}; install circuitsvis 1.43")
    return path.read_text(encoding="utf-8").replace("</script>", ""), convert_props


def _check(v: View) -> None:
    p = np.asarray(v.patterns)
    if p.ndim != 3 or p.shape[1] != p.shape[2] or p.shape[1] != len(v.tokens) or p.shape[0] != len(v.head_names):
        raise AnalysisError(f"view {v.title!r}: patterns must be [heads, tokens, tokens] with one name per head and "
                            f"one token per position; got {p.shape}, {len(v.head_names)} names, {len(v.tokens)} tokens")


def _views_html(views: list[View]) -> tuple[str, str]:
    js, convert_props = _bundle()
    divs, calls = [], []
    page = uuid.uuid4().hex[:8]  # ids unique on a notebook page that shows several views
    for i, v in enumerate(views):
        _check(v)
        uid = f"fixedid-attention-{page}-{i}"
        props = convert_props({"attention": np.asarray(v.patterns, dtype=float), "tokens": list(v.tokens),
                               "attentionHeadNames": list(v.head_names), "maskUpperTri": True})
        divs.append(f'<section class="view"><h2>{html.escape(v.title)}</h2><div id="{uid}"></div></section>')
        calls.append(f"CircuitsVis.render({json.dumps(uid)}, CircuitsVis.AttentionHeads, {props});")
    return "\n".join(divs), f"<script>\n{js}\n" + "\n".join(calls) + "\n</script>"


def attention_page(views: list[View], *, title: str = "attention patterns") -> str:
    """A standalone HTML page drawing every view with CircuitsVis's ``AttentionHeads``, offline."""
    if not views:
        raise AnalysisError("no attention views to draw")
    body, script = _views_html(views)
    return ("<!doctype html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:20px} section.view{margin-bottom:30px}</style></head>\n"
            f"<body><h1>{html.escape(title)}</h1>\n{body}\n{script}\n</body></html>\n")


def write_attention_page(views: list[View], path, *, title: str = "attention patterns") -> Path:
    """:func:`~analysis.interop.circuitsvis_view.attention_page` written to ``path`` (temp file, then rename)."""
    return write_text_atomic(Path(path), attention_page(views, title=title))


class AttentionView:
    """The views for a notebook: ``display(AttentionView(views))`` draws them with the bundled JavaScript (nothing is
    fetched; each display inlines the 1.3 MB bundle once)."""

    def __init__(self, views: list[View]):
        if not views:
            raise AnalysisError("no attention views to draw")
        self.views = views

    def _repr_html_(self) -> str:
        body, script = _views_html(self.views)
        return body + script


__all__ = ["View", "attention_page", "write_attention_page", "AttentionView"]
