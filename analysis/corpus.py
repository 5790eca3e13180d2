"""The token data of corpus-level measurements (loss under a recoding or an intervention, activations, probes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from analysis.errors import AnalysisError

DEFAULT_TOKENS = 32_768
#: Tokens an edit's effect (an intervention, an ablation, an erasure) is measured on when none are given.
MEASURE_TOKENS = 16_384


def corpus_tokens(model, data=None, *, tokens: int = DEFAULT_TOKENS, seq_len: int | None = None) -> torch.Tensor:
    """Token windows ``[n_sequences, seq_len]`` for corpus-level measurements (see the module docstring)."""
    cfg = model.cfg
    seq_len = cfg.context if seq_len is None else seq_len
    if not isinstance(seq_len, int) or not 2 <= seq_len <= cfg.context:
        raise AnalysisError(f"seq_len must be an integer in [2, {cfg.context}] (the model's context), got {seq_len!r}")
    if isinstance(data, torch.Tensor):
        if data.dim() != 2 or data.dtype not in (torch.int64, torch.int32):
            raise AnalysisError(f"token data must be an integer tensor [n_sequences, seq_len], got {data.dtype} "
                                f"{tuple(data.shape)}")
        return _checked(data.long(), cfg, "tensor")
    if data is not None and Path(str(data)).suffix == ".npy":
        return _checked(_load_npy(Path(data)), cfg, str(data))
    if not isinstance(tokens, int) or tokens < seq_len:
        raise AnalysisError(f"tokens must be an integer >= seq_len ({seq_len}), got {tokens!r}")
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise AnalysisError("the model has no tokenizer: pass --data as a .npy array of token ids")
    docs = _own_validation_docs(model) if data is None else _read_docs(Path(data))
    from fixedid.data.tokenizer import eot_id
    eot = eot_id(tok)
    need = (tokens // seq_len) * seq_len
    ids: list[int] = []
    for doc in docs:
        ids += tok.encode(doc, add_special_tokens=False).ids + [eot]
        if len(ids) >= need:
            break
    if len(ids) < seq_len:
        raise AnalysisError(f"{data} holds {len(ids)} tokens, fewer than one window of {seq_len}")
    n = min(len(ids), need) // seq_len
    return _checked(torch.tensor(ids[:n * seq_len], dtype=torch.long).view(n, seq_len), cfg, str(data))


def corpus_texts(model, data=None, *, n: int = 200) -> list[str]:
    """The first ``n`` documents of the checkpoint's own validation stream (``data=None``) or of a ``.txt`` /
    ``.jsonl`` file, as text (for measurements that tokenize text themselves, such as alternative segmentations)."""
    if n < 1:
        raise AnalysisError(f"the number of documents must be positive, got {n}")
    if data is None:
        docs = _own_validation_docs(model)
    else:
        path = Path(data)
        if path.suffix == ".npy":
            raise AnalysisError(f"--data {path} holds token ids; this measurement needs text (.txt or .jsonl)")
        docs = _read_docs(path)
    out = []
    for doc in docs:
        out.append(doc)
        if len(out) == n:
            break
    if not out:
        raise AnalysisError("the data holds no documents")
    return out


def validation_source(model) -> tuple[str, str, dict | None]:
    """``(source, split, synthetic_mix)`` of the checkpoint's validation stream on the built-in language."""
    d = (getattr(model, "meta", None) or {}).get("train_config", {}).get("data", {})
    source = d.get("source", "")
    if not source.startswith("synthetic"):
        raise AnalysisError("this checkpoint was not trained on the built-in language (or records no training "
                            "config): pass --data (a .txt, .jsonl or .npy file)")
    return source, d.get("val_split") or "validation", d.get("synthetic_mix") or None


def _own_validation_docs(model):
    from fixedid.data.corpus import iter_texts
    source, split, mix = validation_source(model)
    return iter_texts(source, split=split, synthetic_mix=mix)


def _read_docs(path: Path):
    if not path.is_file():
        raise AnalysisError(f"--data {path} is not a file; pass a .txt, .jsonl or .npy file")
    if path.suffix not in (".txt", ".jsonl"):
        raise AnalysisError(f"--data {path} must end in .txt, .jsonl or .npy")

    def docs():
        with path.open(encoding="utf-8") as f:
            for i, line in enumerate(_utf8_lines(f, path), 1):
                if not line.strip():
                    continue
                if path.suffix == ".txt":
                    yield line.rstrip("\n")
                    continue
                try:
                    yield json.loads(line)["text"]
                except (ValueError, KeyError, TypeError):
                    raise AnalysisError(f"{path} line {i} is not a JSON object with a 'text' field") from None
    return docs()


def _utf8_lines(f, path: Path):
    try:
        yield from f
    except UnicodeDecodeError as e:
        raise AnalysisError(f"--data {path} is not UTF-8 text ({e.reason}); save it as "
                            "UTF-8") from None


def _load_npy(path: Path) -> torch.Tensor:
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise AnalysisError(f"--data {path} cannot be read as a .npy array ({e})") from None
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.integer):
        raise AnalysisError(f"--data {path} must be an integer array [n_sequences, seq_len], got {arr.dtype} "
                            f"{arr.shape}")
    return torch.from_numpy(arr.astype(np.int64))


def _checked(ids: torch.Tensor, cfg, what: str) -> torch.Tensor:
    if ids.shape[0] < 1 or ids.shape[1] < 2:
        raise AnalysisError(f"--data {what} has shape {tuple(ids.shape)}; it needs at least one sequence of 2 tokens")
    if ids.shape[1] > cfg.context:
        raise AnalysisError(f"--data {what} has sequences of {ids.shape[1]} tokens, longer than the model's "
                            f"context ({cfg.context})")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= cfg.vocab_size:
        raise AnalysisError(f"--data {what} holds token ids in [{lo}, {hi}], outside the vocabulary [0, "
                            f"{cfg.vocab_size})")
    return ids
