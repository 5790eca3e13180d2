"""Depth-wise linear probes with controls: what is linearly readable at each hook point, and is it the probe's doing?

A probe is fitted per hook point x target on activations (:mod:`analysis.readouts.activations`), split into train and test by
sequence (never by token), with standardised inputs. Class targets get an L2-regularised logistic regression (``C``,
as scikit-learn's ``LogisticRegression``; binary targets one logit, others multinomial), scalar targets a ridge
regression (``alpha``, as ``Ridge``); the score is test accuracy or R^2.

Targets (:func:`targets`):

- ``code_bit:j``: column ``j`` of the model's own code (configured bit order) - fixed-code variants only;
- ``canonical_bit:i``: bit ``i`` (LSB first) of the token id; ``xor:i,k``: canonical bits ``i`` XOR ``k``;
- ``token``: identity among the ``top_k`` most frequent tokens (other tokens are left out of that probe);
  ``prev_token``: the previous token's identity among the same ``top_k``; ``position`` (scalar); ``freq_bucket``;
- on the built-in language's own validation data, its latent labels (:mod:`analysis.labels`): ``pos_tag``,
  ``number`` (sg/pl words only), ``depth`` (clause depth), ``ioi_role`` (the names of IOI sentences) and
  ``fact_entity`` (which entity of the fact base an ENTITY token names).

Each bit target carries ``gf2_weight``: how many of the model's own code bits XOR together to give it (1: a code
bit itself, linearly readable at the input; 2 or more: a nonlinear feature of the code), NA for the learned variant.
A target that is constant over the data (the high bits of ids of a small vocabulary) is reported as ``constant``,
never as accuracy 1.0; ``balance`` is its majority-class share.

Controls beside every probe: ``majority`` (the test accuracy of always answering the train split's most common
class), ``control`` (a control task: every token type mapped to a fixed random label drawn from the target's label
distribution - the previous token's type for ``prev_token``; ``selectivity = accuracy - control``; Hewitt and
Liang, 2019), ``shuffled`` (the labels permuted across
training tokens), and - through :func:`probe_table` with ``baseline=`` - the same probes on a randomly initialised
model of the same interface.

The fast path fits all class targets of a hook point (bits, XORs, token identities, labels) together, by one batched
per-target L-BFGS with each target's exact initial Hessian as preconditioner (:mod:`analysis.readouts.logistic`), and scalar
targets in closed form. It agrees with scikit-learn at the same ``C``/``alpha`` (tests; ``method="sklearn"`` runs the
reference, one ``LogisticRegression`` or ``Ridge`` per target).

What a probe does NOT establish: that the model *uses* the information (causal erasure answers that), nor that it is
absent where a linear probe fails (it may be nonlinearly encoded); high accuracy on an easy target can be the
probe's own capacity, which the control task's selectivity exposes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from fixedid.codes import GF2Code, id_permutation, ids_to_bits
from fixedid.config import CODED

from analysis.errors import AnalysisError
from analysis.readouts.logistic import fit_logistic

TARGET_FAMILIES = ("code_bits", "canonical_bits", "xor", "token", "prev_token", "position", "freq_bucket",
                   "pos_tag", "number", "depth", "ioi_role", "fact_entity")
#: Latent-label targets (the built-in language's own validation data only) and the label values left out.
LABEL_TARGETS = {"pos_tag": ("EOT",), "number": ("none",), "depth": (-1,), "ioi_role": ("none",)}


@dataclass
class Target:
    name: str
    labels: np.ndarray  # int64 class ids, or float for scalars; rows with label < 0 (class) are left out
    kind: str  # "class" or "scalar"
    gf2_weight: int | None = None
    type_key: str = "id"  # the token column whose type the control task keys on (the previous token's for prev_token)


# ------------------------------------------------------------------------------------------------------ targets
def _own_inverse_rows(meta) -> np.ndarray | None:
    """Rows of R^{-1} (LSB-first bits): canonical bit i = XOR of code bits (own LSB index) in row i, plus a constant.
    None where the canonical bits are no GF(2)-affine function of the code (learned, permuted, frozen_random)."""
    if meta["interface"] not in ("canonical", "gf2"):
        return None
    n = meta["n_bits"]
    if meta.get("recoding") is None:
        return np.eye(n, dtype=np.uint8)
    return GF2Code.from_json(meta["recoding"]).inverse().matrix.astype(np.uint8)


def _bit_targets(meta, ids: np.ndarray, families, xor_pairs: int, seed: int) -> list[Target]:
    """The model's own code bits, the id's canonical bits and XORs of pairs of varying canonical bits."""
    n_bits = meta["n_bits"]
    inv = _own_inverse_rows(meta)
    canon = ids_to_bits(ids, n_bits)  # [N, n_bits], LSB first
    out: list[Target] = []
    if "code_bits" in families:
        if meta["interface"] not in CODED:
            raise AnalysisError(f"code_bits targets need a model that reads an n-bit code; the {meta['interface']} "
                                "variant has none")
        if meta["interface"] == "permuted":
            code = ids_to_bits(id_permutation(meta["vocab_size"], meta.get("table_seed", 0))[ids], n_bits)
        else:
            code = canon if meta.get("recoding") is None else GF2Code.from_json(meta["recoding"]).encode_bits(canon)
        for j in range(n_bits):  # column j in the configured order
            lsb = n_bits - 1 - j if meta.get("bit_order", "msb") == "msb" else j
            out.append(Target(f"code_bit:{j}", code[:, lsb].astype(np.int64), "class", 1))
    weight = (lambda row: int(row.sum())) if inv is not None else (lambda row: None)
    if "canonical_bits" in families:
        for i in range(n_bits):
            out.append(Target(f"canonical_bit:{i}", canon[:, i].astype(np.int64), "class",
                              None if inv is None else weight(inv[i])))
    if "xor" in families:
        varying = [i for i in range(n_bits) if canon[:, i].min() != canon[:, i].max()]
        pairs = [(i, k) for a, i in enumerate(varying) for k in varying[a + 1:]]
        rng = np.random.default_rng(seed)
        for a in sorted(rng.permutation(len(pairs))[:xor_pairs]):
            i, k = pairs[a]
            out.append(Target(f"xor:{i},{k}", (canon[:, i] ^ canon[:, k]).astype(np.int64), "class",
                              None if inv is None else weight(inv[i] ^ inv[k])))
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
                              type_key="prev_id"))
    if "position" in families:
        out.append(Target("position", tok["pos"].to_numpy(dtype=float), "scalar"))
    if "freq_bucket" in families:
        out.append(Target("freq_bucket", tok["freq_bucket"].to_numpy(dtype=np.int64), "class"))
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
                          "class"))
    if "fact_entity" in families:
        if "entity" not in tok.columns:
            raise AnalysisError("target 'fact_entity' is a latent label of the built-in language: it exists on the "
                                "checkpoint's own validation data only (run without --data)")
        is_entity = (tok["pos_tag"] == "ENTITY").to_numpy()
        out.append(Target("fact_entity", np.where(is_entity, tok["entity"].to_numpy(), -1).astype(np.int64),
                          "class"))
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


# ------------------------------------------------------------------------------------------------------- fitting
def split_by_sequence(seq: np.ndarray, test_fraction: float = 0.2, seed: int = 0) -> np.ndarray:
    """A boolean mask of test rows: whole sequences, a ``test_fraction`` of them."""
    seqs = np.unique(seq)
    if len(seqs) < 2:
        raise AnalysisError(f"probes split by sequence and need at least 2 sequences; the data has {len(seqs)} "
                            "(give more --tokens)")
    rng = np.random.default_rng([seed, 3])
    n_test = min(len(seqs) - 1, max(1, int(round(test_fraction * len(seqs)))))
    test = rng.choice(seqs, size=n_test, replace=False)
    return np.isin(seq, test)


def _standardise(x_train, x_test):
    mu = x_train.mean(0, keepdims=True)
    sd = x_train.std(0, keepdims=True)
    sd = np.where(sd > 1e-6, sd, 1.0)
    return (x_train - mu) / sd, (x_test - mu) / sd


def _sklearn_logistic(x_train, y_train, x_test, classes, y_test, C) -> float:
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=C, max_iter=1000, tol=1e-4).fit(x_train, y_train)
    return float((classes[clf.predict(x_test)] == y_test).mean())


def _ridge(x_train, y_train, x_test, alpha):
    mu = y_train.mean()
    a = x_train.T @ x_train + alpha * np.eye(x_train.shape[1])
    w = np.linalg.solve(a, x_train.T @ (y_train - mu))
    return x_test @ w + mu


def _r2(y, pred):
    ss = ((y - y.mean()) ** 2).sum()
    return float(1 - ((y - pred) ** 2).sum() / ss) if ss > 0 else float("nan")


def fit_probes(x: np.ndarray, tgts: list[Target], test: np.ndarray, *, C: float = 1.0, alpha: float = 1.0,
               method: str = "fast") -> dict[str, float]:
    """Test score of each target (accuracy, or R^2 for scalars) for activations ``x`` ``[N, d]``; constant targets
    (one class over the rows used) get NaN. ``method``: ``fast`` (joint torch/closed form) or ``sklearn``."""
    xtr_all, xte_all = _standardise(np.asarray(x[~test], dtype=np.float64), np.asarray(x[test], dtype=np.float64))
    scores: dict[str, float] = {}
    logistic = []
    for t in tgts:
        if t.kind == "scalar":
            ytr, yte = t.labels[~test], t.labels[test]
            if method == "sklearn":
                from sklearn.linear_model import Ridge
                pred = Ridge(alpha=alpha).fit(xtr_all, ytr).predict(xte_all)
            else:
                pred = _ridge(xtr_all, ytr, xte_all, alpha)
            scores[t.name] = _r2(yte, pred)
            continue
        keep_tr, keep_te = t.labels[~test] >= 0, t.labels[test] >= 0
        ytr = t.labels[~test][keep_tr]
        classes = np.unique(ytr)
        if len(classes) < 2 or not keep_te.any():
            scores[t.name] = float("nan")
            continue
        ytr_i = np.searchsorted(classes, ytr)
        if method == "sklearn":
            scores[t.name] = _sklearn_logistic(xtr_all[keep_tr], ytr_i, xte_all[keep_te], classes,
                                               t.labels[test][keep_te], C)
        else:
            y_full = np.zeros(len(keep_tr), dtype=np.int64)
            y_full[keep_tr] = ytr_i
            logistic.append((t, classes, keep_tr, keep_te, y_full))
    if logistic:  # every class target of this hook point in one batched solve (analysis.readouts.logistic)
        weights = fit_logistic(xtr_all, [y_full for *_, y_full in logistic],
                               [k for _, _, k, _, _ in logistic], [len(c) for _, c, _, _, _ in logistic], C)
        for (t, classes, _, keep_te, _), W in zip(logistic, weights):
            z = xte_all[keep_te] @ W[:-1] + W[-1]
            pred = (z[:, 0] > 0).astype(np.int64) if z.shape[1] == 1 else z.argmax(1)
            scores[t.name] = float((classes[pred] == t.labels[test][keep_te]).mean())
    return scores


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
def probe_table(acts, families=TARGET_FAMILIES, *, baseline=None, top_k: int = 32, xor_pairs: int = 8,
                C: float = 1.0, alpha: float = 1.0, test_fraction: float = 0.2, seed: int = 0,
                method: str = "fast", controls: bool = True, shuffled: bool = True,
                progress: bool = False) -> pd.DataFrame:
    """One row per hook point x target: ``hook, depth, target, kind, n_test`` (held-out rows with a label),
    ``gf2_weight, status, score, majority, balance,
    control, selectivity, shuffled`` and, with ``baseline`` (the activations of a randomly initialised model on the
    same tokens), ``random_init``. ``controls=False`` skips the control task and the shuffled labels,
    ``shuffled=False`` the shuffled labels only (NaN columns)."""
    if method not in ("fast", "sklearn"):
        raise AnalysisError(f"method must be 'fast' or 'sklearn', got {method!r}")
    tgts = targets(acts, families, top_k=top_k, xor_pairs=xor_pairs, seed=seed)
    test = split_by_sequence(acts.tokens["seq"].to_numpy(), test_fraction, seed)
    ctl = [Target(t.name, control_labels(t, acts.tokens[t.type_key].to_numpy(), seed), t.kind) for t in tgts]
    rng = np.random.default_rng([seed, 5])
    shuf = []
    for t in tgts:
        lab = t.labels.copy()
        lab[~test] = rng.permutation(lab[~test])
        shuf.append(Target(t.name, lab, t.kind))
    if baseline is not None and len(baseline) != len(acts):
        raise AnalysisError("the baseline activations must come from the same tokens")
    rows = []
    for depth, hook in enumerate(tqdm(acts.hooks, desc="probes", unit="hook", disable=not progress, leave=False)):
        x = acts.acts[hook]
        score = fit_probes(x, tgts, test, C=C, alpha=alpha, method=method)
        control = fit_probes(x, ctl, test, C=C, alpha=alpha, method=method) if controls else {}
        shuffled_ = fit_probes(x, shuf, test, C=C, alpha=alpha, method=method) if controls and shuffled else {}
        rand = (fit_probes(baseline.acts[hook], tgts, test, C=C, alpha=alpha, method=method)
                if baseline is not None else {})
        for t in tgts:
            maj, bal = _majority(t, test)
            constant = t.kind == "class" and len(np.unique(t.labels[t.labels >= 0])) < 2
            s = score[t.name]
            n_test = int((test & (t.labels >= 0)).sum()) if t.kind == "class" else int(test.sum())
            rows.append({"hook": hook, "depth": depth, "target": t.name, "kind": t.kind, "n_test": n_test,
                         "gf2_weight": t.gf2_weight, "status": "constant" if constant else "fitted",
                         "score": float("nan") if constant else s, "majority": maj, "balance": bal,
                         "control": control.get(t.name, float("nan")),
                         "selectivity": s - control.get(t.name, float("nan")),
                         "shuffled": shuffled_.get(t.name, float("nan")),
                         "random_init": rand.get(t.name, float("nan"))})
    df = pd.DataFrame(rows)
    df["gf2_weight"] = df["gf2_weight"].astype("Int64")
    df.attrs.update(interface=acts.meta.get("interface"), n_tokens=len(acts), n_test=int(test.sum()), C=C,
                    alpha=alpha, method=method)
    return df


__all__ = ["TARGET_FAMILIES", "Target", "targets", "control_labels", "split_by_sequence", "fit_probes",
           "probe_table"]
