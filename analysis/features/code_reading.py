"""A sparse dictionary's latents read against the token-identity code: which latent reads which bit, and which
latents are detectors of one token."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from fixedid.codes import id_permutation, ids_to_bits

from analysis.errors import AnalysisError
from analysis.features.dictionary import SparseDictionary
from analysis.features.stream import model_activations

#: The bit families of :func:`bit_tables` (see the module docstring).
FAMILIES = ("code", "canonical", "perm")


@dataclass
class Latents:
    """A dictionary's active latents on ``n_tokens`` token rows: ``ids`` ``[n_tokens]`` (each row's token id) and,
    per active entry, its row ``token``, ``latent`` and ``value`` (> 0)."""

    ids: np.ndarray
    token: np.ndarray
    latent: np.ndarray
    value: np.ndarray
    d_sae: int
    hook: str

    @property
    def n_tokens(self) -> int:
        """The number of token rows evaluated."""
        return len(self.ids)

    def fires(self) -> np.ndarray:
        """How many token rows each latent is active on, ``[d_sae]``."""
        return np.bincount(self.latent, minlength=self.d_sae)

    def dense(self) -> np.ndarray:
        """The activations ``[n_tokens, d_sae]`` (float32), zeros where a latent is silent."""
        out = np.zeros((self.n_tokens, self.d_sae), np.float32)
        out[self.token, self.latent] = self.value
        return out


@torch.no_grad()
def latent_activations(model, d: SparseDictionary, windows: torch.Tensor, *, batch: int = 16,
                       progress: bool = False) -> Latents:
    """The dictionary's latents on every token of ``windows`` ``[n, T]`` (read at its ``hook_name``)."""
    from tqdm.auto import tqdm

    if windows.dim() != 2:
        raise AnalysisError(f"windows must be [n, T] token ids, got {tuple(windows.shape)}")
    device = next(model.parameters()).device
    d = d.to(device).eval()
    rows, lats, vals = [], [], []
    for i in tqdm(range(0, windows.shape[0], batch), disable=not progress, leave=False, desc="latents"):
        (a,) = model_activations(model, windows[i:i + batch], [d.cfg.hook_name])
        acts = d.encode(a)
        r, c = (acts > 0).nonzero(as_tuple=True)
        rows.append((r + i * windows.shape[1]).cpu())
        lats.append(c.cpu())
        vals.append(acts[r, c].float().cpu())
    return Latents(windows.reshape(-1).cpu().numpy().astype(np.int64), torch.cat(rows).numpy(),
                   torch.cat(lats).numpy(), torch.cat(vals).numpy(), d.cfg.d_sae, d.cfg.hook_name)


def bit_tables(cfg, *, seed: int = 0) -> dict[str, np.ndarray]:
    """The 0/1 tables ``[vocab_size, n_bits]`` (bit ``i`` LSB first) of the families of the module docstring for a
    model config: ``code`` always (the ``permuted`` interface's: the bits of its permuted ids), ``canonical`` where
    the code is not the id's own bits (gf2, permuted), ``perm`` from ``seed`` (the same relabelling as the probes'
    ``perm_bit`` targets with that seed)."""
    V, n = cfg.vocab_size, cfg.n_bits
    canon = ids_to_bits(np.arange(V), n)
    if cfg.interface == "gf2":
        out = {"code": cfg.recoding().encode_bits(canon), "canonical": canon}
    elif cfg.interface == "permuted":
        out = {"code": ids_to_bits(id_permutation(V, cfg.table_seed), n), "canonical": canon}
    else:
        out = {"code": canon}
    out["perm"] = ids_to_bits(np.random.default_rng([int(seed), 29]).permutation(V), n)
    return {k: np.asarray(v, dtype=np.int64) for k, v in out.items()}


def bit_auroc(lat: Latents, table: np.ndarray) -> np.ndarray:
    """``[d_sae, n_bits]``: each latent's AUROC for each column of the 0/1 vocabulary table ``table`` over the token
    rows (ties count one half); NaN for a bit constant over the rows. Exact, from the active entries alone: the silent
    rows of a latent share the lowest ranks."""
    if lat.ids.size and lat.ids.max() >= table.shape[0]:
        raise AnalysisError(f"token id {int(lat.ids.max())} is outside the bit table's {table.shape[0]} ids")
    y = table[lat.ids]  # [N, n_bits]
    N = lat.n_tokens
    n1 = y.sum(0).astype(np.float64)
    n0 = N - n1
    order = np.lexsort((lat.value, lat.latent))
    L, v, t = lat.latent[order], lat.value[order], lat.token[order]
    count = np.bincount(L, minlength=lat.d_sae)
    start = np.cumsum(count) - count
    pos = np.arange(len(L)) - start[L]  # 0-based place among the latent's active rows, by value
    new = np.ones(len(L), bool)
    new[1:] = (L[1:] != L[:-1]) | (v[1:] != v[:-1])
    first = np.flatnonzero(new)
    last = np.r_[first[1:], len(L)] - 1
    mid = (pos[first] + pos[last]) / 2.0  # the tie group's mean place
    zeros = (N - count).astype(np.float64)  # silent rows: ranks 1 .. zeros, mean (zeros + 1) / 2
    rank = zeros[L] + mid[np.cumsum(new) - 1] + 1.0
    out = np.empty((lat.d_sae, y.shape[1]))
    for b in range(y.shape[1]):
        yb = y[t, b].astype(np.float64)
        ones_active = np.bincount(L, weights=yb, minlength=lat.d_sae)
        r1 = np.bincount(L, weights=rank * yb, minlength=lat.d_sae) + (n1[b] - ones_active) * (zeros + 1) / 2
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, b] = (r1 - n1[b] * (n1[b] + 1) / 2) / (n1[b] * n0[b])
    out[:, (n1 == 0) | (n0 == 0)] = np.nan
    return out


def code_auroc(lat: Latents, tables: dict[str, np.ndarray]) -> pd.DataFrame:
    """Per family and bit, the best single latent (see the module docstring): ``family``, ``bit``, ``auroc`` (the
    best ``max(AUROC, 1 - AUROC)``), ``latent``, ``fires_on`` (the bit value it fires on), ``balance`` (share of
    1s over the rows), ``constant`` and ``id_bits`` (whether the family's bits are the id's own: bits of the
    frequency rank, where the tokenizer numbers tokens by frequency); ``hook`` and ``n_tokens`` on every row."""
    rows = []
    for family, table in tables.items():
        auc = bit_auroc(lat, table)
        balance = table[lat.ids].mean(0)
        id_bits = np.array_equal(table, ids_to_bits(np.arange(table.shape[0]), table.shape[1]))
        for b in range(table.shape[1]):
            col = auc[:, b]
            if np.isnan(col).all():
                rows.append({"family": family, "bit": b, "auroc": np.nan, "latent": -1, "fires_on": -1,
                             "balance": balance[b], "constant": True})
                continue
            sep = np.maximum(col, 1 - col)
            j = int(np.argmax(sep))
            rows.append({"family": family, "bit": b, "auroc": float(sep[j]), "latent": j,
                         "fires_on": int(col[j] >= 0.5), "balance": float(balance[b]), "constant": False,
                         "id_bits": id_bits})
    df = pd.DataFrame(rows)
    df.insert(0, "hook", lat.hook)
    df["n_tokens"] = lat.n_tokens
    return df


def bit_groups(code: pd.DataFrame) -> pd.Series:
    """Each row of a :func:`code_auroc` table (or several stacked, with a ``model`` column) as ``perm``, ``code``,
    ``id`` (the id's own bits but the top varying one) or ``top`` (the id's top varying bit: with frequency-ranked
    ids, the split of the rarest tokens from the rest)."""
    model = code["model"] if "model" in code else pd.Series(0, index=code.index)
    varying = code.id_bits & ~code.constant
    top = code.bit.where(varying).groupby(model).transform("max")
    group = pd.Series(np.where(code.family == "perm", "perm", np.where(code.id_bits, "id", "code")), index=code.index)
    group[varying & (code.bit == top)] = "top"
    return group


def latent_tokens(lat: Latents) -> pd.DataFrame:
    """Per latent: ``fires`` (token rows it is active on), ``top_id`` (the token type it fires on most; -1 if never),
    ``top_share`` (that type's share of its firings) and ``types`` (distinct token types it fires on)."""
    V = int(lat.ids.max()) + 1 if lat.ids.size else 1
    key = lat.latent.astype(np.int64) * V + lat.ids[lat.token]
    uniq, counts = np.unique(key, return_counts=True)
    owner, tok = uniq // V, uniq % V
    fires = np.bincount(owner, weights=counts, minlength=lat.d_sae).astype(np.int64)
    types = np.bincount(owner, minlength=lat.d_sae)
    top = np.zeros(lat.d_sae, np.int64)
    top_id = np.full(lat.d_sae, -1, np.int64)
    if len(uniq):
        order = np.lexsort((counts, owner))  # by latent, then count: each latent's last entry is its top type
        last = order[np.r_[owner[order][1:] != owner[order][:-1], True]]
        top[owner[last]], top_id[owner[last]] = counts[last], tok[last]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(fires > 0, top / np.maximum(fires, 1), np.nan)
    return pd.DataFrame({"latent": np.arange(lat.d_sae), "fires": fires, "top_id": top_id, "top_share": share,
                         "types": types})


def token_feature_share(per_latent: pd.DataFrame, *, purity: float = 0.9, min_fires: int = 10) -> dict:
    """``n_latents``, ``n_scored`` (latents firing at least ``min_fires`` times), ``n_token_features`` (of those, the
    ones with ``top_share >= purity``) and ``share`` (their ratio; NaN when none is scored)."""
    if not 0 < purity <= 1 or min_fires < 1:
        raise AnalysisError(f"purity must be in (0, 1] and min_fires >= 1, got {purity} and {min_fires}")
    scored = per_latent[per_latent.fires >= min_fires]
    n_tok = int((scored.top_share >= purity).sum())
    return {"n_latents": len(per_latent), "n_scored": len(scored), "n_token_features": n_tok,
            "share": n_tok / len(scored) if len(scored) else float("nan"), "purity": purity, "min_fires": min_fires}


__all__ = ["FAMILIES", "Latents", "latent_activations", "bit_tables", "bit_auroc", "code_auroc", "bit_groups",
           "latent_tokens",
           "token_feature_share"]
