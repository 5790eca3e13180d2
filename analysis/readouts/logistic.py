"""Many L2-regularised logistic regressions on the same inputs, fitted together: the probes' fast path."""

from __future__ import annotations

import numpy as np
import torch


#: The step at which each column's preconditioner becomes its own Hessian block at the current iterate (by then the
#: fits have left ``W = 0``, where the initial one is exact; a warm start refreshes at its first step too); only for
#: inputs of at most ``REFRESH_MAX_WIDTH`` features, as a block costs ``width^2`` per row it adds.
REFRESH_STEP = 15
REFRESH_MAX_WIDTH = 128
#: A row's curvature ``p (1 - p)`` in a column above which a refresh adds its ``x x^T`` exactly; below it, rows enter
#: by their mean (a fitted probe's confident rows, which move its Hessian little).
SPARSE_CURVATURE = 0.01
#: The most rows of one column a refresh adds one by one; a column with more uncertain rows adds an evenly spaced
#: sample of this many, scaled (a preconditioner need not be exact; the fit's gradient is).
REFRESH_ROWS = 2048
#: The products with ``X`` run on ``W`` padded with zero columns to a multiple of this (MKL's single-precision product
#: of a tall ``X`` took twice as long for 213 columns as for 224 on this project's 2-core machines).
PAD = 16
#: Targets fitted on at most this share of the rows are evaluated on a copy of their own rows (a part of the joint
#: objective: no products or softmax on the rows their mask leaves out); those on more share the full inputs.
PART_SHARE = 0.9
#: The most rows the copies of all parts may hold together, in multiples of the inputs' rows (the smallest masks
#: get theirs first; the others share the full inputs).
PART_ROWS = 2.0


class _Batch:
    """The joint objective of targets laid out as column blocks of ``W`` (binary targets first, one column each;
    multinomial targets after them, those of equal K side by side), each with its own ``C``."""

    def __init__(self, X, Y, M, ks, C, mask_id, known_grams: dict | None = None):
        """``known_grams``: the rows' grams of masks already formed on this ``X`` (by mask id; a restart's are its
        first batch's), filled in with those this batch forms."""
        self.X, self.Y, self.M, self.ks = X, Y, M, list(ks)
        dtype = X.dtype
        self.T = len(ks)
        self.B = sum(1 for k in ks if k == 1)
        self.off = np.concatenate([[0], np.cumsum(ks)]).astype(int)
        self.col2t = torch.from_numpy(np.repeat(np.arange(self.T), ks))
        self.rows = M.sum(0)
        self.every_row = bool(self.rows.min() == len(M)) if len(ks) else True  # no mask to apply
        D = X.shape[1]
        inv_c = torch.tensor([1.0 / c for c in C], dtype=dtype)
        self.reg = inv_c[self.col2t][None].repeat(D, 1)
        self.reg[-1] = 0.0  # the intercept is not penalised
        # runs of multinomial targets with the same K: (first target, number of targets, K)
        self.runs = []
        for t in range(self.B, self.T):
            if self.runs and self.runs[-1][2] == ks[t] and self.runs[-1][0] + self.runs[-1][1] == t:
                self.runs[-1][1] += 1
            else:
                self.runs.append([t, 1, ks[t]])
        # per run, each row's class index ``[N, n, 1]`` (0 where the row is masked out), and where its label's logit
        # sits in the flat ``Z``: y enters as one gather (no one-hot products)
        N, cols = len(Y), int(self.off[-1])
        self.cols, self.padded = cols, -(-cols // PAD) * PAD
        self.labels = [Y[:, self.off[t]:self.off[t + n]].reshape(N, n, k).argmax(2, keepdim=True)
                       for t, n, k in self.runs]
        self.picked = [torch.arange(N)[:, None] * self.padded + int(self.off[t]) + torch.arange(n)[None] * k
                       + lab[..., 0] for (t, n, k), lab in zip(self.runs, self.labels)]
        # each target's exact Hessian at W = 0, one inverse per distinct (rows used, curvature, C)
        curv = [0.25 if k == 1 else 1.0 / k for k in ks]
        keys = [(int(mask_id[t]), curv[t], float(C[t])) for t in range(self.T)]
        distinct = list(dict.fromkeys(keys))
        grams, known = {}, {} if known_grams is None else known_grams
        for m in dict.fromkeys(k[0] for k in distinct):
            if m not in known:
                t = next(i for i, k in enumerate(keys) if k[0] == m)
                known[m] = X.T @ (X * M[:, t:t + 1])
            grams[m] = known[m]
        H0 = []
        for m, cv, c in distinct:
            rows = float(self.rows[keys.index((m, cv, c))])
            ridge = torch.full((D,), 1.0 / c, dtype=dtype)
            ridge[-1] = 0.0
            ridge += 1e-6 * (1 + rows * cv)  # keeps the intercept invertible
            H0.append(cv * grams[m] + torch.diag(ridge))
        self.h0_inv = torch.linalg.inv(torch.stack(H0))
        gram_ids = list(grams)
        self.grams = torch.stack([grams[m] for m in gram_ids])  # the rows' gram, per distinct mask
        self.col_gram = torch.tensor([gram_ids.index(int(mask_id[t])) for t in range(self.T)])[self.col2t]
        which = torch.tensor([distinct.index(k) for k in keys])[self.col2t]
        self.groups = [(u, torch.nonzero(which == u)[:, 0]) for u in range(len(distinct))]
        # per-column Hessian blocks, once ``refresh`` has run: their Cholesky factors (their inverses where a block
        # is not numerically positive definite)
        self.col_chol = self.col_inv = None

    def logits(self, W):
        """``X W`` ``[N, columns]``: a view of the product with the columns padded to a multiple of ``PAD``."""
        return self.X @ torch.nn.functional.pad(W, (0, self.padded - self.cols))

    def probabilities(self, W):
        """Each column's probability ``[N, columns]`` at ``W`` (sigmoid, or the softmax over its target's classes)."""
        Z = self.logits(W)[:, :self.cols]
        P = torch.empty_like(Z)
        P[:, :self.B] = torch.sigmoid(Z[:, :self.B].contiguous())
        N = Z.shape[0]
        for t, n, k in self.runs:
            a, b = self.off[t], self.off[t + n]
            P[:, a:b] = torch.softmax(Z[:, a:b].reshape(N, n, k), 2).reshape(N, n * k)
        return P

    def refresh(self, W):
        """Precondition each column from now on by its own block of the Hessian at ``W`` (the class's curvature
        ``p (1 - p)`` weighting each row's ``x x^T``, plus the penalty), instead of the Hessian at zero. Rows of
        curvature above ``SPARSE_CURVATURE`` enter one by one; the others (in a fitted multi-class probe, most rows
        of most classes) by their mean curvature times the mean ``x x^T`` of the column's rows, so a refresh costs
        about as many multiply-adds as the rows that are still uncertain, not ``width`` objective evaluations."""
        w = self.probabilities(W)
        w = w.sub_(w * w)
        if not self.every_row:
            w.mul_(self.M[:, self.col2t])
        big = w > SPARSE_CURVATURE
        small = torch.where(big, 0.0, w).sum(0)
        H = self.grams[self.col_gram] * (small / self.rows[self.col2t].clamp(min=1))[:, None, None]
        cols = torch.nonzero(big.sum(0))[:, 0]
        bigT, wT = big[:, cols].T.contiguous(), w[:, cols].T.contiguous()  # only the columns with such rows
        for i, c in enumerate(cols.tolist()):
            rows = torch.nonzero(bigT[i])[:, 0]
            every = -(-len(rows) // REFRESH_ROWS)  # a column with many uncertain rows: an evenly spaced sample
            sample = rows[::every]
            xs = self.X[sample]
            H[c].addmm_(xs.T, xs * wT[i, sample, None], alpha=len(rows) / len(sample))
        ridge = self.reg.T.clone()  # [cols, D]
        ridge[:, -1] += 1e-6 * (1 + self.rows[self.col2t] / 4)
        H += torch.diag_embed(ridge)
        L, info = torch.linalg.cholesky_ex(H)  # a factor solves in half the time an inverse multiplies here
        self.col_chol, self.col_inv = (L, None) if not info.any() else (None, torch.linalg.inv(H))

    def precondition(self, G):
        if self.col_chol is not None:
            return torch.cholesky_solve(G.T[:, :, None], self.col_chol)[..., 0].T
        if self.col_inv is not None:
            return torch.einsum("cde,ec->dc", self.col_inv, G)
        out = torch.empty_like(G)
        for u, cols in self.groups:
            out[:, cols] = self.h0_inv[u] @ G[:, cols]
        return out

    def dot(self, A, Bm):
        return _dot(self.col2t, self.T, A, Bm)

    def grad_max(self, G):
        return _grad_max(self.col2t, self.T, G)

    def update(self, W, grad, which, f, G):
        """The objective (and gradient) at ``W`` where any target of ``which`` ``[T]`` moved, else ``f`` and ``G``
        as given (one batch: all or nothing; see :meth:`_Joint.update`)."""
        return self(W, grad) if bool(which.any()) else (f, G)

    def __call__(self, W, grad=True):
        """Each target's objective ``[T]`` at ``W`` and (with ``grad``) the gradient, the shape of ``W``: the
        residuals ``mask x (p - y)`` are formed block by block and enter one ``X^T R``."""
        Zp = self.logits(W)
        Z = Zp[:, :self.cols]
        B, off = self.B, self.off
        f = torch.empty(self.T, dtype=W.dtype)
        Rp = torch.empty_like(Zp) if grad else None
        R = None if Rp is None else Rp[:, :self.cols]
        if grad:
            Rp[:, self.cols:] = 0.0
        if B:
            # contiguous: softplus and sigmoid ran 13x and 7x slower on the strided slice of the padded product
            z, m, y = Z[:, :B].contiguous(), self.M[:, :B], self.Y[:, :B]
            f[:B] = (m * (torch.nn.functional.softplus(z) - y * z)).sum(0)
            if grad:
                R[:, :B] = m * (torch.sigmoid(z) - y)
        N = Z.shape[0]
        for (t, n, k), lab, at in zip(self.runs, self.labels, self.picked):
            a, b = off[t], off[t + n]
            z = Z[:, a:b].reshape(N, n, k)
            m = self.M[:, t:t + n]
            top = z.amax(2, keepdim=True)
            e = torch.sub(z, top).exp_()  # one exp for the log-sum-exp and the probabilities both
            tot = e.sum(2, keepdim=True)
            f[t:t + n] = (m * (top[..., 0] + torch.log(tot[..., 0]) - Zp.take(at))).sum(0)
            if grad:
                p = e.div_(tot).scatter_add_(2, lab, torch.full_like(lab, -1, dtype=e.dtype))  # p - y
                R[:, a:b] = p.mul_(m[..., None]).reshape(N, n * k)
        f = f + 0.5 * self.dot(self.reg * W, W)
        if not grad:
            return f, None
        return f, (self.X.T @ Rp)[:, :self.cols] + self.reg * W


def _dot(col2t, T: int, A, Bm):
    """Per-target inner products ``[T]`` of two arrays laid out as ``W``."""
    return torch.zeros(T, dtype=A.dtype).index_add_(0, col2t, (A * Bm).sum(0))


def _grad_max(col2t, T: int, G):
    """Per-target largest absolute entry ``[T]`` of ``G``."""
    return torch.zeros(T, dtype=G.dtype).scatter_reduce_(0, col2t, G.abs().amax(0), "amax", include_self=False)


class _Joint:
    """The joint objective of :class:`_Batch` parts side by side: each part's targets are a contiguous run of
    ``W``'s columns, evaluated on that part's own rows (the same interface as one ``_Batch``)."""

    def __init__(self, parts: list):
        self.parts = parts
        edges = np.cumsum([0] + [p.cols for p in parts])
        self.slices = [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]
        self.ks = [k for p in parts for k in p.ks]
        self.T = len(self.ks)
        ends = np.cumsum([0] + [p.T for p in parts])
        self.targets = [slice(int(a), int(b)) for a, b in zip(ends[:-1], ends[1:])]
        self.col2t = torch.from_numpy(np.repeat(np.arange(self.T), self.ks))
        self.rows = torch.cat([p.rows for p in parts])

    def __call__(self, W, grad=True):
        out = [p(W[:, s], grad) for p, s in zip(self.parts, self.slices)]
        return torch.cat([f for f, _ in out]), (torch.cat([g for _, g in out], 1) if grad else None)

    def update(self, W, grad, which, f, G):
        """``f`` and ``G`` (the objective and gradient at a point that differs from ``W`` only in the columns of the
        targets ``which`` ``[T]``) made exact at ``W``: only the parts that hold such a target are evaluated (a step
        backtracked for one target costs its part, not every part), in place."""
        for p, s, t in zip(self.parts, self.slices, self.targets):
            if bool(which[t].any()):
                f[t], Gp = p(W[:, s], grad)
                if grad:
                    G[:, s] = Gp
        return f, G

    def refresh(self, W):
        for p, s in zip(self.parts, self.slices):
            p.refresh(W[:, s])

    def precondition(self, G):
        return torch.cat([p.precondition(G[:, s]) for p, s in zip(self.parts, self.slices)], 1)

    def dot(self, A, Bm):
        return _dot(self.col2t, self.T, A, Bm)

    def grad_max(self, G):
        return _grad_max(self.col2t, self.T, G)


def _refresh_due(steps: int, warm: bool) -> bool:
    """Whether step ``steps`` refreshes the preconditioner: at ``REFRESH_STEP``, and at the first step of a fit that
    starts away from ``W = 0`` (a warm start, where the Hessian at zero is no longer the curvature the fit sees)."""
    return steps == REFRESH_STEP or (steps == 0 and warm)


def _lbfgs(fn: _Batch, W, max_iter: int, memory: int, gtol: float, shrink: float = 0.5):
    """Batched per-target L-BFGS from ``W``; returns (W, converged [T], steps taken). Stops early once the targets
    still running hold at most ``shrink`` of the columns (the caller restarts on those)."""
    col2t, dot = fn.col2t, fn.dot
    ks = torch.tensor(fn.ks, dtype=W.dtype)
    f, G = fn(W)
    warm = bool(W.abs().amax() > 0)
    S, Yd, rho = [], [], []
    steps = 0
    for steps in range(max_iter):
        if W.shape[0] <= REFRESH_MAX_WIDTH + 1 and _refresh_due(steps, warm):
            fn.refresh(W)
        active = fn.grad_max(G) > gtol * fn.rows
        if not active.any() or float(ks[active].sum()) <= shrink * float(ks.sum()):
            break
        q = G.clone()
        alphas = []
        for s, y, r in zip(reversed(S), reversed(Yd), reversed(rho)):
            a = r * dot(s, q)
            alphas.append(a)
            q -= a[col2t] * y
        d = fn.precondition(q)
        if S:
            den = dot(Yd[-1], fn.precondition(Yd[-1]))
            gamma = torch.where(den > 0, dot(S[-1], Yd[-1]) / den.clamp(min=1e-30), torch.ones_like(den))
            d = d * gamma[col2t]
        for s, y, r, a in zip(S, Yd, rho, reversed(alphas)):
            d += (a - r * dot(y, d))[col2t] * s
        d = torch.where(active[col2t], -d, torch.zeros_like(d))
        slope = dot(G, d)
        step = torch.ones(fn.T, dtype=W.dtype)
        Wn = W + d
        fn_, Gn = fn.update(Wn, True, active, f.clone(), G.clone())  # a part whose targets all stopped: not moved
        worse = (fn_ > f + 1e-4 * step * slope) & active
        if worse.any():  # Armijo backtracking, per target: only the parts of the targets that moved are evaluated
            for _ in range(40):
                step = torch.where(worse, step / 2, step)
                Wn = W + d * step[col2t]
                fn_, _ = fn.update(Wn, False, worse, fn_, None)
                worse = (fn_ > f + 1e-4 * step * slope) & active
                if not worse.any():
                    break
            fn_, Gn = fn.update(Wn, True, step < 1, fn_, Gn)
        s, y = Wn - W, Gn - G
        sy = dot(s, y)
        ok = sy > 1e-10 * (dot(y, y) * dot(s, s)).sqrt()  # a target failing the curvature test keeps no pair
        keep = ok.to(W.dtype)[col2t]
        S.append(s * keep)
        Yd.append(y * keep)
        rho.append(torch.where(ok, 1.0 / sy.clamp(min=1e-30), torch.zeros_like(sy)))
        if len(S) > memory:
            del S[0], Yd[0], rho[0]
        W, f, G = Wn, fn_, Gn
    return W, ~(fn.grad_max(G) > gtol * fn.rows), steps


def _mask_ids(Mn: np.ndarray) -> np.ndarray:
    """A mask id per column of the boolean ``Mn`` ``[N, targets]`` (targets on the same rows share one)."""
    packed = np.packbits(Mn, axis=0)
    ids: dict[bytes, int] = {}
    return np.array([ids.setdefault(packed[:, j].tobytes(), len(ids)) for j in range(Mn.shape[1])], dtype=int)


def _parts(Mn: np.ndarray, mask_id: np.ndarray) -> np.ndarray:
    """A part per target: 0 for the targets that share the full inputs, ``1, 2, ..`` for those of a mask evaluated
    on a copy of its rows (a mask on at most ``PART_SHARE`` of the rows, the smallest first, while the copies stay
    within ``PART_ROWS`` times the rows)."""
    N = len(Mn)
    first = {m: int(np.flatnonzero(mask_id == m)[0]) for m in np.unique(mask_id)}
    rows = {m: int(Mn[:, t].sum()) for m, t in first.items()}
    part, budget, made = {}, PART_ROWS * N, 0
    for m in sorted(rows, key=lambda m: (rows[m], m)):
        part[m] = 0
        if rows[m] <= PART_SHARE * N and rows[m] <= budget:
            budget -= rows[m]
            made += 1
            part[m] = made
    return np.array([part[m] for m in mask_id], dtype=int)


def _layout(Mn: np.ndarray, labels: list, ks: list[int], off: np.ndarray, dtype):
    """The targets' labels ``Y`` ``[N, columns]`` (a binary target's 0/1 in its column, a multinomial one's one-hot
    in its ``K``) and their row masks ``M`` ``[N, targets]`` (from the boolean ``Mn``), zero outside the masks."""
    Y = np.zeros((len(Mn), int(off[-1])), dtype=np.float32 if dtype == torch.float32 else np.float64)
    binary = [t for t, k in enumerate(ks) if k == 1]
    if binary:
        lab = np.stack([np.asarray(labels[t]) for t in binary], 1)
        Y[:, off[binary]] = np.where(Mn[:, binary], lab, 0)
    for t in (t for t, k in enumerate(ks) if k > 1):
        rows = np.flatnonzero(Mn[:, t])
        Y[rows, off[t] + np.asarray(labels[t])[rows]] = 1
    return torch.from_numpy(Y).to(dtype), torch.from_numpy(Mn).to(dtype)


class _Problem:
    """The laid-out targets of one :func:`fit_logistic` call (in its order: by part, binary first, then by ``K``),
    and each part's rows (the full inputs for part 0, else a copy of the part's mask's rows, made once)."""

    def __init__(self, X, Mn, part, ks, Cs, mask_id):
        self.X, self.Mn, self.part, self.ks, self.Cs, self.mask_id = X, Mn, part, ks, Cs, mask_id
        self.off = np.concatenate([[0], np.cumsum(ks)]).astype(int)
        self.inputs: dict[int, tuple] = {}  # part -> (its rows or None for every row, its inputs)
        self.grams: dict[int, torch.Tensor] = {}  # shared by every batch: a mask's gram is the same on its copy

    def columns(self, todo: list[int]) -> np.ndarray:
        return np.concatenate([np.arange(self.off[j], self.off[j + 1]) for j in todo])

    def rows_of(self, p: int) -> tuple:
        if p not in self.inputs:
            if p == 0:
                self.inputs[p] = (None, self.X)
            else:
                rows = torch.from_numpy(np.flatnonzero(self.Mn[:, int(np.flatnonzero(self.part == p)[0])]))
                self.inputs[p] = (rows, self.X[rows])
        return self.inputs[p]

    def objective(self, todo: list[int], Y, M):
        """The joint objective of the targets ``todo`` (indices in this order, ascending): one ``_Batch`` per part,
        each with its targets' labels and masks on its rows."""
        batches = []
        for p in dict.fromkeys(int(self.part[j]) for j in todo):
            sub = [j for j in todo if self.part[j] == p]
            rows, X = self.rows_of(p)
            Yp, Mp = Y[:, self.columns(sub)], M[:, sub]
            if rows is not None:
                Yp, Mp = Yp[rows], Mp[rows]
            batches.append(_Batch(X, Yp, Mp, [self.ks[j] for j in sub], [self.Cs[j] for j in sub],
                                  self.mask_id[sub], self.grams))
        return batches[0] if len(batches) == 1 else _Joint(batches)


def fit_logistic(x: np.ndarray, labels: list[np.ndarray], masks: list[np.ndarray], n_classes: list[int],
                 C: float | list[float], *, gtol: float = 1e-4, max_iter: int = 1000, memory: int = 10,
                 dtype: torch.dtype = torch.float32, return_converged: bool = False, init: list | None = None):
    """Fit one logistic regression per target on the rows ``masks[t]`` of ``x`` ``[N, d]`` with class indices
    ``labels[t]`` (``0 .. n_classes[t] - 1``; ignored outside the mask) and inverse L2 strength ``C`` (one for all,
    or one per target). Returns per target ``[d + 1, 1]`` (binary: one logit, intercept last) or ``[d + 1, K]``
    (multinomial); with ``return_converged`` also a bool array ``[targets]``: whether each target's gradient reached
    ``gtol`` within ``max_iter`` steps (a target that did not keeps its last iterate). ``init``: a starting point
    per target (arrays as returned; e.g. the solution at a neighbouring ``C``, a warm start), else zeros."""
    if any(k < 2 for k in n_classes):
        raise ValueError("every target needs at least 2 classes")
    Cs = [float(C)] * len(n_classes) if np.isscalar(C) else [float(c) for c in C]
    if len(Cs) != len(n_classes) or not all(c > 0 for c in Cs):
        raise ValueError("C must be one positive value or one per target")
    Mn = np.stack([np.asarray(m, bool) for m in masks], 1)
    mask_id = _mask_ids(Mn)
    part = _parts(Mn, mask_id)
    # by part, then binary first, then by K
    order = sorted(range(len(n_classes)), key=lambda t: (part[t], n_classes[t] != 2, n_classes[t]))
    ks = [1 if n_classes[t] == 2 else n_classes[t] for t in order]
    X = torch.from_numpy(np.ascontiguousarray(x)).to(dtype)
    X = torch.cat([X, torch.ones(len(X), 1, dtype=dtype)], 1)
    prob = _Problem(X, Mn[:, order], part[order], ks, [Cs[t] for t in order], mask_id[order])
    off = prob.off
    Y, M = _layout(Mn[:, order], [labels[t] for t in order], ks, off, dtype)
    W = torch.zeros(X.shape[1], int(off[-1]), dtype=dtype)
    if init is not None:
        for j, t in enumerate(order):
            W[:, off[j]:off[j + 1]] = torch.from_numpy(np.asarray(init[t])).to(dtype)
    todo, used = list(range(len(ks))), 0
    while todo and used < max_iter:
        cols = prob.columns(todo)
        W[:, cols], done, steps = _lbfgs(prob.objective(todo, Y, M), W[:, cols].clone(), max_iter - used, memory,
                                         gtol)
        used += steps + 1
        todo = [j for j, d in zip(todo, done.tolist()) if not d]
    out = [None] * len(ks)
    converged = np.ones(len(ks), dtype=bool)
    for j, t in enumerate(order):
        out[t] = W[:, off[j]:off[j + 1]].double().numpy()
        converged[t] = j not in todo
    return (out, converged) if return_converged else out


__all__ = ["fit_logistic"]
