"""How the built-in language's words become text: one rule (:func:`~fixedid.data.render.render`), with each word's
character span (:func:`~fixedid.data.render.render_spans`) and the internal token tuples' text
(:func:`~fixedid.data.render.render_tokens`)."""

from __future__ import annotations

from typing import Sequence


def render(words: Sequence[str]) -> str:
    """The text of ``words`` (a sentence or a whole document): joined by single spaces, each ``,`` and ``.``
    attached to the word before it. Every text of the language (documents,
    :meth:`SyntheticLanguage.sentence_text <fixedid.data.synthetic.SyntheticLanguage.sentence_text>`, task prompts,
    :mod:`analysis.labels`) is rendered here."""
    return " ".join(words).replace(" ,", ",").replace(" .", ".")


def render_spans(words: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """``render(words)`` and the ``(start, end)`` character span of each word in that text (in order)."""
    text = render(words)
    spans, pos = [], 0
    for w in words:  # the gap before a word is one space or nothing: whatever render put there
        if text.startswith(" ", pos):
            pos += 1
        spans.append((pos, pos + len(w)))
        pos += len(w)
    return text, spans


def render_tokens(toks) -> str:
    """:func:`~fixedid.data.render.render` of internal token tuples (word first)."""
    return render([t[0] for t in toks])
