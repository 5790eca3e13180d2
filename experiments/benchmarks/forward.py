"""Forward-pass throughput, measured side by side in one run.

Prints two ratios per model size:
  fixed/learned   tokens/s of the canonical and gf2 interfaces divided by the learned one's (same backbone weights);
  hooks overhead  time of the hooked model with no hooks attached divided by the same forward with every HookPoint
                  bypassed (HookPoint.__call__ replaced by the identity for the duration), minus one.

Usage: python experiments/benchmarks/forward.py [--sizes tiny,small] [--batch 16] [--rounds 9]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch
from transformer_lens.hook_points import HookPoint

sys.path.insert(0, str(Path(__file__).parent))
from _timing import machine_line, median_ratio  # noqa: E402

from fixedid import FixedIdLM, ModelConfig  # noqa: E402


@contextlib.contextmanager
def hookpoints_bypassed():
    """Make every HookPoint call a plain identity (no nn.Module.__call__ machinery)."""
    original = HookPoint.__call__
    HookPoint.__call__ = lambda self, x, *a, **k: x
    try:
        yield
    finally:
        HookPoint.__call__ = original


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="tiny,small")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args(argv)
    print(machine_line(), flush=True)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; ratios are medians of {args.rounds} "
          "interleaved rounds")
    for size in args.sizes.split(","):
        models = {i: FixedIdLM(ModelConfig.preset(size, interface=i)).eval() for i in ("learned", "canonical", "gf2")}
        cfg = models["learned"].cfg
        tokens = torch.randint(0, cfg.vocab_size, (args.batch, cfg.context))
        n_tok = tokens.numel()

        def fwd(m):
            def run():
                with torch.no_grad():
                    m(tokens)
            return run

        r_can, t = median_ratio({"learned": fwd(models["learned"]), "canonical": fwd(models["canonical"]),
                                 "gf2": fwd(models["gf2"])}, "learned", "canonical", rounds=args.rounds)
        r_gf2, _ = median_ratio({"learned": fwd(models["learned"]), "gf2": fwd(models["gf2"])}, "learned", "gf2",
                                rounds=args.rounds)
        print(f"[{size}] batch {args.batch}x{cfg.context}: learned {n_tok / t['learned']:,.0f} tok/s, "
              f"canonical {n_tok / t['canonical']:,.0f} tok/s, gf2 {n_tok / t['gf2']:,.0f} tok/s")
        print(f"[{size}] fixed/learned tokens/s: canonical {r_can:.3f}x, gf2 {r_gf2:.3f}x")

        m = models["canonical"]
        hooked = fwd(m)

        def bypassed():
            with hookpoints_bypassed():
                hooked()

        ratio, _ = median_ratio({"hooked": hooked, "bypassed": bypassed}, "hooked", "bypassed", rounds=args.rounds)
        n_hooks = len(m.hook_dict)
        print(f"[{size}] hooked (no hooks attached) / bypassed forward time: {ratio:.4f} "
              f"-> overhead {100 * (ratio - 1):+.2f}% over {n_hooks} hook points")


if __name__ == "__main__":
    main()
