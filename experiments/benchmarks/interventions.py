"""Interventions and patching on the shared engine against the same model run the naive way, with FLOP bounds.

Three sweeps, each timed side by side with its naive anchor on one model (the demo's shape, untrained: the speed does
not depend on the weights), and each printed with its FLOP bound - the FLOPs of the naive loop over the FLOPs of the
work the sweep cannot avoid - and the share of that bound the measured speed-up reaches (target >= 75%):

1. the all-bits flip sweep (``input_intervention(kind="bitflip")``) against one hooked forward per bit: on corpus
   windows with the flip at every position (nothing can be skipped: bound 1x), and on task prompts with the flip at
   one position ``p`` (positions before ``p`` cannot change, and the metric reads the final position);
2. the bit x layer maps (``bit_layer_map``) against one hooked forward per (bit, layer, position);
3. activation patching of ``resid_pre`` against one hooked forward per (layer, position) on the same model, for each
   built-in task and for 8-token pairs that differ at position 3.

FLOP model: per position and block, ``2 x`` the block's weights plus ``4 x d_model x`` the positions attended to;
``2 x d_model x vocab`` per unembedded position. The minimal work of a patch at (layer ``l``, position ``q``) is
layers ``>= l`` at positions ``>= q`` and one unembedded position; a unit whose source equals its base, nothing;
the runs that every method needs (the clean and corrupted caches, the bit-flipped runs) count once on both sides.

Usage: python experiments/benchmarks/interventions.py [--rounds 5] [--pairs 16]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _models import untrained_tiny  # noqa: E402
from _patching_anchor import Flops, early_pairs, patching_vs_loop  # noqa: E402
from _timing import machine_line, median_ratio  # noqa: E402

from analysis.causal.bitmap import bit_layer_map  # noqa: E402
from analysis.corpus import corpus_tokens  # noqa: E402
from analysis.causal.interventions import input_intervention  # noqa: E402
from analysis.engine.metrics import logit_diff  # noqa: E402
from analysis.tasks import task_pairs  # noqa: E402


def flip_hook(model, bit, pos):
    cols = model.embed.widen(torch.nn.functional.one_hot(torch.tensor(bit), model.cfg.n_bits).float()).bool()
    sl = slice(None) if pos is None else slice(pos, pos + 1)

    def hook(act, hook):
        act = act.clone()
        act[:, sl, cols] = -act[:, sl, cols]
        return act
    return hook


def report(name, ratio, bound, t):
    print(f"  {name:34s} ours {t['ours'] * 1e3:8.1f} ms  naive {t['naive'] * 1e3:8.1f} ms  speed-up {ratio:6.2f}x  "
          f"FLOP bound {bound:6.2f}x  share of bound {ratio / bound:6.0%}")


def flip_sweeps(model, fl, rounds, n_pairs):
    B, L = model.cfg.n_bits, model.cfg.n_layers
    x = corpus_tokens(model, tokens=8192)
    n, T = x.shape

    @torch.no_grad()
    def naive_corpus():
        base = model(x)
        for b in range(B):
            logits = model.run_with_hooks(x, fwd_hooks=[("hook_embed", flip_hook(model, b, None))])
            torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), x[:, 1:], reduction="none").mean(1)
            (base.log_softmax(-1).exp() * (base.log_softmax(-1) - logits.log_softmax(-1))).sum(-1).mean(1)
    fns = {"ours": lambda: input_intervention(model, "bitflip", x), "naive": naive_corpus}
    ratio, t = median_ratio(fns, "naive", "ours", rounds=rounds, warmup=1)
    report(f"flip every position ({n}x{T} tokens)", ratio, 1.0, t)

    batch = task_pairs(model, "ioi", n_pairs, seed=0)
    T = batch.n_pos
    p = T // 2

    @torch.no_grad()
    def naive_pairs():
        model(batch.clean)
        for b in range(B):
            logits = model.run_with_hooks(batch.clean, fwd_hooks=[("hook_embed", flip_hook(model, b, p))])
            logit_diff(logits, batch.answer, batch.wrong)
    fns = {"ours": lambda: input_intervention(model, "bitflip", batch, pos=p), "naive": naive_pairs}
    ratio, t = median_ratio(fns, "naive", "ours", rounds=rounds, warmup=1)
    nb = len(batch)
    bound = (fl.run(nb, T, last_only=False) * (B + 1)) / (fl.run(nb, T, last_only=False) + B * fl.run(nb, T, q=p))
    report(f"flip at position {p} of {T} ({nb} ioi prompts)", ratio, bound, t)
    del L


def bit_maps(model, fl, rounds, n_pairs):
    B, L = model.cfg.n_bits, model.cfg.n_layers
    batch = task_pairs(model, "ioi", n_pairs, seed=0)
    n, T = batch.clean.shape
    p = T // 2

    @torch.no_grad()
    def naive():
        _, cache = model.run_with_cache(batch.clean, names_filter=lambda nm: nm.endswith("hook_resid_pre"))
        clean_last = model(batch.clean)[:, -1]
        for b in range(B):
            for layer in range(L):
                name = f"blocks.{layer}.hook_resid_pre"
                for q in range(T):
                    def patch(act, hook, q=q, name=name):
                        act = act.clone()
                        act[:, q] = cache[name][:, q]
                        return act
                    logits = model.run_with_hooks(batch.clean, fwd_hooks=[("hook_embed", flip_hook(model, b, p)),
                                                                          (name, patch)])
                    lp, lq = clean_last.log_softmax(-1), logits[:, -1].log_softmax(-1)
                    (lp.exp() * (lp - lq)).sum(-1)
    fns = {"ours": lambda: bit_layer_map(model, batch, pos=p), "naive": naive}
    ratio, t = median_ratio(fns, "naive", "ours", rounds=rounds, warmup=1)
    shared = fl.run(n, T, last_only=False) * (1 + B)  # the clean run and the bit-flipped runs
    naive_f = fl.run(n, T, last_only=False) + B * L * T * fl.run(n, T, last_only=False)
    need = shared + B * sum(fl.run(n, T, q=q, layer=layer) for layer in range(L) for q in range(p, T))
    report(f"bit x layer maps ({B} bits x {L} layers x {T} pos)", ratio, naive_f / need, t)


def patching(model, rounds, batches):
    for label, batch in batches:
        ratio, t, bound, first = patching_vs_loop(model, batch, rounds)
        report(f"patching {label} ({model.cfg.n_layers}x{batch.n_pos}, differ at {first})", ratio, bound, t)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--pairs", type=int, default=16, help="prompts per task (default 16)")
    args = p.parse_args(argv)
    print(machine_line(), flush=True)
    torch.manual_seed(0)
    warnings.simplefilter("ignore")  # an untrained model: the maps warn that flips barely move its output
    model = untrained_tiny("canonical")
    cfg = model.cfg
    fl = Flops(model.cfg)
    print(f"model: tiny recipe ({cfg.n_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads, vocab "
          f"{cfg.vocab_size}), canonical interface; median of {args.rounds} interleaved rounds")
    print("1. all-bits flip sweep vs one hooked forward per bit")
    flip_sweeps(model, fl, args.rounds, args.pairs)
    print("2. bit x layer maps vs one hooked forward per (bit, layer, position)")
    bit_maps(model, fl, args.rounds, args.pairs)
    print("3. activation patching (resid_pre) vs one hooked forward per (layer, position), same model")
    batches = [(t, task_pairs(model, t, args.pairs, seed=0)) for t in ("ioi", "agreement", "facts", "induction")]
    batches.append(("early (random ids)", early_pairs(model, args.pairs)))
    patching(model, args.rounds, batches)


if __name__ == "__main__":
    main()
