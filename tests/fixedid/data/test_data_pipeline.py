"""Tests of the data pipeline: corpus sources, BPE tokenizers, uint16 token shards and the stateless sampler.

Everything runs offline on small files written under tmp_path; nothing touches the network or user caches.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from fixedid.errors import DataError
from fixedid.data.corpus import iter_texts, synthetic_seed
from fixedid.data.shards import FORMAT, TokenShards, batch_at, build_shards, load_manifest
from fixedid.data.synthetic import SyntheticLanguage
from fixedid.data.tokenizer import (check_vocab_fits, eot_id, load_tokenizer, tokenizer_hash, train_bpe,
                                    train_words)


def _docs(n: int, seed: int = 0) -> list[str]:
    """Small English-ish documents of the synthetic language."""
    return list(SyntheticLanguage(0).documents(n, seed=seed))


@pytest.fixture(scope="module")
def tok():
    return train_bpe(_docs(300), 400)


def _expected_stream(tok, docs):
    out = []
    for d in docs:
        out.extend(tok.encode(d, add_special_tokens=False).ids)
        out.append(eot_id(tok))
    return np.array(out, dtype=np.int64)


# --------------------------------------------------------------------------------------------------------- tokenizer


def test_bpe_deterministic_and_round_trips(tok):
    again = train_bpe(_docs(300), 400)
    assert tokenizer_hash(again) == tokenizer_hash(tok)
    assert tok.get_vocab_size() <= 400
    assert tok.token_to_id("<|endoftext|>") == 0 and eot_id(tok) == 0
    for s in _docs(20, seed=7) + ["héllo wörld\n\n  tabs\tand 日本語 🙂 ", " leading space", ""]:
        assert tok.decode(tok.encode(s).ids) == s


def test_bpe_special_tokens_order_and_too_small_vocab():
    t = train_bpe(_docs(50), 300, special_tokens=("<|endoftext|>", "<pad>"))
    assert t.token_to_id("<|endoftext|>") == 0 and t.token_to_id("<pad>") == 1
    with pytest.raises(DataError, match="too small"):
        train_bpe(_docs(5), 200)


def test_word_level_tokenizer():
    docs = _docs(3000)  # enough text that every piece of the held-out documents below was seen
    words = train_words(docs, 4096)
    assert tokenizer_hash(train_words(docs, 4096)) == tokenizer_hash(words)
    assert words.token_to_id("<|endoftext|>") == 0 and eot_id(words) == 0 and words.token_to_id("<|unk|>") == 1
    bpe = train_bpe(docs, 2048)
    for s in _docs(20, seed=7):
        ids = words.encode(s).ids
        assert words.decode(ids) == s and 1 not in ids  # seen pieces round-trip, none unknown
        # the same pieces as a BPE that keeps every word whole, from a vocabulary without bytes and merges
        assert [words.decode([i]) for i in ids] == [bpe.decode([i]) for i in bpe.encode(s).ids]
    assert words.get_vocab_size() < bpe.get_vocab_size() / 2
    assert words.encode(" Mary").ids == [words.token_to_id("ĠMary")] and words.encode(" Zyzzyx").ids == [1]
    assert train_words(docs, 50).get_vocab_size() == 50
    with pytest.raises(DataError, match="too small"):
        train_words(docs, 2)


def test_check_vocab_fits(tok):
    check_vocab_fits(tok, 16)
    check_vocab_fits(tok, 9)  # 400 <= 512
    with pytest.raises(DataError, match=r"8-bit code can name only 256"):
        check_vocab_fits(tok, 8)


def test_eot_missing():
    t = train_bpe(_docs(20), 300, special_tokens=("<pad>",))
    with pytest.raises(DataError, match="end-of-text"):
        eot_id(t)


def test_load_tokenizer_file_and_dir(tok, tmp_path):
    tok.save(str(tmp_path / "tokenizer.json"))
    for spec in (str(tmp_path / "tokenizer.json"), str(tmp_path)):
        loaded = load_tokenizer(spec)
        assert tokenizer_hash(loaded) == tokenizer_hash(tok)
    with pytest.raises(DataError, match="not found"):
        load_tokenizer(str(tmp_path / "nope" / "tokenizer.json"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no tokenizer.json"):
        load_tokenizer(str(empty))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DataError, match="not a valid tokenizer.json"):
        load_tokenizer(str(tmp_path / "bad.json"))


def _offline(monkeypatch, tmp_path):
    """Force Hugging Face offline mode, also in modules that read the environment at import time."""
    import datasets.config
    import huggingface_hub.constants

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf" / "datasets")


def test_load_tokenizer_hub_offline_fails_fast(monkeypatch, tmp_path):
    _offline(monkeypatch, tmp_path)
    t0 = time.monotonic()
    with pytest.raises(DataError, match="could not be loaded from the Hugging Face hub"):
        load_tokenizer("fixedid-test-org/no-such-tokenizer")
    assert time.monotonic() - t0 < 10


# ------------------------------------------------------------------------------------------------------------ corpus


def test_txt_paragraphs(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("first doc\nline two\n\n\n  \nsecond doc\n\nthird\n", encoding="utf-8")
    assert list(iter_texts(str(p))) == ["first doc\nline two", "second doc", "third"]
    assert list(iter_texts(str(p), limit_docs=2)) == ["first doc\nline two", "second doc"]


def test_jsonl_json_parquet_and_directory(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "data"
    d.mkdir()
    (d / "b.jsonl").write_text("\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(["j1", "j2"])) + "\n")
    (d / "c.json").write_text(json.dumps([{"text": "a1"}, {"text": None}, {"text": "a2"}]))
    pq.write_table(pa.table({"content": ["p1", "p2", None, "p3"], "n": [1, 2, 3, 4]}), d / "a.parquet")
    (d / "ignored.csv").write_text("x")
    assert list(iter_texts(str(d / "b.jsonl"))) == ["j1", "j2"]
    assert list(iter_texts(str(d / "c.json"))) == ["a1", "a2"]
    assert list(iter_texts(str(d / "a.parquet"), text_field="content")) == ["p1", "p2", "p3"]
    with pytest.raises(DataError, match=r"no column 'text'.*'content'"):
        iter_texts(str(d / "a.parquet"))
    with pytest.raises(DataError, match=r"no field 'body'.*\['id', 'text'\]"):
        list(iter_texts(str(d / "b.jsonl"), text_field="body"))
    (d / "a.parquet").unlink()
    assert list(iter_texts(str(d))) == ["j1", "j2", "a1", "a2"]  # sorted: b.jsonl, c.json
    assert list(iter_texts(str(d), limit_docs=3)) == ["j1", "j2", "a1"]


def test_bad_local_sources(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        iter_texts(str(tmp_path / "missing.jsonl"))
    (tmp_path / "x.jsonl").write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(DataError, match=r"x.jsonl:2 is not valid JSON"):
        list(iter_texts(str(tmp_path / "x.jsonl")))
    (tmp_path / "y.jsonl").write_text('{"text": 3}\n')
    with pytest.raises(DataError, match="not a string"):
        list(iter_texts(str(tmp_path / "y.jsonl")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no"):
        iter_texts(str(tmp_path / "empty"))


def test_synthetic_source():
    a = list(iter_texts("synthetic", limit_docs=5))
    assert a == list(iter_texts("synthetic:0", limit_docs=5)) == list(SyntheticLanguage(0).documents(5))
    assert a != list(iter_texts("synthetic", split="validation", limit_docs=5))
    assert a != list(iter_texts("synthetic:1", limit_docs=5))
    with pytest.raises(DataError, match="integer"):
        iter_texts("synthetic:abc")
    sources = ("synthetic", "synthetic:3", "synthetic:-2", "wikitext", "synthetics", "data/synthetic:1.txt")
    assert [synthetic_seed(s) for s in sources] == [0, 3, -2, None, None, None]
    for bad in ("synthetic:", "synthetic:1.5", "synthetic:x"):
        with pytest.raises(DataError, match="must be an integer seed"):
            synthetic_seed(bad)


def test_hub_dataset_offline_fails_fast(monkeypatch, tmp_path):
    _offline(monkeypatch, tmp_path)
    t0 = time.monotonic()
    with pytest.raises(DataError, match=r"dataset 'fixedid-test-org/no-such-data:cfg' could not be loaded.*synthetic"):
        iter_texts("fixedid-test-org/no-such-data:cfg")
    assert time.monotonic() - t0 < 10


# ------------------------------------------------------------------------------------------------------------ shards


def test_shards_round_trip_across_boundaries(tok, tmp_path):
    docs = _docs(40, seed=3)
    expected = _expected_stream(tok, docs)
    m = build_shards(iter(docs), tok, tmp_path, source="unit", split="train", shard_tokens=97, batch_docs=7)
    info = m.splits["train"]
    assert info.n_tokens == len(expected) and info.n_docs == 40 and len(info.shards) == -(-len(expected) // 97)
    ts = TokenShards(tmp_path, "train")
    assert len(ts) == len(expected) and ts.tokenizer_sha256 == tokenizer_hash(tok) and ts.eot_id == 0
    np.testing.assert_array_equal(ts.slice(0, len(ts)), expected)
    for start, length in [(90, 20), (96, 1), (97, 0), (5, 300), (len(ts) - 3, 3)]:  # crossing 97-token boundaries
        np.testing.assert_array_equal(ts.slice(start, length), expected[start:start + length])
    assert ts.slice(90, 20, dtype=np.uint16).dtype == np.uint16
    with pytest.raises(IndexError):
        ts.slice(len(ts) - 2, 3)
    ts.verify(full=True)
    raw = np.fromfile(tmp_path / "train_00000.bin", dtype="<u2")
    np.testing.assert_array_equal(raw, expected[:97])


def test_shards_max_tokens_exact_and_infinite_source(tok, tmp_path):
    def forever():
        while True:
            yield from _docs(10)

    m = build_shards(forever(), tok, tmp_path, source="unit", split="train", max_tokens=1000, shard_tokens=256)
    assert m.splits["train"].n_tokens == 1000
    assert [s.n_tokens for s in m.splits["train"].shards] == [256, 256, 256, 232]
    ts = TokenShards(tmp_path, "train")
    assert len(ts) == 1000
    np.testing.assert_array_equal(ts.slice(0, 1000), _expected_stream(tok, _docs(10) * 20)[:1000])


def test_manifest_layout_and_multiple_splits(tok, tmp_path):
    build_shards(_docs(30), tok, tmp_path, source="unit", split="train", shard_tokens=100)
    build_shards(_docs(5, seed=9), tok, tmp_path, source="unit", split="validation", shard_tokens=100)
    d = json.loads((tmp_path / "manifest.json").read_text())
    assert d["format"] == FORMAT and set(d["splits"]) == {"train", "validation"}
    v = d["splits"]["validation"]
    assert set(v) == {"source", "tokenizer_sha256", "vocab_size", "eot_id", "dtype", "n_tokens", "n_docs", "shards"}
    assert v["dtype"] == "uint16" and v["shards"][0]["file"] == "validation_00000.bin"
    assert load_manifest(tmp_path).split("train").n_tokens == len(TokenShards(tmp_path, "train"))
    with pytest.raises(DataError, match="no split 'test'"):
        TokenShards(tmp_path, "test")
    # rebuilding a split with fewer shards replaces it and removes the stale files
    n_before = len(list(tmp_path.glob("train_*.bin")))
    build_shards(_docs(3), tok, tmp_path, source="unit", split="train", shard_tokens=100)
    assert len(list(tmp_path.glob("train_*.bin"))) < n_before
    assert not list(tmp_path.glob(".*tmp*"))
    TokenShards(tmp_path, "train").verify()
    TokenShards(tmp_path, "validation").verify()
    other = train_bpe(_docs(50), 300)
    with pytest.raises(DataError, match="another tokenizer"):
        build_shards(_docs(3), other, tmp_path, source="unit", split="test")


def test_shard_corruption_detected(tok, tmp_path):
    build_shards(_docs(20), tok, tmp_path, source="unit", split="train", shard_tokens=128)
    shard = tmp_path / "train_00001.bin"
    data = bytearray(shard.read_bytes())
    data[0] ^= 0xFF  # same size, different content: only the full check sees it
    shard.write_bytes(bytes(data))
    ts = TokenShards(tmp_path, "train")
    ts.verify(full=False)
    with pytest.raises(DataError, match="sha256"):
        ts.verify(full=True)
    shard.write_bytes(bytes(data[:-2]))  # truncated
    with pytest.raises(DataError, match="truncated"):
        TokenShards(tmp_path, "train")
    shard.unlink()
    with pytest.raises(DataError, match="missing"):
        TokenShards(tmp_path, "train")
    man = tmp_path / "manifest.json"
    good = json.loads(man.read_text())
    man.write_text(man.read_text()[:-20])
    with pytest.raises(DataError, match="not valid JSON"):
        TokenShards(tmp_path, "train")
    man.write_text(json.dumps({**good, "format": "other/9"}))
    with pytest.raises(DataError, match="unknown shard format"):
        load_manifest(tmp_path)
    good["splits"]["train"]["n_tokens"] += 1
    man.write_text(json.dumps(good))
    with pytest.raises(DataError, match="add up"):
        load_manifest(tmp_path)
    del good["splits"]["train"]["shards"]
    man.write_text(json.dumps(good))
    with pytest.raises(DataError, match="malformed"):
        load_manifest(tmp_path)
    with pytest.raises(DataError, match="no shard manifest"):
        load_manifest(tmp_path / "nowhere")


def test_build_shards_rejects_bad_input(tok, tmp_path):
    with pytest.raises(DataError, match="produced no text"):
        build_shards([], tok, tmp_path, source="unit", split="train")
    with pytest.raises(DataError, match="not a string"):
        build_shards(["ok", 3], tok, tmp_path, source="unit", split="train")
    with pytest.raises(DataError, match="split name"):
        build_shards(["ok"], tok, tmp_path, source="unit", split="../x")
    assert not (tmp_path / "manifest.json").exists() and not list(tmp_path.iterdir())


def test_build_shards_refuses_large_vocab(tmp_path):
    from tokenizers import Tokenizer, models

    big = Tokenizer(models.WordLevel({f"w{i}": i for i in range(70000)} | {"<|endoftext|>": 70000}, unk_token="w0"))
    with pytest.raises(DataError, match="16-bit code can name only 65536"):
        build_shards(["w1 w2"], big, tmp_path, source="unit", split="train")


# ----------------------------------------------------------------------------------------------------------- sampler


def test_batch_at_stateless_sharded_and_shifted(tok, tmp_path):
    build_shards(_docs(60), tok, tmp_path, source="unit", split="train", shard_tokens=300)
    ts = TokenShards(tmp_path, "train")
    ctx, bs, world = 16, 3, 2
    x, y = batch_at(ts, 5, bs, ctx, seed=11)
    assert x.shape == y.shape == (bs, ctx) and str(x.dtype) == "torch.int64"
    x2, y2 = batch_at(TokenShards(tmp_path, "train"), 5, bs, ctx, seed=11)  # fresh object, same batch
    assert (x == x2).all() and (y == y2).all()
    assert (x[:, 1:] == y[:, :-1]).all()
    # every row is a window of the token stream (found by search, not by the sampler's formula), y the next tokens
    full = np.asarray(ts.slice(0, len(ts)))
    windows = np.lib.stride_tricks.sliding_window_view(full, ctx + 1)

    def starts_of(xb, yb):
        rows = np.concatenate([xb.numpy(), yb.numpy()[:, -1:]], axis=1)
        found = [np.flatnonzero((windows == r).all(1)) for r in rows]
        assert all(len(f) for f in found), "a row is not a window of the stream"
        return [int(f[0]) for f in found]

    starts_of(x, y)
    # starts cover the stream uniformly: over 300 steps, both ends are reached and the mean is near the middle
    drawn = np.concatenate([starts_of(*batch_at(ts, s, bs, ctx, seed=11)) for s in range(300)])
    top = len(ts) - ctx - 1
    assert drawn.min() < 0.05 * top and drawn.max() > 0.95 * top and abs(drawn.mean() / top - 0.5) < 0.05
    assert not (batch_at(ts, 6, bs, ctx, seed=11)[0] == x).all()
    assert not (batch_at(ts, 5, bs, ctx, seed=12)[0] == x).all()
    # DDP: the ranks' rows, stacked, are the single-process batch of the same global size
    gx, gy = batch_at(ts, 9, bs * world, ctx, seed=11)
    parts = [batch_at(ts, 9, bs, ctx, seed=11, rank=r, world_size=world) for r in range(world)]
    assert (np.concatenate([p[0].numpy() for p in parts]) == gx.numpy()).all()
    assert (np.concatenate([p[1].numpy() for p in parts]) == gy.numpy()).all()
    with pytest.raises(DataError, match="too few"):
        batch_at(ts, 0, 1, len(ts), seed=0)
    with pytest.raises(ValueError):
        batch_at(ts, 0, 1, 8, seed=0, rank=2, world_size=2)


def test_words_split_at_a_seeded_rate_decode_to_the_same_text(tok, tmp_path):
    """split_word_rate writes some words in two pieces: the ids still decode to the text, the same word comes out
    in more than one segmentation, the tokenizer (and its hash) is unchanged, and the draws are seeded."""
    from fixedid.data.resegment import resegmenting_encoder, split_words

    docs = _docs(40, seed=3) + ["héllo wörld\n\n  tabs\tand 日本語 🙂 "]
    encoded = resegmenting_encoder(tok, 0.5)(docs)
    assert [tok.decode(e.ids) for e in encoded] == docs
    plain = [tok.encode(d).ids for d in docs]
    assert sum(map(len, (e.ids for e in encoded))) > sum(map(len, plain))  # split words take more pieces
    rng, n_words, n_pieces = np.random.default_rng(0), 0, 0
    for d in docs:
        pieces = split_words(d, tok, 0.5, rng)
        assert "".join(pieces) == d
        n_words += len(tok.pre_tokenizer.pre_tokenize_str(d))
        n_pieces += len(pieces)
    assert 1.3 < n_pieces / n_words < 1.5  # half the words of two or more characters are cut in two
    m1 = build_shards(iter(docs), tok, tmp_path / "a", source="unit", split="train", split_word_rate=0.5)
    build_shards(iter(docs), tok, tmp_path / "b", source="unit", split="train", split_word_rate=0.5)
    m0 = build_shards(iter(docs), tok, tmp_path / "c", source="unit", split="train")
    a, b, c = (TokenShards(p, "train") for p in (tmp_path / "a", tmp_path / "b", tmp_path / "c"))
    ids = a.slice(0, len(a))
    assert np.array_equal(ids, b.slice(0, len(b)))  # seeded: the same ids on every build
    assert np.array_equal(c.slice(0, len(c)), np.concatenate([np.r_[p, eot_id(tok)] for p in plain]))
    assert len(a) > len(c) and m1.splits["train"].tokenizer_sha256 == m0.splits["train"].tokenizer_sha256
    # the word " the" is one token by default and, somewhere in the split stream, in two pieces
    the = tok.encode(" the").ids
    assert len(the) == 1 and the[0] in ids
    assert any(tok.decode(ids[i:i + 2].tolist()) == " the" for i in range(len(ids) - 1))
    with pytest.raises(DataError, match="split_word_rate"):
        resegmenting_encoder(tok, 1.5)


def test_words_split_per_document_are_written_one_way_within_a_document(tok, tmp_path):
    """split_word_scope = "document": every occurrence of a word in one document comes out in the same pieces (so a
    retold story copies token for token), the same word is written more than one way across documents, about
    ``rate`` of each document's distinct words are cut, and a per-occurrence draw does break that consistency."""
    from fixedid.data.resegment import resegmenting_encoder, split_words

    docs = _docs(60, seed=5)
    pre = tok.pre_tokenizer

    def segmentations(doc_pieces, doc):
        """{word: set of the ways it was written} for one document, from the pieces and the word boundaries."""
        words = [doc[s:e] for _, (s, e) in pre.pre_tokenize_str(doc)]
        ways, i = {}, 0
        for w in words:  # a word is one piece or two consecutive pieces that join to it
            way = (doc_pieces[i],) if doc_pieces[i] == w else (doc_pieces[i], doc_pieces[i + 1])
            assert "".join(way) == w
            ways.setdefault(w, set()).add(way)
            i += len(way)
        assert i == len(doc_pieces)
        return ways

    for scope, expect_consistent in (("document", True), ("occurrence", False)):
        rng = np.random.default_rng(1)
        per_doc = [segmentations(split_words(d, tok, 0.3, rng, scope), d) for d in docs]
        consistent = all(len(w) == 1 for ways in per_doc for w in ways.values())
        assert consistent == expect_consistent, scope
    rng = np.random.default_rng(1)
    per_doc = [segmentations(split_words(d, tok, 0.3, rng, "document"), d) for d in docs]
    long_words = [(w, next(iter(ways))) for d in per_doc for w, ways in d.items() if len(w) >= 2]
    cut_share = np.mean([len(way) == 2 for _, way in long_words])
    assert 0.24 < cut_share < 0.36  # distinct words per document, cut at the rate
    across = {}
    for w, way in long_words:
        across.setdefault(w, set()).add(way)
    assert sum(len(v) > 1 for v in across.values()) >= 10  # the same word, other documents, other pieces
    encoded = resegmenting_encoder(tok, 0.3, scope="document")(docs)
    assert [tok.decode(e.ids) for e in encoded] == docs
    build_shards(iter(docs), tok, tmp_path / "a", source="unit", split="train", split_word_rate=0.3,
                 split_word_scope="document")
    build_shards(iter(docs), tok, tmp_path / "b", source="unit", split="train", split_word_rate=0.3,
                 split_word_scope="document")
    a, b = TokenShards(tmp_path / "a", "train"), TokenShards(tmp_path / "b", "train")
    assert np.array_equal(a.slice(0, len(a)), b.slice(0, len(b)))
    with pytest.raises(DataError, match="split_word_scope"):
        resegmenting_encoder(tok, 0.3, scope="word")
