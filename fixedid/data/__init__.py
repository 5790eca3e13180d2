"""Data: the built-in synthetic language, text sources, tokenizers and pretokenised uint16 shards."""

from .corpus import iter_texts, synthetic_seed
from .shards import Manifest, TokenShards, batch_at, build_shards, load_manifest
from .synthetic import PromptPair, SyntheticLanguage, WordLabel
from .tokenizer import check_vocab_fits, eot_id, load_tokenizer, tokenizer_hash, train_bpe, train_words

__all__ = ["iter_texts", "synthetic_seed", "Manifest", "TokenShards", "batch_at", "build_shards", "load_manifest",
           "PromptPair", "SyntheticLanguage", "WordLabel", "check_vocab_fits", "eot_id", "load_tokenizer",
           "tokenizer_hash", "train_bpe", "train_words"]
