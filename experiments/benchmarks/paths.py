"""Path patching speed: batched senders (analysis.causal.paths) against a naive per-sender hooked loop on the same
model, each with its FLOP bound, and against TransformerLens's direct-path patching on the split-qkv bridge.

One model of the demo's tiny recipe (untrained: the speed does not depend on the weights), IOI pairs of the built-in
language, denoising, logit difference. Sweeps, each timed side by side (interleaved rounds, median of per-round
ratios):

1. every head as sender into the logits: ours runs no block at all (one final norm and unembedding of the final
   position per chunk of senders); the loop runs one full hooked forward per head (the sender's delta added to the
   last block's output, which only the final norm reads);
2. every head of the earlier layers as sender into the queries of every head of the last layer: ours runs the last
   layer once per chunk of senders from the first differing position; the loop, one full hooked forward per sender
   with the receivers' queries recomputed from the patched stream;
3. every head as sender into each later head's query, one receiver at a time, against TransformerLens 4.3's
   ``get_act_patch_direct_path_all_sources`` on the split-qkv bridge (one forward per source and destination).

FLOP model (``_patching_anchor.Flops``): per position and block, ``2 x`` the block's weights plus ``4 x d_model x`` the
positions attended to; ``2 x d_model x vocab`` per unembedded position. The minimal work of a path into the logits is
one unembedded position per pair; into a layer's queries, that layer from the first differing position on and one
unembedded position (plus the receivers' own query projections, counted on both sides); the clean and corrupted
caches count once on both sides. Printed: ratios only (speed-up, FLOP bound, share of the bound reached) and the
largest difference between the two methods' results.

Usage: python experiments/benchmarks/paths.py [--rounds 5] [--pairs 8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import transformer_lens.patching as tlp

sys.path.insert(0, str(Path(__file__).parent))
from _models import untrained_tiny  # noqa: E402
from _patching_anchor import Flops  # noqa: E402
from _timing import machine_line, median_ratio  # noqa: E402

from analysis.causal.paths import path_patching  # noqa: E402
from analysis.engine.metrics import logit_diff  # noqa: E402
from analysis.interop.split_bridge import to_split_qkv_bridge  # noqa: E402
from analysis.tasks import task_pairs  # noqa: E402

tlp.tqdm = lambda it, **kw: it  # TL prints a progress bar per sweep otherwise


def head_write(model, cache, layer, h):
    dh = model.cfg.d_head
    W = model.blocks[layer].attn.o_proj.weight[:, h * dh:(h + 1) * dh]
    return cache[f"blocks.{layer}.attn.hook_z"][:, :, h] @ W.T


def caches(model, batch):
    z = lambda nm: nm.endswith("hook_z")  # noqa: E731
    _, clean = model.run_with_cache(batch.clean, names_filter=z)
    _, corrupt = model.run_with_cache(batch.corrupt, names_filter=z)
    return clean, corrupt


def naive_into_logits(model, batch):
    """One hooked forward of the corrupted prompt per head, its clean-minus-corrupt write added to the final stream."""
    out = []
    with torch.no_grad():
        clean, corrupt = caches(model, batch)
        last = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
        for layer in range(model.cfg.n_layers):
            for h in range(model.cfg.n_heads):
                delta = head_write(model, clean, layer, h) - head_write(model, corrupt, layer, h)
                logits = model.run_with_hooks(batch.corrupt, fwd_hooks=[(last, lambda act, hook: act + delta)])
                out.append(logit_diff(logits, batch.answer, batch.wrong).mean())
    return torch.stack(out)


def naive_into_queries(model, batch, layer):
    """One hooked forward per head of layers < ``layer``: every head of ``layer`` computes its query from
    ``ln1(x + delta)``, everything else from the unpatched stream."""
    out, attn, ln1 = [], model.blocks[layer].attn, model.blocks[layer].ln1
    with torch.no_grad():
        clean, corrupt = caches(model, batch)
        for sl in range(layer):
            for sh in range(model.cfg.n_heads):
                delta = head_write(model, clean, sl, sh) - head_write(model, corrupt, sl, sh)
                seen = {}

                def keep(act, hook):
                    seen["x"] = act

                def queries(act, hook, delta=delta):
                    q = attn.q_proj(ln1(seen["x"] + delta))
                    return q.view(act.shape)

                logits = model.run_with_hooks(batch.corrupt, fwd_hooks=[
                    (f"blocks.{layer}.hook_resid_pre", keep), (f"blocks.{layer}.attn.hook_q", queries)])
                out.append(logit_diff(logits, batch.answer, batch.wrong).mean())
    return torch.stack(out)


def bounds(model, batch, layer=None):
    """(naive FLOPs / minimal FLOPs) of every head into the logits (``layer`` None) or into ``layer``'s queries."""
    fl, cfg = Flops(model.cfg), model.cfg
    n, T = batch.clean.shape
    first = int((batch.clean != batch.corrupt).any(0).nonzero()[0, 0])
    shared = 2 * fl.run(n, T, last_only=False)
    if layer is None:
        S = cfg.n_layers * cfg.n_heads
        return (shared + S * fl.run(n, T, last_only=False)) / (shared + S * n * fl.unembed)
    S = layer * cfg.n_heads
    extra = n * 2 * cfg.d_model * cfg.d_head * cfg.n_heads  # the receivers' patched queries, per position
    naive = shared + S * (fl.run(n, T, last_only=False) + T * extra)
    need = shared + S * (fl.run(n, T, q=first, layer=layer) + (T - first) * extra)
    return naive / need


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--pairs", type=int, default=8, help="pairs per sweep (default 8)")
    args = p.parse_args(argv)
    print(machine_line(), flush=True)
    model = untrained_tiny("canonical")
    batch = task_pairs(model, "ioi", args.pairs, seed=0)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    first = int((batch.clean != batch.corrupt).any(0).nonzero()[0, 0])
    print(f"tiny recipe ({L} layers x {H} heads, d_model {model.cfg.d_model}, vocab {model.cfg.vocab_size}), "
          f"{len(batch)} IOI pairs of {batch.n_pos} tokens differing first at position {first}:")
    res = {}

    def report(name, ratio, bound, a, b):
        diff = float((res[a].double() - res[b].double()).abs().max())
        print(f"  {name:44s} speed-up {ratio:6.1f}x  FLOP bound {bound:6.1f}x  share of bound {ratio / bound:5.0%}  "
              f"max |difference| {diff:.1e}")

    def ours_logits():
        res["ours"] = torch.tensor(path_patching(model, batch, "heads", "logits", metric="logit_diff").value.to_numpy())

    def loop_logits():
        res["naive"] = naive_into_logits(model, batch)

    ratio, _ = median_ratio({"ours": ours_logits, "naive": loop_logits}, "naive", "ours", rounds=args.rounds,
                            warmup=1)
    report(f"every head ({L * H}) -> logits", ratio, bounds(model, batch), "ours", "naive")

    last = L - 1

    def ours_queries():
        res["ours"] = torch.tensor(path_patching(model, batch, "heads", f"L{last}H*.q", metric="logit_diff").value.to_numpy())

    def loop_queries():
        res["naive"] = naive_into_queries(model, batch, last)

    ratio, _ = median_ratio({"ours": ours_queries, "naive": loop_queries}, "naive", "ours", rounds=args.rounds,
                            warmup=1)
    report(f"heads of L0-L{last - 1} ({last * H}) -> L{last}H*.q", ratio, bounds(model, batch, last), "ours",
           "naive")

    against_transformerlens(model, batch, max(3, args.rounds // 2))


def against_transformerlens(model, batch, rounds: int) -> None:
    """Every head into each later head's query, one receiver at a time: TransformerLens's direct-path patching on
    the split-qkv bridge against ours, one line."""
    L, H, res = model.cfg.n_layers, model.cfg.n_heads, {}
    bridge = to_split_qkv_bridge(model).eval()
    with torch.no_grad():
        _, clean = bridge.run_with_cache(batch.clean)
        _, corrupt = bridge.run_with_cache(batch.corrupt)

    def metric(logits):
        return logit_diff(logits, batch.answer, batch.wrong).mean()

    def tl():
        with torch.no_grad():
            ref = tlp.get_act_patch_direct_path_all_sources(bridge, batch.corrupt, clean, corrupt, metric, "q",
                                                            verbose=False)
        res["tl"] = torch.cat([ref[:layer, :, layer, h].reshape(-1) for layer in range(1, L) for h in range(H)])

    def ours_each():
        res["ours"] = torch.cat([torch.tensor(path_patching(model, batch, "heads", f"L{layer}H{h}.q", metric="logit_diff")
                                                .value.to_numpy()) for layer in range(1, L) for h in range(H)])

    ratio, _ = median_ratio({"tl": tl, "ours": ours_each}, "tl", "ours", rounds=rounds, warmup=1)
    diff = float((res["tl"].double() - res["ours"].double()).abs().max())
    print(f"  every head -> each later head's q, one receiver at a time: TL get_act_patch_direct_path_all_sources "
          f"(split-qkv bridge) / ours {ratio:5.1f}x  max |difference| {diff:.1e}")


if __name__ == "__main__":
    main()
