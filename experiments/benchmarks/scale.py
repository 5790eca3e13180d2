"""Cost against model size: a plain forward, a resid_pre patching sweep, edge attribution (EAP) and one DAS fit, on
random-init canonical models from tiny to the study's paper-1.7b shape, each measurement in a fresh process so that
its peak memory is its own.

For each preset and analysis: wall time, the time as a multiple of one plain no-grad forward of the same batch
(the fastest of three in the same process, after a warm-up), the process's peak resident memory (VmHWM) and the model's own
size (float32 parameters and buffers). The prompts are random token pairs (``--pairs`` x ``--tokens``, differing at
one position): the cost of these analyses does not depend on the weights or the words. EAP uses its default chunk
of 16 pairs; DAS fits rank 4 at the middle layer for ``--das-epochs`` epochs of batch 16 (its pairs split in half,
so it fits on ``--pairs`` examples). Each analysis runs once on 4 of the pairs first (a warm-up: imports and first-call
set-up are not its cost), then on all of them, timed.

``load`` saves the model and times loading it back (its peak counted from after the save, where Linux allows) with every check (hashes, shapes, the recomputed code table);
``probes`` collects the middle layer's input over ``--probe-tokens`` random tokens and fits the canonical-bit probes
(C fixed, no controls), its time per token compared with the forward's; ``lmeval`` scores ``--probe-tokens`` random
tokens as lm-eval's rolling log-likelihood requests do (windows of the context, at most 2,048 tokens, every token
scored) through the lm-eval model's batching (a stand-in tokenizer: requests are token ids). ``--figure PATH``
draws time per token and peak memory against parameters, log-log. The GPU: ``experiments/benchmarks/gpu.py``.

Usage: python experiments/benchmarks/scale.py [--presets tiny,small,gpt2-small,prior-1024,paper-1.7b] [--ops forward,load,...]
                                              [--figure experiments/benchmarks/results/scale]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

OPS = ("forward", "load", "patching", "edges", "das", "probes", "lmeval")


def _peak_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


class _AnonPeak:
    """The largest anonymous resident memory (RssAnon, sampled every 5 ms in a thread) until :meth:`stop`: the
    memory a load really needs, where VmHWM also counts the checkpoint's file pages it reads through a memory map
    (clean page cache, which the kernel can drop)."""

    def __init__(self):
        import threading

        self.peak, self.done = 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    self.peak = max(self.peak, int(line.split()[1]))
            self.done.wait(0.005)

    def stop(self) -> float:
        self.done.set()
        self.thread.join()
        return self.peak / 2**20


def _random_pairs(cfg, pairs: int, tokens: int):
    """Random token pairs differing at one position, with random answer and wrong tokens."""
    import torch

    from analysis.pairs import PairBatch

    g = torch.Generator().manual_seed(0)
    clean = torch.randint(0, cfg.vocab_size, (pairs, tokens), generator=g)
    corrupt = clean.clone()
    corrupt[:, tokens // 2] = torch.randint(0, cfg.vocab_size, (pairs,), generator=g)
    return PairBatch(clean, corrupt, torch.randint(0, cfg.vocab_size, (pairs,), generator=g),
                     torch.randint(0, cfg.vocab_size, (pairs,), generator=g))


def _forward_seconds(model, tokens) -> float:
    """The fastest of three no-grad forwards of ``tokens``, after a warm-up (on CUDA, synchronised around each)."""
    import torch

    sync = torch.cuda.synchronize if tokens.is_cuda else (lambda: None)
    times = []
    with torch.no_grad():
        for i in range(4):
            sync()
            t = time.perf_counter()
            model(tokens)
            sync()
            times.append(time.perf_counter() - t)
    return min(times[1:])


def _timed_load(held: list) -> tuple[float, float]:
    """Save the model in ``held`` (taken out of it, so that its memory is gone), then load it back: the load's
    seconds and its largest anonymous memory, the peak count restarted after the save where Linux allows."""
    import gc
    import tempfile

    from analysis import load
    from fixedid import save_checkpoint

    with tempfile.TemporaryDirectory() as d:
        save_checkpoint(held.pop(), Path(d) / "ck")
        gc.collect()
        clear = Path("/proc/self/clear_refs")
        if clear.exists():
            clear.write_text("5")
        sampler = _AnonPeak()
        t = time.perf_counter()
        load(Path(d) / "ck")
        return time.perf_counter() - t, sampler.stop()


def _analysis(op: str, model, batch, windows: int, das_epochs: int) -> int:
    """Run one analysis on ``batch`` (probes: on ``windows`` random windows of its length); the tokens it read."""
    import torch

    cfg, tokens = model.cfg, batch.n_pos
    if op == "probes":
        from analysis.readouts.activations import collect
        from analysis.readouts.probes import probe_table

        x = torch.randint(0, cfg.vocab_size, (windows, tokens), generator=torch.Generator().manual_seed(1))
        acts = collect(model, x, hooks=[f"blocks.{cfg.n_layers // 2}.hook_resid_pre"])
        probe_table(acts, families=("canonical_bits",), C=1.0, controls=False)
        return x.numel()
    if op == "lmeval":
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel

        from analysis.evaluation.lmeval import FixedIdEvalLM

        # loglikelihood_rolling's requests: windows of the context (at most 2,048 tokens), every token scored
        width = min(cfg.context, 2048)
        n = max(1, windows * tokens // width)
        x = torch.randint(0, cfg.vocab_size, (n, width + 1), generator=torch.Generator().manual_seed(2)).tolist()
        model.tokenizer = Tokenizer(WordLevel({"<|endoftext|>": 0}, unk_token="<|endoftext|>"))
        FixedIdEvalLM(model=model)._loglikelihood_tokens([(None, w[:1], w[1:]) for w in x], disable_tqdm=True)
        return n * width
    if op == "patching":
        from analysis.causal.patching import activation_patching

        activation_patching(model, batch, site="resid_pre", metric="logit_diff")
    elif op == "edges":
        from analysis.causal.edges import edge_attribution

        edge_attribution(model, batch, metric="logit_diff")
    elif op == "das":
        from analysis.causal.das import Streams, fit_subspace
        from analysis.causal.das_data import das_data

        data = das_data(model, "ioi", pairs=batch, solved_only=False)
        layer = cfg.n_layers // 2
        fit_subspace(Streams(model, data, [layer]), layer, 4, epochs=das_epochs, batch_size=16)
    else:
        raise SystemExit(f"unknown op {op!r}; use one of {OPS}")
    return batch.clean.numel()


def child(preset: str, op: str, pairs: int, tokens: int, das_epochs: int, probe_tokens: int) -> dict:
    import torch

    from analysis.model import HookedFixedIdLM
    from analysis.pairs import PairBatch
    from fixedid import ModelConfig

    torch.manual_seed(0)
    cfg = ModelConfig.preset(preset, interface="canonical")
    model = HookedFixedIdLM(cfg).eval()
    size = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers())) / 2**30
    n_params = sum(p.numel() for p in model.parameters())
    batch = _random_pairs(cfg, pairs, tokens)
    per_token = _forward_seconds(model, batch.clean) / batch.clean.numel()
    n_tokens, extra = batch.clean.numel(), {}
    if op == "forward":
        seconds = per_token * n_tokens
    elif op == "load":
        held = [model]
        del model
        seconds, extra["anon_peak_gb"] = _timed_load(held)
    else:  # a warm-up on part of the batch first: first-call costs (imports, set-up) are not the analysis's
        small = PairBatch(batch.clean[:4], batch.corrupt[:4], batch.answer[:4], batch.wrong[:4])
        _analysis(op, model, small, 4, das_epochs)
        t = time.perf_counter()
        n_tokens = _analysis(op, model, batch, max(1, probe_tokens // tokens), das_epochs)
        seconds = time.perf_counter() - t
    # probes run on more tokens than the pairs: every analysis is compared with the forward per token
    return dict(preset=preset, params_m=n_params / 1e6, op=op, seconds=seconds, tokens=n_tokens,
                x_forward=seconds / (per_token * n_tokens), peak_gb=_peak_gb(), model_gb=size, **extra)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="tiny,small,gpt2-small,prior-1024,paper-1.7b")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--das-epochs", type=int, default=2)
    p.add_argument("--probe-tokens", type=int, default=16_384)
    p.add_argument("--figure", help="also write the rows to PATH.csv and draw the log-log figure of cost against "
                   "parameters to PATH.png/.pdf")
    p.add_argument("--redraw", help="only draw the figure (to --figure) from a PATH.csv an earlier run wrote")
    p.add_argument("--child", nargs=2, metavar=("PRESET", "OP"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child, args.pairs, args.tokens, args.das_epochs, args.probe_tokens)))
        return
    if args.redraw:
        import pandas as pd

        figure(pd.read_csv(args.redraw).to_dict("records"), args)
        return
    print(f"random-init canonical models, {args.pairs} pairs x {args.tokens} tokens, one process per measurement")
    print(f"{'preset':>12s} {'params':>8s} {'analysis':>9s} {'seconds':>8s} {'x forward':>9s} {'peak GB':>8s} "
          f"{'model GB':>8s}")
    rows = []
    for preset in args.presets.split(","):
        for op in args.ops.split(","):
            cmd = [sys.executable, __file__, "--child", preset, op, "--pairs", str(args.pairs), "--tokens",
                   str(args.tokens), "--das-epochs", str(args.das_epochs), "--probe-tokens", str(args.probe_tokens)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                print(f"{preset:>12s} {op:>9s} failed: {out.stderr.strip().splitlines()[-1]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(r)
            anon = f"  (anonymous memory at most {r['anon_peak_gb']:.2f} GB)" if "anon_peak_gb" in r else ""
            print(f"{preset:>12s} {r['params_m']:>7.0f}M {op:>9s} {r['seconds']:>8.3g} {r['x_forward']:>9.1f} "
                  f"{r['peak_gb']:>8.2f} {r['model_gb']:>8.2f}{anon}", flush=True)
    if args.figure and rows:
        import pandas as pd

        from analysis.outputs import write_csv

        write_csv(pd.DataFrame(rows), Path(f"{args.figure}.csv"))
        figure(rows, args)


def figure(rows, args) -> None:
    """Milliseconds per token (every analysis but ``load``, whose time does not scale with tokens) and peak memory
    against parameters, log-log, one line per analysis."""
    import pandas as pd

    from analysis.figures.style import save_figure, subplots

    df = pd.DataFrame(rows)
    colours = dict(zip(OPS, ("#000000", "#999999", "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00")))
    fig, axes = subplots(2, height=2.6, ncols=2)
    for op, g in df.groupby("op", sort=False):
        g = g.sort_values("params_m")
        style = dict(marker="o", ms=3, color=colours.get(op), label=op)
        if op != "load":
            axes[0, 0].plot(g.params_m * 1e6, g.seconds / g.tokens * 1e3, **style)
        axes[0, 1].plot(g.params_m * 1e6, g.peak_gb, **style)
    axes[0, 0].set_title("time per token (load: see the table)", fontsize=8)
    axes[0, 1].set_title("memory", fontsize=8)
    model = df.drop_duplicates("preset").sort_values("params_m")
    axes[0, 1].plot(model.params_m * 1e6, model.model_gb, color="#888888", ls="--", lw=0.8, label="the model itself")
    for ax, ylabel in zip(axes[0], ("milliseconds per token", "peak resident memory (GB)")):
        ax.set_xscale("log"), ax.set_yscale("log")
        ax.set_xlabel("parameters", fontsize=8), ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=6.5, frameon=False)
    axes[0, 1].legend(fontsize=6.5, frameon=False)
    fig.suptitle(f"cost against size: random-init canonical models, {args.pairs} pairs x {args.tokens} tokens "
                 f"(probes, lm-eval: {args.probe_tokens:,} tokens), 2-core CPU", fontsize=8)
    out = Path(args.figure)
    save_figure(fig, out.parent, out.name)


if __name__ == "__main__":
    main()
