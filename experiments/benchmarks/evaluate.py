"""lm-eval adapter speed: loglikelihood requests against plain batched forwards over the same tokens, side by side.

Requests: the shipped built-in tasks' documents as lm-eval would send them (every multiple-choice option and every
last-word target, as text: tokenization, left truncation, sorting, padding and the continuation's log-softmax are all
inside the timed call). Anchor: the model's forward alone over every request's token row, in sorted, right-padded
batches (what an adapter without sharing runs; target >= 0.9x its tokens/s). The adapter runs only the rows that are
no other row's prefix, so its bound is (tokens of every request's row) / (tokens of the rows it runs). Cases: the
built-in tasks; one-word contexts (the adapter's per-request work largest against the forward's); and the
unfavourable case, one request per distinct row, where there is nothing to share and the adapter's tokenization and
bookkeeping are pure overhead.

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
from _timing import machine_line, median_ratio  # noqa: E402

from analysis.evaluation.lmeval import FixedIdEvalLM, task_docs  # noqa: E402
from analysis.evaluation.shared_rows import host_rows  # noqa: E402


def requests_of_tasks():
    reqs = []
    for task in ("fixedid_ioi", "fixedid_agreement", "fixedid_facts"):
        for d in task_docs(task):
            reqs += [SimpleNamespace(args=(d["context"], " " + c)) for c in d["choices"]]
    for d in task_docs("fixedid_lastword"):
        words = d["text"].split(" ")
        reqs.append(SimpleNamespace(args=(" ".join(words[:-1]), " " + words[-1])))
    return reqs


def row_of(lm, req) -> tuple:
    """The token row the model must see for one request (context and continuation less its last token)."""
    c, k = lm._encode_pair(*req.args)
    return tuple((c + k)[-(lm.max_length + 1):][:-1])


def unshared(lm, reqs) -> list:
    """One request per host row: nothing for the adapter to share, every row it runs is one the anchor runs."""
    by_row = {}
    for r in reqs:
        by_row.setdefault(row_of(lm, r), r)
    return [by_row[h] for h in set(host_rows(by_row).values())]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args(argv)
    print(machine_line(), flush=True)
    torch.manual_seed(0)
    model = untrained_tiny("canonical")
    lm = FixedIdEvalLM(model=model, batch_size=args.batch_size)
    short = [SimpleNamespace(args=(r.args[0].split(" ")[0], r.args[1])) for r in requests_of_tasks()]
    print(f"model: tiny recipe, canonical, untrained; batch {args.batch_size}; median of {args.rounds} interleaved "
          "rounds")
    cases = [("built-in tasks' requests", requests_of_tasks()), ("one-word contexts", short),
             ("no shared rows (unfavourable)", unshared(lm, requests_of_tasks()))]
    for label, reqs in cases:
        rows = [row_of(lm, r) for r in reqs]
        run = set(host_rows(rows).values())
        n_run, n_run_tok = len(run), sum(map(len, run))
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
        print(f"  {label}: {len(reqs)} requests, {n_tok:,} tokens in their rows, {n_run} distinct rows run; adapter "
              f"{n_tok / t['adapter']:,.0f} tok/s, plain batched forwards over every request's row "
              f"{n_tok / t['plain']:,.0f} tok/s: {ratio:.2f}x (target >= 0.9x; bound "
              f"{n_tok / n_run_tok:.2f}x: the tokens of the rows it must run)")


if __name__ == "__main__":
    main()
