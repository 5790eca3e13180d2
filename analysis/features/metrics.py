"""A sparse dictionary's standard metrics on held-out token windows, as a tidy table.

:func:`dictionary_metrics` streams windows through the model a batch at a time and reports, over all their tokens:

- ``l0``: mean number of active latents per token;
- ``fvu``: fraction of variance unexplained, the summed squared error of the dictionary's output over the summed
  squared deviation of the target (the hook's activation for an SAE, the predicted hook's for a transcoder) from its
  mean over the evaluation tokens;
- ``dead_fraction``: the share of latents that never fire on the ``n_tokens`` evaluation tokens;
- ``loss_clean``, ``loss_spliced``, ``loss_zero``: next-token cross-entropy (nats per predicted token) of the model
  as it is, with the dictionary's output spliced in at the hook (for a transcoder: at the predicted hook, from the
  input hook's activation of the same forward), and with that hook's activation set to zero;
- ``loss_recovered``: ``(loss_zero - loss_spliced) / (loss_zero - loss_clean)``;
- ``kl_spliced``: mean KL(clean || spliced) of the next-token distributions, nats per predicted token.

The windows must be text the dictionary was not trained on (:func:`analysis.features.run.split_windows` keeps them
apart).
"""

from __future__ import annotations

import pandas as pd
import torch
import torch.nn.functional as F

from analysis.errors import AnalysisError
from analysis.features.dictionary import SparseDictionary


def _forward(model, x, hooks: dict):
    mods = model.mod_dict
    handles = [mods[name].register_forward_hook(fn) for name, fn in hooks.items()]
    try:
        return model(x).float()
    finally:
        for h in handles:
            h.remove()


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
    out_hook = cfg.hook_name if cfg.kind == "sae" else cfg.hook_name_out
    n = sq_err = 0.0
    sum_y = sum_y2 = None
    active = 0.0
    fired = torch.zeros(cfg.d_sae, dtype=torch.bool, device=device)
    ce = {"clean": 0.0, "spliced": 0.0, "zero": 0.0}
    kl = 0.0
    n_pred = 0
    for start in tqdm(range(0, windows.shape[0], batch), disable=not progress, leave=False, desc="metrics"):
        x = windows[start:start + batch].to(device)
        seen: dict = {}

        def keep(name):
            return lambda mod, inp, out: seen.__setitem__(name, out.detach())

        clean = _forward(model, x, {cfg.hook_name: keep("in")} if cfg.kind == "sae" else
                         {cfg.hook_name: keep("in"), out_hook: keep("out")})
        seen.setdefault("out", seen["in"])
        a_in = seen["in"].float()
        acts = d.encode(a_in)
        recon = d.decode(acts, a_in)
        y = seen["out"].float()
        flat_y = y.reshape(-1, y.shape[-1]).double()
        n += flat_y.shape[0]
        sq_err += float((recon.double() - y.double()).pow(2).sum())
        sum_y = flat_y.sum(0) if sum_y is None else sum_y + flat_y.sum(0)
        sum_y2 = flat_y.pow(2).sum(0) if sum_y2 is None else sum_y2 + flat_y.pow(2).sum(0)
        on = acts > 0
        active += float(on.sum())
        fired |= on.reshape(-1, cfg.d_sae).any(0)

        def splice(mod, inp, out, name=cfg.hook_name):
            if cfg.kind == "sae":
                return d(out.float()).to(out.dtype)
            return d(seen["spliced_in"].float()).to(out.dtype)

        hooks = {out_hook: splice}
        if cfg.kind != "sae":
            hooks[cfg.hook_name] = keep("spliced_in")
        spliced = _forward(model, x, hooks)
        zero = _forward(model, x, {out_hook: lambda mod, inp, out: torch.zeros_like(out)})
        target = x[:, 1:]
        for key, logits in (("clean", clean), ("spliced", spliced), ("zero", zero)):
            ce[key] += float(F.cross_entropy(logits[:, :-1].flatten(0, 1), target.flatten(), reduction="sum"))
        lp_clean = clean[:, :-1].log_softmax(-1)
        lp_spliced = spliced[:, :-1].log_softmax(-1)
        kl += float((lp_clean.exp() * (lp_clean - lp_spliced)).sum())
        n_pred += target.numel()
    sst = float((sum_y2 - sum_y.pow(2) / n).sum())
    loss = {k: v / n_pred for k, v in ce.items()}
    gap = loss["zero"] - loss["clean"]
    values = {"l0": active / n, "fvu": sq_err / sst, "dead_fraction": float((~fired).float().mean()),
              "loss_clean": loss["clean"], "loss_spliced": loss["spliced"], "loss_zero": loss["zero"],
              "loss_recovered": (loss["zero"] - loss["spliced"]) / gap if gap != 0 else float("nan"),
              "kl_spliced": kl / n_pred}
    desc = {"hook": cfg.hook_name, "hook_out": out_hook, "kind": cfg.kind, "arch": cfg.arch, "d_in": cfg.d_in,
            "d_sae": cfg.d_sae, "k": cfg.k if cfg.arch in ("topk", "batchtopk") else None, "n_tokens": int(n)}
    return pd.DataFrame([{**desc, "metric": m, "value": v} for m, v in values.items()])
