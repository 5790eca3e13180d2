"""Depth-wise linear probes with controls: what is linearly readable at each hook point, and is it the probe's doing?"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from fixedid.codes import GF2Code, coset_min_weight, id_permutation, ids_to_bits
from fixedid.config import CODED
from fixedid.errors import CodeError

from analysis.errors import AnalysisError, AnalysisWarning
from analysis.readouts.probe_fitting import (C_GRID, CV_FOLDS, _fit, _r2, fit_probes, split_by_sequence,
                                             split_by_type)

#: The target families :func:`~analysis.readouts.probes.targets` knows (see the module docstring).
TARGET_FAMILIES = ("code_bits", "canonical_bits", "xor", "perm_bits", "token", "prev_token", "position",
                   "freq_bucket", "pos_tag", "number", "depth", "ioi_role", "fact_entity")
#: Latent-label targets (the built-in language's own validation data only) and the label values left out.
LABEL_TARGETS = {"pos_tag": ("EOT",), "number": ("none",), "depth": (-1,), "ioi_role": ("none",)}
#: The train/test splits: whole sequences, or held-out token types (see the module docstring).
SPLITS = ("sequence", "type")


@dataclass
class Target:
    """One probe target: its ``name`` (``code_bit:3``, ``pos_tag``...), one label per token row ``labels``
    (int64 class ids, rows below 0 left out; or floats for a scalar), ``kind`` (``"class"`` or ``"scalar"``),
    ``gf2_weight`` (bit targets; see the module docstring), ``type_key`` (the token column the control task keys on),
    ``level`` (``"type"`` or ``"context"``) and ``by_type`` (whether the held-out-types split applies)."""

    name: str
    labels: np.ndarray  # int64 class ids, or float for scalars; rows with label < 0 (class) are left out
    kind: str  # "class" or "scalar"
    gf2_weight: int | None = None
    type_key: str = "id"  # the token column whose type the control task keys on (the previous token's for prev_token)
    level: str = "type"  # "type": a function of the token id; "context": not
    by_type: bool = False  # whether the held-out-types split applies


# ------------------------------------------------------------------------------------------------------ targets
def _vocab_code(meta) -> np.ndarray | None:
    """The model's own code bits (LSB-first) of every vocabulary id ``[V, n_bits]``; None without a bit code."""
    n, V = meta["n_bits"], meta["vocab_size"]
    ids = np.arange(V)
    if meta["interface"] == "permuted":
        return ids_to_bits(id_permutation(V, meta.get("table_seed", 0)), n)
    if meta["interface"] not in ("canonical", "gf2"):
        return None
    bits = ids_to_bits(ids, n)
    return bits if meta.get("recoding") is None else GF2Code.from_json(meta["recoding"]).encode_bits(bits)


def _weight(values: np.ndarray, code: np.ndarray | None) -> int | None:
    """Coset-minimal GF(2) weight of a 0/1 function of the vocabulary ids in the code ``code`` (None: no XOR)."""
    if code is None:
        return None
    try:
        found = coset_min_weight(values, code)
    except CodeError as e:
        raise AnalysisError(f"GF(2) weight: {e}") from None
    return None if found is None else found[0]


def perm_table(vocab_size: int, seed: int = 0) -> np.ndarray:
    """The seeded relabelling of ``0 .. vocab_size-1`` whose bits are the ``perm_bit`` targets."""
    return np.random.default_rng([int(seed), 29]).permutation(vocab_size)


def _bit_targets(meta, ids: np.ndarray, families, xor_pairs: int, seed: int) -> list[Target]:
    """The model's own code bits, the id's canonical bits, XORs of pairs of varying canonical bits and the bits of
    a random relabelling of the ids, each with its coset-minimal GF(2) weight over the vocabulary."""
    n_bits, V = meta["n_bits"], meta["vocab_size"]
    if ids.size and ids.max() >= V:
        raise AnalysisError(f"token id {int(ids.max())} is outside the model's vocabulary of {V}")
    code = _vocab_code(meta)
    canon_v = ids_to_bits(np.arange(V), n_bits)  # [V, n_bits], LSB first
    out: list[Target] = []

    def add(name, table):  # a 0/1 function of the vocabulary ids
        out.append(Target(name, table[ids].astype(np.int64), "class", _weight(table, code), by_type=True))

    if "code_bits" in families:
        if meta["interface"] not in CODED:
            raise AnalysisError(f"code_bits targets need a model that reads an n-bit code; the {meta['interface']} "
                                "variant has none")
        for j in range(n_bits):  # column j in the configured order
            lsb = n_bits - 1 - j if meta.get("bit_order", "msb") == "msb" else j
            add(f"code_bit:{j}", code[:, lsb])
    if "canonical_bits" in families:
        for i in range(n_bits):
            add(f"canonical_bit:{i}", canon_v[:, i])
    if "xor" in families:
        canon = canon_v[ids]
        varying = [i for i in range(n_bits) if canon[:, i].min() != canon[:, i].max()]
        pairs = [(i, k) for a, i in enumerate(varying) for k in varying[a + 1:]]
        rng = np.random.default_rng(seed)
        for a in sorted(rng.permutation(len(pairs))[:xor_pairs]):
            i, k = pairs[a]
            add(f"xor:{i},{k}", canon_v[:, i] ^ canon_v[:, k])
    if "perm_bits" in families:
        perm = ids_to_bits(perm_table(V, seed), n_bits)
        for i in range(n_bits):
            add(f"perm_bit:{i}", perm[:, i])
    return out


def _token_targets(tok: pd.DataFrame, families, top_k: int) -> list[Target]:
    """The token and the previous token among the ``top_k`` most frequent, position and frequency bucket."""
    ids = tok["id"].to_numpy()
    out: list[Target] = []
    if "token" in families or "prev_token" in families:
        top = pd.Series(ids).value_counts().index[:top_k].to_numpy()
        lookup = {t: c for c, t in enumerate(top)}
        if "token" in families:
            out.append(Target("token", np.array([lookup.get(t, -1) for t in ids], dtype=np.int64), "class"))
        if "prev_token" in families:
            prev = tok["prev_id"].to_numpy()
            out.append(Target("prev_token", np.array([lookup.get(t, -1) for t in prev], dtype=np.int64), "class",
                              type_key="prev_id", level="context"))
    if "position" in families:
        out.append(Target("position", tok["pos"].to_numpy(dtype=float), "scalar", level="context"))
    if "freq_bucket" in families:
        out.append(Target("freq_bucket", tok["freq_bucket"].to_numpy(dtype=np.int64), "class", by_type=True))
    return out


def _label_targets(tok: pd.DataFrame, families) -> list[Target]:
    """The built-in language's latent labels (on the checkpoint's own validation data only)."""
    out: list[Target] = []
    for name, skip in LABEL_TARGETS.items():
        if name not in families:
            continue
        if name not in tok.columns:
            raise AnalysisError(f"target {name!r} is a latent label of the built-in language: it exists on the "
                                "checkpoint's own validation data only (run without --data)")
        values = tok[name].to_numpy()
        keep = ~np.isin(values, np.array(skip, dtype=values.dtype))
        classes = sorted(set(values[keep].tolist()))
        code = {c: i for i, c in enumerate(classes)}
        out.append(Target(name, np.array([code[v] if k else -1 for v, k in zip(values, keep)], dtype=np.int64),
                          "class", level="context"))
    if "fact_entity" in families:
        if "entity" not in tok.columns:
            raise AnalysisError("target 'fact_entity' is a latent label of the built-in language: it exists on the "
                                "checkpoint's own validation data only (run without --data)")
        is_entity = (tok["pos_tag"] == "ENTITY").to_numpy()
        out.append(Target("fact_entity", np.where(is_entity, tok["entity"].to_numpy(), -1).astype(np.int64),
                          "class", level="context"))
    return out


def targets(acts, families=TARGET_FAMILIES, *, top_k: int = 32, xor_pairs: int = 8, seed: int = 0) -> list[Target]:
    """The probe targets of ``families`` for an :class:`~analysis.readouts.activations.Activations` (see the module
    docstring); ``xor_pairs`` random pairs of varying canonical bits."""
    unknown = [f for f in families if f not in TARGET_FAMILIES]
    if unknown:
        raise AnalysisError(f"unknown probe target(s) {unknown}; use {', '.join(TARGET_FAMILIES)}")
    tok = acts.tokens
    return (_bit_targets(acts.meta, tok["id"].to_numpy(), families, xor_pairs, seed)
            + _token_targets(tok, families, top_k) + _label_targets(tok, families))


def control_labels(target: Target, ids: np.ndarray, seed: int = 0) -> np.ndarray:
    """The control task of a target: each token type gets one fixed random label, drawn from the target's label
    distribution over the tokens (Hewitt and Liang, 2019); left-out rows stay left out."""
    rng = np.random.default_rng([seed, 11])
    if target.kind == "scalar":
        values = target.labels
        types = np.unique(ids)
        table = dict(zip(types, rng.choice(values, size=len(types))))
        return np.array([table[t] for t in ids], dtype=float)
    keep = target.labels >= 0
    classes, counts = np.unique(target.labels[keep], return_counts=True)
    types = np.unique(ids[keep])
    table = dict(zip(types, rng.choice(classes, size=len(types), p=counts / counts.sum())))
    return np.array([table.get(t, -1) if k else -1 for t, k in zip(ids, keep)], dtype=np.int64)


def lexical_baseline(target: Target, ids: np.ndarray, test: np.ndarray) -> float:
    """The score of predicting each test token's label from its type alone: the type's majority label among the
    training tokens (ties: the smaller class), unseen types the training majority; for a scalar target the type's
    mean (unseen: the training mean), scored as R^2. NaN without labelled test or training rows."""
    if target.kind == "scalar":
        keep_tr, keep_te = ~test, test
    else:
        keep_tr, keep_te = ~test & (target.labels >= 0), test & (target.labels >= 0)
    if not keep_tr.any() or not keep_te.any():
        return float("nan")
    train = pd.DataFrame({"id": ids[keep_tr], "y": target.labels[keep_tr]})
    if target.kind == "scalar":
        table = train.groupby("id").y.mean()
        pred = pd.Series(ids[keep_te]).map(table).fillna(train.y.mean()).to_numpy()
        return _r2(target.labels[keep_te], pred)
    counts = train.groupby(["id", "y"]).size().reset_index(name="n").sort_values(["id", "n", "y"],
                                                                                ascending=[True, False, True])
    table = counts.drop_duplicates("id").set_index("id").y
    vals, n = np.unique(train.y, return_counts=True)
    pred = pd.Series(ids[keep_te]).map(table).fillna(vals[n.argmax()]).to_numpy()
    return float((pred == target.labels[keep_te]).mean())


def _majority(t: Target, test: np.ndarray) -> tuple[float, float]:
    """(majority-class test accuracy, majority share over all rows) of a class target."""
    if t.kind == "scalar":
        return float("nan"), float("nan")
    keep = t.labels >= 0
    tr = t.labels[~test & keep]
    te = t.labels[test & keep]
    if len(tr) == 0 or len(te) == 0:
        return float("nan"), float("nan")
    vals, counts = np.unique(tr, return_counts=True)
    top = vals[counts.argmax()]
    _, all_counts = np.unique(t.labels[keep], return_counts=True)
    return float((te == top).mean()), float(all_counts.max() / all_counts.sum())


# --------------------------------------------------------------------------------------------------------- table
def baseline_activations(model, acts, seed: int | None = None):
    """The activations of ``model``'s random-init twin (:func:`analysis.loading.random_init_twin`: the
    same architecture and interface from the checkpoint's own initial seed, or ``seed``) on the same tokens and hook
    points as ``acts``: the ``baseline=`` of :func:`~analysis.readouts.probes.probe_table`."""
    import torch

    from analysis.readouts.activations import collect
    from analysis.loading import random_init_twin

    x = torch.tensor(acts.tokens["id"].to_numpy()).view(acts.meta["n_sequences"], acts.meta["seq_len"])
    return collect(random_init_twin(model, seed), x, hooks=acts.hooks)


def _check_options(method: str, C, Cs, folds: int, splits) -> tuple[str, ...]:
    """The splits asked for, as a tuple, once the fit's options are checked."""
    if method not in ("fast", "sklearn"):
        raise AnalysisError(f"method must be 'fast' or 'sklearn', got {method!r}")
    if isinstance(C, str) and C != "cv" or not isinstance(C, str) and not C > 0:
        raise AnalysisError(f"C must be 'cv' or a positive number, got {C!r}")
    if not Cs or not all(c > 0 for c in Cs) or folds < 2:
        raise AnalysisError("Cs must be positive values and folds at least 2")
    splits = tuple(splits)
    if not splits or any(s not in SPLITS for s in splits):
        raise AnalysisError(f"splits must be some of {SPLITS}, got {splits}")
    return splits


def _parts(splits: tuple, tgts: list[Target], ids: np.ndarray, seq: np.ndarray, test_fraction: float,
           seed: int) -> list[tuple]:
    """``(split, its targets, test mask, CV groups)`` of each split asked for that applies."""
    parts = []
    if "sequence" in splits:
        parts.append(("sequence", tgts, split_by_sequence(seq, test_fraction, seed), seq))
    typed = [t for t in tgts if t.by_type]
    if "type" in splits and typed:
        parts.append(("type", typed, split_by_type(ids, test_fraction, seed), ids))
    if not parts:
        raise AnalysisError("the type split applies to targets that are a function of the token (bits, XORs, "
                            "freq_bucket); add splits=('sequence',) for the others")
    return parts


@dataclass(frozen=True)
class _References:
    """Each target's references by name: its control task, its labels shuffled across the training rows of the
    sequence split and its lexical baseline (the last two where the sequence split is fitted)."""

    control: dict
    shuffled: dict
    lexical: dict


def _references(acts, tgts: list[Target], ids: np.ndarray, parts: list[tuple], seed: int) -> _References:
    """The control tasks, shuffled labels and lexical baselines of ``tgts``."""
    ctl = {t.name: Target(t.name, control_labels(t, acts.tokens[t.type_key].to_numpy(), seed), t.kind)
           for t in tgts}
    rng = np.random.default_rng([seed, 5])
    test_seq = parts[0][2] if parts[0][0] == "sequence" else None
    shuf = {}
    if test_seq is not None:
        for t in tgts:
            lab = t.labels.copy()
            lab[~test_seq] = rng.permutation(lab[~test_seq])
            shuf[t.name] = Target(t.name, lab, t.kind)
    lexical = {t.name: lexical_baseline(t, ids, test_seq) for t in tgts if t.level == "context"} \
        if test_seq is not None else {}
    return _References(ctl, shuf, lexical)


def _fits(x, base_x, part: tuple, refs: _References, opts: dict, controls: bool, shuffled: bool) -> tuple[dict, ...]:
    """The probes of one split at one hook point, by target name: ``(fit, control, shuffled, random_init)``, the
    control and shuffled ones at the C the fit picked (``{}`` where skipped; ``random_init`` on ``base_x``)."""
    split, ts, test, groups = part
    fit = _fit(x, ts, test, groups=groups, **opts)
    picked = {n: f.C for n, f in fit.items() if np.isfinite(f.C)}
    on_seq = split == "sequence"
    control = (_fit(x, [refs.control[t.name] for t in ts], test, fixed_C=picked, **opts)
               if controls and on_seq else {})
    shuffled_ = (_fit(x, [refs.shuffled[t.name] for t in ts], test, fixed_C=picked, **opts)
                 if controls and shuffled and on_seq else {})
    rand = _fit(base_x, ts, test, groups=groups, **opts) if base_x is not None else {}
    return fit, control, shuffled_, rand


def _row(hook: str, depth: int, split: str, test: np.ndarray, t: Target, fits: tuple, lexical: dict) -> dict:
    """The table's row of target ``t`` in one split at one hook point, from its probes ``fits`` (:func:`_fits`)."""
    fit, control, shuffled_, rand = fits
    maj, bal = _majority(t, test)
    constant = t.kind == "class" and len(np.unique(t.labels[t.labels >= 0])) < 2
    f = fit[t.name]
    n_test = int((test & (t.labels >= 0)).sum()) if t.kind == "class" else int(test.sum())
    extra = [d[t.name] for d in (control, shuffled_, rand) if t.name in d]
    conv = [g.converged for g in [f] + extra if g.converged is not None]
    c_score = control[t.name].score if t.name in control else float("nan")
    on_seq = split == "sequence"
    return {"hook": hook, "depth": depth, "target": t.name, "kind": t.kind, "level": t.level,
            "split": split, "n_test": n_test, "gf2_weight": t.gf2_weight,
            "status": "constant" if constant else "fitted",
            "score": float("nan") if constant else f.score, "majority": maj, "balance": bal,
            "lexical": lexical.get(t.name, float("nan")) if on_seq else float("nan"),
            "control": c_score,
            "selectivity": f.score - c_score if t.level == "type" else float("nan"),
            "shuffled": shuffled_[t.name].score if t.name in shuffled_ else float("nan"),
            "random_init": rand[t.name].score if t.name in rand else float("nan"),
            "C": f.C, "converged": all(conv) if conv else None}


def _typed_frame(rows: list[dict]) -> pd.DataFrame:
    """The table of ``rows`` with its nullable columns typed, warning of probe fits that did not converge."""
    df = pd.DataFrame(rows)
    df["gf2_weight"] = df["gf2_weight"].astype("Int64")
    df["converged"] = df["converged"].astype("boolean")
    missed = int((df.converged == False).sum())  # noqa: E712 (NA stays out)
    if missed:
        warnings.warn(f"{missed} of {int(df.converged.notna().sum())} probe rows rest on a fit that did not converge "
                      "within max_iter (column 'converged')", AnalysisWarning, stacklevel=3)
    return df


def probe_table(acts, families=TARGET_FAMILIES, *, baseline=None, top_k: int = 32, xor_pairs: int = 8,
                C: float | str = "cv", Cs=C_GRID, folds: int = CV_FOLDS, alpha: float = 1.0,
                splits=("sequence",), test_fraction: float = 0.2, seed: int = 0, method: str = "fast",
                controls: bool = True, shuffled: bool = True, progress: bool = False) -> pd.DataFrame:
    """One row per hook point x target x split: ``hook, depth, target, kind, level, split, n_test`` (held-out rows
    with a label), ``gf2_weight, status, score, majority, balance, lexical, control, selectivity, shuffled,
    random_init, C, converged`` (see the module docstring). ``baseline``: the activations of a randomly initialised
    model on the same tokens (:func:`~analysis.readouts.probes.baseline_activations`), else ``random_init`` is NaN.
    ``splits``: ``sequence`` and/or ``type`` (the held-out-types split, for the ``by_type`` targets). ``C``: ``"cv"``
    (chosen on the training rows over ``Cs`` by ``folds``-fold grouped cross-validation) or a number. ``controls=False``
    skips the control task and the shuffled labels, ``shuffled=False`` the shuffled labels only (NaN columns)."""
    splits = _check_options(method, C, Cs, folds, splits)
    tgts = targets(acts, families, top_k=top_k, xor_pairs=xor_pairs, seed=seed)
    ids, seq = acts.tokens["id"].to_numpy(), acts.tokens["seq"].to_numpy()
    if baseline is not None and len(baseline) != len(acts):
        raise AnalysisError("the baseline activations must come from the same tokens")
    parts = _parts(splits, tgts, ids, seq, test_fraction, seed)
    refs = _references(acts, tgts, ids, parts, seed)
    opts = dict(C=C, Cs=Cs, alpha=alpha, method=method, folds=folds, seed=seed)
    rows = []
    for depth, hook in enumerate(tqdm(acts.hooks, desc="probes", unit="hook", disable=not progress, leave=False)):
        x = acts.acts[hook]
        base_x = baseline.acts[hook] if baseline is not None else None
        for part in parts:
            fits = _fits(x, base_x, part, refs, opts, controls, shuffled)
            split, ts, test, _ = part
            rows += [_row(hook, depth, split, test, t, fits, refs.lexical) for t in ts]
    df = _typed_frame(rows)
    df.attrs.update(interface=acts.meta.get("interface"), n_tokens=len(acts), n_test=int(parts[0][2].sum()),
                    C=C, Cs=list(Cs), folds=folds, alpha=alpha, method=method, splits=list(splits),
                    vocab_size=acts.meta.get("vocab_size"))
    return df


__all__ = ["TARGET_FAMILIES", "SPLITS", "C_GRID", "Target", "targets", "control_labels", "lexical_baseline",
           "perm_table", "split_by_sequence", "split_by_type", "fit_probes", "baseline_activations", "probe_table"]
