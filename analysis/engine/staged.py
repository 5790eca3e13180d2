"""The intervention engine: replace an activation at a site and unit, run the rest of the model, measure."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from analysis.errors import AnalysisError
from analysis.engine import names as hooknames


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
        """The hook point of this site at ``layer`` (e.g. ``blocks.3.hook_resid_post``)."""
        return self.hook.format(layer)

    def layers(self, cfg) -> list[int]:
        """The layers this site exists at in a model of ``cfg``: ``[0]`` for ``embed``, else every block."""
        return [0] if self.name == "embed" else list(range(cfg.n_layers))

    def units(self, cfg, n_pos: int) -> list[tuple]:
        """The units of one layer: ``(pos, head)``, ``None`` for 'every position' / 'not per head'."""
        positions = [None] if self.all_pos else list(range(n_pos))
        heads = list(range(cfg.n_heads)) if self.per_head else [None]
        return [(p, h) for p in positions for h in heads]

    def index(self, unit, offset: int = 0) -> tuple:
        """The index of ``unit`` into an activation without its batch axis, whose positions start at ``offset``."""
        p, h = unit
        if p is not None and p < offset:
            raise ValueError(f"unit position {p} lies before the run's first position {offset}")
        pos = slice(None) if p is None else p - offset
        return (pos,) if h is None else (pos, h)

    def live(self, src: torch.Tensor, base: torch.Tensor, units) -> list[int]:
        """Indices of the units whose ``src`` and ``base`` activations differ in some row (the others are exact
        no-ops), from one comparison of the whole tensors."""
        diff = src != base  # [batch, pos, (head,) features]
        by_pos_head = diff.flatten(3).any(-1) if self.per_head else diff.flatten(2).any(-1)[..., None]
        table = by_pos_head.any(0).tolist()  # [pos][head]
        out = []
        for i, (p, h) in enumerate(units):
            rows = table if p is None else [table[p]]
            if any(any(r) if h is None else r[h] for r in rows):
                out.append(i)
        return out

    def read(self, cache, layer: int) -> torch.Tensor:
        """The site's activation ``[batch, pos, ...]`` at ``layer`` from a cache (a dict-like of hook names)."""
        if self.delta:
            return cache[hooknames.resid_post(layer)] - cache[hooknames.resid_pre(layer)]
        return cache[self.hook_name(layer)]

    def cache_names(self, layers) -> list[str]:
        """The hook names a cache must hold to :meth:`~analysis.engine.staged.Site.read` this site at ``layers`` (both
        residual streams of each block for a ``delta`` site)."""
        if self.delta:
            return [hooknames.resid(i, n) for i in layers for n in ("pre", "post")]
        return [self.hook_name(i) for i in layers]


#: The sites by name: the residual stream (``embed``, ``resid_pre``, ``resid_mid``, ``resid_post``), the attention and
#: MLP outputs (``attn_out``, ``mlp_out``), the heads' outputs before ``o_proj`` (``z`` per position and head,
#: ``z_all_pos`` per head at every position) and a block's whole write to the residual stream (``block``).
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
    """The :data:`~analysis.engine.staged.SITES` entry ``name``; an unknown name raises
    :class:`~analysis.errors.AnalysisError` listing the known ones."""
    if name not in SITES:
        raise AnalysisError(f"unknown site {name!r}; use one of {list(SITES)}")
    return SITES[name]


def stop_layer(hooks) -> int | None:
    """The ``stop_at_layer`` of a forward that only needs ``hooks`` to fire: after the last block one of them reads
    (0 for ``hook_embed`` alone); None when one is past the blocks (the final norm), so the forward runs to the end."""
    deepest = -1
    for h in hooks:
        if h.startswith("blocks."):
            deepest = max(deepest, int(h.split(".")[1]))
        elif h != "hook_embed":
            return None
    return deepest + 1 if deepest >= 0 else 0


def cache_run(model, x, names, **kwargs):
    """One forward that keeps the activations of the hook points ``names``: ``(output, {name: activation})``.

    The same as ``model.run_with_cache(x, names_filter=...)`` without TransformerLens's per-call walk over every
    hook point (a fixed cost that small sweeps feel): plain forward hooks on the named points only, removed on
    exit, even on error."""
    cache, handles = {}, []
    mods = model.mod_dict
    try:
        for name in set(names):
            if name not in mods:
                raise AnalysisError(f"the model has no hook point {name!r}")
            handles.append(mods[name].register_forward_hook(
                lambda mod, inp, out, name=name: cache.__setitem__(name, out.detach())))
        out = model(x, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return out, cache


def kv_names(n_layers: int) -> list[str]:
    """The hook names whose cache :func:`~analysis.engine.staged.past_kv` reads."""
    return [hooknames.attn(i, h) for i in range(n_layers) for h in ("rot_k", "v")]


def past_kv(cache, layer: int, n_layers: int, start: int, repeat: int = 1):
    """Keys and values of positions ``< start`` for blocks ``layer..``, from a cache of
    :func:`~analysis.engine.staged.kv_names`, each row block repeated ``repeat`` times (unit-major). None when ``start``
    is 0."""
    if not start:
        return None
    out = []
    for i in range(layer, n_layers):
        pair = []
        for h in ("rot_k", "v"):
            t = cache[hooknames.attn(i, h)][:, :start]
            pair.append(t.transpose(1, 2).repeat(repeat, 1, 1, 1))
        out.append(tuple(pair))
    return out


#: A forward has a fixed cost (kernel launches, hooks, Python) that small sweeps feel more than their FLOPs: units
#: with different start positions share one forward from the earliest start while the positions computed twice (a
#: unit's rows times the positions before its own start) stay below this many; 0 plans one forward per start.
MERGE_POSITIONS = 1024


def groups(starts: list[int], rows_per_unit: int, max_batch: int, merge: int = MERGE_POSITIONS):
    """Plan a layer's sweep: ``(start, [unit indices])``, each group at most ``max_batch`` rows (at least one unit).
    Units are taken in order of their start position; a group runs from its first unit's start and takes later
    units while the recomputed positions (see :data:`~analysis.engine.staged.MERGE_POSITIONS`) stay within ``merge``."""
    order = sorted(range(len(starts)), key=lambda i: (int(starts[i]), i))
    per = max(1, max_batch // max(1, rows_per_unit))
    group: list[int] = []
    begin, waste = 0, 0
    for i in order:
        s = int(starts[i])
        extra = rows_per_unit * (s - begin)
        if group and len(group) < per and waste + extra <= merge:
            group.append(i)
            waste += extra
            continue
        if group:
            yield begin, group
        group, begin, waste = [i], s, 0
    if group:
        yield begin, group


def run_from(model, x, layer: int, *, past=None, last_only: bool = False):
    """One forward of blocks ``layer..`` on ``x`` (``[rows, pos, d_model]``: the residual stream entering ``layer``,
    built by the caller; ``past`` the keys and values of earlier positions, see
    :func:`~analysis.engine.staged.past_kv`). Returns logits ``[rows, pos, vocab]``, or ``[rows, 1, vocab]`` (the final
    position) with ``last_only``."""
    if not last_only:
        return model(x, start_at_layer=layer, past_kv=past)
    out = model(x, start_at_layer=layer, stop_at_layer=model.cfg.n_layers, past_kv=past)
    return model.unembed(model.ln_final(out[:, -1:]))


@dataclass
class Stage:
    """Rows that join a staged forward at ``layer``: ``x`` (``[r, pos, d_model]``, the residual stream entering
    ``layer`` at the run's positions), their ``edits`` at the site of ``layer`` (rows within this stage), and
    ``past_rows``, the rows of the base cache whose keys and values stand for the positions before the run."""

    layer: int
    x: torch.Tensor
    edits: list
    past_rows: torch.Tensor | None = None


def _shift(rows, base: int, n: int) -> slice:
    start, stop, _ = rows.indices(n)
    return slice(base + start, base + stop)


def run_stages(model, site_: Site, stages: list[Stage], *, kv_cache=None, offset: int = 0, last_only: bool = False):
    """One forward for units of several layers: the rows of a stage join the batch at the stage's layer (earlier
    layers are not recomputed for them), and each stage's edits are written at ``site_`` of its own layer only.
    Stages must be given in order of layer; output rows follow that order. ``kv_cache`` (the base run's
    :func:`~analysis.engine.staged.kv_names`) supplies the keys and values of positions ``< offset``. Returns logits as
    :func:`~analysis.engine.staged.run_from`."""
    if any(a.layer > b.layer for a, b in zip(stages, stages[1:])):
        raise ValueError("stages must be sorted by layer")
    if offset and any(st.past_rows is None for st in stages):
        raise ValueError("a run from a later position needs each stage's past_rows (the cache rows it continues)")
    T = stages[0].x.shape[1]
    cos, sin = model.rope_cos[offset:offset + T], model.rope_sin[offset:offset + T]
    x, past_rows = None, []
    for layer in range(stages[0].layer, model.cfg.n_layers):
        edits = []
        for st in (st for st in stages if st.layer == layer):
            base = 0 if x is None else x.shape[0]
            r = st.x.shape[0]
            xi = st.x
            if site_.input_layer:  # the edited activation is the block's input itself
                xi = xi.clone()
                for rows, unit, value in st.edits:
                    xi[(rows, *site_.index(unit, offset))] = value
            else:
                edits += [(_shift(rows, base, r), unit, value) for rows, unit, value in st.edits]
            x = xi if x is None else torch.cat([x, xi])
            if offset:
                past_rows.append(st.past_rows)
        past = None
        if offset:
            idx = torch.cat(past_rows)
            past = tuple(kv_cache[hooknames.attn(layer, h)][idx, :offset].transpose(1, 2)
                         for h in ("rot_k", "v"))
        handle = None
        if edits:
            x_in = x

            def write(mod, inp, act, edits=edits, x_in=x_in):
                act = act.clone()
                for rows, unit, value in edits:
                    idx = (rows, *site_.index(unit, offset))
                    act[idx] = x_in[idx] + value if site_.delta else value
                return act
            handle = model.mod_dict[site_.hook_name(layer)].register_forward_hook(write)
        try:
            x = model.blocks[layer](x, cos, sin, past)
        finally:
            if handle is not None:
                handle.remove()
    return model.unembed(model.ln_final(x[:, -1:] if last_only else x))


def first_difference(src, base) -> int:
    """The first position at which any row of ``src`` and ``base`` differs (``pos`` is axis 1); the length if none."""
    diff = (src != base).reshape(src.shape[0], src.shape[1], -1).any(-1).any(0)
    return int(diff.nonzero()[0, 0]) if diff.any() else src.shape[1]


def unit_start(unit, default: int) -> int:
    """The first position a unit touches: its position, or ``default`` for an every-position unit."""
    return default if unit[0] is None else max(int(unit[0]), default)
