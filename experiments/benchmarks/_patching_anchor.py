"""Shared by the benchmark scripts: a FLOP model of the tiny recipe's forward, the naive per-unit patching loop on the
same model, and pairs that differ early.

FLOP model: per position and block, ``2 x`` the block's weights plus ``4 x d_model x`` the positions attended to;
``2 x d_model x vocab`` per unembedded position. The minimal work of a ``resid_pre`` patch at (layer ``l``,
position ``q``) is layers ``>= l`` at positions ``>= q`` and the final position's unembedding; a unit whose clean
and corrupted activations are equal needs nothing; the clean and corrupted runs count once on both sides.
"""

from __future__ import annotations

import torch

from analysis import activation_patching
from analysis.engine.metrics import logit_diff
from analysis.pairs import PairBatch

from _timing import median_ratio


class Flops:
    def __init__(self, cfg):
        d, dh = cfg.d_model, cfg.d_head
        attn = 2 * d * dh * (2 * cfg.n_heads + 2 * cfg.kv_heads)
        mlp = 2 * d * cfg.d_ff * (3 if cfg.mlp == "swiglu" else 2)
        self.dense, self.d, self.L, self.unembed = attn + mlp, d, cfg.n_layers, 2 * d * cfg.vocab_size

    def run(self, rows, T, q=0, layer=0, last_only=True):
        """FLOPs of ``rows`` sequences of length ``T`` through layers ``layer..`` at positions ``q..``."""
        per_layer = (T - q) * self.dense + sum(4 * self.d * (t + 1) for t in range(q, T))
        return rows * ((self.L - layer) * per_layer + self.unembed * (1 if last_only else T - q))


def naive_patching(model, batch):
    """One hooked forward per (layer, position): the clean resid_pre written into the corrupted run."""
    with torch.no_grad():
        _, cache = model.run_with_cache(batch.clean, names_filter=lambda nm: nm.endswith("hook_resid_pre"))
        model(batch.corrupt)
        for layer in range(model.cfg.n_layers):
            name = f"blocks.{layer}.hook_resid_pre"
            for q in range(batch.n_pos):
                def patch(act, hook, q=q, name=name):
                    act = act.clone()
                    act[:, q] = cache[name][:, q]
                    return act
                logits = model.run_with_hooks(batch.corrupt, fwd_hooks=[(name, patch)])
                logit_diff(logits, batch.answer, batch.wrong)


def patching_bound(model, batch) -> tuple[float, int]:
    """(naive FLOPs / minimal FLOPs, first differing position) of a resid_pre sweep."""
    fl, L = Flops(model.cfg), model.cfg.n_layers
    n, T = batch.clean.shape
    diff = (batch.clean != batch.corrupt).any(0)
    first = int(diff.nonzero()[0, 0])
    # the residual stream entering layer 0 is the input: it differs where the tokens differ; after a block, at
    # every position from the first difference on
    live = [(layer, q) for layer in range(L) for q in range(first, T) if layer > 0 or bool(diff[q])]
    shared = 2 * fl.run(n, T, last_only=False)
    naive_f = shared + L * T * fl.run(n, T, last_only=False)
    need = shared + sum(fl.run(n, T, q=q, layer=layer) for layer, q in live)
    return naive_f / need, first


def patching_vs_loop(model, batch, rounds):
    """(speed-up over the same-model loop, timings, FLOP bound, first differing position)."""
    fns = {"ours": lambda: activation_patching(model, batch, site="resid_pre", metric="logit_diff"),
           "naive": lambda: naive_patching(model, batch)}
    ratio, t = median_ratio(fns, "naive", "ours", rounds=rounds, warmup=1)
    bound, first = patching_bound(model, batch)
    return ratio, t, bound, first


def early_pairs(model, n, T=8, at=3, seed=0):
    """``n`` random-id pairs of ``T`` tokens whose prompts differ at position ``at`` only."""
    g = torch.Generator().manual_seed(seed)
    V = model.cfg.vocab_size
    clean = torch.randint(0, V, (n, T), generator=g)
    corrupt = clean.clone()
    corrupt[:, at] = (clean[:, at] + 1 + torch.randint(0, V - 1, (n,), generator=g)) % V
    answer = torch.randint(0, V, (n,), generator=g)
    return PairBatch(clean, corrupt, answer, (answer + 1) % V)
