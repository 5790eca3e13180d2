"""Head geometry: what the learned output head holds, now that the input can no longer learn anything."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from fixedid.codes import ids_to_bits

from analysis.errors import AnalysisError
from analysis.readouts.similarity import debiased_cka, linear_cka
from analysis.stats import t_interval

COLUMNS = ["measure", "basis", "value", "lo", "hi", "null_mean", "null_lo", "null_hi", "reference", "reference_seed"]
FREQUENCY_TOKENS = 65_536  # tokens counted for the frequencies when none are given


# ------------------------------------------------------------------------------------------------ frequencies
def token_counts(model, data=None, *, tokens: int = FREQUENCY_TOKENS) -> np.ndarray:
    """``[vocab]`` token counts of ``tokens`` tokens of ``data`` (as :func:`analysis.corpus.corpus_tokens`: by default
    the checkpoint's own validation stream)."""
    from analysis.corpus import corpus_tokens

    x = corpus_tokens(model, data, tokens=tokens)
    V = model.cfg.vocab_size
    return np.bincount(x.reshape(-1).cpu().numpy(), minlength=V)[:V].astype(np.int64)


def frequency_bins(counts, n_bins: int) -> np.ndarray:
    """``[vocab]`` bin of each token: ``n_bins`` equal-size bins of the tokens ranked by count (most frequent first;
    tied counts ranked by id, itself a frequency rank of the tokenizer's training data)."""
    counts = np.asarray(counts)
    V = len(counts)
    if not isinstance(n_bins, (int, np.integer)) or not 1 <= n_bins <= V:
        raise AnalysisError(f"freq_bins must be an integer in [1, {V}] (the vocabulary), got {n_bins!r}")
    order = np.lexsort((np.arange(V), -counts))
    bins = np.empty(V, dtype=np.int64)
    bins[order] = np.arange(V) * n_bins // V
    return bins


def binned_permutation(bins: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random permutation ``perm`` of the token ids that moves each token only within its bin
    (``bins[perm] == bins``)."""
    perm = np.arange(len(bins))
    for b in np.unique(bins):
        idx = np.flatnonzero(bins == b)
        perm[idx] = rng.permutation(idx)
    return perm


def frequency_null(bins: np.ndarray, draws: int, seed: int) -> list[np.ndarray]:
    """The null's ``draws`` within-bin permutations: :func:`~analysis.readouts.head.binned_permutation` in sequence from
    ``np.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    return [binned_permutation(bins, rng) for _ in range(draws)]


def _frequency_features(counts: np.ndarray, degree: int) -> np.ndarray:
    z = np.log1p(counts.astype(np.float64))
    z = (z - z.mean()) / (z.std() or 1.0)
    F = np.stack([z ** p for p in range(1, degree + 1)], 1)
    sd = F.std(0)
    return (F - F.mean(0)) / np.where(sd > 0, sd, 1.0)


# ---------------------------------------------------------------------------------- held-out regression R^2
def kfold(n: int, folds: int, seed: int) -> np.ndarray:
    """``[n]`` fold of each token: a seeded random assignment to ``folds`` disjoint folds of (nearly) equal size."""
    if not isinstance(folds, (int, np.integer)) or not 2 <= folds <= n:
        raise AnalysisError(f"folds must be an integer in [2, {n}], got {folds!r}")
    fold = np.empty(n, dtype=np.int64)
    fold[np.random.default_rng(seed).permutation(n)] = np.arange(n) % folds
    return fold


def out_of_fold(X: np.ndarray, Y: np.ndarray, fold: np.ndarray, alpha: float) -> np.ndarray:
    """Ridge predictions of ``Y`` from ``X`` (unpenalised intercept), each fold predicted by the map fitted on the
    others."""
    pred = np.empty_like(Y)
    for f in np.unique(fold):
        te = fold == f
        xm, ym = X[~te].mean(0), Y[~te].mean(0)
        A = X[~te] - xm
        W = np.linalg.solve(A.T @ A + alpha * np.eye(A.shape[1]), A.T @ (Y[~te] - ym))
        pred[te] = (X[te] - xm) @ W + ym
    return pred


def _ratio(num_t: np.ndarray, den_t: np.ndarray, w=None):
    """``1 - sum(num_t) / sum(den_t)`` over tokens; ``w``: ``[B, n]`` bootstrap counts (one value per resample)."""
    return 1 - num_t.sum() / den_t.sum() if w is None else 1 - (w @ num_t) / (w @ den_t)


def _boot_weights(n: int, boot: int, seed: int):
    rng = np.random.default_rng(seed)
    for i in range(0, boot, 100):
        yield rng.multinomial(n, np.full(n, 1 / n), size=min(100, boot - i)).astype(np.float64)


def _interval(draws: np.ndarray) -> tuple[float, float]:
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return float(lo), float(hi)


def _regression_rows(W, bases, F, *, alpha, folds, boot, seed) -> list[dict]:
    Y = W - W.mean(0)
    fold = kfold(len(Y), folds, seed)
    sse = {"log-frequency": ((Y - out_of_fold(F, Y, fold, alpha)) ** 2).sum(1)}
    for basis, X in bases.items():
        X = X[:, X.std(0) > 0]  # constant bits (ids above the vocabulary) carry nothing
        sse[basis] = ((Y - out_of_fold(X, Y, fold, alpha)) ** 2).sum(1)
        sse[basis, "+f"] = ((Y - out_of_fold(np.hstack([X, F]), Y, fold, alpha)) ** 2).sum(1)
    sst = (Y ** 2).sum(1)  # about the mean row (Y is centred), held fixed like the predictions
    stats = {("logfreq_r2", "log-frequency"): (sse["log-frequency"], sst)}
    for basis in bases:
        stats["bits_r2", basis] = (sse[basis], sst)
        stats["bits_logfreq_r2", basis] = (sse[basis, "+f"], sst)
        stats["bits_partial_r2", basis] = (sse[basis, "+f"], sse["log-frequency"])
    draws = {key: [] for key in stats}
    for w in _boot_weights(len(Y), boot, seed + 1):  # the same resamples for every statistic
        for key, (num, den) in stats.items():
            draws[key].append(_ratio(num, den, w))
    rows = []
    for (measure, basis), (num, den) in stats.items():
        lo, hi = _interval(np.concatenate(draws[measure, basis]))
        rows.append({"measure": measure, "basis": basis, "value": float(_ratio(num, den)), "lo": lo, "hi": hi})
    order = ["bits_r2", "logfreq_r2", "bits_logfreq_r2", "bits_partial_r2"]
    return sorted(rows, key=lambda r: order.index(r["measure"]))


# ------------------------------------------------------------------------------------------ the reference
def _own_bits(model) -> np.ndarray | None:
    if not model.cfg.has_code:
        return None
    c = model.cfg
    code = model.embed.code.detach().cpu().numpy()  # [vocab, n_bits] in the configured order, values per value_map
    return (code > code.min()).astype(float) if c.value_map == "01" else (code > 0).astype(float)


def _where(model) -> str | None:
    p = getattr(model, "checkpoint_path", None) or getattr(model, "ckpt_dir", None)
    return str(p) if p is not None else None


def _data_seed(model):
    meta = getattr(model, "meta", None) or {}
    return ((meta.get("train_config") or {}).get("train") or {}).get("seed")


def check_reference(model, reference) -> None:
    """Refuse a reference that cannot serve: not a learned-interface model, another vocabulary, or the same run as
    ``model`` (see the module docstring)."""
    if reference.cfg.is_fixed:
        raise AnalysisError("the reference must be a learned-interface checkpoint (its input table is compared)")
    V = model.cfg.vocab_size
    if reference.cfg.vocab_size != V:
        raise AnalysisError(f"the reference has {reference.cfg.vocab_size} tokens but this model {V}: they need the "
                            "same tokenizer")
    ta, tb = getattr(model, "tokenizer", None), getattr(reference, "tokenizer", None)
    if ta is not None and tb is not None and ta.get_vocab() != tb.get_vocab():
        raise AnalysisError("the reference has another tokenizer: head geometry needs the same tokens in both")
    a, b = _where(model), _where(reference)
    imported = any("imported_from" in (getattr(m, "meta", None) or {}) for m in (model, reference))
    same = (reference is model or (a is not None and b is not None and Path(a).resolve() == Path(b).resolve())
            or (not imported and reference.cfg.seed == model.cfg.seed)
            or (_data_seed(model) is not None and _data_seed(model) == _data_seed(reference))
            or torch.equal(reference.unembed.weight.detach().cpu(), model.unembed.weight.detach().cpu()))
    if same:
        raise AnalysisError(f"the reference {b or '(in memory)'} is the same run as the model measured (seed "
                            f"{model.cfg.seed}): compare with the learned checkpoint of another seed")


def _nearest(rows: np.ndarray, k: int, chunk: int = 2048) -> np.ndarray:
    """``[vocab, k]`` each row's ``k`` nearest other rows by cosine (in chunks: no ``vocab x vocab`` matrix)."""
    z = torch.from_numpy(rows).float()
    z = z / z.norm(dim=1, keepdim=True).clamp_min(1e-12)
    out = []
    for i in range(0, len(z), chunk):
        sim = z[i:i + chunk] @ z.T
        r = torch.arange(len(sim))
        sim[r, r + i] = -torch.inf
        out.append(sim.topk(k, dim=1).indices)
    return torch.cat(out).numpy()


def _overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per token, the share of its neighbours ``a[t]`` that are among ``b[t]``."""
    return (a[:, :, None] == b[:, None, :]).any(-1).mean(1)


def _reference_rows(W, E, perms, *, k, where, ref_seed, progress) -> list[dict]:
    V = len(W)
    ref = {"reference": where, "reference_seed": ref_seed}
    rows = [{"measure": "cka_to_learned_input", "basis": "W_U vs learned W_E", "value": linear_cka(W, E), **ref}]
    null = np.array([debiased_cka(W, E[p]) for p in tqdm(perms, desc="head null", unit="draw", disable=not progress,
                                                          leave=False)])
    rows.append({"measure": "debiased_cka_to_learned_input", "basis": "W_U vs learned W_E",
                 "value": debiased_cka(W, E), "null_mean": float(null.mean()), **dict(zip(("null_lo", "null_hi"),
                                                                                          _interval(null))), **ref})
    kk = min(k, V - 2)
    a, b = _nearest(W, kk), _nearest(E, kk)
    m, lo, hi = t_interval(_overlap(a, b))
    # the reference's rows permuted, E'[t] = E[p[t]]: t's neighbours in E' are p^-1 of p[t]'s neighbours in E
    null = np.array([_overlap(a, np.argsort(p)[b[p]]).mean() for p in perms])
    rows.append({"measure": "nn_overlap", "basis": f"W_U vs learned W_E, k={kk}", "value": m, "lo": lo, "hi": hi,
                 "null_mean": float(null.mean()), **dict(zip(("null_lo", "null_hi"), _interval(null))), **ref})
    rows.append({"measure": "nn_overlap_chance", "basis": f"k={kk}", "value": kk / (V - 1), **ref})
    return rows


# ------------------------------------------------------------------------------------------------ the table
def head_geometry(model, reference=None, *, frequencies=None, data=None, tokens: int = FREQUENCY_TOKENS,
                  alpha: float = 1.0, folds: int = 5, boot: int = 1000, k: int = 10, null_draws: int = 100,
                  freq_bins: int = 10, freq_degree: int = 3, seed: int = 0, progress: bool = False) -> pd.DataFrame:
    """The head-geometry rows of one checkpoint (see the module docstring). ``reference``: a learned-interface
    checkpoint of the same tokenizer and another run (seed), whose input table the head is compared with;
    ``frequencies``: ``[vocab]`` token counts (default: counted over ``tokens`` tokens of ``data``)."""
    W = model.unembed.weight.detach().double().cpu().numpy()
    V = W.shape[0]
    if V < 10:
        raise AnalysisError(f"a vocabulary of {V} tokens is too small for head geometry")
    for name, v, low in (("boot", boot, 10), ("null_draws", null_draws, 2), ("freq_degree", freq_degree, 1),
                         ("k", k, 1)):
        if not isinstance(v, (int, np.integer)) or v < low:
            raise AnalysisError(f"{name} must be an integer >= {low}, got {v!r}")
    if not alpha > 0:
        raise AnalysisError(f"alpha (the ridge penalty) must be positive, got {alpha!r}")
    if reference is not None:
        check_reference(model, reference)
    if frequencies is None:
        counts, source = token_counts(model, data, tokens=tokens), f"token counts of {tokens} tokens of " + (
            "the checkpoint's validation stream" if data is None else str(data) if not isinstance(
                data, torch.Tensor) else "the token tensor given")
    else:
        counts, source = np.asarray(frequencies, dtype=np.float64), "frequencies given"
        if counts.shape != (V,) or not np.isfinite(counts).all() or (counts < 0).any():
            raise AnalysisError(f"frequencies must be {V} non-negative counts (one per token id), got shape "
                                f"{counts.shape}")
    bases = {"canonical": ids_to_bits(np.arange(V), model.cfg.n_bits).astype(float)}
    own = _own_bits(model)
    if own is not None:
        bases["own code"] = own
    rows = _regression_rows(W, bases, _frequency_features(counts, freq_degree), alpha=alpha, folds=folds,
                            boot=boot, seed=seed)
    bins = frequency_bins(counts, freq_bins)
    if reference is not None:
        E = reference.embed.W_E.detach().double().cpu().numpy()
        rows += _reference_rows(W, E, frequency_null(bins, null_draws, seed), k=k, where=_where(reference),
                                ref_seed=int(reference.cfg.seed), progress=progress)
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["reference_seed"] = df.reference_seed.astype("Int64")
    df.attrs.update(vocab_size=V, interface=model.cfg.interface, seed=int(model.cfg.seed), frequency_source=source,
                    n_counted=float(counts.sum()), folds=folds, boot=boot, null_draws=null_draws,
                    freq_bins=freq_bins, freq_degree=freq_degree)
    return df


__all__ = ["head_geometry", "check_reference", "token_counts", "frequency_bins", "binned_permutation",
           "frequency_null", "kfold", "out_of_fold"]
