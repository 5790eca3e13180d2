"""A sparse dictionary's standard metrics on held-out token windows, as a tidy table."""

from __future__ import annotations

import pandas as pd
import torch
import torch.nn.functional as F

from analysis.engine.hooks import module_hooks
from analysis.errors import AnalysisError
from analysis.features.dictionary import SparseDictionary, dictionary_class


def _logits(model, x, hooks) -> torch.Tensor:
    """Float logits of ``x`` with ``(name, fn)`` forward hooks in place."""
    with module_hooks(model, hooks):
        return model(x).float()


def _batch(model, d: SparseDictionary, x: torch.Tensor) -> dict:
    """One batch's sums: the dictionary on the clean activations, and the next-token losses clean, spliced and
    zero-ablated (three forwards)."""
    cfg = d.cfg
    out_hook = cfg.hook_name if cfg.kind == "sae" else cfg.hook_name_out
    seen: dict = {}

    def keep(name):
        return lambda mod, inp, out: seen.__setitem__(name, out.detach())

    clean = _logits(model, x, [(cfg.hook_name, keep("in"))] + ([] if cfg.kind == "sae" else [(out_hook, keep("out"))]))
    a_in = seen["in"].float()
    y = seen.get("out", seen["in"]).float()
    acts = d.encode(a_in)
    err = d.decode(acts, a_in).double() - y.double()
    flat_y = y.reshape(-1, y.shape[-1]).double()
    on = acts > 0
    # spliced: an SAE replaces the hook's own activation; a transcoder replaces the MLP output with its prediction
    # from the MLP input of the same forward
    splice = [(out_hook, lambda mod, inp, out: d(out.float()).to(out.dtype))] if cfg.kind == "sae" else \
        [(cfg.hook_name, keep("spliced_in")),
         (out_hook, lambda mod, inp, out: d(seen["spliced_in"].float()).to(out.dtype))]
    spliced = _logits(model, x, splice)
    zero = _logits(model, x, [(out_hook, lambda mod, inp, out: torch.zeros_like(out))])
    target = x[:, 1:].flatten()
    ce = {k: float(F.cross_entropy(lg[:, :-1].flatten(0, 1), target, reduction="sum"))
          for k, lg in (("clean", clean), ("spliced", spliced), ("zero", zero))}
    lp_clean, lp_spliced = clean[:, :-1].log_softmax(-1), spliced[:, :-1].log_softmax(-1)
    return {"n": flat_y.shape[0], "sq_err": float(err.pow(2).sum()), "sum_y": flat_y.sum(0),
            "sum_y2": flat_y.pow(2).sum(0), "active": float(on.sum()), "fired": on.reshape(-1, cfg.d_sae).any(0),
            "ce": ce, "kl": float((lp_clean.exp() * (lp_clean - lp_spliced)).sum()), "n_pred": target.numel()}


@torch.no_grad()
def dictionary_metrics(model, d: SparseDictionary, windows: torch.Tensor, *, batch: int = 16,
                       progress: bool = False) -> pd.DataFrame:
    """The metrics of the module docstring, one row per metric (``metric``, ``value``) with the dictionary's
    description (``hook``, ``kind``, ``arch``, ``d_sae``, ``k``, ``n_tokens``) on every row."""
    from tqdm.auto import tqdm

    cfg = d.cfg
    if windows.dim() != 2 or windows.shape[1] < 2:
        raise AnalysisError(f"evaluation windows must be [n, T>=2] token ids, got {tuple(windows.shape)}")
    device = next(model.parameters()).device
    d = d.to(device).eval()
    parts = [_batch(model, d, windows[i:i + batch].to(device))
             for i in tqdm(range(0, windows.shape[0], batch), disable=not progress, leave=False, desc="metrics")]
    n, n_pred = sum(p["n"] for p in parts), sum(p["n_pred"] for p in parts)
    sum_y, sum_y2 = sum(p["sum_y"] for p in parts), sum(p["sum_y2"] for p in parts)
    sst = float((sum_y2 - sum_y.pow(2) / n).sum())
    loss = {k: sum(p["ce"][k] for p in parts) / n_pred for k in ("clean", "spliced", "zero")}
    fired = torch.stack([p["fired"] for p in parts]).any(0)
    gap = loss["zero"] - loss["clean"]
    values = {"l0": sum(p["active"] for p in parts) / n, "fvu": sum(p["sq_err"] for p in parts) / sst,
              "dead_fraction": float((~fired).float().mean()), "loss_clean": loss["clean"],
              "loss_spliced": loss["spliced"], "loss_zero": loss["zero"],
              "loss_recovered": (loss["zero"] - loss["spliced"]) / gap if gap != 0 else float("nan"),
              "kl_spliced": sum(p["kl"] for p in parts) / n_pred}
    desc = {"hook": cfg.hook_name, "hook_out": cfg.hook_name if cfg.kind == "sae" else cfg.hook_name_out,
            "kind": cfg.kind, "arch": cfg.arch, "d_in": cfg.d_in, "d_sae": cfg.d_sae,
            "k": cfg.k if dictionary_class(cfg.arch).uses_k else None, "n_tokens": int(n)}
    return pd.DataFrame([{**desc, "metric": m, "value": v} for m, v in values.items()])
