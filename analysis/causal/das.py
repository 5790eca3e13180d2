"""Distributed alignment search: a learned low-rank subspace whose interchange makes a base run output what the
source run's value of a causal variable predicts (Geiger et al. 2021, 2024)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import orthogonal
from tqdm.auto import tqdm

from analysis.causal.das_data import DasData, das_data
from analysis.engine.staged import cache_run, run_from
from analysis.errors import AnalysisError
from analysis.stats import wilson
from analysis.engine import names as hooknames

def code_direction(model, bit: int) -> torch.Tensor:
    """``[d_model, 1]`` the unit direction along which the input code writes ``bit`` (its repeated columns)."""
    from analysis.causal.interventions import _bit_mask

    if not getattr(model.cfg, "has_code", False):
        raise AnalysisError(f"the {model.cfg.interface} variant reads no code, so no input direction carries a bit")
    d = _bit_mask(model, bit).float().cpu()
    return (d / d.norm())[:, None]


def hook_name(model, layer: int) -> str:
    """The hook point of ``layer``: ``blocks.L.hook_resid_pre``, or the last block's ``hook_resid_post`` for
    ``L = n_layers``."""
    n = model.cfg.n_layers
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer <= n:
        raise AnalysisError(f"layer {layer!r} is out of range: the stream enters layers 0..{n - 1}, and {n} is the "
                            "stream after the last block")
    return hooknames.resid_pre(layer) if layer < n else hooknames.resid_post(n - 1)


class Subspace(nn.Module):
    """A ``[d_model, rank]`` basis kept orthonormal by torch's orthogonal parametrisation."""

    def __init__(self, d_model: int, rank: int):
        super().__init__()
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 < rank <= d_model:
            raise AnalysisError(f"rank must be an integer in 1..{d_model} (d_model), got {rank!r}")
        self.map = orthogonal(nn.Linear(int(rank), d_model, bias=False))

    @property
    def basis(self) -> torch.Tensor:
        """The subspace basis as rows, ``[rank, d_model]`` (orthonormal by the parametrisation)."""
        return self.map.weight


@dataclass
class FittedSubspace:
    """A basis fitted by :func:`~analysis.causal.das.fit_subspace`, with its mean training loss per epoch."""

    basis: torch.Tensor
    losses: tuple
    layer: int
    rank: int


class Streams:
    """The residual stream entering the chosen layers for every prompt of a :class:`~analysis.causal.das_data.DasData`,
    computed once."""

    def __init__(self, model, data: DasData, layers, max_batch: int = 64):
        names = {L: hook_name(model, L) for L in layers}
        parts = {L: [] for L in layers}
        with torch.no_grad():
            for i in range(0, len(data.prompts), max_batch):
                _, cache = cache_run(model, data.prompts[i:i + max_batch].to(model.device), list(names.values()))
                for L, name in names.items():
                    parts[L].append(cache[name])
        self.model, self.data = model, data
        self.x = {L: torch.cat(v) for L, v in parts.items()}

    def logits(self, layer: int, rows, position: str, move) -> torch.Tensor:
        """``[len(rows), 2]`` candidate logits of examples ``rows`` with ``move(base_vec, source_vec)`` written at
        the position (differentiable in whatever ``move`` holds)."""
        d, model = self.data, self.model
        rows = torch.as_tensor(rows)
        pos = d.positions(position)[rows].to(model.device)
        x = self.x[layer][d.base[rows].to(model.device)].clone()
        src = self.x[layer][d.source[rows].to(model.device), pos]
        ar = torch.arange(len(rows), device=x.device)
        x[ar, pos] = move(x[ar, pos], src).to(x.dtype)
        if layer == model.cfg.n_layers:
            out = model.unembed(model.ln_final(x[:, -1:]))
        else:
            out = run_from(model, x, layer, last_only=True)
        return out[:, 0].gather(1, d.candidates[rows].to(out.device)).float()


def interchange(basis: torch.Tensor):
    """The move that sets the base's coordinates in ``basis`` to the source's."""
    def move(base, source):
        B = basis.to(base.device, base.dtype)
        return base + ((source - base) @ B) @ B.T
    return move


def norm_matched(basis: torch.Tensor, reference: torch.Tensor):
    """The placebo move: inside ``basis``, scaled per example to the distance ``interchange(reference)`` moves it."""
    def move(base, source):
        ref = reference.to(base.device, base.dtype)
        distance = (((source - base) @ ref) @ ref.T).norm(dim=-1, keepdim=True)
        B = basis.to(base.device, base.dtype)
        step = ((source - base) @ B) @ B.T
        return base + step * (distance / step.norm(dim=-1, keepdim=True).clamp_min(1e-12))
    return move


def _whole(base, source):
    return source


def _none(base, source):
    return base


def random_basis(d_model: int, rank: int, seed: int) -> torch.Tensor:
    """A seeded random orthonormal ``[d_model, rank]`` basis (QR of a Gaussian matrix)."""
    g = torch.Generator().manual_seed(int(seed))
    q, r = torch.linalg.qr(torch.randn(d_model, rank, generator=g, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).float()


@torch.no_grad()
def evaluate(streams: Streams, layer: int, rows, move, position: str, targets=None, max_batch: int = 256) -> dict:
    """IIA (with a Wilson interval) and the mean target-minus-other logit of ``move`` over examples ``rows``."""
    rows = torch.as_tensor(rows)
    tgt = (streams.data.target if targets is None else torch.as_tensor(targets))[rows]
    logits = torch.cat([streams.logits(layer, rows[i:i + max_batch], position, move).cpu()
                        for i in range(0, len(rows), max_batch)])
    hit = logits.argmax(1) == tgt
    signed = (logits[:, 1] - logits[:, 0]) * (2 * tgt - 1)
    k, n = int(hit.sum()), len(rows)
    lo, hi = wilson(k, n)
    return dict(iia=k / n, iia_lo=lo, iia_hi=hi, n=n, logit_diff=float(signed.mean()))


def interchange_logits(model, data: DasData, layer: int, basis: torch.Tensor | None = None, *,
                       position: str = "diff", rows=None) -> torch.Tensor:
    """``[len(rows), 2]`` candidate logits (answer, wrong) of examples ``rows`` (default: all) with the subspace
    ``basis`` interchanged at ``layer`` (``None``: the whole stream at the position)."""
    rows = torch.arange(len(data)) if rows is None else torch.as_tensor(rows)
    streams = Streams(model, data, [layer])
    with torch.no_grad():
        return streams.logits(layer, rows, position, _whole if basis is None else interchange(basis)).cpu()


def fit_subspace(streams: Streams, layer: int, rank: int, *, position: str = "diff", rows=None, targets=None,
                 epochs: int = 20, batch_size: int = 128, lr: float = 1e-2, seed: int = 0) -> FittedSubspace:
    """Fit a rank-``rank`` basis at ``layer`` to ``targets`` (default: the data's) on examples ``rows`` (default: the
    train split); see the module docstring."""
    model, d = streams.model, streams.data
    if model.training:
        raise AnalysisError("DAS needs the model in eval mode (call model.eval()): dropout would change every run")
    if epochs < 1 or batch_size < 1 or not lr > 0:
        raise AnalysisError(f"epochs and batch_size must be positive and lr > 0, got {epochs}, {batch_size}, {lr}")
    rows = d.train if rows is None else torch.as_tensor(rows)
    labels = (d.target if targets is None else torch.as_tensor(targets)).to(model.device)
    with torch.random.fork_rng(devices=[]):  # seeds the CPU generator only, restored on exit
        torch.default_generator.manual_seed(int(seed))
        sub = Subspace(model.cfg.d_model, rank)
    sub = sub.to(model.device)
    opt = torch.optim.Adam(sub.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    flags = [p.requires_grad for p in model.parameters()]
    model.requires_grad_(False)
    losses = []
    try:
        for _ in range(epochs):
            order = rows[torch.as_tensor(rng.permutation(len(rows)))]
            total = torch.zeros((), device=model.device)
            for i in range(0, len(order), batch_size):
                idx = order[i:i + batch_size]
                opt.zero_grad()
                logits = streams.logits(layer, idx, position, interchange(sub.basis))
                loss = F.cross_entropy(logits, labels[idx.to(labels.device)])
                loss.backward()
                opt.step()
                total += loss.detach() * len(idx)
            losses.append(total / len(order))
    finally:
        for p, flag in zip(model.parameters(), flags):
            p.requires_grad_(flag)
    return FittedSubspace(sub.basis.detach().cpu(), tuple(float(v) for v in torch.stack(losses).cpu()), layer, rank)


def _arbitrary(data: DasData, seed: int) -> torch.Tensor:
    """A fixed random class per example (the arbitrary-label control's targets)."""
    return torch.as_tensor(np.random.default_rng([int(seed), 7]).integers(0, 2, len(data)))


def das_sweep(model, variable: str = "ioi", *, bit: int | None = None, n_pairs: int = 64, layers=None,
              ranks=(1, 4, 16), position: str = "diff", epochs: int = 20, batch_size: int = 128, lr: float = 1e-2,
              seed: int = 0, controls: bool = True, solved_only: bool = True, target: str = "variable",
              data: DasData | None = None, progress: bool = False) -> pd.DataFrame:
    """DAS of ``variable`` at every layer in ``layers`` (default: all, ``0..n_layers``) and rank in ``ranks``, with
    the controls of the module docstring (``controls=False``: ``das``, ``full`` and ``none`` only). One row per
    (layer, rank, method, split); ``df.attrs`` holds the pair counts. ``seed`` draws the pairs, the split, the
    initial bases and the controls. ``data`` (from :func:`~analysis.causal.das_data.das_data`) replaces the
    examples, and with them ``variable``, ``bit``, ``n_pairs``, ``solved_only`` and ``target``."""
    layers = list(range(model.cfg.n_layers + 1)) if layers is None else [int(L) for L in layers]
    for L in layers:
        hook_name(model, L)
    ranks = [int(r) for r in ranks]
    if not ranks or any(not 0 < r <= model.cfg.d_model for r in ranks):
        raise AnalysisError(f"ranks must be integers in 1..{model.cfg.d_model} (d_model), got {ranks}")
    data = data if data is not None else das_data(model, variable, n_pairs, bit=bit, seed=seed,
                                                  solved_only=solved_only, target=target)
    data.positions(position)
    streams = Streams(model, data, layers)
    twin = None
    if controls:
        from analysis.loading import random_init_twin
        twin = Streams(random_init_twin(model), data, layers)
    fit = dict(position=position, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)
    bar = tqdm(total=len(layers) * len(ranks) * (3 if controls else 1), desc=f"DAS ({data.variable})", unit="fit",
               disable=not progress, leave=False)
    rows = [row for L in layers for row in _layer_rows(streams, twin, L, ranks, fit, bar)]
    bar.close()
    df = pd.DataFrame(rows)
    df.insert(0, "variable", data.variable if data.bit is None else f"bit{data.bit}")
    df.insert(1, "position", position)
    for k, v in dict(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, target=data.target_rule).items():
        df[k] = v
    df.attrs.update(variable=data.variable, bit=data.bit, n_pairs_drawn=data.n_drawn, n_pairs_solved=data.n_solved,
                    n_pairs=len(data) // 2, n_train=len(data.train), n_test=len(data.test),
                    solved_only=data.solved_only)
    return df


def _layer_rows(streams: Streams, twin: Streams | None, layer: int, ranks, fit: dict, bar) -> list[dict]:
    """The rows of one layer: its references, then per rank the fitted subspace and (with ``twin``) its controls."""
    model, data, position, seed = streams.model, streams.data, fit["position"], fit["seed"]
    rows = []

    def add(rank, method, move, s=streams, targets=None, loss=np.nan):
        for split, idx in (("train", data.train), ("test", data.test)):
            rows.append(dict(layer=layer, hook=hook_name(model, layer), rank=rank, method=method, split=split,
                             **evaluate(s, layer, idx, move, position, targets), final_loss=loss))

    add(model.cfg.d_model, "full", _whole)
    add(0, "none", _none)
    if data.bit is not None and model.cfg.has_code:
        add(1, "code_direction", interchange(code_direction(model, data.bit)))
    arbitrary = _arbitrary(data, seed)
    for r in ranks:
        res = fit_subspace(streams, layer, r, **fit)
        bar.update()
        add(r, "das", interchange(res.basis), loss=res.losses[-1])
        if twin is None:
            continue
        add(r, "placebo", norm_matched(random_basis(model.cfg.d_model, r, seed + 1000 * layer + r), res.basis))
        ctl = fit_subspace(streams, layer, r, targets=arbitrary, **fit)
        bar.update()
        add(r, "arbitrary_labels", interchange(ctl.basis), targets=arbitrary, loss=ctl.losses[-1])
        init = fit_subspace(twin, layer, r, **fit)
        bar.update()
        add(r, "random_init", interchange(init.basis), s=twin, loss=init.losses[-1])
    return rows
