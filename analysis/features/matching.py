"""Do two dictionaries find the same features? Latents matched by decoder direction and by activation."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.optimize import linear_sum_assignment

from analysis.errors import AnalysisError
from analysis.features.code_reading import Latents
from analysis.features.dictionary import SparseDictionary


def _unit_rows(w: np.ndarray) -> np.ndarray:
    return w / np.maximum(np.linalg.norm(w, axis=1, keepdims=True), 1e-12)


def _unit_decoder(d: SparseDictionary) -> np.ndarray:
    """The decoder rows ``[d_sae, d_out]`` scaled to unit norm (float64)."""
    return _unit_rows(d.W_dec.detach().double().cpu().numpy())


def decoder_cosines(a: SparseDictionary, b: SparseDictionary) -> np.ndarray:
    """``[d_sae_a, d_sae_b]``: cosines between the two dictionaries' decoder rows (same output width)."""
    wa, wb = _unit_decoder(a), _unit_decoder(b)
    if wa.shape[1] != wb.shape[1]:
        raise AnalysisError(f"decoder directions of width {wa.shape[1]} and {wb.shape[1]} cannot be compared")
    return wa @ wb.T


def _csr(lat: Latents, rows: np.ndarray | None = None) -> sparse.csr_matrix:
    tok = lat.token if rows is None else rows[lat.token]
    return sparse.csr_matrix((lat.value.astype(np.float64), (tok, lat.latent)), shape=(lat.n_tokens, lat.d_sae))


def activation_correlations(a: Latents, b: Latents, *, rows: np.ndarray | None = None) -> np.ndarray:
    """``[d_sae_a, d_sae_b]``: Pearson correlations of the latents' activations over the same token rows (NaN for a
    latent that never fires); ``rows`` permutes ``b``'s rows first (the null)."""
    if a.n_tokens != b.n_tokens or not np.array_equal(a.ids, b.ids):
        raise AnalysisError("activation correlations need both dictionaries' latents on the same tokens; evaluate "
                            "them on the same windows")
    A, B = _csr(a), _csr(b, rows)
    n = a.n_tokens
    cross = (A.T @ B).toarray() / n
    mean_a, mean_b = np.asarray(A.mean(0)).ravel(), np.asarray(B.mean(0)).ravel()
    sd_a = np.sqrt(np.maximum(np.asarray(A.multiply(A).mean(0)).ravel() - mean_a ** 2, 0))
    sd_b = np.sqrt(np.maximum(np.asarray(B.multiply(B).mean(0)).ravel() - mean_b ** 2, 0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (cross - np.outer(mean_a, mean_b)) / np.outer(sd_a, sd_b)


def summarise(sim: np.ndarray) -> dict:
    """``max_mean`` (mean over rows of the row maximum) and ``hungarian_mean`` (mean of a one-to-one assignment that
    maximises the total) of a similarity matrix whose rows and columns are the latents to match."""
    if sim.size == 0:
        return {"max_mean": float("nan"), "hungarian_mean": float("nan")}
    r, c = linear_sum_assignment(sim, maximize=True)
    return {"max_mean": float(sim.max(1).mean()), "hungarian_mean": float(sim[r, c].mean())}


def match_dictionaries(a: SparseDictionary, b: SparseDictionary, lat_a: Latents, lat_b: Latents, *,
                       seed: int = 0) -> pd.DataFrame:
    """The table of the module docstring: one row per ``measure`` (``decoder_cosine``, ``activation_correlation``)
    and ``stat`` (``max_mean``, ``hungarian_mean``) with ``value`` and ``null``, over the latents of each dictionary
    that fire on the evaluated tokens (``n_a``, ``n_b``)."""
    alive_a, alive_b = np.flatnonzero(lat_a.fires() > 0), np.flatnonzero(lat_b.fires() > 0)
    rng = np.random.default_rng([int(seed), 31])
    cos = decoder_cosines(a, b)[np.ix_(alive_a, alive_b)]
    wa = _unit_decoder(a)[alive_a]
    null_cos = wa @ _unit_rows(rng.standard_normal((len(alive_b), wa.shape[1]))).T
    corr = activation_correlations(lat_a, lat_b)[np.ix_(alive_a, alive_b)]
    null_corr = activation_correlations(lat_a, lat_b, rows=rng.permutation(lat_b.n_tokens))[np.ix_(alive_a, alive_b)]
    rows = []
    for measure, sim, null in (("decoder_cosine", cos, null_cos), ("activation_correlation", corr, null_corr)):
        got, ref = summarise(np.nan_to_num(sim)), summarise(np.nan_to_num(null))
        rows += [{"measure": measure, "stat": s, "value": got[s], "null": ref[s]} for s in got]
    df = pd.DataFrame(rows)
    df["n_a"], df["n_b"] = len(alive_a), len(alive_b)
    return df


__all__ = ["decoder_cosines", "activation_correlations", "summarise", "match_dictionaries"]
