"""Activations of chosen hook points over a corpus, with what is known about each token, in memory or on disk."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from fixedid.atomic import fsync_dir

from analysis import engine
from analysis.corpus import DEFAULT_TOKENS, corpus_tokens
from analysis.outputs import read_csv
from analysis.errors import AnalysisError
from analysis.engine import names as hooknames

DTYPES = {"float32": np.float32, "float16": np.float16}
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16}
N_FREQ_BUCKETS = 5


def default_hooks(model) -> list[str]:
    """The hook points :func:`~analysis.readouts.activations.collect` keeps by default, in depth order:
    ``hook_embed``, ``blocks.{i}.hook_resid_pre`` of every block but the first (which equals ``hook_embed``) and
    ``ln_final.hook_normalized``."""
    return [hooknames.EMBED] + [hooknames.resid_pre(i) for i in range(1, model.cfg.n_layers)] + \
        [hooknames.FINAL_NORMALIZED]


@dataclass
class Activations:
    """``acts[hook]``: ``[n_tokens, width]`` (a memmap when stored on disk); ``tokens``: one row per token, in the same
    order; ``meta``: the model's interface, code settings and the hook order (depth)."""

    acts: dict[str, np.ndarray]
    tokens: pd.DataFrame
    meta: dict = field(default_factory=dict)

    @property
    def hooks(self) -> list[str]:
        """The hook points held, in the order they were collected (the keys of ``acts``)."""
        return list(self.acts)

    def __len__(self) -> int:
        return len(self.tokens)


def _meta(model, hooks, dtype, n, T) -> dict:
    c = model.cfg
    return {"interface": c.interface, "vocab_size": c.vocab_size, "n_bits": c.n_bits, "n_layers": c.n_layers,
            "hooks": hooks, "dtype": dtype, "n_sequences": n, "seq_len": T,
            "recoding": None if c.recoding() is None else c.recoding().to_json(), "bit_order": c.bit_order,
            "table_seed": c.table_seed}


def token_table(ids: torch.Tensor) -> pd.DataFrame:
    """``seq, pos, id, prev_id, freq_bucket`` for token ids ``[n, T]`` (row-major order)."""
    n, T = ids.shape
    flat = ids.reshape(-1).cpu().numpy()
    prev = np.concatenate([np.full((n, 1), -1), ids[:, :-1].cpu().numpy()], axis=1).reshape(-1)
    counts = np.bincount(flat)
    freq = counts[flat]
    # quantile buckets of the per-token frequency (ties kept together), 0 = rarest
    ranks = pd.Series(freq).rank(method="average", pct=True).to_numpy()
    bucket = np.minimum((ranks * N_FREQ_BUCKETS).astype(int), N_FREQ_BUCKETS - 1)
    return pd.DataFrame({"seq": np.repeat(np.arange(n), T), "pos": np.tile(np.arange(T), n), "id": flat,
                         "prev_id": prev, "freq_bucket": bucket})


@torch.inference_mode()
def collect(model, data=None, *, hooks=None, tokens: int = DEFAULT_TOKENS, out=None, dtype: str = "float32",
            max_batch: int = 64, progress: bool = False) -> Activations:
    """Collect ``hooks`` over the data (see the module docstring); ``out``: a directory for an on-disk store."""
    if dtype not in DTYPES:
        raise AnalysisError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    hooks = default_hooks(model) if hooks is None else list(hooks)
    unknown = [h for h in hooks if h not in model.mod_dict]
    if unknown or not hooks:
        raise AnalysisError(f"unknown hook point(s) {unknown or '(none given)'}; e.g. {default_hooks(model)}")
    x = corpus_tokens(model, data, tokens=tokens)
    n, T = x.shape
    table = token_table(x)
    if data is None:  # the checkpoint's own validation stream of the built-in language: add its latent labels
        from analysis.labels import validation_labels
        labels = validation_labels(model, n * T)
        if not np.array_equal(labels.attrs["ids"], table["id"].to_numpy()):
            raise AnalysisError("the regenerated labelled documents do not tokenise to the validation windows; "
                                "the checkpoint's data settings do not match this version of the built-in language")
        table = pd.concat([table, labels.reset_index(drop=True)], axis=1)
    meta = _meta(model, hooks, dtype, n, T)
    out = None if out is None else Path(out)
    tmp = None
    if out is not None:
        if out.exists():
            raise AnalysisError(f"{out} exists; choose a new directory for the activation store")
        tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    acts: dict = {}  # allocated once the first batch shows each hook's width (no forward of its own)
    device = model.unembed.weight.device
    try:
        for i in tqdm(range(0, n, max_batch), desc="activations", unit="batch", disable=not progress, leave=False):
            chunk = x[i:i + max_batch].to(device)
            rows = slice(i * T, (i + chunk.shape[0]) * T)
            if not acts and tmp is None and chunk.shape[0] == n:  # one batch, in memory: no copy at all
                acts = _own_batch(model, chunk, hooks, TORCH_DTYPES[dtype])
                continue
            if not acts:  # the first batch: its cache sizes the outputs, which it is then copied into
                acts = _first_batch(model, chunk, hooks, n * T, DTYPES[dtype], tmp)
                outs = {h: torch.from_numpy(acts[h]) for h in hooks}
                continue
            _run_into(model, chunk, hooks, {h: outs[h][rows] for h in hooks})
        if out is None:
            return Activations(acts, table, meta)
        for a in acts.values():
            a.flush()
        table.to_csv(tmp / "tokens.csv", index=False)
        index = dict(meta, files={h: f"{i:02d}.npy" for i, h in enumerate(hooks)})
        (tmp / "index.json").write_text(json.dumps(index, indent=1))
        del acts
        os.replace(tmp, out)
        fsync_dir(out.parent)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return load_activations(out)


def _first_batch(model, chunk, hooks, n_rows: int, dtype, tmp) -> dict:
    """The outputs ``{hook: [n_rows, width]}`` (arrays, or memmaps under ``tmp``), sized by the first batch's cache,
    which fills their first rows."""
    cache = _run(model, chunk, hooks)
    widths = _widths(cache, hooks, tuple(chunk.shape))
    acts = {}
    for j, h in enumerate(hooks):
        acts[h] = np.empty((n_rows, widths[h]), dtype=dtype) if tmp is None else \
            np.lib.format.open_memmap(tmp / f"{j:02d}.npy", mode="w+", dtype=dtype, shape=(n_rows, widths[h]))
        torch.from_numpy(acts[h])[:chunk.numel()] = cache[h].reshape(-1, widths[h])
    return acts


def _own_batch(model, chunk, hooks, dtype) -> dict:
    """The outputs of a corpus that is one batch: the forward's own activations as ``[rows, width]`` arrays, not
    copies (no hook point of the model is written in place after it is read, and none is a parameter's view),
    converted only where ``dtype`` or the device asks; a tensor read at two hook points is copied for the second."""
    cache = _run(model, chunk, hooks)
    widths = _widths(cache, hooks, tuple(chunk.shape))
    acts, seen = {}, set()
    for h in hooks:
        a = cache[h].reshape(-1, widths[h]).to("cpu", dtype).contiguous()
        if a.untyped_storage().data_ptr() in seen:  # two hook points of one tensor (hook_embed, blocks.0's input)
            a = a.clone()
        seen.add(a.untyped_storage().data_ptr())
        acts[h] = a.numpy()
    return acts


def _widths(cache, hooks, shape) -> dict[str, int]:
    """Each hook point's width from a batch's cache (``shape``: the batch's ``[rows, pos]``); a hook point that is
    not one vector per token is refused."""
    for h in hooks:
        got = tuple(cache[h].shape)
        if len(got) < 3 or got[:2] != shape or h.endswith(("hook_pattern", "hook_attn_scores")):
            raise AnalysisError(f"hook point {h} is not one vector per token (its activation is {list(got)} for "
                                f"{shape[0]} sequence(s) of {shape[1]}); use a residual, attn_out, mlp_out or a "
                                "per-head z/q/k/v/result hook")
    return {h: int(np.prod(cache[h].shape[2:])) for h in hooks}


def _hooked_forward(model, chunk, hooks, sink) -> None:
    """One forward of ``chunk`` that stops where the deepest of ``hooks`` is read (at the final norm rather than the
    unembedding, which no hook point needs), each hook point's activation handed to ``sink(name, activation)``."""
    def hook(name):
        def read(mod, inp, out):  # returns None: the forward goes on with its own activation
            sink(name, out)
        return read

    stop = engine.stop_layer(hooks)
    mods, handles = model.mod_dict, []
    try:
        for h in hooks:
            handles.append(mods[h].register_forward_hook(hook(h)))
        if stop is None and all(h.startswith(("hook_embed", "blocks.", "ln_final.")) for h in hooks):
            model.ln_final(model(chunk, stop_at_layer=model.cfg.n_layers))
        else:
            model(chunk, stop_at_layer=stop)
    finally:
        for handle in handles:
            handle.remove()


def _run(model, chunk, hooks) -> dict:
    """The cache of ``hooks`` for one batch."""
    cache = {}
    _hooked_forward(model, chunk, hooks, lambda h, out: cache.__setitem__(h, out.detach()))
    return cache


def _run_into(model, chunk, hooks, into: dict) -> None:
    """One batch whose hook points copy their activations straight into ``into[hook]`` (rows of the outputs): no
    cache, and no copy after the forward."""
    _hooked_forward(model, chunk, hooks, lambda h, out: into[h].copy_(out.detach().reshape(into[h].shape)))


def load_activations(path) -> Activations:
    """Open an activation store written by :func:`~analysis.readouts.activations.collect` (memmaps: nothing is read
    until used)."""
    path = Path(path)
    try:
        index = json.loads((path / "index.json").read_text())
        acts = {h: np.load(path / f, mmap_mode="r") for h, f in index.pop("files").items()}
        table = read_csv(path / "tokens.csv")  # a token such as "None" or "null" stays itself
    except (OSError, ValueError, KeyError) as e:
        raise AnalysisError(f"{path} is not an activation store written by analysis.readouts.activations.collect ({e})") \
            from None
    return Activations(acts, table, index)


__all__ = ["Activations", "collect", "load_activations", "token_table", "default_hooks"]
