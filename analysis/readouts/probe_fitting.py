"""How the probes of :mod:`analysis.readouts.probes` are fitted: the train/test splits (whole sequences, or held-out
token types), the folds of the cross-validation that chooses ``C`` inside the training rows, and the fits themselves
(the batched L-BFGS of :mod:`analysis.readouts.logistic`, ridge in closed form, or scikit-learn as the reference).
The choices and what they do not establish are documented in :mod:`analysis.readouts.probes`."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from analysis.errors import AnalysisError
from analysis.readouts.logistic import fit_logistic

#: The inverse L2 strengths the cross-validation chooses ``C`` from (``Cs``).
C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
#: Folds of the grouped cross-validation that chooses ``C`` (``folds``).
CV_FOLDS = 3
#: The cross-validation fits' gradient tolerance, the final fits' own (a 10x looser one under-fitted the weakly
#: regularised end of the grid: the C chosen tilted small, on half the targets of a probe table at one hook point).
CV_GTOL = 1e-4
#: Above this many (training rows x logit columns of every fold's problems), the cross-validation solves each fold on
#: its own rows (a fold's problems never read the held-out rows: 1 / folds fewer multiply-adds per objective, and
#: each fold stops when its own targets converge) rather than every fold in one batched solve, whose fewer, larger
#: operations win on small inputs (on the demo's hook point: multi-class targets, 2.8M, took 0.83x the time split,
#: with each target on its own rows; binary ones, 1.0M, 1.3x before that).
CV_SPLIT_WORK = 2_000_000


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


def split_by_type(ids: np.ndarray, test_fraction: float = 0.2, seed: int = 0) -> np.ndarray:
    """A boolean mask of test rows: every token of a seeded ``test_fraction`` of the distinct token types (so no
    test type is seen in training)."""
    types = np.unique(ids)
    if len(types) < 2:
        raise AnalysisError(f"the held-out-types split needs at least 2 token types; the data has {len(types)}")
    rng = np.random.default_rng([seed, 13])
    n_test = min(len(types) - 1, max(1, int(round(test_fraction * len(types)))))
    return np.isin(ids, rng.choice(types, size=n_test, replace=False))


def _folds(groups: np.ndarray, k: int, seed: int) -> np.ndarray | None:
    """A fold index per row: the distinct groups dealt at random into ``min(k, groups)`` folds; None under 2."""
    uniq = np.unique(groups)
    k = min(k, len(uniq))
    if k < 2:
        return None
    perm = np.random.default_rng([seed, 17]).permutation(uniq)
    fold_of = np.empty(len(uniq), dtype=np.int64)
    fold_of[np.searchsorted(uniq, perm)] = np.arange(len(uniq)) % k
    return fold_of[np.searchsorted(uniq, groups)]


# ------------------------------------------------------------------------------------------------------- fitting
def _standardise(x_train, x_test):
    mu = x_train.mean(0, keepdims=True)
    sd = x_train.std(0, keepdims=True)
    sd = np.where(sd > 1e-6, sd, 1.0)
    return (x_train - mu) / sd, (x_test - mu) / sd


def _mm(a, b) -> np.ndarray:
    """``a @ b`` in float64 through torch's BLAS, the one the fits run on: numpy's is a second pool of threads,
    which keeps spinning after each call and took the first fit after a validation's predictions 1.5-2x as long on
    2 cores."""
    return (torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))
            @ torch.from_numpy(np.ascontiguousarray(b, dtype=np.float64))).numpy()


def _ridge(x_train, y_train, x_test, alpha):
    mu = y_train.mean()
    x = torch.from_numpy(np.ascontiguousarray(x_train, dtype=np.float64))
    a = x.T @ x + alpha * torch.eye(x.shape[1], dtype=x.dtype)
    w = torch.linalg.solve(a, x.T @ torch.from_numpy(np.asarray(y_train - mu, dtype=np.float64)))
    return _mm(x_test, w.numpy()) + mu


def _r2(y, pred):
    ss = ((y - y.mean()) ** 2).sum()
    return float(1 - ((y - pred) ** 2).sum() / ss) if ss > 0 else float("nan")


def _logistic(x, labels, masks, ks, Cs, method, gtol=1e-4, init=None):
    """``[(W [d + 1, 1 or K], converged)]`` per problem: the batched fast path (from ``init``, if given) or one
    scikit-learn fit each (``tol=gtol``)."""
    if not labels:
        return []
    if method == "fast":
        ws, conv = fit_logistic(x, labels, masks, ks, Cs, return_converged=True, gtol=gtol, init=init)
        return list(zip(ws, conv.tolist()))
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    out = []
    for y, m, k, C in zip(labels, masks, ks, Cs):
        with warnings.catch_warnings():  # recorded in ``converged``
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf = LogisticRegression(C=C, max_iter=1000, tol=gtol).fit(x[m], y[m])
        W = np.vstack([clf.coef_.T, clf.intercept_[None]])
        if k > 2 and len(clf.classes_) < k:  # classes absent from these rows never win
            if W.shape[1] == 1:  # two classes left: logits (0, z)
                W = np.hstack([np.zeros_like(W), W])
            full = np.zeros((W.shape[0], k))
            full[-1] = -np.inf
            full[:, clf.classes_] = W
            W = full
        out.append((W, bool(np.max(clf.n_iter_) < 1000)))
    return out


def _predict(x, W):
    z = _mm(x, W[:-1]) + W[-1]
    return (z[:, 0] > 0).astype(np.int64) if z.shape[1] == 1 else np.nan_to_num(z, neginf=-1e300).argmax(1)


@dataclass
class _Fit:
    score: float
    C: float
    converged: bool | None


def _fit(x, tgts, test, *, C="cv", Cs=C_GRID, alpha=1.0, method="fast", groups=None, folds=CV_FOLDS, seed=0,
         fixed_C: dict | None = None) -> dict[str, _Fit]:
    """Score, C and convergence of each target's probe on activations ``x`` ``[N, d]``, trained on ``~test``.
    ``C="cv"``: C chosen per target by cross-validation over ``groups`` (one per row) inside the training rows;
    a number: that C (and ``alpha`` for ridge); ``fixed_C``: a C per target name that overrides both."""
    xtr, xte = _standardise(np.asarray(x[~test], dtype=np.float64), np.asarray(x[test], dtype=np.float64))
    cv = isinstance(C, str)
    fold = _folds(groups[~test], folds, seed) if cv and groups is not None else None
    middle = float(sorted(Cs)[len(Cs) // 2])
    out: dict[str, _Fit] = {}
    plan = []  # class targets that get fitted: (target, classes, train labels as class indices, train mask)
    for t in tgts:
        given = None if fixed_C is None else fixed_C.get(t.name)
        if t.kind == "scalar":
            ytr, yte = t.labels[~test], t.labels[test]
            if given is not None:
                a = 1.0 / given
            elif not cv:
                a = alpha
            else:
                a = 1.0 / _cv_ridge(xtr, ytr, fold, Cs, middle)
            if method == "sklearn":
                from sklearn.linear_model import Ridge
                pred = Ridge(alpha=a).fit(xtr, ytr).predict(xte)
            else:
                pred = _ridge(xtr, ytr, xte, a)
            out[t.name] = _Fit(_r2(yte, pred), 1.0 / a, True)
            continue
        keep_tr, keep_te = t.labels[~test] >= 0, t.labels[test] >= 0
        classes = np.unique(t.labels[~test][keep_tr])
        if len(classes) < 2 or not keep_te.any():
            out[t.name] = _Fit(float("nan"), float("nan"), None)
            continue
        y = np.zeros(len(keep_tr), dtype=np.int64)
        y[keep_tr] = np.searchsorted(classes, t.labels[~test][keep_tr])
        plan.append((t, classes, y, keep_tr, given))
    chosen, starts = _choose_C(xtr, plan, C, cv, fold, Cs, method, middle)
    init = [starts.get(p[0].name, np.zeros((xtr.shape[1] + 1, 1 if len(p[1]) == 2 else len(p[1])))) for p in plan]
    final = _logistic(xtr, [p[2] for p in plan], [p[3] for p in plan], [len(p[1]) for p in plan],
                      [chosen[p[0].name] for p in plan], method, init=init if starts else None)
    for (t, classes, _, _, _), (W, conv) in zip(plan, final):
        keep_te = t.labels[test] >= 0
        pred = classes[_predict(xte[keep_te], W)]
        out[t.name] = _Fit(float((pred == t.labels[test][keep_te]).mean()), chosen[t.name], conv)
    return out


def _choose_C(xtr, plan, C, cv, fold, Cs, method, middle) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The C of each planned class target (``(target, classes, class indices, train mask, given C)``): the given one,
    else ``C`` when not cross-validating, else by :func:`~analysis.readouts.probe_fitting._cv_choose` over the folds
    (``middle`` without folds, or for a target with no fold to score); and, for a target whose C the folds chose,
    the mean of its folds' solutions at that C (where the fit on every training row starts)."""
    chosen, starts = {}, {}
    problems = []  # (target name, fit rows, validation rows, class indices, classes, fold)
    for t, classes, y, keep, given in plan:
        if given is not None or not cv:
            chosen[t.name] = float(given if given is not None else C)
        elif fold is None:
            chosen[t.name] = middle
        else:
            for f in range(fold.max() + 1):
                fit_rows, val_rows = keep & (fold != f), keep & (fold == f)
                if val_rows.any() and len(np.unique(y[fit_rows])) >= 2:
                    problems.append((t.name, fit_rows, val_rows, y, len(classes), f))
    if problems:
        picked, starts = _cv_choose(xtr, problems, Cs, method, [t.name for t, *_ in plan if t.name not in chosen],
                                    middle)
        chosen.update(picked)
    for t, *_ in plan:
        chosen.setdefault(t.name, middle)
    return chosen, starts


def _cv_choose(xtr, problems, Cs, method, names, middle) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The C of each target in ``names`` with the best mean validation accuracy over its folds (ties: the smaller C; a
    target with no scored fold gets ``middle``), and the mean of its folds' solutions at that C. ``problems``:
    ``(target name, fit rows, validation rows, class indices, classes, fold)`` per target x fold; for each C,
    ascending, every problem in one batched solve (above ``CV_SPLIT_WORK``, one solve per fold on the rows outside
    it), started from the solution path of the last two C's extrapolated one grid step (one step in log C on a
    geometric grid)."""
    tally: dict[tuple[str, float], list[float]] = {}  # validation accuracy per fold
    solutions: dict[tuple[str, float], list[np.ndarray]] = {}  # the folds' solutions
    cols = sum(1 if p[4] == 2 else p[4] for p in problems)
    if method == "fast" and len(xtr) * cols > CV_SPLIT_WORK:
        groups = [[i for i, p in enumerate(problems) if p[5] == f] for f in sorted({p[5] for p in problems})]
    else:
        groups = [list(range(len(problems)))]
    batches = []  # (problems, their rows' activations, labels, fit masks), each restricted to the rows they fit on
    for members in groups:
        rows = np.logical_or.reduce([problems[i][1] for i in members])
        whole = rows.all()
        batches.append((members, xtr if whole else xtr[rows],
                        [problems[i][3] if whole else problems[i][3][rows] for i in members],
                        [problems[i][1] if whole else problems[i][1][rows] for i in members]))
    keys = [np.packbits(p[2]).tobytes() for p in problems]
    held: dict[bytes, np.ndarray] = {}  # each distinct set of validation rows, gathered once
    for key, p in zip(keys, problems):
        if key not in held:
            held[key] = xtr[p[2]]
    xval = [held[k] for k in keys]
    init, last = None, None
    for c in sorted(Cs):
        now = [None] * len(problems)
        for members, x, labels, masks in batches:
            fits = _logistic(x, labels, masks, [problems[i][4] for i in members], [c] * len(members), method,
                             gtol=CV_GTOL, init=None if init is None else [init[i] for i in members])
            for i, (W, _) in zip(members, fits):
                now[i] = W
        init, last = (now if last is None else [2 * a - b for a, b in zip(now, last)]), now
        for (name, _, val, y, _, _), W, xv in zip(problems, now, xval):
            tally.setdefault((name, c), []).append(float((_predict(xv, W) == y[val]).mean()))
            if method == "fast":  # where the final fit starts
                solutions.setdefault((name, c), []).append(W)
    chosen, starts = {}, {}
    for name in names:
        ranked = [(float(np.mean(acc)), -c) for (n, c), acc in tally.items() if n == name]
        chosen[name] = -max(ranked)[1] if ranked else middle
        if ranked and method == "fast":
            starts[name] = np.mean(solutions[(name, chosen[name])], axis=0)
    return chosen, starts


def _cv_ridge(xtr, ytr, fold, Cs, middle) -> float:
    """The C (= 1 / alpha) of the grid with the best pooled validation R^2 over the folds (ties: the smaller)."""
    if fold is None:
        return middle
    best = None
    for c in sorted(Cs):
        pred = np.empty_like(ytr)
        for f in range(fold.max() + 1):
            val = fold == f
            pred[val] = _ridge(xtr[~val], ytr[~val], xtr[val], 1.0 / c)
        r2 = _r2(ytr, pred)
        if np.isfinite(r2) and (best is None or r2 > best[0]):
            best = (r2, c)
    return middle if best is None else best[1]


def fit_probes(x: np.ndarray, tgts: list, test: np.ndarray, *, C: float = 1.0, alpha: float = 1.0,
               method: str = "fast") -> dict[str, float]:
    """Test score of each target (a :class:`~analysis.readouts.probes.Target`: accuracy, or R^2 for scalars) for
    activations ``x`` ``[N, d]`` at a fixed ``C`` (ridge: ``alpha``); targets with one class in training get NaN.
    ``method``: ``fast`` (joint torch/closed form) or ``sklearn``. :func:`analysis.readouts.probes.probe_table` adds
    the choice of C, convergence and the controls."""
    return {k: v.score for k, v in _fit(x, tgts, test, C=float(C), alpha=alpha, method=method).items()}


__all__ = ["C_GRID", "CV_FOLDS", "CV_GTOL", "CV_SPLIT_WORK", "split_by_sequence", "split_by_type", "fit_probes"]
