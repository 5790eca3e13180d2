"""Causal erasure: remove a concept from hook points with LEACE, and measure what the model loses beyond a placebo."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from analysis.corpus import MEASURE_TOKENS, corpus_tokens
from analysis.errors import AnalysisError
from analysis.readouts.activations import collect
from analysis.readouts.probes import Target, _bit_targets, control_labels, fit_probes, split_by_sequence, targets
from analysis.stats import t_interval
from analysis.engine import names as hooknames

#: The probe-target family (:mod:`analysis.readouts.probes`) of each concept prefix erasure accepts.
FAMILY_OF = {"code_bit": "code_bits", "canonical_bit": "canonical_bits", "xor": "xor", "token": "token",
             "prev_token": "prev_token", "freq_bucket": "freq_bucket"}
#: Singular values of ``I - P`` below this share of the largest are rounding, not a direction erased.
RANK_RTOL = 1e-10
#: Seeded draws :func:`~analysis.causal.erasure.control_concept` tries for a placebo with as many classes as the
#: concept.
PLACEBO_ATTEMPTS = 10


# ------------------------------------------------------------------------------------------------------ concepts
def _concept(acts, concept: str, seed: int) -> Target:
    family = FAMILY_OF.get(concept.split(":")[0])
    if family is None:
        raise AnalysisError(f"unknown concept {concept!r}; use a class target of analysis.readouts.probes, e.g. "
                            "canonical_bit:3, code_bit:5, xor:0,1, token, prev_token, freq_bucket")
    ids = acts.tokens["id"].to_numpy()
    if family == "xor":  # any pair, not only the randomly drawn ones
        try:
            i, k = (int(v) for v in concept.split(":")[1].split(","))
        except ValueError:
            raise AnalysisError(f"an XOR concept is xor:I,K with two canonical bit indices, got {concept!r}") from None
        n = acts.meta["n_bits"]
        if not (0 <= i < n and 0 <= k < n) or i == k:
            raise AnalysisError(f"{concept!r}: bits must be two different indices in 0..{n - 1}")
        t = Target(concept, (((ids >> i) ^ (ids >> k)) & 1).astype(np.int64), "class")
    else:
        made = (_bit_targets(acts.meta, ids, [family], xor_pairs=0, seed=seed) if family.endswith("_bits")
                else targets(acts, [family], seed=seed))
        found = [t for t in made if t.name == concept]
        if not found:
            raise AnalysisError(f"unknown concept {concept!r} for this model (e.g. bit indices "
                                f"0..{acts.meta['n_bits'] - 1})")
        t = found[0]
    if len(np.unique(t.labels[t.labels >= 0])) < 2:
        raise AnalysisError(f"{concept} is constant over these tokens: there is nothing to erase")
    return t


def control_concept(t: Target, type_ids: np.ndarray, fit_rows: np.ndarray, seed: int) -> tuple[np.ndarray, int]:
    """The placebo's labels for concept ``t``: the probes' control task (one random label per token type, drawn from
    ``t``'s token-level label distribution). Of up to ``PLACEBO_ATTEMPTS`` seeded draws, the first whose fit
    rows hold as many classes as ``t``'s, else the first with the most classes (a concept with one class per type,
    ``token``, can rarely keep them all). ``(labels, seed used)``."""
    want = len(np.unique(t.labels[fit_rows]))
    best = None
    for attempt in range(PLACEBO_ATTEMPTS):
        s = seed + 7919 * attempt
        labels = control_labels(t, type_ids, seed=s)
        got = len(np.unique(labels[fit_rows & (labels >= 0)]))
        if got == want:
            return labels, s
        if best is None or got > best[0]:
            best = (got, labels, s)
    if best[0] < 2:
        raise AnalysisError(f"{t.name}: {PLACEBO_ATTEMPTS} control draws all gave one class over the fit tokens (a "
                            "class held by too few token types); give more --tokens or choose another concept")
    return best[1], best[2]


def _one_hot(labels: np.ndarray) -> torch.Tensor:
    classes = np.unique(labels)
    if len(classes) == 2:
        return torch.from_numpy((labels == classes[1]).astype(np.float64))[:, None]
    # k - 1 indicator columns: the centred one-hot code of k classes has rank k - 1, so this erases the same subspace
    return torch.from_numpy((labels[:, None] == classes[None, 1:]).astype(np.float64))


# ------------------------------------------------------------------------------------------- the eraser's edit
def true_rank(eraser, rtol: float = RANK_RTOL) -> int:
    """The number of directions ``eraser`` changes: the numerical rank of ``I - P = proj_left @ proj_right``."""
    change = eraser.proj_left @ eraser.proj_right
    s = torch.linalg.svdvals(change)
    return 0 if s.numel() == 0 or float(s[0]) == 0.0 else int((s > rtol * s[0]).sum())


def edit_norm(eraser, x: torch.Tensor) -> float:
    """The mean over rows of ``||x - eraser(x)||^2``."""
    return float(((x - eraser(x)) ** 2).sum(1).mean())


def _on(fn, device):
    """An eraser fitted on the CPU, with its tensors on ``device`` (where the model's activations are)."""
    return dataclasses.replace(fn, **{k: None if v is None else v.to(device)
                                     for k, v in (("proj_left", fn.proj_left), ("proj_right", fn.proj_right),
                                                  ("bias", fn.bias))})


def _scaled(fn, x: torch.Tensor, scale: float) -> torch.Tensor:
    """``x`` edited by ``fn`` with the edit ``x - fn(x)`` scaled by ``scale``."""
    return fn(x) if scale == 1.0 else x - scale * (x - fn(x))


def _hooked(model, hook: str, fn, scale: float = 1.0):
    mod = model.mod_dict[hook]
    fn = _on(fn, model.unembed.weight.device)

    def edit(module, inputs, out):  # a per-head hook [batch, pos, head, d_head] is erased as its concatenated heads
        return _scaled(fn, out.reshape(*out.shape[:2], -1).double(), scale).to(out.dtype).reshape(out.shape)

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
def _task_scores(model, batches) -> dict[str, float]:
    scores = {}
    for task, b in batches.items():
        last = model(b.clean)[:, -1].float()
        ld = last.gather(1, b.answer[:, None])[:, 0] - last.gather(1, b.wrong[:, None])[:, 0]
        scores[f"acc_{task}"], scores[f"logit_diff_{task}"] = float((ld > 0).float().mean()), float(ld.mean())
    return scores


# ---------------------------------------------------------------------------------------------------- the study
def resid_hooks(model) -> list[str]:
    """Every hook point of the residual stream between blocks, input to output: ``blocks.{l}.hook_resid_pre`` for
    each block, then the last block's ``hook_resid_post``."""
    n = model.cfg.n_layers
    return hooknames.stream(n)


def depth_of(hook: str) -> float:
    """The residual stream's depth at ``hook`` (see the module docstring); NaN for a hook point off the stream."""
    if hook == "hook_embed":
        return 0.0
    parts = hook.split(".")
    if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit():
        offset = {"hook_resid_pre": 0.0, "hook_resid_mid": 0.5, "hook_resid_post": 1.0}.get(parts[2])
        if offset is not None:
            return int(parts[1]) + offset
    return float("nan")


def _interval(values, prefix: str) -> dict[str, float]:
    m, lo, hi = t_interval(values)
    return {prefix: m, f"{prefix}_lo": lo, f"{prefix}_hi": hi}


def _request(model, concept, hook, placebo_draws, test_fraction) -> tuple[list[str], list[str]]:
    """The concepts and hook points asked for, as lists, once the arguments are checked."""
    if model.training:
        raise AnalysisError("the model is in train mode; call model.eval() (analysis.load returns it in eval mode)")
    concepts = [concept] if isinstance(concept, str) else list(concept)
    hooks = [hook] if isinstance(hook, str) else list(hook)
    if not concepts or not hooks:
        raise AnalysisError("give at least one concept and one hook point")
    for h in hooks:
        if h not in model.mod_dict:
            raise AnalysisError(f"unknown hook point {h!r}; e.g. blocks.1.hook_resid_pre")
    if isinstance(placebo_draws, bool) or not isinstance(placebo_draws, int) or placebo_draws < 1:
        raise AnalysisError(f"placebo_draws must be a positive integer, got {placebo_draws!r}")
    if not 0 < test_fraction < 1:
        raise AnalysisError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    return concepts, hooks


@dataclasses.dataclass(frozen=True)
class _HeldOut:
    """The split, and the held-out windows with their unedited losses and task scores: what every edit is measured
    against."""

    test: np.ndarray  # [tokens] True on the held-out sequences' rows
    test_seqs: np.ndarray
    x_test: torch.Tensor
    base: np.ndarray  # per held-out sequence
    batches: dict
    base_scores: dict
    split: dict  # the recorded split's columns


def _held_out(model, x: torch.Tensor, acts, tasks, n_pairs: int, test_fraction: float, seed: int) -> _HeldOut:
    """Split the windows by sequence and measure the unedited model on the held-out ones and the tasks' prompts."""
    from analysis.tasks import task_pairs

    seq = acts.tokens["seq"].to_numpy()
    test = split_by_sequence(seq, test_fraction=test_fraction, seed=seed)
    test_seqs = np.unique(seq[test])
    x_test = x[torch.from_numpy(test_seqs).to(x.device)]
    base = _losses(model, x_test)
    batches = {task: task_pairs(model, task, n_pairs, seed=0) for task in tasks}
    base_scores = _task_scores(model, batches)
    split = {"n_fit_sequences": int(len(np.unique(seq[~test]))), "n_test_sequences": int(len(test_seqs)),
             "test_fraction": float(test_fraction), "split_seed": int(seed)}
    return _HeldOut(test, test_seqs, x_test, base, batches, base_scores, split)


@dataclasses.dataclass(frozen=True)
class _Site:
    """One concept at one hook point: the activations (float64) and what every condition's row shares."""

    t: Target
    hook: str
    a: torch.Tensor  # [tokens, d]
    a_test: torch.Tensor  # the held-out rows
    fit_rows: np.ndarray  # the rows the concept's eraser is fitted on
    spread: float  # mean squared distance of the held-out activations from the fit mean
    majority: float  # held-out accuracy of the fit rows' majority class


def _site(acts, held: _HeldOut, t: Target, h: str) -> _Site:
    """The activations of ``t`` at ``h``, its fit rows, spread and majority baseline."""
    # float64: a float32 eraser leaves class-correlated residue of ~1e-6 in the erased directions, which a
    # standardised probe reads back perfectly on a discrete input such as the fixed code
    a = torch.from_numpy(np.asarray(acts.acts[h], dtype=np.float64))
    test = held.test
    fit_rows = ~test & (t.labels >= 0)
    a_test = a[torch.from_numpy(test)]
    spread = float(((a_test - a[torch.from_numpy(fit_rows)].mean(0)) ** 2).sum(1).mean())
    keep = t.labels[test] >= 0
    vals, counts = np.unique(t.labels[fit_rows], return_counts=True)
    if len(vals) < 2:
        raise AnalysisError(f"{t.name} takes one value on the sequences the eraser is fitted on (the other class "
                            "occurs only in the held-out ones): give more --tokens or another --test-fraction")
    majority = float((t.labels[test][keep] == vals[counts.argmax()]).mean())
    return _Site(t, h, a, a_test, fit_rows, spread, majority)


# ------------------------------------------------------------------------------------- fit, measure, protocol
@dataclasses.dataclass(frozen=True)
class _Fitted:
    """One condition's edit: the eraser fitted to ``labels`` (None for ``none``, the model as is) and the factor its
    edit is scaled by."""

    condition: str
    draw: int | None
    placebo_seed: int | None
    labels: np.ndarray
    eraser: object = None
    scale: float = 1.0


def _fit_erasers(site: _Site, type_ids: np.ndarray, test: np.ndarray, *, placebo_draws: int, match_norm: bool,
                 seed: int) -> tuple[_Fitted, list[_Fitted]]:
    """The LEACE eraser of ``site``'s concept and its placebo draws, fitted on the fit sequences; with
    ``match_norm``, each placebo's edit scaled to the size of the concept's edit on the held-out rows."""
    from concept_erasure import LeaceEraser

    def fit(labels):
        rows = ~test & (labels >= 0)
        return LeaceEraser.fit(site.a[torch.from_numpy(rows)], _one_hot(labels[rows]))

    t = site.t
    draws = [control_concept(t, type_ids, site.fit_rows, seed=1000 * seed + d) for d in range(placebo_draws)]
    leace = _Fitted("leace", None, None, t.labels, fit(t.labels))
    concept_norm = edit_norm(leace.eraser, site.a_test)
    placebos = []
    for d, (labels, used) in enumerate(draws):
        fn = fit(labels)
        scale = _matched_scale(fn, site.a_test, concept_norm) if match_norm else 1.0
        placebos.append(_Fitted("placebo", d, used, labels, fn, scale))
    return leace, placebos


def _matched_scale(fn, a_test: torch.Tensor, concept_norm: float) -> float:
    """The factor that gives ``fn``'s edit of ``a_test`` the mean squared norm ``concept_norm``."""
    own = edit_norm(fn, a_test)
    return float(np.sqrt(concept_norm / own)) if own > 0 else 1.0


def _measure(model, held: _HeldOut, site: _Site, f: _Fitted) -> tuple[dict, np.ndarray, np.ndarray]:
    """The row of one fitted edit (its labels, rank and size, the concept's probe on the edited activations, the
    held-out losses and task scores under it), with the per-sequence losses and their change from the model as is."""
    fn, scale, t = f.eraser, f.scale, site.t
    edited = site.a if fn is None else _scaled(fn, site.a, scale)
    probe = fit_probes(edited.numpy(), [t], held.test)[t.name]
    if fn is None:
        loss, scores = held.base, held.base_scores
    else:
        handle = _hooked(model, site.hook, fn, scale)
        try:
            loss, scores = _losses(model, held.x_test), _task_scores(model, held.batches)
        finally:
            handle.remove()
    delta = loss - held.base
    _, fc = np.unique(f.labels[~held.test & (f.labels >= 0)], return_counts=True)
    row = {"concept": t.name, "hook": site.hook, "depth": depth_of(site.hook), "condition": f.condition,
           "draw": f.draw, "placebo_seed": f.placebo_seed, "n_classes": int(len(fc)),
           "balance": float(fc.max() / fc.sum()), "rank": 0 if fn is None else true_rank(fn),
           "edit_norm": 0.0 if fn is None else scale ** 2 * edit_norm(fn, site.a_test), "edit_scale": scale,
           "probe": probe, "majority": site.majority, "loss": float(loss.mean()), **_interval(delta, "delta_loss"),
           **held.split, **scores}
    row["edit_share"] = row["edit_norm"] / site.spread if site.spread > 0 else float("nan")
    return row, loss, delta


def _seq_frame(held: _HeldOut, site: _Site, f: _Fitted, loss: np.ndarray, delta: np.ndarray) -> pd.DataFrame:
    """The per-sequence rows of one edit."""
    return pd.DataFrame({"concept": site.t.name, "hook": site.hook, "depth": depth_of(site.hook),
                         "condition": f.condition, "draw": f.draw, "seq": held.test_seqs, "base_loss": held.base,
                         "loss": loss, "delta_loss": delta})


def _site_rows(model, acts, held: _HeldOut, t: Target, h: str, *, placebo_draws: int, match_norm: bool,
               seed: int) -> tuple[list[dict], list[pd.DataFrame]]:
    """The rows of one concept at one hook point (``none``, ``leace``, a ``placebo`` per draw; the ``leace`` row
    with ``minus_placebo``) and the per-sequence frames of the edits."""
    site = _site(acts, held, t, h)
    leace, placebos = _fit_erasers(site, acts.tokens[t.type_key].to_numpy(), held.test,
                                   placebo_draws=placebo_draws, match_norm=match_norm, seed=seed)
    rows = [_measure(model, held, site, _Fitted("none", None, None, t.labels))[0]]
    seqs, deltas = [], []
    for f in [leace, *placebos]:
        row, loss, delta = _measure(model, held, site, f)
        rows.append(row)
        deltas.append(delta)
        seqs.append(_seq_frame(held, site, f, loss, delta))
    leace_delta, placebo_deltas = deltas[0], deltas[1:]
    rows[1].update(_interval(leace_delta - np.mean(placebo_deltas, axis=0), "minus_placebo"))
    return rows, seqs


#: The leading columns of :func:`~analysis.causal.erasure.erasure_tables`'s table, in order.
_FRONT = ["concept", "hook", "depth", "condition", "draw", "placebo_seed", "n_classes", "balance", "rank",
          "edit_norm", "edit_scale", "edit_share", "probe", "majority", "loss", "delta_loss", "delta_loss_lo",
          "delta_loss_hi", "minus_placebo", "minus_placebo_lo", "minus_placebo_hi"]


def _frames(rows: list[dict], per_seq: list[pd.DataFrame], model, x: torch.Tensor,
            held: _HeldOut) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The table and the per-sequence table from their rows, columns ordered and the study recorded in attrs."""
    df = pd.DataFrame(rows)
    for c in ("draw", "placebo_seed"):
        df[c] = df[c].astype("Int64")
    df = df[_FRONT + [c for c in df.columns if c not in _FRONT]]
    seqs = pd.concat(per_seq, ignore_index=True)
    seqs["draw"] = seqs["draw"].astype("Int64")
    for frame in (df, seqs):
        frame.attrs.update(interface=model.cfg.interface, n_tokens=int(x.numel()), n_test=int(held.test.sum()),
                           test_sequences=tuple(int(s) for s in held.test_seqs))
    return df, seqs


def erasure_tables(model, concept, hook="blocks.1.hook_resid_pre", data=None, *, tokens: int = MEASURE_TOKENS,
                   placebo_draws: int = 3, tasks=("ioi", "agreement"), n_pairs: int = 32, seed: int = 0,
                   test_fraction: float = 0.5, match_norm: bool = True,
                   progress: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`~analysis.causal.erasure.erasure`'s table and the per-sequence table behind its intervals (see the module
    docstring)."""
    concepts, hooks = _request(model, concept, hook, placebo_draws, test_fraction)
    x = corpus_tokens(model, data, tokens=tokens).to(model.unembed.weight.device)
    acts = collect(model, x, hooks=hooks)
    held = _held_out(model, x, acts, tasks, n_pairs, test_fraction, seed)
    concept_targets = [_concept(acts, c, seed) for c in concepts]
    rows, per_seq = [], []
    todo = [(t, h) for t in concept_targets for h in hooks]
    for t, h in tqdm(todo, desc="erasure", unit="site", disable=not progress, leave=False):
        site_rows, site_seqs = _site_rows(model, acts, held, t, h, placebo_draws=placebo_draws,
                                          match_norm=match_norm, seed=seed)
        rows += site_rows
        per_seq += site_seqs
    return _frames(rows, per_seq, model, x, held)


def erasure(model, concept, hook="blocks.1.hook_resid_pre", data=None, *, tokens: int = MEASURE_TOKENS,
            placebo_draws: int = 3, tasks=("ioi", "agreement"), n_pairs: int = 32, seed: int = 0,
            test_fraction: float = 0.5, match_norm: bool = True, progress: bool = False) -> pd.DataFrame:
    """Erase ``concept`` (a name, or a list of names) at ``hook`` (a hook point, or a list) with LEACE against
    ``placebo_draws`` placebo erasures of matched control concepts, each scaled to the concept's edit's size unless
    ``match_norm=False``, fitted on a ``1 - test_fraction`` share of the sequences and measured on the rest (see the
    module docstring for the columns). ``tasks=()`` on data that is not the built-in language."""
    return erasure_tables(model, concept, hook, data, tokens=tokens, placebo_draws=placebo_draws, tasks=tasks,
                          n_pairs=n_pairs, seed=seed, test_fraction=test_fraction, match_norm=match_norm,
                          progress=progress)[0]


def erasure_by_depth(model, concept, data=None, **kwargs) -> pd.DataFrame:
    """:func:`~analysis.causal.erasure.erasure` at every hook point of the residual stream
    (:func:`~analysis.causal.erasure.resid_hooks`): the table by depth."""
    return erasure(model, concept, resid_hooks(model), data, **kwargs)


__all__ = ["erasure", "erasure_by_depth", "erasure_tables", "resid_hooks", "depth_of", "true_rank", "edit_norm",
           "control_concept"]
