"""Many L2-regularised logistic regressions on the same inputs, fitted together: the probes' fast path.

Each target is scikit-learn's ``LogisticRegression(C=C)`` problem (its objective times the number of rows): a binary
target is one logit (``softplus(z) - y z``), a target with K > 2 classes a K-way softmax (multinomial), every weight
penalised by ``||w||^2 / (2 C)``, the intercepts not. All targets share the inputs ``X`` and differ in labels and in
which rows they use, so one ``X @ W`` over the columns of every target gives all their logits and one ``X.T @ R`` all
their gradients.

The solver is L-BFGS run per target inside one batched loop: every inner product of the two-loop recursion, the
curvature test and the Armijo backtracking are taken per target (segment sums over a target's columns), so the
targets never share a step length or a curvature pair. The initial inverse Hessian is each target's exact Hessian at
``W = 0`` (the row Gram ``X^T X`` of its rows times 1/4 for a logit, 1/K for a softmax, plus the penalty) - it removes
the ill-conditioning of correlated residual-stream directions, so the fits take ~100 steps where scikit-learn's takes
up to ~500 - scaled each step by the usual ``s^T y / y^T H0 y``. A target stops when the largest entry of its gradient
is below ``gtol`` per row (scikit-learn's ``tol`` on its row-averaged objective); once the targets still running hold
at most half of the columns, the solve restarts on those alone, so a slow target does not keep paying for the fast
ones. Float32 by default: the probes compare accuracies, which the tests check against scikit-learn to 0.01.
"""

from __future__ import annotations

import numpy as np
import torch


class _Batch:
    """The joint objective of targets laid out as column blocks of ``W`` (binary targets first, one column each)."""

    def __init__(self, X, Y, M, ks, C):
        self.X, self.Y, self.M, self.ks = X, Y, M, list(ks)
        dtype = X.dtype
        self.T = len(ks)
        self.B = sum(1 for k in ks if k == 1)
        self.off = np.concatenate([[0], np.cumsum(ks)]).astype(int)
        self.col2t = torch.from_numpy(np.repeat(np.arange(self.T), ks))
        self.Mcol = M[:, self.col2t]
        self.rows = M.sum(0)
        D = X.shape[1]
        self.reg = torch.full((D, 1), 1.0 / C, dtype=dtype)
        self.reg[-1] = 0.0  # the intercept is not penalised
        curv = torch.tensor([0.25 if k == 1 else 1.0 / k for k in ks], dtype=dtype)
        ridge = self.reg[:, 0][None] + 1e-6 * (1 + self.rows * curv)[:, None]  # keeps the intercept invertible
        H0 = torch.einsum("nd,nt,ne->tde", X, M * curv, X) + torch.diag_embed(ridge)
        self.h0_inv = torch.linalg.inv(H0)

    def precondition(self, G):
        out = torch.empty_like(G)
        B = self.B
        if B:
            out[:, :B] = torch.bmm(self.h0_inv[:B], G[:, :B].T.unsqueeze(-1))[..., 0].T
        for t in range(B, self.T):
            a, b = self.off[t], self.off[t + 1]
            out[:, a:b] = self.h0_inv[t] @ G[:, a:b]
        return out

    def dot(self, A, Bm):
        """Per-target inner products ``[T]``."""
        return torch.zeros(self.T, dtype=A.dtype).index_add_(0, self.col2t, (A * Bm).sum(0))

    def grad_max(self, G):
        g = G.abs().amax(0)
        return torch.stack([g[self.off[t]:self.off[t + 1]].max() for t in range(self.T)])

    def __call__(self, W, grad=True):
        Z = self.X @ W
        B, off = self.B, self.off
        f = torch.empty(self.T, dtype=W.dtype)
        P = torch.empty_like(Z) if grad else None
        if B:
            z = Z[:, :B]
            f[:B] = (self.M[:, :B] * (torch.nn.functional.softplus(z) - self.Y[:, :B] * z)).sum(0)
            if grad:
                P[:, :B] = torch.sigmoid(z)
        for t in range(B, self.T):
            z = Z[:, off[t]:off[t + 1]]
            lse = torch.logsumexp(z, 1, keepdim=True)
            f[t] = (self.M[:, t] * (lse[:, 0] - (z * self.Y[:, off[t]:off[t + 1]]).sum(1))).sum()
            if grad:
                P[:, off[t]:off[t + 1]] = torch.exp(z - lse)
        f = f + 0.5 * self.dot(self.reg * W, W)
        if not grad:
            return f, None
        return f, self.X.T @ (self.Mcol * (P - self.Y)) + self.reg * W


def _lbfgs(fn: _Batch, W, max_iter: int, memory: int, gtol: float, shrink: float = 0.5):
    """Batched per-target L-BFGS from ``W``; returns (W, converged [T], steps taken). Stops early once the targets
    still running hold at most ``shrink`` of the columns (the caller restarts on those)."""
    col2t, dot = fn.col2t, fn.dot
    ks = torch.tensor(fn.ks, dtype=W.dtype)
    f, G = fn(W)
    S, Yd, rho = [], [], []
    steps = 0
    for steps in range(max_iter):
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
        fn_, Gn = fn(Wn)
        worse = (fn_ > f + 1e-4 * step * slope) & active
        if worse.any():  # Armijo backtracking, per target
            for _ in range(40):
                step = torch.where(worse, step / 2, step)
                Wn = W + d * step[col2t]
                fn_, _ = fn(Wn, grad=False)
                worse = (fn_ > f + 1e-4 * step * slope) & active
                if not worse.any():
                    break
            fn_, Gn = fn(Wn)
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


def fit_logistic(x: np.ndarray, labels: list[np.ndarray], masks: list[np.ndarray], n_classes: list[int], C: float,
                 *, gtol: float = 1e-4, max_iter: int = 1000, memory: int = 10,
                 dtype: torch.dtype = torch.float32) -> list[np.ndarray]:
    """Fit one logistic regression per target on the rows ``masks[t]`` of ``x`` ``[N, d]`` with class indices
    ``labels[t]`` (``0 .. n_classes[t] - 1``; ignored outside the mask). Returns per target ``[d + 1, 1]`` (binary:
    one logit, intercept last) or ``[d + 1, K]`` (multinomial)."""
    if any(k < 2 for k in n_classes):
        raise ValueError("every target needs at least 2 classes")
    order = sorted(range(len(n_classes)), key=lambda t: n_classes[t] != 2)  # binary targets first
    ks = [1 if n_classes[t] == 2 else n_classes[t] for t in order]
    X = torch.from_numpy(np.ascontiguousarray(x)).to(dtype)
    X = torch.cat([X, torch.ones(len(X), 1, dtype=dtype)], 1)
    off = np.concatenate([[0], np.cumsum(ks)]).astype(int)
    Y = torch.zeros(len(X), int(off[-1]), dtype=dtype)
    M = torch.zeros(len(X), len(ks), dtype=dtype)
    for j, t in enumerate(order):
        m = np.asarray(masks[t], bool)
        rows = torch.from_numpy(np.flatnonzero(m))
        y = torch.from_numpy(np.asarray(labels[t])[m].astype(np.int64))
        if ks[j] == 1:
            Y[rows, off[j]] = y.to(dtype)
        else:
            Y[rows, off[j] + y] = 1.0
        M[:, j] = torch.from_numpy(m).to(dtype)
    W = torch.zeros(X.shape[1], int(off[-1]), dtype=dtype)
    todo, used = list(range(len(ks))), 0
    while todo and used < max_iter:
        cols = np.concatenate([np.arange(off[j], off[j + 1]) for j in todo])
        fn = _Batch(X, Y[:, cols], M[:, todo], [ks[j] for j in todo], C)
        W[:, cols], done, steps = _lbfgs(fn, W[:, cols].clone(), max_iter - used, memory, gtol)
        used += steps + 1
        todo = [j for j, d in zip(todo, done.tolist()) if not d]
    out = [None] * len(ks)
    for j, t in enumerate(order):
        out[t] = W[:, off[j]:off[j + 1]].double().numpy()
    return out


__all__ = ["fit_logistic"]
