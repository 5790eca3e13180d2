"""Activation patching speed: the same resid_pre sweep through TransformerLens, through a one-forward-per-unit loop
on the same model, and through analysis.causal.patching.

A tiny-preset model (trained, with --ckpt; else freshly initialised with a BPE tokenizer of the built-in
language), 8 IOI pairs of the built-in language, denoising, mean logit difference. TL's
``get_act_patch_resid_pre`` runs on the model's TransformerBridge; ours on the model. Runs are interleaved; the
printed ratio is the median over rounds of TL time / our time, with the max difference between the two results.

Then, because TL's bridge carries its own overhead (which flatters that ratio), every built-in task and 8-token
pairs that differ at position 3 against the honest anchor: one hooked forward per (layer, position) on the same
model, with the FLOP bound of each sweep (see ``_patching_anchor.py``) and the share of it reached (target 75%).

Usage: python experiments/benchmarks/patching.py [--ckpt runs/tiny/canonical] [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
import transformer_lens.patching as tlp

sys.path.insert(0, str(Path(__file__).parent))
from _patching_anchor import early_pairs, patching_vs_loop  # noqa: E402
from _timing import machine_line, median_ratio  # noqa: E402

from analysis import activation_patching, load, to_tensor  # noqa: E402
from analysis.engine.metrics import logit_diff  # noqa: E402
from analysis.tasks import task_pairs  # noqa: E402
from fixedid import FixedIdLM, ModelConfig, save_checkpoint  # noqa: E402
from fixedid.data import SyntheticLanguage, train_bpe  # noqa: E402

tlp.tqdm = lambda it, **kw: it  # TL prints a progress bar per sweep otherwise


def fresh_tiny(workdir: Path):
    tok = train_bpe(SyntheticLanguage(0).documents(3000), 2048)
    model = FixedIdLM(ModelConfig.preset("toy", vocab_size=tok.get_vocab_size(with_added_tokens=True)))
    return load(save_checkpoint(model, workdir / "tiny", tokenizer=tok))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt", help="a trained tiny checkpoint (default: a fresh tiny-preset model)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--pairs", type=int, default=8, help="pairs per sweep (default 8)")
    args = p.parse_args(argv)
    print(machine_line(), flush=True)
    with tempfile.TemporaryDirectory() as work:
        model = load(args.ckpt) if args.ckpt else fresh_tiny(Path(work))
        batch = task_pairs(model, "ioi", args.pairs, seed=0)
        bridge = model.to_transformer_lens().eval()

        def metric(logits):
            return logit_diff(logits, batch.answer, batch.wrong).mean()

        with torch.no_grad():
            _, clean_cache = bridge.run_with_cache(batch.clean)
        results = {}

        def tl():
            with torch.no_grad():
                results["tl"] = tlp.get_act_patch_resid_pre(bridge, batch.corrupt, clean_cache, metric)

        def ours():
            results["ours"] = to_tensor(activation_patching(model, batch, site="resid_pre", metric="logit_diff"))

        ratio, t = median_ratio({"tl": tl, "ours": ours}, "tl", "ours", rounds=args.rounds, warmup=1)
    diff = (results["tl"] - results["ours"]).abs().max().item()
    print(f"toy preset ({model.cfg.n_layers} layers), {len(batch)} IOI pairs of {batch.n_pos} tokens, resid_pre sweep "
          f"[{model.cfg.n_layers} x {batch.n_pos}]")
    print(f"TransformerLens get_act_patch_resid_pre (bridge): {t['tl'] * 1e3:.1f} ms; analysis.causal.patching: "
          f"{t['ours'] * 1e3:.1f} ms")
    print(f"speed-up (TL time / ours, median of {args.rounds} interleaved rounds): {ratio:.1f}x; "
          f"max |difference| {diff:.2e}")
    print(f"against one hooked forward per (layer, position) on the same model, {args.pairs} pairs each:")
    batches = [(t, task_pairs(model, t, args.pairs, seed=0)) for t in ("ioi", "agreement", "facts", "induction")]
    batches.append(("random ids, 8 tokens", early_pairs(model, args.pairs)))
    for label, b in batches:
        r, t, bound, first = patching_vs_loop(model, b, args.rounds)
        print(f"  {label:22s} {model.cfg.n_layers}x{b.n_pos:<3d} differ at {first:2d}: ours {t['ours'] * 1e3:6.1f} ms, "
              f"loop {t['naive'] * 1e3:6.1f} ms, speed-up {r:5.2f}x, FLOP bound {bound:5.2f}x ({r / bound:.0%} of it)")


if __name__ == "__main__":
    main()
