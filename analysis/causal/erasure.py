"""Causal erasure: remove a concept from one hook point with LEACE, and measure what the model loses.

A probe says a concept is linearly *readable* at a hook point; erasure asks whether the model *uses* it there.
:func:`erasure` collects the hook point's activations over corpus windows, fits a LEACE eraser (Belrose et al.,
2023; the ``concept-erasure`` package) for the concept on the training sequences, and then, with the eraser
installed as a forward hook on that hook point:

- the concept's linear probe, refitted on erased activations, is scored on held-out sequences (LEACE guarantees no
  linear probe beats the constant predictor: expect the majority baseline);
- the next-token loss of every sequence (mean and 95% interval of the change), and accuracy and logit difference on
  the built-in tasks' prompts.

Beside it, the placebo: a projection that removes ``rank`` random directions (the rank LEACE removed: one for a
binary concept, up to classes - 1 otherwise), several draws, so a reader can tell the concept's share of the damage
from what any erasure of that size costs.

Concepts are the probe targets of :mod:`analysis.readouts.probes` (``canonical_bit:3``, ``code_bit:5``, ``xor:0,1``,
``token``, ``prev_token``, ``freq_bucket``).

What a result does NOT establish: a loss increase over the placebo shows that the model reads the concept's linear
subspace at this hook point; it does not show the information is absent elsewhere (a later layer may recompute it)
nor that a nonlinear encoding of the concept is not used. LEACE removes linear information only.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import torch

from analysis.readouts.activations import collect
from analysis.corpus import DEFAULT_TOKENS, corpus_tokens
from analysis.stats import t_intervals
from analysis.errors import AnalysisError
from analysis.readouts.probes import fit_probes, split_by_sequence, targets

FAMILY_OF = {"code_bit": "code_bits", "canonical_bit": "canonical_bits", "xor": "xor", "token": "token",
             "prev_token": "prev_token", "freq_bucket": "freq_bucket"}


def _concept(acts, concept: str, seed: int):
    family = FAMILY_OF.get(concept.split(":")[0])
    if family is None:
        raise AnalysisError(f"unknown concept {concept!r}; use a class target of analysis.readouts.probes, e.g. "
                            "canonical_bit:3, code_bit:5, xor:0,1, token, prev_token, freq_bucket")
    if family == "xor":  # any pair, not only the randomly drawn ones
        try:
            i, k = (int(v) for v in concept.split(":")[1].split(","))
        except ValueError:
            raise AnalysisError(f"an XOR concept is xor:I,K with two canonical bit indices, got {concept!r}") from None
        bits = acts.tokens["id"].to_numpy()
        n = acts.meta["n_bits"]
        if not (0 <= i < n and 0 <= k < n) or i == k:
            raise AnalysisError(f"{concept!r}: bits must be two different indices in 0..{n - 1}")
        from analysis.readouts.probes import Target
        return Target(concept, (((bits >> i) ^ (bits >> k)) & 1).astype(np.int64), "class")
    found = [t for t in targets(acts, [family], seed=seed) if t.name == concept]
    if not found:
        raise AnalysisError(f"unknown concept {concept!r} for this model (e.g. bit indices "
                            f"0..{acts.meta['n_bits'] - 1})")
    t = found[0]
    if len(np.unique(t.labels[t.labels >= 0])) < 2:
        raise AnalysisError(f"{concept} is constant over these tokens: there is nothing to erase")
    return t


def _one_hot(labels: np.ndarray) -> torch.Tensor:
    classes = np.unique(labels)
    if len(classes) == 2:
        return torch.from_numpy((labels == classes[1]).astype(np.float64))[:, None]
    # k - 1 indicator columns: the centred one-hot code of k classes has rank k - 1, so this erases the same subspace
    return torch.from_numpy((labels[:, None] == classes[None, 1:]).astype(np.float64))


class Placebo:
    """Removes ``rank`` random orthonormal directions around the data mean (the shape of a LEACE edit)."""

    def __init__(self, mean: torch.Tensor, rank: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        q, _ = torch.linalg.qr(torch.randn(mean.shape[0], rank, generator=g, dtype=mean.dtype))
        self.mean, self.q = mean, q

    def __call__(self, x):
        d = x - self.mean
        return x - (d @ self.q) @ self.q.T

    def to(self, device) -> "Placebo":
        moved = Placebo.__new__(Placebo)
        moved.mean, moved.q = self.mean.to(device), self.q.to(device)
        return moved


def _on(fn, device):
    """An eraser or placebo fitted on the CPU, with its tensors on ``device`` (where the model's activations are)."""
    if isinstance(fn, Placebo):
        return fn.to(device)
    return dataclasses.replace(fn, **{k: None if v is None else v.to(device)
                                     for k, v in (("proj_left", fn.proj_left), ("proj_right", fn.proj_right),
                                                  ("bias", fn.bias))})


def _hooked(model, hook: str, fn):
    mod = model.mod_dict[hook]
    fn = _on(fn, model.unembed.weight.device)

    def edit(module, inputs, out):  # a per-head hook [batch, pos, head, d_head] is erased as its concatenated heads
        return fn(out.reshape(*out.shape[:2], -1).double()).to(out.dtype).reshape(out.shape)

    return mod.register_forward_hook(edit)


@torch.no_grad()
def _losses(model, x: torch.Tensor, max_batch: int = 64) -> np.ndarray:
    out = []
    for i in range(0, x.shape[0], max_batch):
        t = x[i:i + max_batch]
        logits = model(t)
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].float().transpose(1, 2), t[:, 1:], reduction="none")
        out.append(ce.mean(1))
    return torch.cat(out).double().cpu().numpy()


@torch.no_grad()
def _task_scores(model, tasks, n_pairs: int) -> dict[str, float]:
    from analysis.tasks import task_pairs
    scores = {}
    for task in tasks:
        b = task_pairs(model, task, n_pairs, seed=0)
        last = model(b.clean)[:, -1].float()
        ld = last.gather(1, b.answer[:, None])[:, 0] - last.gather(1, b.wrong[:, None])[:, 0]
        scores[f"acc_{task}"], scores[f"logit_diff_{task}"] = float((ld > 0).float().mean()), float(ld.mean())
    return scores


def erasure(model, concept: str, hook: str, data=None, *, tokens: int = DEFAULT_TOKENS, placebo_draws: int = 3,
            tasks=("ioi", "agreement"), n_pairs: int = 32, seed: int = 0) -> pd.DataFrame:
    """Erase ``concept`` at ``hook`` (see the module docstring). One row per condition: ``none`` (the model as
    is), ``leace`` and ``placebo`` (one row per draw): ``probe`` (held-out accuracy of the concept's probe on the
    edited activations), ``majority``, ``rank`` (directions removed), ``loss`` and ``delta_loss`` with its 95%
    interval over sequences, and ``acc_<task>`` / ``logit_diff_<task>`` on the tasks' prompts (``tasks=()`` on
    data that is not the built-in language)."""
    if model.training:
        raise AnalysisError("the model is in train mode; call model.eval() (analysis.load returns it in eval mode)")
    if hook not in model.mod_dict:
        raise AnalysisError(f"unknown hook point {hook!r}; e.g. blocks.1.hook_resid_pre")
    if not isinstance(placebo_draws, int) or placebo_draws < 1:
        raise AnalysisError(f"placebo_draws must be a positive integer, got {placebo_draws!r}")
    from concept_erasure import LeaceEraser

    x = corpus_tokens(model, data, tokens=tokens).to(model.unembed.weight.device)
    acts = collect(model, x, hooks=[hook])
    t = _concept(acts, concept, seed)
    test = split_by_sequence(acts.tokens["seq"].to_numpy(), seed=seed)
    # float64: a float32 eraser leaves class-correlated residue of ~1e-6 in the erased directions, which a
    # standardised probe reads back perfectly on a discrete input such as the fixed code
    a = torch.from_numpy(np.asarray(acts.acts[hook], dtype=np.float64))
    fit_rows = ~test & (t.labels >= 0)
    eraser = LeaceEraser.fit(a[fit_rows], _one_hot(t.labels[fit_rows]))
    rank = int(eraser.proj_left.shape[1])  # the directions LEACE removes
    base_loss = _losses(model, x)
    conditions = [("none", None, None), ("leace", None, eraser)]
    mean = a[fit_rows].mean(0)
    conditions += [("placebo", d, Placebo(mean, rank, seed * 1000 + d)) for d in range(placebo_draws)]
    rows = []
    for name, draw, fn in conditions:
        edited = a if fn is None else fn(a)
        probe = fit_probes(edited.numpy(), [t], test)[t.name]
        handle = None if fn is None else _hooked(model, hook, fn)
        try:
            loss = base_loss if fn is None else _losses(model, x)
            scores = _task_scores(model, tasks, n_pairs) if tasks else {}
        finally:
            if handle is not None:
                handle.remove()
        m, lo, hi = t_intervals((loss - base_loss)[None])
        keep = t.labels[test] >= 0
        vals, counts = np.unique(t.labels[~test & (t.labels >= 0)], return_counts=True)
        majority = float((t.labels[test][keep] == vals[counts.argmax()]).mean())
        rows.append({"concept": concept, "hook": hook, "condition": name, "draw": draw, "rank": 0 if fn is None
                     else rank, "probe": probe, "majority": majority, "loss": float(loss.mean()),
                     "delta_loss": float(m[0]), "delta_loss_lo": float(lo[0]), "delta_loss_hi": float(hi[0]),
                     **scores})
    df = pd.DataFrame(rows)
    df["draw"] = df["draw"].astype("Int64")
    df.attrs.update(interface=model.cfg.interface, n_tokens=int(x.numel()), n_test=int(test.sum()))
    return df


__all__ = ["erasure", "Placebo"]
