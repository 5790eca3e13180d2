"""What a trained crosscoder says, latent by latent and model by model: each latent's decoder norm in each model, its
share and class (shared, shared by some, or exclusive to one), Latent Scaling (how much the latent's activation alone
explains each model, so an "exclusive" latent explained elsewhere is marked), and per model L0, FVU, dead fraction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from analysis.features.crosscoder import Crosscoder

#: A model holds a latent when its share of the latent's decoder norm (over the models) is at least this.
HOLD = 0.1
#: A latent is exclusive to a model when that model's share is at least this (every other model's is then < 0.1).
EXCLUSIVE = 0.9
#: A latent is live when it fires on at least this share of the held-out tokens (1 in 10,000).
LIVE = 1e-4
#: An exclusive latent is marked as explained elsewhere when its best decoder for another model, fitted on that
#: model's activations alone (Latent Scaling), is at least this share of its own decoder norm.
ELSEWHERE = 0.5


def classify(shares: np.ndarray, models) -> list[str]:
    """Each latent's class from its shares ``[latents, models]``: ``<model> only`` (share >= EXCLUSIVE), ``shared``
    (every model holds it: share >= HOLD), ``mostly <model>`` (that model alone holds it, short of EXCLUSIVE: three
    or more models), else ``shared by <a>+<b>...`` (the models that hold it)."""
    out = []
    for row in shares:
        top = int(np.argmax(row))
        if row[top] >= EXCLUSIVE:
            out.append(f"{models[top]} only")
        elif (row >= HOLD).all():
            out.append("shared")
        else:
            held = [m for m, s in zip(models, row) if s >= HOLD]
            out.append(f"mostly {held[0]}" if len(held) == 1 else "shared by " + "+".join(held))
    return out


@torch.no_grad()
def _sums(cc: Crosscoder, x: torch.Tensor, batch: int) -> dict:
    """Per latent and model, the sums Latent Scaling and the metrics need, over held-out rows ``x`` (raw)."""
    M, L = len(cc.cfg.models), cc.cfg.n_latents
    dev = cc.W_dec.device
    s = {"fires": torch.zeros(L, dtype=torch.float64, device=dev), "f2": torch.zeros(L, dtype=torch.float64,
                                                                                            device=dev),
         "fe": torch.zeros(M, L, cc.cfg.d, dtype=torch.float64, device=dev),
         "e2_on": torch.zeros(M, L, dtype=torch.float64, device=dev), "active": 0.0, "n": 0,
         "sq_err": torch.zeros(M, dtype=torch.float64, device=dev), "sum_x": 0, "sum_x2": 0}
    for i in range(0, x.shape[0], batch):
        xb = x[i:i + batch].to(dev).float()
        xs = xb / cc.scale[None, :, None]
        acts = cc.encode(xb)
        err = (xs - cc.decode(acts, scaled=True)).double()
        f = acts.double()
        on = (acts > 0).double()
        s["fires"] += on.sum(0)
        s["f2"] += f.pow(2).sum(0)
        s["fe"] += torch.einsum("bl,bmd->mld", f, err)
        s["e2_on"] += torch.einsum("bl,bm->ml", on, err.pow(2).sum(-1))
        s["active"] += float(on.sum())
        s["n"] += xb.shape[0]
        s["sq_err"] += err.pow(2).sum((0, 2))
        s["sum_x"] = s["sum_x"] + xs.double().sum(0)
        s["sum_x2"] = s["sum_x2"] + xs.double().pow(2).sum(0)
    return s


@torch.no_grad()
def latent_table(cc: Crosscoder, x: torch.Tensor, *, batch: int = 4096) -> pd.DataFrame:
    """One row per latent over held-out raw activations ``x`` ``[tokens, models, d]``: ``latent``, ``fire_rate``,
    ``live``, ``dedicated`` (the model it is reserved for, or empty), per model ``norm_<m>`` and ``share_<m>`` (its
    decoder norm and that norm's share of the sum over models), ``class``, and Latent Scaling per model:
    ``scaling_<m>`` (the norm of the decoder that best explains model ``m``'s activations from the latent's activation
    alone - least squares of its error plus the latent's own part, on the tokens - relative to the latent's largest
    decoder norm) and ``explained_<m>`` (the share of that target's energy it explains where the latent fires);
    ``elsewhere`` marks an exclusive latent whose scaling in another model reaches :data:`ELSEWHERE`."""
    cfg, models = cc.cfg, list(cc.cfg.models)
    s = _sums(cc, x, batch)
    d = (cc.W_dec * cc.mask[..., None]).double()  # [M, L, d] scaled units
    norms = d.norm(dim=-1)  # [M, L]
    shares = (norms / norms.sum(0).clamp_min(1e-30)).T.cpu().numpy()
    f2 = s["f2"].clamp_min(1e-30)
    v = (s["fe"] + s["f2"][None, :, None] * d) / f2[None, :, None]  # the best decoder per model [M, L, d]
    target = s["e2_on"] + 2 * (s["fe"] * d).sum(-1) + s["f2"][None] * norms.pow(2)
    explained = (f2[None] * v.pow(2).sum(-1) / target.clamp_min(1e-30)).clamp(0, 1)
    scaling = v.norm(dim=-1) / norms.max(0).values.clamp_min(1e-30)[None]
    df = pd.DataFrame({"latent": np.arange(cfg.n_latents), "fire_rate": (s["fires"] / s["n"]).cpu().numpy()})
    df["live"] = df.fire_rate >= LIVE
    owner = {i: m for m, (a, b) in cfg.dedicated_ranges.items() for i in range(a, b)}
    df["dedicated"] = [owner.get(i, "") for i in range(cfg.n_latents)]
    for i, m in enumerate(models):
        df[f"norm_{m}"], df[f"share_{m}"] = norms[i].cpu().numpy(), shares[:, i]
    df["class"] = classify(shares, models)
    for i, m in enumerate(models):
        df[f"scaling_{m}"] = scaling[i].cpu().numpy()
        df[f"explained_{m}"] = explained[i].cpu().numpy()
    df["elsewhere"] = _elsewhere(df, models)
    return df


def _elsewhere(df: pd.DataFrame, models) -> np.ndarray:
    """Exclusive latents whose activation alone explains another model about as well (Latent Scaling)."""
    out = np.zeros(len(df), bool)
    for m in models:
        mine = (df["class"] == f"{m} only").to_numpy()
        other = np.max([df[f"scaling_{o}"].to_numpy() for o in models if o != m], axis=0)
        out |= mine & (other >= ELSEWHERE)
    return out


def class_fractions(table: pd.DataFrame) -> pd.DataFrame:
    """The share of live latents in each class (``class``, ``n``, ``fraction``), and of the exclusive ones explained
    elsewhere (class ``<model> only, explained elsewhere``)."""
    live = table[table.live]
    counts = live["class"].value_counts()
    rows = [{"class": c, "n": int(n), "fraction": n / max(len(live), 1)} for c, n in counts.items()]
    for c in [c for c in counts.index if c.endswith(" only")]:
        n = int((live["elsewhere"] & (live["class"] == c)).sum())
        rows.append({"class": f"{c}, explained elsewhere", "n": n, "fraction": n / max(len(live), 1)})
    return pd.DataFrame(rows, columns=["class", "n", "fraction"]).assign(n_live=len(live))


@torch.no_grad()
def reconstruction_metrics(cc: Crosscoder, x: torch.Tensor, *, batch: int = 4096) -> pd.DataFrame:
    """Per model, over held-out raw activations ``x``: ``l0`` (latents active per token, shared by every model),
    ``fvu`` (the model's unexplained variance), ``dead_fraction`` (latents that never fire), ``n_tokens``."""
    s = _sums(cc, x, batch)
    n = s["n"]
    sst = (s["sum_x2"] - s["sum_x"].pow(2) / n).sum(-1)  # [M]
    dead = float((s["fires"] == 0).double().mean())
    return pd.DataFrame([{"model": m, "l0": s["active"] / n, "fvu": float(s["sq_err"][i] / sst[i]),
                          "dead_fraction": dead, "n_tokens": n} for i, m in enumerate(cc.cfg.models)])


__all__ = ["ELSEWHERE", "EXCLUSIVE", "HOLD", "LIVE", "class_fractions", "classify", "latent_table",
           "reconstruction_metrics"]
