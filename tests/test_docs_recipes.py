"""docs/recipes.md against its sources: every number the recipes page keeps is recomputed here from the packaged
configs (``fixedid/configs``, linked from ``experiments/configs``), the code they run (presets, the synthetic
language, the tokenizer, the learning-rate schedule, RoPE) and the committed results under
``experiments/benchmarks/results``, and compared with the page's tables and sentences. A last check fails on any
number of the page that none of these checks states, so a number added without a source fails too; another keeps the
page a reference (no dates, no issue numbers, short paragraphs). The behaviours tables between the page's markers
are the benchmark's output (also checked in tests/test_docs_claims.py)."""

import importlib.util
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "recipes.md"
RESULTS = ROOT / "experiments" / "benchmarks" / "results"
TARGETS = ("ioi", "agreement", "induction")
TASK_NAMES = {"ioi": "IOI", "agreement": "agreement", "induction": "induction"}
#: Names with digits in them (a field, a model, a recipe): not numbers of the page.
NAMES = ("GF(2)", "SmolLM2-1.7B", "GPT-2", "paper-1.7b")
#: A number as the page writes it (the sign, if any, is left to the surrounding text).
NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?")


def flat(text: str) -> str:
    return " ".join(text.split())


@lru_cache
def page() -> str:
    return PAGE.read_text()


def section(title: str) -> str:
    """The text of the ``## title`` section (to the next ``## `` heading)."""
    text = page()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def row(text: str, first: str) -> list[str]:
    """The cells of the table row of ``text`` whose first cell is ``first``."""
    rows = [line for line in text.splitlines() if line.startswith(f"| {first} |")]
    assert len(rows) == 1, f"no single table row starting with {first!r}: {rows}"
    return [c.strip() for c in rows[0].strip().strip("|").split(" | ")]


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def span(values) -> str:
    """A lowest-highest range of accuracies in % as the page writes it: ``94-100%``, or ``100%`` when one value."""
    lo, hi = (f"{100 * v:.0f}" for v in (min(values), max(values)))
    return f"{lo}%" if lo == hi else f"{lo}-{hi}%"


def sci(x: float) -> str:
    """``3e-3`` for 0.003."""
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def sig2(x: float) -> str:
    """Two significant digits, trailing zero kept (``0.10``); an exact 1 as ``1``."""
    return "1" if abs(x - 1) < 1e-6 else f"{x:#.2g}"


def cfg(name):
    from fixedid.train import TrainConfig

    return TrainConfig.load(name)


def behaviours_bench():
    spec = importlib.util.spec_from_file_location("behaviours", ROOT / "experiments/benchmarks/behaviours.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@lru_cache
def tiny_tokenizer():
    from fixedid.train.prepare import make_tokenizer

    return make_tokenizer(cfg("tiny").data)


def tokens_read(c) -> int:
    return c.train.steps * c.train.batch_size * c.model_config("canonical", 2).context


# Each function below returns the claims it recomputed, as the strings the page must hold; the test of each asserts
# them, and test_every_number_on_the_page_is_checked reads the numbers of all of them.


def overview_claims() -> list[str]:
    from fixedid.config import ModelConfig

    out = []
    for name, tok in (("tiny", "word-level tokenizer"), ("tiny-bpe", None), ("small", None), ("paper-1.7b", None)):
        c = cfg(name)
        vocab = ModelConfig.preset("paper-1.7b").vocab_size if name == "paper-1.7b" else c.data.vocab_size
        m = c.model_config("canonical", vocab if name != "tiny" else 2)  # tiny: only the shape is read here
        heads = f"{m.n_layers} layers of {m.n_heads} heads" + (f" of {m.d_head}" if "tiny" in name else "")
        last = tok or (f"BPE of {vocab:,}" if c.data.tokenizer == "bpe" else f"vocabulary {vocab:,}")
        assert (c.data.tokenizer == "words") == (name == "tiny")
        shape = f"{heads}, `d_model` {m.d_model:,}, a {m.n_bits}-bit code, {last}"
        training = f"{c.train.steps:,} steps of {c.train.batch_size:,} x {m.context:,} tokens"
        cells = row(page(), f"`{name}`")
        assert cells[2:] == [shape, training], name
        out += [shape, training]
    bench = behaviours_bench()
    keep = {cfg(n).train.keep[0] for n in ("tiny", "tiny-bpe")}
    assert len(keep) == 1
    claim = (f"IOI, agreement and induction are all at >= {100 * bench.TARGET:.0f}% of held-out pairs, both at the end "
             f"of training and at the snapshot kept at {100 * keep.pop():.0f}% of it")
    assert claim in flat(page())
    return out + [claim]


class Choices:
    """The rows of a section's choices table (``| choice | value | why |``): :meth:`value` asserts a value cell,
    :meth:`why` a phrase of a why cell; ``claims`` collects what was asserted."""

    def __init__(self, title: str):
        self.text = section(title)
        self.claims: list[str] = []

    def value(self, key: str, expected: str) -> None:
        assert row(self.text, key)[1] == expected, key
        self.claims.append(expected)

    def why(self, key: str, expected: str) -> None:
        assert expected in row(self.text, key)[2], (key, expected)
        self.claims.append(expected)


def tiny_model():
    c = cfg("tiny")
    vocab = tiny_tokenizer().get_vocab_size(with_added_tokens=True)
    return c, vocab, c.model_config("canonical", vocab)


def tiny_code_claims() -> list[str]:
    """The code's width, how much of it the word tokenizer's vocabulary fills, and the shape."""
    from fixedid.config import ModelConfig

    c, vocab, m = tiny_model()
    preset, study = ModelConfig.preset("toy", vocab_size=vocab), ModelConfig.preset("paper-1.7b")
    assert all(any(i >> b & 1 for i in range(vocab)) for b in range(m.n_bits))  # every bit varies
    rows = Choices("The tiny recipe")
    rows.value("code", f"`n_bits` {m.n_bits}, `d_model` {m.d_model} ({m.d_model // m.n_bits} repeats)")
    rows.why("code", f"the word tokenizer's {vocab} ids fill {vocab / 2 ** m.n_bits:.0%} of the {2 ** m.n_bits} "
                     f"codes, near the study's {study.vocab_size / 2 ** study.n_bits:.0%} ({study.vocab_size:,} of "
                     f"{2 ** study.n_bits:,})")
    rows.why("code", f"under the {preset.n_bits}-bit default {preset.n_bits - (vocab - 1).bit_length()} canonical "
                     "bits would be constant")
    assert c.data.tokenizer == "words"
    rows.value("shape", f"{m.n_layers} layers of {m.n_heads} heads of {m.d_head}, SwiGLU {m.d_ff}, context "
                        f"{m.context}")
    return rows.claims


def tiny_rope_claims() -> list[str]:
    """The RoPE bases per layer and each base's frequencies (radians per token), read from the model's tables."""
    import torch

    from fixedid.model import rope_tables

    _, _, m = tiny_model()
    bases = Counter(m.rope_head_thetas)
    slow, fast = sorted(bases, reverse=True)
    rows = Choices("The tiny recipe")
    rows.value("RoPE bases", f"per layer, {bases[fast]} heads at base {fast} and {bases[slow]} at {slow:,} "
                             "(`rope_head_thetas`)")
    cos, sin = rope_tables(m)
    turn = torch.atan2(sin[1], cos[1])[:, : m.d_head // 2]  # [heads, frequencies]: the angle at position 1
    said = {}
    for base in (fast, slow):
        freqs = turn[m.rope_head_thetas.index(base)].tolist()
        said[base] = ", ".join(sig2(f) for f in freqs[:-1]) + f" and {sig2(freqs[-1])}"
    rows.why("RoPE bases", f"a head of {m.d_head} turns at {said[fast]} rad/token at base {fast}, and at {said[slow]} "
                           f"at base {slow:,}")
    return rows.claims


def tiny_training_claims() -> list[str]:
    """Biases, initialisation, the learned table, the data and the learning-rate schedule."""
    from fixedid.config import ModelConfig
    from fixedid.data.lexicon import FEMALE, MALE
    from fixedid.data.synthetic import RETELL
    from fixedid.train.config import OptimConfig
    from fixedid.train.optim import lr_at

    c, vocab, m = tiny_model()
    preset = ModelConfig.preset("toy", vocab_size=vocab)
    rows = Choices("The tiny recipe")
    assert m.bias
    rows.value("biases", "`bias = true`")
    rows.value("initialisation", f"`init_std` {m.init_std}, not the preset's {preset.init_std}")
    rows.value("learned table", f"`embed_init_std` {m.embed_init_std}, no weight decay")
    assert c.train.embed_weight_decay == 0 and preset.embed_init_std is None  # the preset's table starts at init_std
    rows.why("learned table", f"at {preset.init_std} with weight decay it merged the {len(FEMALE) + len(MALE)} "
                              "interchangeable person names")
    rows.value("data", f"{c.data.train_tokens / 1e6:.0f}M fresh training tokens for the {tokens_read(c):,} a variant "
                       f"reads; documents told twice with probability {c.data.synthetic_mix.get('retell', RETELL)}")
    t = c.train
    rows.value("schedule", f"{t.steps:,} steps of {t.batch_size} sequences; warm-up {t.warmup} steps, {sci(t.lr)} "
                           f"constant to step {t.decay_begin}, then a cosine cool-down to "
                           f"{sci(t.lr * t.min_lr_ratio)}; Adam's beta2 {t.beta2} (the trainer's default: "
                           f"{OptimConfig().beta2}); weight decay {t.weight_decay}")
    assert lr_at(t.steps - 1, t) == pytest.approx(t.lr * t.min_lr_ratio, rel=1e-3) and t.decay_end == t.steps
    kept = t.kept_steps[0]
    rows.why("schedule", f"the snapshot kept at step {kept:,}, where the behaviours must already hold, is "
                         f"{kept - t.decay_begin} steps into the {t.decay_end - t.decay_begin}-step cool-down, at "
                         f"{lr_at(kept, t) / t.lr:.2f}x the peak rate")
    return rows.claims


def tiny_mixture_claims() -> list[str]:
    """The mixture against the language's default, and the id bit that spells the agreement nouns' number."""
    from fixedid.data.lexicon import NOUNS
    from fixedid.data.synthetic import DEFAULT_MIX

    c, _, m = tiny_model()
    mix = c.data.synthetic_mix
    order = ("ioi", "agreement", "list", "fact", "nested", "filler")
    assert set(mix) == set(order) and DEFAULT_MIX["repeat"] == 0
    rows = Choices("The tiny recipe")
    rows.value("mixture", f"IOI {mix['ioi']:.0%}, agreement {mix['agreement']:.0%}, word lists {mix['list']:.0%}, "
                          f"facts {mix['fact']:.0%}, nested clauses {mix['nested']:.0%}, fillers {mix['filler']:.0%} "
                          "(the language's default: " + "/".join(f"{100 * DEFAULT_MIX[k]:.0f}" for k in order) + ")")
    ids = tiny_tokenizer().get_vocab()  # words with their leading space, which the tokenizer writes as "Ġ"
    singular, plural = ([ids["Ġ" + pair[k]] for pair in NOUNS] for k in (0, 1))
    split = [b for b in range(m.n_bits) if all(i >> b & 1 for i in plural) and not any(i >> b & 1 for i in singular)]
    assert len(split) == 1
    rows.why("mixture", f"one bit of the id (value {1 << split[0]}) separates the agreement task's plural subject "
                        "nouns from the singular ones")
    return rows.claims


def _cells(table: pd.DataFrame) -> pd.DataFrame:
    """The lowest target accuracy per cell and step: index (variant, recoding, seed), one column per step."""
    t = table[table.task.isin(TARGETS)].copy()
    return t.groupby(["variant", "recoding", "seed", "step"]).accuracy.min().unstack("step")


def _study(name: str) -> pd.DataFrame:
    m = pd.read_csv(RESULTS / name / "measurements.csv")
    b = m[(m.analysis == "behaviours") & (m.metric == "accuracy") & m.variant.isin(["learned", "canonical"] + [
        v for v in m.variant.unique() if v.startswith("gf2")])]
    recoding = b.variant.map(lambda v: int(v.split("-r")[1]) if "-r" in v else (0 if v == "gf2" else -1))
    return pd.DataFrame(dict(variant=b.variant.str.replace(r"-r\d", "", regex=True), recoding=recoding, seed=b.seed,
                             step=b.step, task=b.key, accuracy=b.value))


def _behaviours(name: str) -> pd.DataFrame:
    d = pd.read_csv(RESULTS / name)
    d["recoding"] = d.recoding.fillna(-1).astype(int)
    return d


def _label(variant, recoding, seed) -> str:
    return f"gf2 recoding {recoding} seed {seed}" if variant == "gf2" else f"{variant} seed {seed}"


def _misses(table: pd.DataFrame, kept: int, final: int) -> set[str]:
    """``LABEL: TASK A% at 75% of training[, B% at the end]`` for every cell with a target below 90% (at either)."""
    out = set()
    t = table[table.task.isin(TARGETS)]
    for (v, r, s, task), g in t.groupby(["variant", "recoding", "seed", "task"]):
        acc = g.set_index("step").accuracy
        low = [(step, where) for step, where in ((kept, "at 75% of training"), (final, "at the end"))
               if acc[step] < 0.9]
        if low:
            parts = ", ".join(f"{pct(acc[step])} {where}" for step, where in low)
            out.add(f"{_label(v, r, s)}: {TASK_NAMES[task]} {parts}")
    return out


def _seeds(values) -> str:
    values = sorted(int(v) for v in values)
    assert values == list(range(values[0], values[-1] + 1))
    return f"{values[0]}-{values[-1]}"


def behaviours_claims() -> list[str]:
    bench = behaviours_bench()
    out = []
    for config in ("tiny", "tiny-bpe"):
        results, begin, end = bench.places(config)
        block = page()[page().index(begin):page().index(end) + len(end)]
        assert block == bench.table_block(pd.read_csv(results), config)
    # the target over seeds, from the behaviours table and the two studies
    t = cfg("tiny").train
    kept, final = t.kept_steps[0], t.steps
    text = section("The tiny recipe")
    for source, table in (("`behaviours.csv` (the table above)", _behaviours("behaviours.csv")),
                          ("`study-tiny/measurements.csv`", _study("study-tiny")),
                          ("`study-tiny-confirmatory/measurements.csv`", _study("study-tiny-confirmatory"))):
        assert sorted(table.step.unique()) == [kept, final]
        gf2 = table[table.variant == "gf2"].recoding.unique()
        first = f"{_seeds(table.seed.unique())}, recodings {_seeds(gf2)}"
        cells = row(text, first)
        assert cells[1] == source
        low = _cells(table)
        counts = f"{(low[kept] >= bench.TARGET).sum()} / {(low[final] >= bench.TARGET).sum()} of {len(low)}"
        assert cells[2] == counts, source
        misses = _misses(table, kept, final)
        if misses:
            assert set(cells[3].split("; ")) == misses, source
        else:
            worst = table[table.task.isin(TARGETS) & (table.step == kept)].sort_values("accuracy").iloc[0]
            narrowest = (f"none; the narrowest is {_label(worst.variant, worst.recoding, worst.seed)}'s "
                         f"{TASK_NAMES[worst.task]} at 75% of training, {pct(worst.accuracy)} "
                         f"({round(worst.accuracy * worst.n_pairs)} of {worst.n_pairs} pairs)")
            assert cells[3] == narrowest
            misses = {narrowest}
        out += [first, counts, *misses]
    return out


def induction_claims() -> list[str]:
    from fixedid.data.lexicon import POOL

    d = _behaviours("behaviours.csv")
    assert (d[d.task == "induction"].accuracy == 1).all()
    claims = [f"Copying of the list pool's {len(POOL)} words",
              f"every variant is at {span(d[d.task == 'induction_unlisted'].accuracy)} on it while at 100% on "
              "`induction`"]
    for c in claims:
        assert c in flat(page()), c
    return claims


def demo_claims() -> list[str]:
    per_variant = tokens_read(cfg("tiny"))
    claim = f"training 3 x {per_variant:,} tokens: about {3 * per_variant / 1e6:.1f}M"
    assert claim in flat(page())
    return [claim]


def screen_claims() -> list[str]:
    """The committed screen of a shorter schedule, from its config and table."""
    toml = RESULTS / "screen-demo-1200-steps.toml"
    t = cfg(str(toml)).train
    table = _behaviours("screen-demo-1200-steps.csv")
    low = _cells(table)
    kept = t.kept_steps[0]
    assert (low[t.steps] >= 0.9).all() and t.keep == [0.75]
    label = f"{t.steps:,} steps with the cool-down from step {t.decay_begin}, for a shorter demo"
    result = f"every cell at the end, but {(low[kept] >= 0.9).sum()} of {len(low)} at step {kept}, its 75% of training"
    assert row(section("The tiny recipe"), label)[1:] == [result, "no"]
    gf2 = sorted(table[table.variant == "gf2"].recoding.unique())
    assert sorted(table.variant.unique()) == ["canonical", "gf2", "learned"]
    what = f"(learned, canonical and gf2 recodings {_seeds(gf2)} over seeds {_seeds(table.seed.unique())})"
    assert what in flat(page())
    return [label, result, what]


def tiny_bpe_choice_claims() -> list[str]:
    """The sub-word twin's choices table against its config (and tiny's, where it says it is tiny's)."""
    c = cfg("tiny-bpe")
    d, m = c.data, c.model_config("canonical", c.data.vocab_size)
    tiny = cfg("tiny").model_config("canonical", 2)  # any vocabulary that fits 9 bits: only the shape is read
    rows = Choices("The sub-word twin: tiny-bpe")
    rows.value("code", f"a BPE of {m.vocab_size} tokens, `n_bits` {m.n_bits}, `d_model` {m.d_model} "
                       f"({m.d_model // m.n_bits} repeats)")
    rows.why("code", f"{m.vocab_size} tokens fill {m.vocab_size / 2 ** m.n_bits:.0%} of the {2 ** m.n_bits:,} codes")
    bases = Counter(m.rope_head_thetas)
    slow, fast = sorted(bases, reverse=True)
    assert m.bias == tiny.bias and m.init_std == tiny.init_std and set(bases) == set(tiny.rope_head_thetas)
    rows.value("shape", f"{m.n_layers} layers of {m.n_heads} heads of {m.d_head}, SwiGLU {m.d_ff}; per layer "
                        f"{bases[fast]} heads at base {fast} and {bases[slow]} at {slow:,}; `tiny`'s biases and "
                        "initialisation")
    mix = d.synthetic_mix
    rows.value("mixture", f"word lists {mix['list']:.0%}, IOI {mix['ioi']:.0%}, agreement {mix['agreement']:.0%}, "
                          f"facts {mix['fact']:.0%}, nested clauses {mix['nested']:.0%}, fillers {mix['filler']:.0%}")
    rows.value("cuts", f"`split_word_rate` {d.split_word_rate}, `split_word_scope = \"{d.split_word_scope}\"`")
    rows.why("cuts", f"{d.split_word_rate:.0%} of each training document's distinct words")
    rows.value("length", f"{c.train.steps:,} steps of {c.train.batch_size} x {m.context} tokens, "
                         f"{tokens_read(c) / 1e6:.1f}M of the {d.train_tokens / 1e6:.0f}M training tokens")
    return rows.claims


def tiny_bpe_behaviour_claims() -> list[str]:
    """The two sentences under the sub-word twin's behaviours table, from behaviours-tiny-bpe.csv."""
    t = cfg("tiny-bpe").train
    table = _behaviours("behaviours-tiny-bpe.csv")
    assert "facts" not in set(table.task) and t.keep == [0.75]
    kept = t.kept_steps[0]
    low = _cells(table)
    assert (low >= 0.9).all().all()
    targets = table[table.task.isin(TARGETS)]
    summary = (f"All {len(low)} cells meet the target at 75% of training and at the end (" +
               ", ".join(f"{TASK_NAMES[k]} {span(targets[targets.task == k].accuracy)}" for k in TARGETS) + ")")
    ioi = targets[(targets.task == "ioi") & (targets.step == kept)]
    lowest = targets[targets.step == kept].sort_values("accuracy").iloc[0]
    assert (lowest.variant, lowest.task) == ("gf2", "ioi")
    late = (f"gf2's IOI is the lowest target at 75% of training: {span(ioi[ioi.variant == 'gf2'].accuracy)}, "
            f"against {span(ioi[ioi.variant != 'gf2'].accuracy)} for learned and canonical")
    for claim in (summary, late):
        assert claim in flat(page()), claim
    return [summary, late]


def _segmentation():
    """segmentation-tiny-bpe.csv as ``(long table, {measure: per-seed values by variant})``."""
    d = pd.read_csv(RESULTS / "segmentation-tiny-bpe.csv")
    wide = d.pivot_table(index=["measure", "seed"], columns="variant", values="value")
    return d, {k: wide.loc[k] for k in ("extra_nats", "loss whole window")}


def _paired(g) -> dict:
    from analysis.stats import paired_difference

    return {v: paired_difference(g[v].to_numpy(float), g["learned"].to_numpy(float)) for v in ("canonical", "gf2")}


def segmentation_table_claims() -> list[str]:
    """The segmentation table: mean [t interval] per variant, and the paired differences from learned."""
    from analysis.stats import t_interval

    d, by = _segmentation()
    text = section("The sub-word twin: tiny-bpe")
    out = []
    for measure, label in (("extra_nats", "extra nats of a word written as two pieces"),
                           ("loss whole window", "loss over the whole window (nats per token)")):
        cells = []
        for v in ("learned", "canonical", "gf2"):
            mean, lo, hi = t_interval(by[measure][v].to_numpy(float))
            cells.append(f"{mean:.2f} [{lo:.2f}, {hi:.2f}]")
        cells += [f"{x['diff']:+.2f} [{x['lo']:+.2f}, {x['hi']:+.2f}]" for x in _paired(by[measure]).values()]
        assert row(text, label)[1:] == cells, measure
        out += [label, *cells]
    source = (ROOT / "experiments" / "benchmarks" / "segmentation.py").read_text()
    words = re.search(r'"--words", type=int, default=(\d+)', source).group(1)
    seeds = _seeds(re.search(r'"--seeds", default="([\d,]+)"', source).group(1).split(","))
    assert _seeds(d.seed.unique()) == seeds
    claims = [f"seeds {seeds}, measures the first {words} such words",
              f"Mean over seeds {seeds} [Student-t {t_interval.__defaults__[0]:.0%} interval]"]
    for claim in claims:
        assert claim in flat(text), claim
    return out + claims


def segmentation_prose_claims() -> list[str]:
    """What the sentences under the table say of the seeds: the per-seed costs over learned, the smallest sign-flip
    p three seeds allow, and intervals of the whole-window loss that include 0."""
    from analysis.stats import sign_flip_p

    _, by = _segmentation()
    g = by["extra_nats"]
    n = len(g)
    per_seed = {v: g[v] - g["learned"] for v in ("canonical", "gf2")}
    assert all((x > 0).all() for x in per_seed.values())  # "in each of the three seeds"
    claims = [f"{k} by {x.min():.1f}-{x.max():.1f}" for k, x in per_seed.items()]
    claims[0] += " nats"
    p = {x["p_sign"] for x in _paired(g).values()}
    assert p == {sign_flip_p(np.ones(n))}
    enough = next(k for k in range(1, 20) if sign_flip_p(np.ones(k)) < 0.1)
    claims += [f"sign-flip p is {p.pop():.2f} for both, the smallest {n} seeds allow (it takes {enough} seeds to "
               "reach p < 0.1)", f"each of the {['', 'one', 'two', 'three', 'four', 'five'][n]} seeds"]
    assert all(x["lo"] < 0 < x["hi"] for x in _paired(by["loss whole window"]).values())
    claims.append("(both intervals include 0)")
    for claim in claims:
        assert claim in flat(section("The sub-word twin: tiny-bpe")), claim
    return claims


def small_claims() -> list[str]:
    from fixedid.config import trainable_params

    c = cfg("small")
    vocab = c.data.vocab_size
    m = c.model_config("canonical", vocab)
    learned, fixed = (round(trainable_params(c.model_config(v, vocab)) / 1e6) for v in ("learned", "canonical"))
    claim = (f"`small` has ~{learned}M trainable parameters as the learned variant and ~{fixed}M as a fixed-code one "
             f"(`d_model` {m.d_model}, {m.n_layers} layers of {m.n_heads} heads, SwiGLU {m.d_ff:,}, context "
             f"{m.context}, a BPE of {vocab:,} tokens read through the preset's {m.n_bits}-bit code)")
    assert claim in flat(page())
    return [claim]


def paper_claims() -> list[str]:
    from fixedid.config import ModelConfig, trainable_params

    c = cfg("paper-1.7b")
    vocab = ModelConfig.preset("paper-1.7b").vocab_size
    m = c.model_config("canonical", vocab)
    assert (m.norm, m.mlp, m.bias, m.output) == ("rms", "swiglu", False, "learned")
    params = {v: trainable_params(c.model_config(v, vocab)) for v in ("learned", "canonical", "gf2")}
    assert params["canonical"] == params["gf2"]
    t = c.train
    total = t.steps * t.batch_size * m.context
    billions = round(total / 1e9)
    toml = (ROOT / "experiments" / "configs" / "paper-1.7b.toml").read_text()
    gpu = re.search(r"fits one (\d+) GB GPU per rank", toml).group(1)
    assert t.parallel == "ddp" and t.dtype == "bf16"
    claims = [
        f"the SmolLM2-1.7B shape ({m.n_layers} layers, `d_model` {m.d_model:,}, {m.n_heads} heads, SwiGLU "
        f"{m.d_ff:,}, RMSNorm, RoPE, no biases, untied head), vocabulary {vocab:,}, the {m.n_bits}-bit code repeated "
        f"{m.d_model // m.n_bits} times: {params['canonical']:,} trainable parameters for canonical and gf2 and "
        f"{params['learned']:,} for learned",
        f"SmolLM2's {vocab:,}-token tokenizer; ~{billions}B prediction tokens = {t.steps:,} steps x {t.batch_size:,} "
        f"sequences x {m.context:,} tokens",
        f"(peak rate {sci(t.lr)}, ~{round(t.warmup, -3):,} warm-up steps, beta2 {t.beta2}, weight decay "
        f"{t.weight_decay}, bf16 autocast)",
        f"fits one {gpu} GB GPU per rank (its weights, gradients and AdamW's two moments in float32 take 16 bytes a "
        f"parameter, {16 * params['learned'] / 1e9:.0f} GB for learned)",
        f"Pretokenising {billions}B tokens",
    ]
    for claim in claims:
        assert claim in flat(page()), claim
    # the paper says the same of its training tokens
    assert f"about {billions}B prediction tokens each" in flat((ROOT / "docs" / "paper.md").read_text())
    return claims


CHECKS = [overview_claims, tiny_code_claims, tiny_rope_claims, tiny_training_claims, tiny_mixture_claims,
          behaviours_claims, induction_claims, demo_claims, screen_claims,
          tiny_bpe_choice_claims, tiny_bpe_behaviour_claims, segmentation_table_claims,
          segmentation_prose_claims, small_claims, paper_claims]


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_the_pages_numbers_are_their_sources(check):
    assert check()


def numbers(text: str) -> list[str]:
    """The numbers of a text as the page writes them, leaving out code spans, link targets and :data:`NAMES`."""
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    for name in NAMES:
        text = text.replace(name, " ")
    return NUMBER.findall(text)


def test_every_number_on_the_page_is_checked():
    """Each number of the page's own text (the generated behaviours tables aside: they are the benchmark's output)
    occurs in a claim one of the checks above recomputed; a number without a source fails here."""
    text = re.sub(r"<!-- behaviours[^>]*begin -->.*?<!-- behaviours[^>]*end -->", " ", page(), flags=re.DOTALL)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.DOTALL)
    checked = {n for check in CHECKS for claim in check() for n in numbers(claim)}
    unchecked = sorted({n for n in numbers(text) if n not in checked}, key=lambda s: float(s.replace(",", "")))
    assert not unchecked, f"docs/recipes.md has numbers no check recomputes: {unchecked}"


def test_the_page_stays_a_reference():
    """Short paragraphs, bullets and table cells; no dates, issue numbers or commit hashes (those belong to the
    screening record in experiments/benchmarks/results/README.md, which the page names)."""
    text = page()
    assert len(text.splitlines()) <= 250
    for para in re.split(r"\n\s*\n|\n(?=\s*[-*] )", text):
        pieces = para.split(" | ") if para.lstrip().startswith("|") else [para]
        for piece in pieces:
            assert len(piece.split()) <= 150 or piece.startswith("<!--"), piece[:200]
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text)
    assert not re.search(r"\b(issue|PR|pull request) #?\d+", text, flags=re.IGNORECASE)
    assert not re.search(r"\b[0-9a-f]{7,12}\b", text)
    assert "experiments/benchmarks/results/README.md" in flat(text)
    assert (ROOT / "experiments" / "benchmarks" / "results" / "README.md").is_file()
