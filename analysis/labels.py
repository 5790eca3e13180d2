"""Latent labels per token of the built-in language's validation stream."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from analysis.corpus import validation_source
from analysis.errors import AnalysisError
from analysis.tasks import language_seed

#: The label columns of :func:`~analysis.labels.validation_labels`, one per token (the end-of-text token: ``EOT``,
#: ``none``, -1, -1, ``none``).
LABEL_COLUMNS = ("pos_tag", "number", "entity", "depth", "ioi_role")


def _labelled_docs(model):
    """Yield ``(text, [(start, end, WordLabel)])`` for the documents of the checkpoint's validation stream."""
    from fixedid.data.corpus import synthetic_language
    from fixedid.data.render import render_spans
    from fixedid.data.synthetic import SENTENCES_PER_DOC, WordLabel

    _, split, mix = validation_source(model)
    # the stream seed of fixedid.data.corpus for a non-train split (seed 0)
    doc_seed = int.from_bytes(hashlib.sha256(f"{split}:0".encode()).digest()[:4], "little")
    lang = synthetic_language(language_seed(model), mix)
    for doc in lang._stream(doc_seed, *SENTENCES_PER_DOC):
        words = [WordLabel(*t) for sentence in doc for t in sentence]
        text, spans = render_spans([w.word for w in words])  # the text of SyntheticLanguage.documents
        yield text, [(a, b, w) for (a, b), w in zip(spans, words)]


def validation_labels(model, n_tokens: int) -> pd.DataFrame:
    """Labels of the first ``n_tokens`` tokens of the validation stream (the order of ``corpus_tokens``)."""
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise AnalysisError("latent labels need the checkpoint's tokenizer")
    from fixedid.data.tokenizer import eot_id

    eot = eot_id(tok)
    cols: dict[str, list] = {c: [] for c in LABEL_COLUMNS}
    ids: list[int] = []
    for text, spans in _labelled_docs(model):
        enc = tok.encode(text, add_special_tokens=False)
        starts = np.array([s for s, _, _ in spans])
        for tid, (a, b) in zip(enc.ids, enc.offsets):
            w = spans[max(0, int(np.searchsorted(starts, b - 1, side="right")) - 1)][2]
            ids.append(tid)
            cols["pos_tag"].append(w.pos)
            cols["number"].append(w.number)
            cols["entity"].append(w.entity)
            cols["depth"].append(w.depth)
            cols["ioi_role"].append(w.role)
        ids.append(eot)
        for c, v in zip(LABEL_COLUMNS, ("EOT", "none", -1, -1, "none")):
            cols[c].append(v)
        if len(ids) >= n_tokens:
            break
    out = pd.DataFrame({c: v[:n_tokens] for c, v in cols.items()})
    out.attrs["ids"] = np.asarray(ids[:n_tokens])
    return out


__all__ = ["LABEL_COLUMNS", "validation_labels"]
