"""Edge attribution speed: analysis.causal.edges (EAP, and EAP-IG at 5 steps) against TransformerLens 4.3's
``attribution_patch`` at edge granularity on the split-qkv bridge (the tool a user would pick instead), and against
exact patching of every edge (one batched path-patching sweep per reader, :func:`exact_edge_effects`: the naive
answer EAP estimates).

One model of the demo's tiny recipe (untrained: the speed does not depend on the weights), IOI pairs of the built-in
language, denoising, logit difference, every edge of the graph. Timed side by side (interleaved rounds, median of
per-round ratios). The unit is one inference forward (no autograd) of the clean and corrupted prompts together,
"a forward per pair". The bound in multiply-adds, ~1.5 of them: EAP needs the source prompts' writes (half of that
forward), and a forward and backward of the base prompts (half a forward, and a backward to the activations only -
no weight gradients - of about as much again, attention's a little more), shared by every edge. The floor is that work timed on its
own (a forward of the source half; a forward of the base half and a backward of its metric to the stream), in the
same rounds. TransformerLens's per-pair loop does the same work one pair at a time. Printed: ratios, the
largest difference between our scores and TransformerLens's, and Spearman's rank correlation of the EAP scores
with exact patching of every edge (what EAP estimates; a change of speed must leave it as it is).

At each of ``--threads`` (default 1 and 2): the machine's bare training-loop speed, EAP's forwards per pair on the
demo's (tiny) and the small recipe's shapes, and on the tiny shape the anchors above.

Usage: python experiments/benchmarks/edges.py [--rounds 5] [--pairs 16] [--threads 1,2] [--recipes tiny,small]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

sys.path.insert(0, str(Path(__file__).parent))
from _models import untrained_tiny  # noqa: E402
from _timing import machine_line, median_ratio, per_round, thread_counts  # noqa: E402

from analysis.causal.edges import edge_attribution, exact_agreement, exact_edge_effects  # noqa: E402
from analysis.engine import names  # noqa: E402
from analysis.interop.split_bridge import to_split_qkv_bridge  # noqa: E402
from analysis.tasks import task_pairs  # noqa: E402
from fixedid.clitools import ArgumentParser  # noqa: E402


def tl_scores(bridge, batch):
    total = {}
    for i in range(len(batch)):
        a, w = int(batch.answer[i]), int(batch.wrong[i])
        r = attribution_patch(bridge, batch.clean[i:i + 1], batch.corrupt[i:i + 1],
                              lambda lg, a=a, w=w: lg[0, -1, a] - lg[0, -1, w], EdgeAttributionConfig("edge"))
        for k, v in r.edge_scores.items():
            total[k] = total.get(k, 0.0) + v / len(batch)
    return total


@torch.no_grad()
def forward(model, x):
    return model(x)


def anchors(model, batch, rounds: int) -> None:
    """The tiny recipe's full comparison: TransformerLens, EAP-IG, exact patching and the forwards per pair."""
    bridge = to_split_qkv_bridge(model).eval()
    ours = edge_attribution(model, batch, per_position=True, metric="logit_diff")
    theirs = tl_scores(bridge, batch)
    mine = {(r.sender, r.receiver, r.position): r.score for r in ours.itertuples()}
    lab = {"embed": lambda n: "embed", "attn_head_out": lambda n: f"L{n.layer}H{n.head}",
           "mlp_out": lambda n: f"L{n.layer}.mlp", "mlp_in": lambda n: f"L{n.layer}.mlp", "logits": lambda n: "logits"}
    key = lambda n: lab[n.kind](n) if n.kind in lab else f"L{n.layer}H{n.head}.{n.kind[0]}"  # noqa: E731
    diff = max(abs(mine[(key(u), key(v), u.position)] - s) for (u, v), s in theirs.items())
    print(f"  tiny recipe, {len(batch)} IOI pairs of {batch.n_pos} tokens, {ours.attrs['n_edges']} edges "
          f"({len(theirs)} position-resolved); max |ours - TransformerLens| = {diff:.1e}")
    fns = {"ours_eap": lambda: edge_attribution(model, batch, metric="logit_diff"),
           "tl_eap": lambda: tl_scores(bridge, batch),
           "ours_ig5": lambda: edge_attribution(model, batch, method="eap-ig", steps=5, metric="logit_diff"),
           "exact": lambda: exact_edge_effects(model, batch, metric="logit_diff"),
           "forward": lambda: forward(model, torch.cat([batch.clean, batch.corrupt]))}
    r_tl, t = median_ratio(fns, "tl_eap", "ours_eap", rounds=rounds)
    print(f"  EAP: ours {r_tl:.1f}x faster than TransformerLens's attribution_patch (edge granularity, same pairs)")
    agree = exact_agreement(edge_attribution(model, batch, metric="logit_diff"),
                            exact_edge_effects(model, batch, metric="logit_diff"))
    print(f"  EAP against exact patching of every edge: Spearman {agree['spearman']:.4f} (of magnitudes "
          f"{agree['spearman_abs']:.4f}) over {agree['n_edges']} edges")
    print(f"  EAP-IG, 5 steps: {t['ours_ig5'] / t['ours_eap']:.1f}x EAP's time (work: (1 + 5 x 1.5) / 2.5 = 3.4x)")
    print(f"  exact patching of every edge: {t['exact'] / t['ours_eap']:.1f}x EAP's time "
          f"({ours.receiver.nunique()} readers, each a batched path-patching sweep)")


def floor_run(model, batch):
    """What any EAP must run, and nothing else: a forward of the source prompts, and a forward of the base prompts
    with a backward of their logit difference to the residual stream entering each block (no weight gradients);
    the logits at the final position only, all the metric reads."""
    L = model.cfg.n_layers
    with torch.no_grad():
        model.unembed(model.ln_final(model(batch.clean, stop_at_layer=L)[:, -1:]))
    mods, kept = model.mod_dict, []
    handles = [mods[names.EMBED].register_forward_hook(lambda m, i, o: o.detach().requires_grad_(True))]
    handles += [mods[names.resid_pre(i)].register_forward_hook(lambda m, i, o: kept.append(o))
                for i in range(model.cfg.n_layers)]
    try:
        last = model.unembed(model.ln_final(model(batch.corrupt, stop_at_layer=L)[:, -1:]))[:, -1]
        metric = last.gather(1, batch.answer[:, None]) - last.gather(1, batch.wrong[:, None])
        torch.autograd.grad(metric.sum(), kept)
    finally:
        for h in handles:
            h.remove()


def forwards_per_pair(model, batch, rounds: int) -> tuple[float, list[float], float]:
    """EAP's time over one inference forward of the clean and corrupted prompts together, per interleaved round,
    and the floor's (:func:`floor_run`) median over the same forward."""
    both = torch.cat([batch.clean, batch.corrupt])
    fns = {"eap": lambda: edge_attribution(model, batch, metric="logit_diff"), "forward": lambda: forward(model, both),
           "floor": lambda: floor_run(model, batch)}
    t = per_round(fns, rounds=rounds, warmup=3)
    ratios = [e / f for e, f in zip(t["eap"], t["forward"])]
    return statistics.median(ratios), ratios, statistics.median([a / f for a, f in zip(t["floor"], t["forward"])])


def recipes(text: str) -> list[str]:
    """``--recipes tiny,small`` as a list of packaged recipe names (an argparse type)."""
    from fixedid.train.config import packaged_configs

    names, known = text.split(","), packaged_configs()
    if not all(n in known for n in names):
        raise argparse.ArgumentTypeError(f"give packaged recipes, comma-separated (one of {known}), not {text!r}")
    return names


def main(argv=None) -> None:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the anchors (default 5)")
    p.add_argument("--ratio-rounds", type=int, default=41, help="interleaved rounds of EAP against the forward")
    p.add_argument("--pairs", type=int, default=16)
    p.add_argument("--threads", type=thread_counts, default=[1, 2], help="torch thread counts (default 1,2)")
    p.add_argument("--recipes", type=recipes, default="tiny,small",
                   help="the recipes' shapes EAP is timed at (default tiny,small)")
    p.add_argument("--no-anchors", action="store_true", help="only EAP against the forward")
    args = p.parse_args(argv)
    torch.set_grad_enabled(True)
    models = {r: untrained_tiny("learned", r).eval() for r in args.recipes}  # TL takes a gradient at
    batches = {r: task_pairs(m, "ioi", args.pairs, seed=0) for r, m in models.items()}  # hook_embed: a learned table
    for n in args.threads:
        torch.set_num_threads(n)
        print(machine_line())
        for r, model in models.items():
            ratio, rounds, floor = forwards_per_pair(model, batches[r], args.ratio_rounds)
            c = model.cfg
            print(f"  EAP on the {r} recipe's shape (d {c.d_model}, {c.n_layers} layers, {c.n_heads} heads; "
                  f"{args.pairs} IOI pairs of {batches[r].n_pos} tokens): {ratio:.2f} forwards per pair (median of "
                  f"{len(rounds)} rounds, quartiles {statistics.quantiles(rounds, n=4)[0]:.2f}-"
                  f"{statistics.quantiles(rounds, n=4)[2]:.2f}; target <= 3.0); the floor, the runs any EAP "
                  f"needs timed alone: {floor:.2f} (bound in multiply-adds ~1.5)")
        if not args.no_anchors and "tiny" in models:
            anchors(models["tiny"], batches["tiny"], args.rounds)


if __name__ == "__main__":
    main()
