"""Text sources: one function, :func:`~fixedid.data.corpus.iter_texts`, that turns a source string into a stream of
documents."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import DataError

__all__ = ["iter_texts", "synthetic_seed", "LOCAL_SUFFIXES"]

#: File name endings read as local sources.
LOCAL_SUFFIXES = (".txt", ".jsonl", ".json", ".parquet")


def iter_texts(
    source: str,
    *,
    text_field: str = "text",
    split: str = "train",
    streaming: bool = True,
    limit_docs: int | None = None,
    seed: int = 0,
    synthetic_mix: dict[str, float] | None = None,
) -> Iterator[str]:
    """Yield the documents of ``source`` (see the module docstring for what a source can be).

    ``limit_docs`` caps the number of documents yielded (``None``: all of them, which for ``"synthetic"`` is an
    infinite stream). Errors that can be seen before the first document (a missing path, a dataset that cannot
    be loaded, a missing field in a parquet schema) are raised when this function is called, not on the first
    ``next()``; errors inside the data are raised when the bad record is reached.
    """
    if not isinstance(source, str) or not source:
        raise DataError(f"data source must be a non-empty string, got {source!r}; pass a local path "
                        "(txt/jsonl/parquet), a Hugging Face dataset name or 'synthetic'")
    if limit_docs is not None and (not isinstance(limit_docs, int) or limit_docs < 0):
        raise DataError(f"limit_docs must be a non-negative integer or None, got {limit_docs!r}")
    lang_seed = synthetic_seed(source)
    if lang_seed is not None:
        docs = _synthetic(lang_seed, split=split, limit_docs=limit_docs, seed=seed, mix=synthetic_mix)
    else:
        path = Path(source).expanduser()
        if path.exists():
            docs = _local(path, text_field)
        elif _looks_like_path(source):
            raise DataError(f"data source {source!r} looks like a local path but does not exist; "
                            "check the path, or pass a Hugging Face dataset name or 'synthetic'")
        else:
            docs = _hub(source, text_field=text_field, split=split, streaming=streaming)
    return docs if limit_docs is None else itertools.islice(docs, limit_docs)


# --------------------------------------------------------------------------------------------------------- synthetic


def synthetic_seed(source: str) -> int | None:
    """The world seed of a built-in-language source: 0 for ``"synthetic"``, ``N`` for ``"synthetic:N"``, ``None``
    for any other source (a path or a hub dataset). :class:`~fixedid.errors.DataError` if ``N`` is not an integer."""
    if source == "synthetic":
        return 0
    if not source.startswith("synthetic:"):
        return None
    try:
        return int(source.split(":", 1)[1])
    except ValueError:
        raise DataError(f"bad synthetic source {source!r}: the part after 'synthetic:' must be an integer "
                        "seed, e.g. 'synthetic:3'") from None


def _synthetic(lang_seed: int, *, split: str, limit_docs: int | None, seed: int, mix=None) -> Iterator[str]:
    if split == "train":
        doc_seed = seed
    else:  # a stable stream per split, independent of Python's hash randomisation
        doc_seed = int.from_bytes(hashlib.sha256(f"{split}:{seed}".encode()).digest()[:4], "little")
    return iter(synthetic_language(lang_seed, mix).documents(n=limit_docs, seed=doc_seed))


def synthetic_language(seed: int, mix: dict | None):
    """The built-in language of world ``seed`` with a ``[data] synthetic_mix`` table: sentence-kind weights plus
    the optional key ``retell`` (the probability that a document is told twice)."""
    from .synthetic import RETELL, SyntheticLanguage

    kinds = dict(mix or {})
    retell = kinds.pop("retell", RETELL)
    return SyntheticLanguage(seed, mix=kinds, retell=retell)


# ------------------------------------------------------------------------------------------------------------- local


def _looks_like_path(source: str) -> bool:
    return (source.startswith(("/", "./", "../", "~")) or source.lower().endswith(LOCAL_SUFFIXES)
            or source.count("/") > 1 or "\\" in source)


def _local(path: Path, text_field: str) -> Iterator[str]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(LOCAL_SUFFIXES))
        if not files:
            raise DataError(f"directory {str(path)!r} holds no {'/'.join(LOCAL_SUFFIXES)} files; "
                            "point the data source at a directory of such files or at one file")
        for f in files:  # check what can be checked up front
            _check_file(f, text_field)
        return itertools.chain.from_iterable(_file_docs(f, text_field) for f in files)
    _check_file(path, text_field)
    return _file_docs(path, text_field)


def _check_file(path: Path, text_field: str) -> None:
    name = path.name.lower()
    if not name.endswith(LOCAL_SUFFIXES):
        raise DataError(f"cannot read {str(path)!r}: unknown file type; use a .txt, .jsonl, .json or .parquet "
                        "file, or a directory of them")
    if name.endswith(".parquet"):
        pq = _parquet_file(path)
        names = pq.schema_arrow.names
        if text_field not in names:
            raise DataError(f"{str(path)!r} has no column {text_field!r}; its columns are {names}; "
                            "pass the right text_field")


def _file_docs(path: Path, text_field: str) -> Iterator[str]:
    name = path.name.lower()
    if name.endswith(".txt"):
        return _txt_docs(path)
    if name.endswith(".parquet"):
        return _parquet_docs(path, text_field)
    return _json_docs(path, text_field)


def _txt_docs(path: Path) -> Iterator[str]:
    para: list[str] = []
    with open(path, encoding="utf-8", errors="strict", newline=None) as f:
        try:
            for line in f:
                if line.strip():
                    para.append(line)
                elif para:
                    yield "".join(para).rstrip("\n")
                    para = []
        except UnicodeDecodeError as e:
            raise DataError(f"{str(path)!r} is not valid UTF-8 ({e}); re-encode it as UTF-8") from None
    if para:
        yield "".join(para).rstrip("\n")


def _record_text(rec: Any, text_field: str, where: str) -> str | None:
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected a JSON object with field {text_field!r}, got {type(rec).__name__}")
    if text_field not in rec:
        raise DataError(f"{where}: no field {text_field!r}; the record's fields are {sorted(rec)}; "
                        "pass the right text_field")
    text = rec[text_field]
    if text is not None and not isinstance(text, str):
        raise DataError(f"{where}: field {text_field!r} is a {type(text).__name__}, not a string")
    return text


def _json_docs(path: Path, text_field: str) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        head = f.read(4096).lstrip()
    if head.startswith("["):  # one JSON array
        try:
            with open(path, encoding="utf-8") as f:
                records = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{str(path)!r} is not valid JSON ({e}); fix the file or write it as JSON Lines") from None
        for i, rec in enumerate(records):
            text = _record_text(rec, text_field, f"{path}: element {i}")
            if text is not None:
                yield text
        return
    with open(path, encoding="utf-8") as f:  # JSON Lines
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno} is not valid JSON ({e}); each line of a .jsonl file must be "
                                "one JSON object") from None
            text = _record_text(rec, text_field, f"{path}:{lineno}")
            if text is not None:
                yield text


def _parquet_file(path: Path):
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError...
        raise DataError(f"{str(path)!r} cannot be read as parquet ({type(e).__name__}: {e})") from None


def _parquet_docs(path: Path, text_field: str) -> Iterator[str]:
    pf = _parquet_file(path)
    for batch in pf.iter_batches(columns=[text_field], batch_size=4096):
        for text in batch.column(0).to_pylist():
            if text is None:
                continue
            if not isinstance(text, str):
                raise DataError(f"{path}: column {text_field!r} holds {type(text).__name__} values, not strings")
            yield text


# --------------------------------------------------------------------------------------------------------------- hub


def _hub(source: str, *, text_field: str, split: str, streaming: bool) -> Iterator[str]:
    name, _, config = source.partition(":")
    hint = "pass a local path (txt/jsonl/parquet) or 'synthetic'"
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - datasets is a dependency
        raise DataError(f"dataset {source!r} could not be loaded: the 'datasets' package is missing ({e}); {hint}")
    try:
        ds = datasets.load_dataset(name, config or None, split=split, streaming=streaming)
    except Exception as e:  # offline, not found, bad config/split, gated...: all mean "cannot use this source"
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"dataset {source!r} could not be loaded: {type(e).__name__}: {reason}; {hint}") from None
    columns = getattr(ds, "column_names", None)
    if columns is not None and text_field not in columns:
        raise DataError(f"dataset {source!r} has no field {text_field!r}; its fields are {list(columns)}; "
                        "pass the right text_field")
    return _hub_docs(ds, source, text_field)


def _hub_docs(ds: Iterable[dict], source: str, text_field: str) -> Iterator[str]:
    for i, rec in enumerate(ds):
        text = _record_text(rec, text_field, f"dataset {source!r} record {i}")
        if text is not None:
            yield text
