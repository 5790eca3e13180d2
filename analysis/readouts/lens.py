"""The logit lens: what the (still learned) output side reads from each layer's residual stream."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from analysis.stats import t_intervals
from analysis.engine.staged import cache_run
from analysis.engine import names as hooknames


def lens_hooks(model) -> list[str]:
    """The depths the lens reads, in order: ``blocks.{i}.hook_resid_pre`` of every block, then the last block's
    ``hook_resid_post`` (the model itself)."""
    return hooknames.stream(model.cfg.n_layers)


@torch.no_grad()
def logit_lens(model, data=None, *, tokens: int = 16384, max_batch: int = 32, progress: bool = False) -> pd.DataFrame:
    """One row per depth: ``depth, hook, accuracy, loss, kl`` (means over sequences) with ``_lo``/``_hi`` 95%
    intervals; ``data`` as every corpus-level analysis takes it (default: the checkpoint's validation data)."""
    from analysis.corpus import corpus_tokens

    x = data if isinstance(data, torch.Tensor) else corpus_tokens(model, data, tokens=tokens)
    return lens_table(model, x, max_batch=max_batch, progress=progress)


@torch.no_grad()
def lens_table(model, x: torch.Tensor, translate=None, *, max_batch: int = 32, progress: bool = False,
               desc: str = "logit lens") -> pd.DataFrame:
    """:func:`logit_lens`'s table on the token windows ``x`` ``[sequences, pos]``, each depth's residual passed
    through ``translate(h, depth)`` before the final norm and head (None: as it is, the logit lens; a translator that
    returns None for a depth leaves that depth out)."""
    from analysis.engine.effects import check_eval

    check_eval(model)
    hooks = lens_hooks(model)
    per_seq = {h: {"accuracy": [], "loss": [], "kl": []} for h in hooks}
    for i in tqdm(range(0, len(x), max_batch), desc=desc, unit="batch", disable=not progress, leave=False):
        xb = x[i:i + max_batch].to(model.device)
        final, cache = cache_run(model, xb, hooks)
        target = xb[:, 1:]
        final_lp = torch.log_softmax(final[:, :-1].float(), -1)
        for depth, h in enumerate(hooks):
            resid = cache[h][:, :-1]
            if translate is not None:
                resid = translate(resid, depth)
                if resid is None:  # a lens that does not read this depth
                    continue
            lp = head_log_probs(model, resid)
            acc = (lp.argmax(-1) == target).float().mean(1)
            loss = -lp.gather(-1, target[..., None])[..., 0].mean(1)
            kl = (final_lp.exp() * (final_lp - lp)).sum(-1).mean(1)
            for k, v in (("accuracy", acc), ("loss", loss), ("kl", kl)):
                per_seq[h][k].append(v.cpu().numpy())
    rows = []
    for depth, h in enumerate(hooks):
        if not per_seq[h]["kl"]:
            continue
        row = {"depth": depth, "hook": h}
        for k, parts in per_seq[h].items():
            m, lo, hi = t_intervals(np.concatenate(parts)[None, :])
            row.update({k: float(m[0]), f"{k}_lo": float(lo[0]), f"{k}_hi": float(hi[0])})
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs.update(n_sequences=int(len(x)), n_tokens=int(x.numel()))
    return df


def head_log_probs(model, resid: torch.Tensor) -> torch.Tensor:
    """The model's final norm and head applied to ``resid`` ``[..., d_model]``: next-token log-probabilities
    (float32), what every lens reads."""
    return torch.log_softmax(model.unembed(model.ln_final(resid)).float(), -1)


__all__ = ["logit_lens", "lens_table", "lens_hooks", "head_log_probs"]
