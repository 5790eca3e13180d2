"""What interventions measure, and the result they return (shared by :mod:`analysis.causal.interventions` and
:mod:`analysis.causal.ablation`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from fixedid.model import constant_code_bits

from analysis.corpus import corpus_tokens
from analysis.errors import AnalysisError
from analysis.stats import t_intervals
from analysis.pairs import PairBatch
from analysis.tasks import task_pairs

MEASURES_CORPUS = ["loss", "delta_loss", "kl"]
MEASURES_PAIRS = ["logit_diff", "delta_logit_diff", "correct", "kl"]
ID_COLUMNS = ["interface", "kind", "bit", "pos", "layer", "head", "component", "ablation", "token", "scale", "draw"]
_INT_COLUMNS = ("bit", "pos", "layer", "head", "token", "draw")


@dataclass
class InterventionResult:
    """``items``: one row per edit and sequence or pair (``item``), with every measure; ``summary``: one row per
    edit, each measure's mean with a 95% interval of the mean (``<measure>_lo``/``_hi``, Student t over items) and
    ``n``. ``attrs``: the unedited baselines and the settings."""

    items: pd.DataFrame
    summary: pd.DataFrame
    attrs: dict

    def _repr_html_(self):
        return self.summary._repr_html_()

    def __repr__(self):
        return f"InterventionResult({len(self.summary)} edits x {self.attrs['n_items']} items)\n{self.summary!r}"


# ------------------------------------------------------------------------------------------------------- data
@dataclass
class Target:
    """The sequences measured: token ids ``[n, T]``, with the answer and wrong token of each pair (prompts) or
    None (corpus windows)."""

    tokens: torch.Tensor
    answer: torch.Tensor | None = None
    wrong: torch.Tensor | None = None

    @property
    def pairs(self) -> bool:
        """Whether the sequences are prompts of pairs (an answer and a wrong token each) rather than corpus windows."""
        return self.answer is not None

    @property
    def measures(self) -> list[str]:
        """The measure names of this kind of target: ``logit_diff, delta_logit_diff, correct, kl`` for prompts,
        ``loss, delta_loss, kl`` for corpus windows."""
        return MEASURES_PAIRS if self.pairs else MEASURES_CORPUS


def target(model, data, task, tokens, n_pairs, seed) -> Target:
    """Prompts of ``task`` or of a :class:`~analysis.pairs.PairBatch` given as ``data``; else corpus windows of
    ``data``."""
    if task is not None and data is not None:
        raise AnalysisError("give either data (corpus windows) or task (prompt pairs), not both")
    device = model.unembed.weight.device
    if isinstance(data, PairBatch):
        b = data.to(device)
        return Target(b.clean, b.answer, b.wrong)
    if task is not None:
        b = task_pairs(model, task, n_pairs, seed=seed)
        return Target(b.clean, b.answer, b.wrong)
    return Target(corpus_tokens(model, data, tokens=tokens).to(device))


def position(pos, T: int) -> int | None:
    """A position in ``[-T, T)`` as a non-negative index (None passes through)."""
    if pos is None:
        return None
    if not isinstance(pos, (int, np.integer)) or isinstance(pos, (bool, np.bool_)) or not -T <= pos < T:
        raise AnalysisError(f"position {pos!r} is out of range for sequences of {T} tokens ({-T}..{T - 1})")
    return int(pos) % T


#: Elements of one logits tensor ``[rows, pos, vocab]`` that a forward of a corpus sweep may produce (fp32: 512 MiB);
#: the rows per forward shrink below ``max_batch`` to stay within it (at least one row).
LOGIT_BUDGET = 1 << 27


def rows_per_forward(tgt: Target, vocab: int, max_batch: int) -> int:
    """Rows of one forward: ``max_batch``, or fewer where corpus windows' full logits would exceed the budget."""
    if tgt.pairs:
        return max(1, max_batch)
    return max(1, min(max_batch, LOGIT_BUDGET // (tgt.tokens.shape[1] * vocab)))


def nonempty(values, what: str) -> list:
    """``values`` as a list, refused when empty (an empty sweep is never what was meant)."""
    out = list(values)
    if not out:
        raise AnalysisError(f"no {what} selected: give at least one")
    return out


def chunks(n: int, rows: int):
    """Row indices ``0 .. n-1`` cut into consecutive int64 tensors of at most ``rows`` (at least 1) each."""
    step = max(1, rows)
    return [torch.arange(i, min(n, i + step)) for i in range(0, n, step)]


def check_eval(model):
    """Refuse a model in train mode with :class:`~analysis.errors.AnalysisError` (:func:`analysis.loading.load`
    returns models in eval mode); the model is not switched."""
    if model.training:
        raise AnalysisError("the model is in train mode; call model.eval() (analysis.load returns it in eval mode)")


# --------------------------------------------------------------------------------------------------- measuring
class Measurer:
    """The unedited run of one chunk of sequences, and the measures of edited runs of the same sequences."""

    def __init__(self, tgt: Target, seq: torch.Tensor, base_logits: torch.Tensor):
        self.pairs, self.m = tgt.pairs, len(seq)
        if self.pairs:
            self.base_lp = base_logits[:, -1].float().log_softmax(-1)
            self.base_p = self.base_lp.exp()  # the KL's weights, the same for every edited run of this chunk
            self.answer, self.wrong = tgt.answer[seq], tgt.wrong[seq]
            self.base_ld = self._ld(self.base_lp)
        else:
            self.targets = tgt.tokens[seq][:, 1:]
            self.base_lp = base_logits[:, :-1].float().log_softmax(-1)
            self.base_p = self.base_lp.exp()
            self.ce_base = -self.base_lp.gather(-1, self.targets[..., None])[..., 0]  # [m, T-1]

    def _ld(self, lp):
        return lp.gather(-1, self.answer[:, None])[..., 0] - lp.gather(-1, self.wrong[:, None])[..., 0]

    def __call__(self, logits: torch.Tensor, k: int, start: int) -> dict[str, torch.Tensor]:
        """Measures ``[k, m]`` of edited logits ``[k * m, pos, vocab]`` (unit-major rows) whose positions begin at
        ``start`` (for prompts only the final position is read)."""
        m = self.m
        if self.pairs:
            lq = logits[:, -1].float().log_softmax(-1).view(k, m, -1)
            ld = (lq.gather(-1, self.answer[None, :, None].expand(k, m, 1))[..., 0]
                  - lq.gather(-1, self.wrong[None, :, None].expand(k, m, 1))[..., 0])
            kl = (self.base_p[None] * (self.base_lp[None] - lq)).sum(-1)
            return {"logit_diff": ld, "delta_logit_diff": ld - self.base_ld[None], "correct": (ld > 0).float(),
                    "kl": kl}
        n_pred = self.targets.shape[1]
        ce = self.ce_base[None].repeat(k, 1, 1)
        kl = torch.zeros_like(ce)
        if start < n_pred:
            lq = logits[:, : n_pred - start].float().log_softmax(-1)
            lq = lq.view(k, m, n_pred - start, -1)
            tg = self.targets[None, :, start:, None].expand(k, m, n_pred - start, 1)
            ce[:, :, start:] = -lq.gather(-1, tg)[..., 0]
            bp = self.base_lp[None, :, start:]
            kl[:, :, start:] = (self.base_p[None, :, start:] * (bp - lq)).sum(-1)
        loss = ce.mean(-1)
        return {"loss": loss, "delta_loss": loss - self.ce_base.mean(-1)[None], "kl": kl.mean(-1)}


def result(model, ids: list[dict], values: dict[str, np.ndarray], tgt: Target, attrs: dict,
           columns: list[dict] | None = None) -> InterventionResult:
    """Assemble an :class:`~analysis.engine.effects.InterventionResult` from one dict of identifying columns per edit
    and the measures ``[n_edits, n_items]``; ``columns`` (optional, one dict per edit) adds properties of each edit
    (e.g. how far it moves the input) to its summary row and to each of its item rows, after the identifying columns."""
    E, n = len(ids), tgt.tokens.shape[0]
    per_edit = pd.DataFrame([{c: d.get(c) for c in ID_COLUMNS} for d in ids], columns=ID_COLUMNS)
    per_edit["interface"] = model.cfg.interface
    for c in _INT_COLUMNS:
        per_edit[c] = per_edit[c].astype("Int64")
    per_edit["scale"] = per_edit["scale"].astype(float)
    if per_edit["bit"].notna().any():  # a bit that no token differs in is named as such
        constant = set(constant_code_bits(model.cfg))
        per_edit["bit_constant"] = pd.array([pd.NA if pd.isna(b) else int(b) in constant for b in per_edit["bit"]],
                                            dtype="boolean")
    if columns is not None:
        if len(columns) != E:
            raise AnalysisError(f"{len(columns)} dicts of edit columns for {E} edits")
        extra = pd.DataFrame(list(columns), index=per_edit.index)
        per_edit = pd.concat([per_edit, extra], axis=1)
    items = per_edit.iloc[np.repeat(np.arange(E), n)].reset_index(drop=True)
    items["item"] = np.tile(np.arange(n), E)
    summary = per_edit.copy()
    summary["n"] = np.isfinite(values[tgt.measures[0]]).sum(1)
    for me in tgt.measures:
        items[me] = values[me].reshape(-1)
        summary[me], summary[f"{me}_lo"], summary[f"{me}_hi"] = t_intervals(values[me])
    attrs.update(n_items=int(n), n_pos=int(tgt.tokens.shape[1]), measures=list(tgt.measures),
                 data="pairs" if tgt.pairs else "corpus", n_tokens=int(tgt.tokens.numel()),
                 interface=model.cfg.interface)
    return InterventionResult(items, summary, attrs)
