"""What the how-to pages on patching, circuits, evaluation, similarity and the lenses, interop, interventions and
recoding, probes and erasure, and training state that a committed file can check: every number they quote from a
committed run, recomputed from its CSV (experiments/circuits/results, experiments/graphs/results); the figures that
follow from the code (parameter counts, token counts, tolerances, memory arithmetic, option defaults); and the pages'
form (no paragraph or bullet over 150 words, no dates or issue numbers, no numbers of a retired recipe)."""

import dataclasses
import inspect
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
HOWTO = ROOT / "docs" / "howto"
PAGES = ["patching", "circuits", "evaluation", "similarity-lens", "interop", "interventions-recoding",
         "probes-erasure", "training"]


def page(name: str) -> str:
    """The page's text with every run of whitespace one space, so a quoted phrase may wrap across lines."""
    return " ".join((HOWTO / f"{name}.md").read_text().split())


def span(values, scale: float = 1.0, fmt: str = ".2f") -> str:
    """``lo-hi`` of ``values`` (times ``scale``) as a page writes a range, ``lo`` alone where the two read the same."""
    lo, hi = f"{scale * min(values):{fmt}}", f"{scale * max(values):{fmt}}"
    return lo if lo == hi else f"{lo}-{hi}"


@pytest.mark.parametrize("name", PAGES)
def test_the_page_has_no_dates_issues_or_retired_recipe(name):
    """(Paragraph length: tests/test_docs_pages.py, for every page.)"""
    markdown = (HOWTO / f"{name}.md").read_text()
    prose = re.sub(r"```.*?```", " ", markdown, flags=re.DOTALL)
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", prose), f"{name}.md dates a measurement"
    assert not re.search(r"(?<![\w/.])#\d+\b|\b[Ii]ssues? \d+", prose), f"{name}.md names an issue number"
    for retired in ("6ca6db4f0635", "trained key", "Measured on the demo's models", "were not rerun", "982 edges",
                    "1,350 steps", "9 heads of 8"):
        assert retired not in markdown, f"{name}.md: {retired!r}"


# ------------------------------------------------------------------------------------ circuits: committed runs
CIRCUITS = ROOT / "experiments" / "circuits" / "results"


def test_the_circuit_numbers_are_the_committed_run():
    """The circuits page's EAP agreement and faithfulness on the demo's models, from experiments/circuits/results."""
    text = page("circuits")
    agree = pd.read_csv(CIRCUITS / "agreement.csv")
    curve = pd.read_csv(CIRCUITS / "faithfulness.csv")
    assert sorted(agree.seed.unique()) == [0, 1, 2] and (agree.n_pairs == 16).all()
    assert "seeds 0, 1 and 2, with 16 IOI pairs (pair seed 0)" in text
    (edges,) = agree.n_edges.unique()
    sp = {v: span(g.spearman) for v, g in agree.groupby("variant")}
    assert (f"exact patching over all {edges} edges is {sp['learned']} for learned, {sp['canonical']} for canonical "
            f"and {sp['gf2']} for gf2 ({span(agree.spearman_abs)} on magnitudes; "
            f"{span(agree.top_decile_overlap, 100, '.0f')}% of the exact top decile shared)") in text

    def at(k):
        rows = curve[curve.k == k].groupby("variant").recovered
        return {v: span(g) for v, g in rows}

    k24, k64 = at(24), at(64)
    assert (f"The top 24 edges recover {k24['learned']} of the gap for learned, {k24['canonical']} for canonical and "
            f"{k24['gf2']} for gf2; the top 64 edges {k64['learned']}, {k64['canonical']} and {k64['gf2']}") in text
    assert f"the top 128 at least {curve[curve.k == 128].recovered.min():.2f} in every model" in text
    assert f"(areas {span(curve.groupby(['seed', 'variant']).area.first())})" in text
    # the ranges overlap between the variants, which is why the page draws no difference from them
    at24 = curve[curve.k == 24].groupby("variant").recovered
    assert at24.min().max() < at24.max().min() and "They overlap between the variants" in text


GRAPHS = ROOT / "experiments" / "graphs" / "results"


def test_the_attribution_graph_table_is_the_committed_run():
    text = page("circuits")
    scores = pd.read_csv(GRAPHS / "scores.csv")
    assert sorted(scores.seed.unique()) == [0, 1, 2] and "seeds 0, 1, 2, two IOI and two induction prompts" in text
    names = {"ioi": "IOI", "induction": "induction"}
    for (task, variant), g in scores.groupby(["task", "variant"]):
        assert len(g) == 6 and "mean and range over the 6 graphs of each cell" in text
        cells = [f"{g[c].mean():.2f} ({span(g[c])})" for c in ("replacement", "completeness")]
        cells.append(" / ".join(f"{g[c].mean():.2f}" for c in ("direct_input", "direct_feature", "direct_error")))
        row = f"| {names[task]}, {variant} | " + " | ".join(cells) + " |"
        assert row in text, row
    means = scores.groupby(["task", "variant"]).direct_input.mean().unstack()
    fixed, learned = means[["canonical", "gf2"]].to_numpy().ravel(), means["learned"].to_numpy()
    assert fixed.min() > learned.max()
    assert f"than the learned table's ({span(fixed)} against {span(learned)})" in text


def test_the_input_influence_by_code_column_is_the_committed_run():
    from fixedid.train import TrainConfig

    text = page("circuits")
    bits = pd.read_csv(GRAPHS / "bits.csv")
    bits = bits[bits.variant != "learned"]
    n_bits = TrainConfig.load("tiny").model["n_bits"]
    assert sorted(bits.code_column.unique()) == list(range(n_bits)) and n_bits == 9
    per_variant = bits.groupby(["variant", "code_column"]).share.mean()
    graphs = bits.groupby(["variant", "seed", "task", "prompt"]).ngroups // 2
    assert (f"spreads over all nine code columns: each column has {span(bits.share, 100, '.0f')}% of it in every graph "
            f"({span(per_variant, 100, '.0f')}% averaged over a variant's {graphs} graphs; uniform is "
            f"{100 / n_bits:.0f}%)") in text


def test_the_demo_recipes_rope_bases_are_the_ones_named():
    from fixedid.train import TrainConfig

    assert set(TrainConfig.load("tiny").model["rope_head_thetas"]) == {30, 10000}
    assert "the demo recipe's heads use two (bases 30 and 10,000)" in page("circuits")


# ------------------------------------------------------------------------------------ figures the code fixes
def test_the_width_and_depth_matching_figures():
    from fixedid.config import MATCH_TOLERANCE, ConfigError, trainable_params
    from fixedid.train import TrainConfig
    from fixedid.train.prepare import vocab_size_of

    text = page("training")
    assert MATCH_TOLERANCE == 0.005 and "within 0.5% of the learned variant's trainable count" in text

    def pct(x):
        return f"{100 * x:+.3f}%"

    def configs(name):
        cfg = TrainConfig.load(name)
        vocab = 49_152 if name == "paper-1.7b" else vocab_size_of(cfg.data)  # the study's hub tokenizer: 49,152 ids
        return cfg.model_config("learned", vocab), cfg.model_config("canonical", vocab)

    width = {}
    for name in ("tiny", "tiny-bpe", "small", "paper-1.7b"):
        learned, fixed = configs(name)
        target = trainable_params(learned)
        matched = dataclasses.replace(fixed, match_params="width")
        width[name] = (fixed.d_ff, matched.d_ff, trainable_params(matched), target)
        assert abs(trainable_params(matched) - target) <= MATCH_TOLERANCE * target, name
    d0, d1, got, target = width["paper-1.7b"]
    assert (f"`paper-1.7b`: d_ff {d0:,} -> {d1:,}, {got:,} trainable against {target:,}, "
            f"{pct((got - target) / target)}") in text
    d0, d1, got, target = width["tiny"]
    assert f"`tiny`: d_ff {d0} -> {d1}, {pct((got - target) / target)}" in text
    near = {}
    for name in ("tiny", "small", "paper-1.7b"):
        with pytest.raises(ConfigError) as e:
            dataclasses.replace(configs(name)[1], match_params="depth")
        near[name] = " / ".join(re.findall(r"\(([+-]\d+\.\d\d%)\)", str(e.value)))
    assert (f"(tiny {near['tiny']}, small {near['small']}, paper-1.7b {near['paper-1.7b']}: "
            f"one layer is") in text
    learned, fixed = configs("paper-1.7b")
    layer = trainable_params(dataclasses.replace(fixed, n_layers=fixed.n_layers + 1)) - trainable_params(fixed)
    gap = trainable_params(learned) - trainable_params(fixed)
    assert f"one layer is {layer:,} parameters against a gap of {gap:,}" in text
    assert (f"({trainable_params(fixed):,} trainable parameters for canonical and gf2, {trainable_params(learned):,} "
            "for learned)") in text


def test_the_tiny_vocabulary_and_its_code_bits():
    from fixedid.model import constant_code_bits
    from fixedid.train import TrainConfig
    from fixedid.train.prepare import vocab_size_of

    tiny, bpe = TrainConfig.load("tiny"), TrainConfig.load("tiny-bpe")
    vocab, bpe_vocab = vocab_size_of(tiny.data), vocab_size_of(bpe.data)
    n_bits = tiny.model["n_bits"]
    wide = {k: v for k, v in tiny.model.items() if k != "rope_head_thetas"}
    wide = TrainConfig(model={**wide, "n_bits": 16, "d_model": 64, "n_heads": 8}, data=tiny.data, train=tiny.train)
    constant = len(constant_code_bits(wide.model_config("canonical", vocab)))
    text = page("interventions-recoding")
    assert f"the tiny recipe's {n_bits}-bit code is matched to its {vocab} tokens" in text
    assert f"a 16-bit code of the same vocabulary leaves {constant} bits constant" in text
    assert f"({vocab} tokens under a 16-bit code: the top {constant} canonical bits)" in text
    assert (f"(tiny: {n_bits} bits for {vocab} tokens, tiny-bpe: {bpe.model['n_bits']} for {bpe_vocab}, the study's "
            "49,152 tokens: 16)") in text
    assert f"(a 16-bit code for tiny's {vocab} tokens leaves {constant})" in page("training")
    # "a flip of a low canonical bit ... onto another real token for nearly every id"
    ids = np.arange(vocab)
    assert all(((ids ^ (1 << b)) < vocab).mean() > 0.95 for b in range(4))


def test_the_lm_eval_figures():
    from analysis.evaluation.lmeval import STUDY_FIGURES
    from analysis.evaluation.lmeval_model import SCORE_CHUNK, FixedIdEvalLM
    from fixedid.data.lexicon import POOL

    text = page("evaluation")
    figures = {k: f"{v:.2f}" for k, (_, v) in STUDY_FIGURES.items()}
    assert (f"HellaSwag acc_norm {figures['hellaswag']}, PIQA acc {figures['piqa']}, LAMBADA acc "
            f"{figures['lambada_openai']}, 0-shot") in text
    default = inspect.signature(FixedIdEvalLM.__init__).parameters["max_batch_tokens"].default
    assert f"`max_batch_tokens` tokens (default {default:,};" in text
    assert f"unembedded, {SCORE_CHUNK:,} at a time" in text
    windows, context, vocab = 32, 2048, 49_152
    assert (f"the full float32 logits of {windows} windows of {context:,} tokens would be "
            f"{windows * context * vocab * 4 / 1e9:.1f} GB at the study's vocabulary of {vocab:,}") in text
    assert f"copying of the list pool's {len({w for w, _, _ in POOL})} words" in text


def test_the_cka_memory_arithmetic():
    from analysis.readouts.activations import default_hooks
    from fixedid.config import ModelConfig

    cfg = ModelConfig.preset("paper-1.7b")
    hooks = len(default_hooks(SimpleNamespace(cfg=cfg)))
    tokens = 8192
    gb = 2 * hooks * tokens * cfg.d_model * 4 / 1e9
    assert (f"at the 1.7B shape that is 2 x {hooks} hook points x {tokens:,} tokens x {cfg.d_model:,} x 4 B = "
            f"{gb:.1f} GB") in page("similarity-lens")


def test_the_code_inference_tolerances_and_the_small_recipes_budget():
    import torch

    from analysis.interop.codeinfer import default_rtol
    from fixedid.train import TrainConfig

    text = page("interop")
    tol = {d: default_rtol(d) for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16)}
    assert tol[torch.float32] == tol[torch.float64]
    assert (f"{tol[torch.float32]:.2e} for float32 and float64, {tol[torch.float16]:.1e} for float16, "
            f"{tol[torch.bfloat16]:.1e} for bfloat16").replace("e-0", "e-") in text
    assert f"bf16: {tol[torch.bfloat16]:.1e}".replace("e-0", "e-") in text
    small = TrainConfig.load("small")
    context = small.model_config("learned", small.data.vocab_size).context
    assert f"({small.train.steps:,} steps of {small.train.batch_size} x {context} tokens)" in text


def test_the_split_qkv_bridge_computes_the_models_logits(model):
    """The interop page: the split-q/k/v bridge's logits equal the model's to float32 rounding (within 1e-5)."""
    import torch

    from analysis.interop.split_bridge import to_split_qkv_bridge

    tokens = torch.randint(0, model.cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (to_split_qkv_bridge(model).eval()(tokens) - model(tokens)).abs().max().item()
    assert diff < 1e-5
    assert "and so do the split-q/k/v bridge's logits" in page("interop")


#: ``(page, verb, parameter, the default as the page writes it)``: the option defaults the pages quote.
DEFAULTS = [
    ("patching", "patching", "n_pairs", "(`--n-pairs`, default 16;"),
    ("patching", "context", "ks", "(`--ks`, default 1,2,4,8,16,32)"),
    ("circuits", "circuit", "k", "`--k` defaults to 32."),
    ("similarity-lens", "similarity", "tokens", "`--tokens`, default 8,192,"),
    ("similarity-lens", "similarity", "boot", "(`--boot`, default 1,000 draws)"),
    ("similarity-lens", "similarity", "null", "`--null` times (default 20)"),
    ("similarity-lens", "lens", "lens_steps", "300 Adam steps of 16 windows, `--lens-steps`"),
    ("similarity-lens", "unembed", "tokens", "`--tokens` (default 65,536)"),
    ("similarity-lens", "unembed", "k", "`--k` nearest neighbours (default 10)"),
    ("similarity-lens", "unembed", "null_draws", "(`--null-draws`, default 100;"),
    ("interventions-recoding", "recoding", "draws", "`--draws` random maps per k (default 4)"),
    ("interventions-recoding", "recoding", "tokens", "`--tokens N` (default 32,768)"),
    ("probes-erasure", "probes", "tokens", "`--tokens`, default 16,384)"),
    ("probes-erasure", "probes", "top_k", "`--top-k` (32)"),
    ("probes-erasure", "erasure", "placebo_draws", "`--draws` of them, default 3)"),
    ("probes-erasure", "erasure", "test_fraction", "(`--test-fraction`, default 0.5)"),
]


@pytest.mark.parametrize("name, verb, param, quoted", DEFAULTS, ids=[f"{d[1]}-{d[2]}" for d in DEFAULTS])
def test_the_option_defaults_the_pages_quote(name, verb, param, quoted):
    from analysis.cli.main import command_specs

    default = {p.name: p.default for p in command_specs()[verb].params}[param]
    shown = ",".join(map(str, default)) if isinstance(default, tuple) else (
        f"{default:,}" if isinstance(default, int) else str(default))
    assert shown in quoted and quoted in page(name), (verb, param, default)


def test_the_transvection_walk_lengths_and_the_tuned_lens_budget():
    from analysis.causal.recoding import DEFAULT_KS
    from analysis.readouts.tuned_lens import fit_tuned_lens

    ks = ", ".join(map(str, DEFAULT_KS["transvection"]))
    assert f"k = {ks} (`--ks`)" in page("interventions-recoding")
    sig = inspect.signature(fit_tuned_lens).parameters
    assert f"{sig['steps'].default} Adam steps of {sig['batch'].default} windows" in page("similarity-lens")
