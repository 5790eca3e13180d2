"""A crosscoder read against the models it was trained on: the next-token loss with its reconstruction spliced into
each model (loss recovered), its latents read against each fixed-code model's bits and against token types, and the
per-model SAE of the same width at the same L0 that says what the joint dictionary costs each model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from analysis.engine.hooks import module_hooks
from analysis.features.crosscoder import Crosscoder
from analysis.features.stream import model_activations


@torch.no_grad()
def spliced_losses(cc: Crosscoder, models: dict, hook: str, windows: torch.Tensor, *, batch: int = 16) -> pd.DataFrame:
    """Per model: the next-token loss on ``windows`` clean, with the crosscoder's reconstruction of every model at
    ``hook`` spliced into that model, and with the hook zeroed; ``loss_recovered`` = (zero - spliced) / (zero -
    clean)."""
    names = list(models)
    sums = {n: {"clean": 0.0, "spliced": 0.0, "zero": 0.0} for n in names}
    n_pred = 0
    for i in range(0, windows.shape[0], batch):
        w = windows[i:i + batch]
        x = torch.stack([model_activations(models[n], w, [hook])[0] for n in names], 1)
        recon = cc(x.to(cc.W_dec.device))
        target = w[:, 1:].flatten()
        for j, n in enumerate(names):
            m = models[n]
            dev = next(m.parameters()).device
            r = recon[:, j].reshape(*w.shape, -1)
            for what, hooks in (("clean", []), ("spliced", [(hook, lambda mod, inp, out, r=r: r.to(out))]),
                                ("zero", [(hook, lambda mod, inp, out: torch.zeros_like(out))])):
                with module_hooks(m, hooks):
                    logits = m(w.to(dev)).float()
                sums[n][what] += float(F.cross_entropy(logits[:, :-1].flatten(0, 1), target.to(dev), reduction="sum"))
        n_pred += target.numel()
    rows = []
    for n in names:
        loss = {k: v / n_pred for k, v in sums[n].items()}
        gap = loss["zero"] - loss["clean"]
        rows.append({"model": n, "loss_clean": loss["clean"], "loss_spliced": loss["spliced"],
                     "loss_zero": loss["zero"],
                     "loss_recovered": (loss["zero"] - loss["spliced"]) / gap if gap else float("nan")})
    return pd.DataFrame(rows)


@torch.no_grad()
def code_readings(cc: Crosscoder, models: dict, x: torch.Tensor, ids: np.ndarray, *, seed: int = 0,
                  batch: int = 4096) -> pd.DataFrame:
    """Per latent, over held-out rows ``x`` (raw activations) of token ids ``ids``: the best AUROC of the latent for one
    bit of the id (``auroc_id``), of a random relabelling of the ids (``auroc_perm``, the frequency-free reference) and
    of each fixed-code model's own code (``auroc_code_<model>``), and ``top_token`` / ``top_share`` (the token type
    it fires on most, and that type's share of its firings)."""
    from analysis.features.code_reading import Latents, bit_tables, latent_tokens

    rows, lats, vals = [], [], []
    for i in range(0, x.shape[0], batch):
        acts = cc.encode(x[i:i + batch].to(cc.W_dec.device))
        r, c = (acts > 0).nonzero(as_tuple=True)
        rows.append((r + i).cpu())
        lats.append(c.cpu())
        vals.append(acts[r, c].float().cpu())
    lat = Latents(np.asarray(ids, np.int64), torch.cat(rows).numpy(), torch.cat(lats).numpy(),
                  torch.cat(vals).numpy(), cc.cfg.n_latents, cc.cfg.hook or "")
    first = next(iter(models.values()))
    out = pd.DataFrame({"latent": np.arange(cc.cfg.n_latents)})
    tables = bit_tables(first.cfg, seed=seed)
    with np.errstate(invalid="ignore"):
        out["auroc_id"] = _best(lat, tables.get("canonical", tables["code"]))  # the id's own bits
        out["auroc_perm"] = _best(lat, tables["perm"])
        for name, m in models.items():
            if m.cfg.has_code:
                out[f"auroc_code_{name}"] = _best(lat, bit_tables(m.cfg, seed=seed)["code"])
    tok = latent_tokens(lat)
    tokenizer = getattr(first, "tokenizer", None)
    out["top_token"] = [tokenizer.decode([int(t)]) if tokenizer is not None and t >= 0 else "" for t in tok.top_id]
    out["top_share"] = tok.top_share.to_numpy()
    return out


def _best(lat, table) -> np.ndarray:
    """Each latent's best separation of one bit of ``table``: max over bits of max(AUROC, 1 - AUROC)."""
    from analysis.features.code_reading import bit_auroc

    auc = bit_auroc(lat, table)
    sep = np.where(np.isnan(auc), -np.inf, np.maximum(auc, 1 - auc)).max(1)
    return np.where(np.isfinite(sep), sep, np.nan)


def sae_baselines(models: dict, hook: str, train_windows: torch.Tensor, held: torch.Tensor, *, n_latents: int,
                  l0: float, seed: int = 0) -> pd.DataFrame:
    """Per model, a TopK SAE of the crosscoder's width at its L0 (``k`` the nearest integer), trained on the same
    windows alone and measured on the held-out ones: ``sae_l0``, ``sae_fvu``, ``sae_loss_recovered``."""
    from analysis.features.dictionary import DictionaryConfig
    from analysis.features.metrics import dictionary_metrics
    from analysis.features.stream import hook_width
    from analysis.features.train import train_dictionary

    rows = []
    for name, m in models.items():
        d = hook_width(m, hook)
        cfg = DictionaryConfig(kind="sae", arch="topk", d_in=d, d_sae=n_latents, hook_name=hook,
                               k=max(1, min(n_latents, round(l0))))
        sae, _ = train_dictionary(m, cfg, train_windows, seed=seed, progress=False)
        met = dict(dictionary_metrics(m, sae, held)[["metric", "value"]].itertuples(index=False))
        rows.append({"model": name, "sae_k": cfg.k, "sae_l0": met["l0"], "sae_fvu": met["fvu"],
                     "sae_loss_recovered": met["loss_recovered"]})
    return pd.DataFrame(rows)


__all__ = ["code_readings", "sae_baselines", "spliced_losses"]
