"""Pretokenised token shards: raw little-endian uint16 files plus a JSON manifest, and a stateless batch sampler."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from ..atomic import fsync_dir, fsync_file, write_text_atomic
from ..errors import DataError
from .tokenizer import check_vocab_fits, eot_id, tokenizer_hash

__all__ = ["FORMAT", "MANIFEST", "ShardInfo", "SplitInfo", "Manifest", "build_shards", "load_manifest",
           "TokenShards", "batch_at"]

#: The ``format`` string of ``manifest.json``; a manifest of any other format is refused.
FORMAT = "fixedid-shards/1"
#: The manifest's file name inside a shard directory.
MANIFEST = "manifest.json"
_DTYPE = np.dtype("<u2")


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One shard file of a split, as the manifest lists it: its plain file ``file`` inside the shard directory,
    its token count ``n_tokens`` (the file holds ``2 * n_tokens`` bytes) and the hex ``sha256`` of its bytes."""

    file: str
    n_tokens: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split of the manifest (the fields of ``splits[name]`` in the module docstring): where its text came
    from, the tokenizer's hash, ``vocab_size`` and ``eot_id``, the dtype (always ``"uint16"``), token and document
    counts, and its shards in stream order."""

    source: str
    tokenizer_sha256: str
    vocab_size: int
    eot_id: int
    dtype: str
    n_tokens: int
    n_docs: int
    shards: tuple[ShardInfo, ...]


@dataclasses.dataclass(frozen=True)
class Manifest:
    """The parsed ``manifest.json`` of a shard directory."""

    format: str
    splits: dict[str, SplitInfo]

    def split(self, name: str) -> SplitInfo:
        """The :class:`~fixedid.data.shards.SplitInfo` of split ``name``; a split the manifest lacks raises
        :class:`~fixedid.errors.DataError` naming the ones it has."""
        if name not in self.splits:
            raise DataError(f"shard manifest has no split {name!r}; it has {sorted(self.splits)}; build it with "
                            "build_shards(..., split=...) or pick one of those")
        return self.splits[name]

    def to_json(self) -> dict:
        """The manifest as the JSON object ``manifest.json`` holds (splits sorted by name)."""
        return {"format": self.format, "splits": {k: dataclasses.asdict(v) for k, v in sorted(self.splits.items())}}

    @classmethod
    def from_json(cls, d: object, where: str = MANIFEST) -> "Manifest":
        """Parse a ``manifest.json`` object, checking its format string, that every split is ``uint16``, that its
        shards add up to its ``n_tokens`` and that shard names are plain file names. Anything else raises
        :class:`~fixedid.errors.DataError` naming ``where``; the shard files themselves are not looked at."""
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise DataError(f"{where}: unknown shard format {got!r} (expected {FORMAT!r}); rebuild the shards")
        try:
            splits = {}
            for name, s in d["splits"].items():
                shards = tuple(ShardInfo(str(x["file"]), int(x["n_tokens"]), str(x["sha256"])) for x in s["shards"])
                info = SplitInfo(str(s["source"]), str(s["tokenizer_sha256"]), int(s["vocab_size"]),
                                 int(s["eot_id"]), str(s["dtype"]), int(s["n_tokens"]), int(s["n_docs"]), shards)
                if info.dtype != "uint16":
                    raise DataError(f"{where}: split {name!r} has dtype {info.dtype!r}, only 'uint16' is supported")
                if sum(x.n_tokens for x in shards) != info.n_tokens:
                    raise DataError(f"{where}: split {name!r} says n_tokens={info.n_tokens} but its shards add up "
                                    f"to {sum(x.n_tokens for x in shards)}; the manifest is corrupt, rebuild it")
                for x in shards:
                    if Path(x.file).name != x.file:
                        raise DataError(f"{where}: shard file name {x.file!r} is not a plain file name")
                splits[str(name)] = info
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DataError(f"{where}: malformed manifest ({type(e).__name__}: {e}); rebuild the shards") from None
        return cls(FORMAT, splits)


def load_manifest(out_dir: str | os.PathLike) -> Manifest:
    """Read and parse ``out_dir/manifest.json`` (files are not checked here; :class:`~fixedid.data.shards.TokenShards`
    does that)."""
    path = Path(out_dir) / MANIFEST
    if not path.is_file():
        raise DataError(f"no shard manifest at {str(path)!r}; build the shards first (build_shards)")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{str(path)!r} is not valid JSON ({e}); the manifest is corrupt, rebuild the shards") from None
    return Manifest.from_json(d, str(path))


# ----------------------------------------------------------------------------------------------------------- writing


class _ShardWriter:
    """Cuts a token stream into shards written under temporary names; ``commit`` renames them into place."""

    def __init__(self, out_dir: Path, split: str, shard_tokens: int):
        self.out_dir, self.split, self.shard_tokens = out_dir, split, shard_tokens
        self.done: list[tuple[Path, ShardInfo]] = []
        self._f = None
        self._n = 0
        self._h = None

    def _open(self) -> None:
        name = f"{self.split}_{len(self.done):05d}.bin"
        self._tmp = self.out_dir / f".{name}.tmp-{os.getpid()}"
        self._name, self._f, self._n, self._h = name, open(self._tmp, "wb"), 0, hashlib.sha256()

    def _close(self) -> None:
        self._f.close()
        fsync_file(self._tmp)
        self.done.append((self._tmp, ShardInfo(self._name, self._n, self._h.hexdigest())))
        self._f = None

    def write(self, ids: np.ndarray) -> None:
        while ids.size:
            if self._f is None:
                self._open()
            take = min(ids.size, self.shard_tokens - self._n)
            b = ids[:take].tobytes()
            self._f.write(b)
            self._h.update(b)
            self._n += take
            ids = ids[take:]
            if self._n == self.shard_tokens:
                self._close()

    def commit(self) -> list[ShardInfo]:
        if self._f is not None:
            self._close()
        for tmp, info in self.done:
            os.replace(tmp, self.out_dir / info.file)
        fsync_dir(self.out_dir)
        return [info for _, info in self.done]

    def abort(self) -> None:
        if self._f is not None:
            self._f.close()
            self.done.append((self._tmp, None))
        for tmp, _ in self.done:
            tmp.unlink(missing_ok=True)


def build_shards(texts: Iterable[str], tokenizer, out_dir: str | os.PathLike, *, source: str, split: str,
                 max_tokens: int | None = None, shard_tokens: int = 2 ** 24, batch_docs: int = 256,
                 progress: bool = False, split_word_rate: float = 0.0,
                 split_word_scope: str = "occurrence") -> Manifest:
    """Tokenize ``texts`` into ``out_dir/<split>_NNNNN.bin`` shards and record them in ``out_dir/manifest.json``.

    Documents are encoded ``batch_docs`` at a time with ``tokenizer.encode_batch`` (or its offset-free twin
    ``encode_batch_fast``; no special tokens added by a post-processor) and each is followed by the end-of-text
    id. Stops after exactly ``max_tokens`` tokens if given (cutting the last document), else when ``texts``
    ends - so an infinite source needs ``max_tokens``. ``progress`` shows a tqdm bar (tokens and rate).
    A split that already exists in ``out_dir`` is replaced; the other splits are kept, and must have been made
    with the same tokenizer. A tokenizer with truncation or padding enabled is used (and hashed) without them.
    ``split_word_rate`` > 0 writes that share of words in two pieces at a seeded random cut
    (:mod:`fixedid.data.resegment`; ``split_word_scope``: a draw per occurrence of a word or per word and document):
    the same tokenizer, so the same hash, with its words segmented more than one way.
    Returns the new manifest (all splits).
    """
    _check_build_args(split, max_tokens, shard_tokens, batch_docs)
    check_vocab_fits(tokenizer, 16)
    eot = eot_id(tokenizer)
    tokenizer = _without_truncation_or_padding(tokenizer)
    tok_sha = tokenizer_hash(tokenizer)  # of the tokenizer as used: without truncation/padding settings
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    old = _other_splits_manifest(out, split, tok_sha)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=max_tokens, unit="tok", unit_scale=True, desc=f"tokenizing {split}")
    writer = _ShardWriter(out, split, shard_tokens)
    try:
        if split_word_rate:
            from .resegment import resegmenting_encoder

            encode = resegmenting_encoder(tokenizer, split_word_rate, scope=split_word_scope)
        else:  # encode_batch_fast (tokenizers >= 0.20) skips the character offsets: same ids, ~25% faster
            encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        n_tokens, n_docs = _tokenize_into(writer, texts, encode, eot, max_tokens, batch_docs, bar)
        if n_tokens == 0:
            raise DataError(f"source {source!r} (split {split!r}) produced no text; check the source and split")
        shards = writer.commit()
    except BaseException:
        writer.abort()
        raise
    finally:
        if bar is not None:
            bar.close()

    info = SplitInfo(source=source, tokenizer_sha256=tok_sha, vocab_size=tokenizer.get_vocab_size(True),
                     eot_id=eot, dtype="uint16", n_tokens=n_tokens, n_docs=n_docs, shards=tuple(shards))
    manifest = Manifest(FORMAT, {**old.splits, split: info})
    write_text_atomic(out / MANIFEST, json.dumps(manifest.to_json(), indent=1) + "\n")
    _remove_stale_shards(out, split, shards)
    return manifest


def _check_build_args(split, max_tokens, shard_tokens, batch_docs) -> None:
    if not isinstance(split, str) or not split or Path(split).name != split or split.startswith("."):
        raise DataError(f"split name {split!r} must be a plain non-empty name such as 'train' or 'validation'")
    for name, val, lo in (("shard_tokens", shard_tokens, 1), ("batch_docs", batch_docs, 1)):
        if not isinstance(val, int) or val < lo:
            raise DataError(f"{name} must be a positive integer, got {val!r}")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise DataError(f"max_tokens must be a positive integer or None, got {max_tokens!r}")


def _without_truncation_or_padding(tokenizer):
    """``tokenizer`` itself, or a copy without them if it truncates or pads (the original is left as it is)."""
    if tokenizer.truncation is None and tokenizer.padding is None:
        return tokenizer
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer.to_str())
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def _other_splits_manifest(out: Path, split: str, tok_sha: str) -> Manifest:
    """The manifest already in ``out`` (an empty one if none), checked: its splits other than ``split`` must have
    been made with the tokenizer of hash ``tok_sha``."""
    old = load_manifest(out) if (out / MANIFEST).exists() else Manifest(FORMAT, {})
    for name, info in old.splits.items():
        if name != split and info.tokenizer_sha256 != tok_sha:
            raise DataError(f"{str(out)!r} already holds split {name!r} made with another tokenizer "
                            f"(sha256 {info.tokenizer_sha256[:12]}... vs {tok_sha[:12]}...); use another out_dir")
    return old


def _tokenize_into(writer: _ShardWriter, texts: Iterable[str], encode, eot: int, max_tokens: int | None,
                   batch_docs: int, bar) -> tuple[int, int]:
    """Encode ``texts`` a batch at a time with ``encode`` (a tokenizer's ``encode_batch``) and write the token
    stream (each document followed by ``eot``, cut at ``max_tokens``) to ``writer``; return ``(n_tokens, n_docs)``,
    a cut last document counted."""
    n_tokens = n_docs = 0
    it = iter(texts)
    while max_tokens is None or n_tokens < max_tokens:
        batch = _next_batch(it, batch_docs, n_docs)
        if not batch:
            break
        ids, ends = _encode_batch(encode, batch, eot)
        if max_tokens is not None and n_tokens + ids.size > max_tokens:
            keep = max_tokens - n_tokens
            n_docs += int(np.searchsorted(ends, keep, side="left")) + 1  # docs touched, the last one cut
            ids = ids[:keep]
        else:
            n_docs += len(batch)
        if ids.size and (ids.min() < 0 or ids.max() >= 2 ** 16):
            raise DataError(f"token id {int(ids.max())} does not fit in uint16 (ids must be < 65536); "
                            "use a tokenizer with at most 65536 tokens")
        writer.write(ids.astype(_DTYPE))
        n_tokens += ids.size
        if bar is not None:
            bar.update(ids.size)
    return n_tokens, n_docs


def _next_batch(it: Iterator, batch_docs: int, n_docs: int) -> list[str]:
    """Up to ``batch_docs`` next documents of ``it`` (``n_docs`` already read, for the error message)."""
    batch = []
    for t in it:
        if not isinstance(t, str):
            raise DataError(f"document {n_docs + len(batch)} is a {type(t).__name__}, not a string")
        batch.append(t)
        if len(batch) == batch_docs:
            break
    return batch


def _encode_batch(encode, batch: list[str], eot: int) -> tuple[np.ndarray, np.ndarray]:
    """The int64 ids of ``batch``, each document followed by ``eot``, and the end offset of each document."""
    encs = encode(batch, add_special_tokens=False)
    lens = np.fromiter((len(e.ids) + 1 for e in encs), dtype=np.int64, count=len(encs))
    ids = np.empty(int(lens.sum()), dtype=np.int64)
    ends = np.cumsum(lens)
    pos = 0
    for e, end in zip(encs, ends):
        ids[pos:end - 1] = e.ids
        ids[end - 1] = eot
        pos = end
    return ids, ends


def _remove_stale_shards(out: Path, split: str, shards: list[ShardInfo]) -> None:
    """Delete the shards of an older, longer build of ``split`` that the new manifest no longer lists."""
    keep = {s.file for s in shards}
    for f in out.glob(f"{split}_*.bin"):
        if f.name not in keep and f.name[len(split) + 1:-4].isdigit():
            f.unlink()


# ----------------------------------------------------------------------------------------------------------- reading


class TokenShards:
    """The token stream of one split, memory-mapped (read-only) from its shards.

    Opening checks the manifest and that every shard file exists with exactly ``2 * n_tokens`` bytes; the
    (slow, full-read) sha256 check is :meth:`~fixedid.data.shards.TokenShards.verify`.
    """

    def __init__(self, out_dir: str | os.PathLike, split: str):
        self.dir = Path(out_dir)
        self.split = split
        self.manifest = load_manifest(self.dir)
        self.info = self.manifest.split(split)
        self._maps: list[np.memmap] = []
        for s in self.info.shards:
            path = self.dir / s.file
            if not path.is_file():
                raise DataError(f"shard {str(path)!r} listed in the manifest is missing; rebuild the shards")
            size = path.stat().st_size
            if size != 2 * s.n_tokens:
                raise DataError(f"shard {str(path)!r} has {size} bytes but the manifest says {s.n_tokens} tokens "
                                f"({2 * s.n_tokens} bytes); it is truncated or corrupt, rebuild the shards")
            if s.n_tokens:
                self._maps.append(np.memmap(path, dtype=_DTYPE, mode="r", shape=(s.n_tokens,)))
        self._starts = np.cumsum([0] + [m.shape[0] for m in self._maps])  # shard k covers [starts[k], starts[k+1])

    @property
    def tokenizer_sha256(self) -> str:
        """Hash of the tokenizer the split was encoded with (:func:`fixedid.data.tokenizer.tokenizer_hash`)."""
        return self.info.tokenizer_sha256

    @property
    def vocab_size(self) -> int:
        """The vocabulary size of the split's tokenizer, added tokens included."""
        return self.info.vocab_size

    @property
    def eot_id(self) -> int:
        """The end-of-text id that follows every document in the stream."""
        return self.info.eot_id

    def __len__(self) -> int:
        return int(self._starts[-1])

    def slice(self, start: int, length: int, dtype=np.int64) -> np.ndarray:
        """Tokens ``[start, start + length)`` as a new array of ``dtype`` (int64, or np.uint16 for the raw ids)."""
        start, length = int(start), int(length)
        if start < 0 or length < 0 or start + length > len(self):
            raise IndexError(f"slice [{start}, {start + length}) is outside the {len(self)} tokens of split "
                             f"{self.split!r}")
        out = np.empty(length, dtype=dtype)
        k = int(np.searchsorted(self._starts, start, side="right")) - 1
        pos = 0
        while pos < length:
            m = self._maps[k]
            lo = start + pos - int(self._starts[k])
            take = min(length - pos, m.shape[0] - lo)
            out[pos:pos + take] = m[lo:lo + take]
            pos += take
            k += 1
        return out

    def verify(self, full: bool = True) -> None:
        """Re-check sizes and, if ``full``, every shard's sha256 against the manifest;
        :class:`~fixedid.errors.DataError` if off."""
        for s in self.info.shards:
            path = self.dir / s.file
            if not path.is_file() or path.stat().st_size != 2 * s.n_tokens:
                raise DataError(f"shard {str(path)!r} is missing or has the wrong size; rebuild the shards")
            if full:
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 22), b""):
                        h.update(block)
                if h.hexdigest() != s.sha256:
                    raise DataError(f"shard {str(path)!r} fails its sha256 check (corrupt); rebuild the shards")


def batch_at(ts: TokenShards, step: int, batch_size: int, context: int, *, seed: int, rank: int = 0,
             world_size: int = 1):
    """The ``(x, y)`` batch of global step ``step`` for rank ``rank``: int64 tensors ``[batch_size, context]``.

    Stateless and reproducible: the global batch of ``batch_size * world_size`` windows of step ``step`` is a
    pure function of ``(seed, step)`` and the data - window starts are drawn uniformly, with replacement, by
    ``numpy.random.default_rng([seed, step]).integers(0, len(ts) - context, size=batch_size * world_size)`` -
    and rank ``r`` takes rows ``r*batch_size:(r+1)*batch_size``. ``y`` is ``x`` shifted by one token
    (``y[:, :-1] == x[:, 1:]``). Hence:

    * resuming at step ``s`` needs no sampler state: call ``batch_at(ts, s, ...)``;
    * model variants trained with the same seed see exactly the same tokens at every step;
    * DDP ranks see disjoint slices of one global batch, and the concatenation over ranks equals the
      ``world_size=1`` batch of size ``batch_size * world_size`` - so changing the number of ranks (at fixed
      global batch) does not change the data.

    There are no epochs: windows may overlap and repeat, and do not respect document boundaries (documents are
    separated by the end-of-text token, which the model learns to read).
    """
    import torch

    for name, v, lo in (("step", step, 0), ("batch_size", batch_size, 1), ("context", context, 1),
                        ("seed", seed, 0), ("world_size", world_size, 1), ("rank", rank, 0)):
        if not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if rank >= world_size:
        raise ValueError(f"rank {rank} is not < world_size {world_size}")
    n = len(ts)
    if n < context + 1:
        raise DataError(f"split {ts.split!r} has {n} tokens, too few for a context of {context} (needs at least "
                        f"{context + 1}); use more data or a shorter context")
    starts = np.random.default_rng([int(seed), int(step)]).integers(0, n - context, size=batch_size * world_size)
    rows = starts[rank * batch_size:(rank + 1) * batch_size]
    w = np.stack([ts.slice(s, context + 1) for s in rows])
    return torch.from_numpy(w[:, :-1].copy()), torch.from_numpy(w[:, 1:].copy())
