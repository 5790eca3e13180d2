"""Similarity of two representations of the same token windows under resampling: a bootstrap over windows and a
row-permutation null, each draw computed from per-window sums instead of from the tokens again."""

from __future__ import annotations

import numpy as np

from analysis.errors import AnalysisError

#: The largest per-window cross-product array (``n_windows * p * q`` float64) a pair may hold.
MAX_BYTES = 2 ** 31
_CHUNK_BYTES = 2 ** 25  # each [tokens, draws] block of one evaluation


def window_counts(n_windows: int, draws: int, seed: int = 0) -> np.ndarray:
    """Multiplicities ``[n_windows, draws]`` of ``draws`` bootstrap resamples of ``n_windows`` windows (seeded)."""
    if n_windows < 2 or draws < 1:
        raise AnalysisError(f"a bootstrap over windows needs at least 2 windows and 1 draw, got {n_windows} and "
                            f"{draws}")
    idx = np.random.default_rng(seed).integers(0, n_windows, size=(draws, n_windows))
    counts = np.zeros((draws, n_windows))
    np.add.at(counts, (np.arange(draws)[:, None], idx), 1.0)
    return counts.T


class Side:
    """One representation of the windows, ``[n, T, p]``, centred over all ``n T`` tokens, with its window sums."""

    def __init__(self, x):
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 3 or x.shape[0] < 1 or x.shape[1] < 1:
            raise AnalysisError(f"window activations must be [n_windows, tokens, width], got shape {x.shape}")
        n, t, p = x.shape
        self.x = x - x.reshape(n * t, p).mean(0)
        self.flat = self.x.reshape(n * t, p)
        self.sums = self.x.sum(1)                 # [n, p]
        self.diag = (self.x * self.x).sum(-1)     # [n, T]: the Gram matrix's diagonal
        self.diag_sums = self.diag.sum(1)         # [n]

    @property
    def shape(self):
        """``(n, T, p)``: windows, tokens per window, width."""
        return self.x.shape

    def point(self, other: "Side", perm=None, *, nuclear: bool = True) -> dict:
        """``hsic``, ``cross``, ``nuclear`` (unless ``nuclear=False``), ``sq_norm_a``, ``sq_norm_b`` on the data
        itself (every window once), with ``other``'s rows permuted by ``perm`` when given."""
        x, y = self.flat, other.flat if perm is None else other.flat[perm]
        m = x.shape[0]
        kd, ld = (x * x).sum(1), (y * y).sum(1)
        xy = x.T @ y
        tr = float((xy * xy).sum())
        k1, l1 = x @ x.sum(0) - kd, y @ y.sum(0) - ld
        hsic = (tr - float(kd @ ld) + k1.sum() * l1.sum() / ((m - 1) * (m - 2)) - 2 * float(k1 @ l1) / (m - 2)) \
            / (m * (m - 3))
        out = {"hsic": hsic, "cross": tr, "sq_norm_a": float(kd.sum()), "sq_norm_b": float(ld.sum())}
        if nuclear:
            out["nuclear"] = float(np.linalg.svd(xy, compute_uv=False).sum())
        return out


class Pair:
    """Two representations of the same windows and the per-window sums their resampled similarities need."""

    def __init__(self, a: Side, b: Side, *, nuclear: bool = True, via: str | None = None):
        if a.shape[:2] != b.shape[:2]:
            raise AnalysisError(f"the two representations cover different windows: {a.shape[:2]} against "
                                f"{b.shape[:2]} (windows, tokens)")
        n, _, p = a.shape
        q = b.shape[2]
        if n * p * q * 8 > MAX_BYTES:
            raise AnalysisError(f"the per-window cross products of {n} windows at widths {p} x {q} need "
                                f"{n * p * q * 8 / 2**30:.1f} GiB; use fewer tokens or no bootstrap (boot=0)")
        self.a, self.b, self.nuclear = a, b, nuclear
        # the per-window sums u_j^T M_s v_k by way of the tokens ([tokens, draws] products) or of the windows (an
        # [n, n, n] array of x_i . s_r y_i . s'_m summed over each window's tokens): whichever costs less
        t = a.shape[1]
        self.via = via or ("windows" if n * n <= t * (p + q) and n ** 3 * 8 <= 2 ** 28 else "tokens")
        if self.via not in ("windows", "tokens"):
            raise AnalysisError(f"via must be 'windows' or 'tokens', got {via!r}")
        if self.via == "windows":
            qx, qy = (a.flat @ a.sums.T).reshape(n, t, n), (b.flat @ b.sums.T).reshape(n, t, n)
            self.h = qx.transpose(0, 2, 1) @ qy                   # [n, n, n]
        self.m_s = a.x.transpose(0, 2, 1) @ b.x                   # per-window cross products M_s, [n, p, q]
        flat = self.m_s.reshape(n, p * q)
        self.gram = flat @ flat.T                                 # <M_s, M_t>
        self.e = (a.diag * b.diag).sum(1)                         # sum over a window of K_ii L_ii
        self.xl = (b.diag[:, None, :] @ a.x)[:, 0]                # sum over a window of L_ii x_i
        self.yk = (a.diag[:, None, :] @ b.x)[:, 0]                # sum over a window of K_ii y_i

    def evaluate(self, counts) -> dict:
        """The statistics (see the module docstring) for multiplicities ``counts`` ``[n, draws]``: arrays
        ``[draws]``."""
        c_all = np.asarray(counts, dtype=np.float64)
        n, t, _ = self.a.shape
        if c_all.ndim != 2 or c_all.shape[0] != n:
            raise AnalysisError(f"multiplicities must be [{n} windows, draws], got shape {c_all.shape}")
        step = max(1, _CHUNK_BYTES // (8 * max(n * t, n * n)))
        parts = [self._evaluate(c_all[:, i:i + step]) for i in range(0, c_all.shape[1], step)]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def _per_window(self, cp, u, v) -> dict:
        a, b = self.a, self.b
        n, t, _ = a.shape
        if self.via == "windows":
            hc = {k: self.h @ cp[k] for k in (1, 2)}                # [n, n, B]
            return {(j, k): (cp[j][None] * hc[k]).sum(1) for j, k in ((1, 1), (2, 1), (1, 2))}
        xu = {k: (a.flat @ u[k]).reshape(n, t, -1) for k in (1, 2)}  # x_i . sum_j w_j^k x_j, [n, T, B]
        yv = {k: (b.flat @ v[k]).reshape(n, t, -1) for k in (1, 2)}
        return {(j, k): (xu[j] * yv[k]).sum(1) for j, k in ((1, 1), (2, 1), (1, 2))}

    def _evaluate(self, c) -> dict:
        a, b, e = self.a, self.b, self.e
        n, t, _ = a.shape
        cp = {k: c ** k for k in range(1, 5)}                     # powers of the windows' multiplicities
        p1, p2, p3, p4 = (t * cp[k].sum(0) for k in range(1, 5))  # power sums of the rows' weights w
        u = {k: a.sums.T @ cp[k] for k in (1, 2)}                  # sum_j w_j^k x_j, [p, B]
        v = {k: b.sums.T @ cp[k] for k in (1, 2)}
        per = self._per_window(cp, u, v)                           # (j, k) -> sum_{i in s} x_i.u_j y_i.v_k
        xl = {k: self.xl @ u[k] for k in (1, 2)}                   # per window: sum_i L_ii x_i . u_k
        yk = {k: self.yk @ v[k] for k in (1, 2)}
        gc = {k: self.gram @ cp[k] for k in (1, 2, 3)}

        def q(i, j):  # sum over tokens i != j of w_i^i w_j^j K_ij L_ij
            return (cp[i] * gc[j]).sum(0) - cp[i + j].T @ e

        def d3(al, be, ga):  # sum over distinct tokens i, j, k of w_i^al w_j^be w_k^ga K_ij L_ik
            inner = per[be, ga] - cp[ga] * xl[be] - cp[be] * yk[ga] + cp[be + ga] * e[:, None]
            return (cp[al] * inner).sum(0) - q(al, be + ga)

        uu, vv = (u[1] * u[1]).sum(0), (v[1] * v[1]).sum(0)
        sk, sl = uu - cp[2].T @ a.diag_sums, vv - cp[2].T @ b.diag_sums  # sum_{i != j} w_i w_j K_ij, and for L
        d211 = d3(2, 1, 1)
        # the U-statistic over ordered 4-tuples of distinct tokens of h = K_ij L_ij + K_ij L_kl - 2 K_ij L_ik,
        # each tuple weighted by the product of its tokens' multiplicities
        term1 = (p1 ** 2 - p2) * q(1, 1) - 4 * p1 * q(1, 2) + 4 * q(1, 3) + 2 * q(2, 2)
        term3 = p1 * d3(1, 1, 1) - d211 - d3(1, 2, 1) - d3(1, 1, 2)
        term4 = sk * sl - 4 * d211 - 2 * q(2, 2)
        with np.errstate(invalid="ignore", divide="ignore"):
            w4 = p1 ** 4 - 6 * p1 ** 2 * p2 + 3 * p2 ** 2 + 8 * p1 * p3 - 6 * p4  # their summed weights
            big_a = (c * per[1, 1]).sum(0)                          # u^T X^T W Y v
            s11 = (c * gc[1]).sum(0)                                # ||X^T W Y||_F^2
            out = {"hsic": (term1 + term4 - 2 * term3) / w4, "cross": s11 - 2 * big_a / p1 + uu * vv / p1 ** 2,
                   "sq_norm_a": c.T @ a.diag_sums - uu / p1, "sq_norm_b": c.T @ b.diag_sums - vv / p1}
            if self.nuclear:  # ||Z||_*, Z = X~^T W Y~
                z = (c.T @ self.m_s.reshape(n, -1)).reshape(-1, *self.m_s.shape[1:])
                z -= np.einsum("pb,qb->bpq", u[1], v[1]) / p1[:, None, None]
                out["nuclear"] = np.linalg.svd(z, compute_uv=False).sum(-1)
        return out


def permuted(a: Side, b: Side, draws: int, seed=0, *, nuclear: bool = True) -> dict:
    """The statistics of ``a`` against ``b`` with ``b``'s rows permuted across all tokens, ``draws`` times
    (seeded): arrays ``[draws]``."""
    if draws < 1:
        raise AnalysisError(f"the permutation null needs at least one draw, got {draws}")
    rng = np.random.default_rng(seed)
    rows = [a.point(b, rng.permutation(b.flat.shape[0]), nuclear=nuclear) for _ in range(draws)]
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def measures(xy: dict, xx: dict, yy: dict) -> dict:
    """``debiased_cka``, ``linear_cka`` and ``procrustes`` from the statistics of a pair and of each side with
    itself (scalars or arrays of draws)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {"debiased_cka": xy["hsic"] / np.sqrt(xx["hsic"] * yy["hsic"]),
               "linear_cka": xy["cross"] / np.sqrt(xx["cross"] * yy["cross"])}
        if "nuclear" in xy:
            out["procrustes"] = xy["nuclear"] / np.sqrt(xy["sq_norm_a"] * xy["sq_norm_b"])
    return out


__all__ = ["MAX_BYTES", "window_counts", "Side", "Pair", "permuted", "measures"]
