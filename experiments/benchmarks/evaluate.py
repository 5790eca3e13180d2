"""lm-eval adapter speed: loglikelihood requests against plain batched forwards over the same tokens, side by side.

Requests: the shipped built-in tasks' documents as lm-eval would send them (every multiple-choice option and every
last-word target, as text: tokenization, left truncation, sorting, padding and the continuation's log-softmax are all
inside the timed call). Anchor: the model's forward alone over exactly the same token rows, in the same sorted,
right-padded batches (the least work any adapter can do; target >= 0.7x its tokens/s). Also the unfavourable case:
requests with one-token contexts, where the adapter's per-request work is largest against the forward's.

Model: the demo's tiny recipe, untrained (speed does not depend on the weights).
Usage: python experiments/benchmarks/evaluate.py [--rounds 5] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _models import untrained_tiny  # noqa: E402
from _timing import median_ratio  # noqa: E402

from analysis.evaluation.lmeval import FixedIdEvalLM, task_docs  # noqa: E402


def requests_of_tasks():
    reqs = []
    for task in ("fixedid_ioi", "fixedid_agreement", "fixedid_facts"):
        for d in task_docs(task):
            reqs += [SimpleNamespace(args=(d["context"], " " + c)) for c in d["choices"]]
    for d in task_docs("fixedid_lastword"):
        words = d["text"].split(" ")
        reqs.append(SimpleNamespace(args=(" ".join(words[:-1]), " " + words[-1])))
    return reqs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model = untrained_tiny("canonical")
    lm = FixedIdEvalLM(model=model, batch_size=args.batch_size)
    short = [SimpleNamespace(args=(r.args[0].split(" ")[0], r.args[1])) for r in requests_of_tasks()]
    print(f"model: tiny recipe, canonical, untrained; batch {args.batch_size}; median of {args.rounds} interleaved "
          "rounds")
    for label, reqs in (("built-in tasks' requests", requests_of_tasks()), ("one-word contexts", short)):
        rows = []
        for ctx, cont in (r.args for r in reqs):
            c, k = lm._encode_pair(ctx, cont)
            rows.append((c + k)[-(lm.max_length + 1):][:-1])
        rows.sort(key=len, reverse=True)
        batches = []
        for b in range(0, len(rows), args.batch_size):
            chunk = rows[b:b + args.batch_size]
            x = torch.zeros(len(chunk), len(chunk[0]), dtype=torch.long)
            for j, r in enumerate(chunk):
                x[j, :len(r)] = torch.tensor(r)
            batches.append(x)
        n_tok = sum(len(r) for r in rows)

        @torch.no_grad()
        def plain():
            for x in batches:
                model(x)

        fns = {"adapter": lambda: lm.loglikelihood(reqs, disable_tqdm=True), "plain": plain}
        ratio, t = median_ratio(fns, "plain", "adapter", rounds=args.rounds, warmup=1)
        print(f"  {label}: {len(reqs)} requests, {n_tok:,} tokens; adapter {n_tok / t['adapter']:,.0f} tok/s, plain "
              f"batched forwards {n_tok / t['plain']:,.0f} tok/s: {ratio:.2f}x (target >= 0.7x)")


if __name__ == "__main__":
    main()
