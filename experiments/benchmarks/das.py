"""DAS fitting speed: analysis.causal.das.fit_subspace against TransformerLens 4.3's ``fit_das`` (the tool a user
would pick instead), same pairs, rank, epochs, batch size and learning rate, at each layer of one model.

One model of the demo's tiny recipe (untrained: the speed of a fit does not depend on the weights), IOI (or agreement) pairs
of the built-in language, the position where the prompts differ, the model's own source outputs as targets. Both fit the same
subspace the same way; ours runs each step from the intervened layer on (the stream entering it is computed once)
and unembeds the final position only, where ``fit_das`` runs the whole model and its caller's task logits. The bound
printed beside each ratio is the FLOP ratio of the two steps' forwards (blocks x positions, plus the unembedding),
the most that skipping the prefix can give; the held-out interchange accuracies of both bases are printed too.
Timed side by side (interleaved rounds, median of per-round ratios).

Usage: python experiments/benchmarks/das.py [--rounds 3] [--pairs 32] [--epochs 10] [--variable agreement]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from transformer_lens.tools.analysis.interchange import fit_das

sys.path.insert(0, str(Path(__file__).parent))
from _models import untrained_tiny  # noqa: E402
from _timing import machine_line, median_ratio  # noqa: E402

from analysis.causal.das import Streams, evaluate, fit_subspace, hook_name, interchange  # noqa: E402
from analysis.causal.das_data import das_data  # noqa: E402


def flop_bound(model, layer: int, T: int) -> float:
    """FLOPs of a full forward with every position unembedded over those of blocks ``layer..`` with one."""
    cfg = model.cfg
    block = sum(p.numel() for p in model.blocks[0].parameters())
    per_block = T * (2 * block + 2 * T * cfg.d_model)  # weights, plus causal attention scores and values
    unembed = 2 * cfg.d_model * cfg.vocab_size
    return (cfg.n_layers * per_block + T * unembed) / ((cfg.n_layers - layer) * per_block + unembed)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pairs", type=int, default=32)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--rank", type=int, default=4)
    p.add_argument("--variable", default="ioi", choices=["ioi", "agreement"])
    args = p.parse_args(argv)
    print(machine_line(), flush=True)
    torch.set_grad_enabled(True)
    model = untrained_tiny("canonical").eval()
    data = das_data(model, args.variable, args.pairs, solved_only=False, target="source_output")
    budget = dict(epochs=args.epochs, batch_size=16, lr=1e-2, seed=0)
    tr, pos = data.train, data.positions("diff")
    T = data.prompts.shape[1]

    def tl_inputs(side):
        return torch.cat([data.prompts[side[tr]], data.candidates[tr]], 1)

    def task_logits(x):
        return model(x[:, :-2])[:, -1].gather(1, x[:, -2:])

    print(f"{model.cfg.n_layers} layers, d_model {model.cfg.d_model}, vocab {model.cfg.vocab_size}, {len(tr)} fitted "
          f"examples of {T} tokens, rank {args.rank}, {args.epochs} epochs of batch 16")
    print(f"{'layer':>24s}  {'TL fit_das / ours':>18s}  {'FLOP bound':>10s}  {'held-out IIA ours / TL':>22s}")
    for layer in range(model.cfg.n_layers):
        hook = hook_name(model, layer)
        out = {}

        def theirs():
            out["tl"] = fit_das(model, hook, tl_inputs(data.base), tl_inputs(data.source), data.target[tr],
                                task_logits, rank=args.rank, base_positions=pos[tr], source_positions=pos[tr],
                                **budget)

        def ours():
            out["streams"] = Streams(model, data, [layer])
            out["ours"] = fit_subspace(out["streams"], layer, args.rank, **budget)

        ratio, _ = median_ratio({"tl": theirs, "ours": ours}, "tl", "ours", rounds=args.rounds, warmup=1)
        iia = [evaluate(out["streams"], layer, data.test, interchange(out[k].basis), "diff")["iia"]
               for k in ("ours", "tl")]
        print(f"{hook:>24s}  {ratio:>17.2f}x  {flop_bound(model, layer, T):>9.2f}x  {iia[0]:>12.2f} / {iia[1]:.2f}")


if __name__ == "__main__":
    main()
