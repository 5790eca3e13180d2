"""Clean/corrupt prompt pairs for patching: text or token ids in, validated tensors out."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from analysis.errors import AnalysisError

FIELDS = ("clean", "corrupt", "answer", "wrong")


@dataclass
class PairBatch:
    """Token tensors of ``n`` pairs: ``clean``/``corrupt`` ``[n, pos]``, ``answer``/``wrong`` ``[n]``."""

    clean: torch.Tensor
    corrupt: torch.Tensor
    answer: torch.Tensor
    wrong: torch.Tensor
    texts: list[dict] | None = None

    def __post_init__(self):
        n, pos = self.clean.shape
        if self.corrupt.shape != (n, pos) or self.answer.shape != (n,) or self.wrong.shape != (n,):
            raise AnalysisError(f"pair tensors disagree: clean {tuple(self.clean.shape)}, corrupt "
                                f"{tuple(self.corrupt.shape)}, answer {tuple(self.answer.shape)}, wrong "
                                f"{tuple(self.wrong.shape)}")

    def __len__(self) -> int:
        return self.clean.shape[0]

    @property
    def n_pos(self) -> int:
        """The token length ``pos`` shared by every clean and corrupt prompt."""
        return self.clean.shape[1]

    def to(self, device) -> "PairBatch":
        """The same pairs with their four tensors on ``device`` (``texts`` shared)."""
        return PairBatch(self.clean.to(device), self.corrupt.to(device), self.answer.to(device),
                         self.wrong.to(device), self.texts)


def _field(pair, name, i):
    v = pair.get(name) if isinstance(pair, dict) else getattr(pair, name, None)
    if not isinstance(v, str) or not v:
        raise AnalysisError(f"pair {i} has no usable {name!r} (a non-empty string is needed); a pair has "
                            f"{', '.join(FIELDS)}")
    return v


def _answer_token(model, word: str, what: str, i: int) -> int:
    text = word if word[:1].isspace() else " " + word
    ids = model.tokenizer.encode(text, add_special_tokens=False).ids
    if len(ids) != 1:
        raise AnalysisError(f"pair {i}: the {what} {word!r} is {len(ids)} tokens, not one; choose a word that is a "
                            "single token of this model's tokenizer")
    return ids[0]


def make_pairs(model, pairs) -> PairBatch:
    """Tokenize and validate one pair or a list of pairs (a :class:`~analysis.pairs.PairBatch` passes through)."""
    if isinstance(pairs, PairBatch):
        return pairs
    if isinstance(pairs, dict) or hasattr(pairs, "clean"):
        pairs = [pairs]
    pairs = list(pairs)
    if not pairs:
        raise AnalysisError("no prompt pairs given")
    if model.tokenizer is None:
        raise AnalysisError("the model has no tokenizer; pass a PairBatch of token ids instead of text")
    tok = model.tokenizer
    clean, corrupt, answer, wrong, texts = [], [], [], [], []
    for i, p in enumerate(pairs):
        c, k = _field(p, "clean", i), _field(p, "corrupt", i)
        ci, ki = tok.encode(c, add_special_tokens=False).ids, tok.encode(k, add_special_tokens=False).ids
        if len(ci) != len(ki):
            raise AnalysisError(f"pair {i} ({c!r} / {k!r}): clean has {len(ci)} tokens but corrupt has {len(ki)}; "
                                "patching needs equal token lengths")
        if clean and len(ci) != len(clean[0]):
            raise AnalysisError(f"pair {i} ({c!r}) has {len(ci)} tokens but pair 0 has {len(clean[0])}; all pairs "
                                "of one call need the same token length (split them by length)")
        if len(ci) > model.cfg.context:
            raise AnalysisError(f"pair {i} has {len(ci)} tokens, more than the model's context {model.cfg.context}")
        a = _answer_token(model, _field(p, "answer", i), "answer", i)
        w = _answer_token(model, _field(p, "wrong", i), "wrong token", i)
        if a == w:
            raise AnalysisError(f"pair {i}: answer and wrong token are the same token")
        clean.append(ci)
        corrupt.append(ki)
        answer.append(a)
        wrong.append(w)
        texts.append({f: _field(p, f, i) for f in FIELDS})
    t = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
    return PairBatch(t(clean), t(corrupt), t(answer), t(wrong), texts).to(model.unembed.weight.device)


def read_pairs_jsonl(path) -> list[dict]:
    """Pairs from a JSONL file, one ``{"clean", "corrupt", "answer", "wrong"}`` object per line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise AnalysisError(f"cannot read pairs file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise AnalysisError(f"pairs file {path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise AnalysisError(f"{path}:{n} is not valid JSON ({e})") from None
        if not isinstance(rec, dict) or not set(FIELDS) <= set(rec):
            raise AnalysisError(f"{path}:{n} needs the keys {list(FIELDS)}")
        out.append(rec)
    if not out:
        raise AnalysisError(f"{path} holds no pairs")
    return out
