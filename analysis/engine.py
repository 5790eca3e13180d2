"""The intervention engine: replace an activation at a site and unit, run the rest of the model, measure.

Activation patching, component ablations and the bit x layer maps are all one operation: write a value into one
unit of one site at one layer, in many rows of one batched forward. This module holds what those analyses share:

- :class:`Site`: where a site lives (hook name per layer), how its units are enumerated (a position, a head at a
  position, a head at every position, or the whole activation), and how one unit is read and written;
- :func:`groups`: the plan of a layer's sweep - units that start at the same position share a forward, chunked to
  ``max_batch`` rows;
- :func:`past_kv`: the cached keys and values of the unedited positions, so a forward starts at the first position a
  unit touches (positions before it are those of the base run: a causal model does not look ahead);
- :func:`run_edits`: one batched forward from layer ``l`` (the cached residual stream entering it) with each row
  block's unit overwritten; logits at the final position only when the metric reads nothing else.

A unit is ``(pos, head)``: ``pos`` None means every position, ``head`` None the whole activation (every head).
Rows are unit-major: the rows of unit ``u`` are ``u * n .. (u + 1) * n - 1`` for ``n`` base sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import AnalysisError


@dataclass(frozen=True)
class Site:
    """One kind of activation. ``delta``: the unit is a block's whole write to the residual stream
    (``resid_post - resid_pre``), so writing ``v`` sets ``resid_post = resid_pre + v``."""

    name: str
    hook: str  # a format string taking the layer
    per_head: bool = False
    all_pos: bool = False
    delta: bool = False
    input_layer: bool = False  # the activation is the residual stream entering its layer (embed, resid_pre)

    def hook_name(self, layer: int) -> str:
        return self.hook.format(layer)

    def layers(self, cfg) -> list[int]:
        return [0] if self.name == "embed" else list(range(cfg.n_layers))

    def units(self, cfg, n_pos: int, *, per_position: bool = True) -> list[tuple]:
        """The units of one layer: ``(pos, head)``, ``None`` for 'every position' / 'not per head'."""
        positions = list(range(n_pos)) if per_position and not self.all_pos else [None]
        heads = list(range(cfg.n_heads)) if self.per_head else [None]
        return [(p, h) for p in positions for h in heads]

    def index(self, unit, offset: int = 0) -> tuple:
        """The index of ``unit`` into an activation without its batch axis, whose positions start at ``offset``."""
        p, h = unit
        pos = slice(None) if p is None else p - offset
        return (pos,) if h is None else (pos, h)

    def read(self, cache, layer: int) -> torch.Tensor:
        """The site's activation ``[batch, pos, ...]`` at ``layer`` from a cache (a dict-like of hook names)."""
        if self.delta:
            return cache[f"blocks.{layer}.hook_resid_post"] - cache[f"blocks.{layer}.hook_resid_pre"]
        return cache[self.hook_name(layer)]

    def cache_names(self, layers) -> list[str]:
        if self.delta:
            return [f"blocks.{i}.hook_{n}" for i in layers for n in ("resid_pre", "resid_post")]
        return [self.hook_name(i) for i in layers]


SITES: dict[str, Site] = {s.name: s for s in (
    Site("embed", "hook_embed", input_layer=True),
    Site("resid_pre", "blocks.{}.hook_resid_pre", input_layer=True),
    Site("resid_mid", "blocks.{}.hook_resid_mid"),
    Site("resid_post", "blocks.{}.hook_resid_post"),
    Site("attn_out", "blocks.{}.hook_attn_out"),
    Site("mlp_out", "blocks.{}.hook_mlp_out"),
    Site("z", "blocks.{}.attn.hook_z", per_head=True),
    Site("z_all_pos", "blocks.{}.attn.hook_z", per_head=True, all_pos=True),
    Site("block", "blocks.{}.hook_resid_post", delta=True),
)}


def site(name: str) -> Site:
    if name not in SITES:
        raise AnalysisError(f"unknown site {name!r}; use one of {list(SITES)}")
    return SITES[name]


def kv_names(n_layers: int) -> list[str]:
    """The hook names whose cache :func:`past_kv` reads."""
    return [f"blocks.{i}.attn.hook_{h}" for i in range(n_layers) for h in ("rot_k", "v")]


def past_kv(cache, layer: int, n_layers: int, start: int, repeat: int = 1, rows=None):
    """Keys and values of positions ``< start`` for blocks ``layer..``, from a cache of :func:`kv_names`, each row
    block repeated ``repeat`` times (unit-major); ``rows`` selects base rows first. None when ``start`` is 0."""
    if not start:
        return None
    out = []
    for i in range(layer, n_layers):
        pair = []
        for h in ("rot_k", "v"):
            t = cache[f"blocks.{i}.attn.hook_{h}"][:, :start]
            if rows is not None:
                t = t[rows]
            pair.append(t.transpose(1, 2).repeat(repeat, 1, 1, 1))
        out.append(tuple(pair))
    return out


def groups(starts: list[int], rows_per_unit: int, max_batch: int):
    """Plan a layer's sweep: ``(start, [unit indices])`` with the units of one start position together, each
    group at most ``max_batch`` rows (at least one unit)."""
    by_start: dict[int, list[int]] = {}
    for i, s in enumerate(starts):
        by_start.setdefault(int(s), []).append(i)
    per = max(1, max_batch // max(1, rows_per_unit))
    for s in sorted(by_start):
        idx = by_start[s]
        for c in range(0, len(idx), per):
            yield s, idx[c:c + per]


def run_edits(model, x, layer: int, site_: Site, edits, *, past=None, offset: int = 0, last_only: bool = False):
    """One forward of blocks ``layer..`` on ``x`` (``[rows, pos, d_model]``: the residual stream entering ``layer``
    at positions ``offset..``), with ``edits`` written at ``site_`` of ``layer``: ``(rows, unit, value)`` triples,
    ``value`` broadcastable to ``act[rows][site_.index(unit, offset)]``. Returns logits ``[rows, pos, vocab]``, or
    ``[rows, 1, vocab]`` (the final position) with ``last_only``."""
    def write(act, base=None):
        act = act.clone()
        for rows, unit, value in edits:
            idx = (rows, *site_.index(unit, offset))
            act[idx] = value if base is None else base[idx] + value
        return act

    n_layers = model.cfg.n_layers
    stop = n_layers if last_only else None
    if site_.input_layer:
        out = model(write(x), start_at_layer=layer, stop_at_layer=stop, past_kv=past)
    elif site_.delta:
        out = model.run_with_hooks(x, start_at_layer=layer, stop_at_layer=stop, past_kv=past,
                                   fwd_hooks=[(site_.hook_name(layer), lambda act, hook: write(act, x))])
    else:
        out = model.run_with_hooks(x, start_at_layer=layer, stop_at_layer=stop, past_kv=past,
                                   fwd_hooks=[(site_.hook_name(layer), lambda act, hook: write(act))])
    if last_only:
        return model.unembed(model.ln_final(out[:, -1:]))
    return out


def first_difference(src, base) -> int:
    """The first position at which any row of ``src`` and ``base`` differs (``pos`` is axis 1); the length if none."""
    diff = (src != base).reshape(src.shape[0], src.shape[1], -1).any(-1).any(0)
    return int(diff.nonzero()[0, 0]) if diff.any() else src.shape[1]


def unit_start(unit, default: int) -> int:
    """The first position a unit touches: its position, or ``default`` for an every-position unit."""
    return default if unit[0] is None else max(int(unit[0]), default)
