"""lm-eval's view of a fixedid checkpoint: the model class :class:`~analysis.evaluation.lmeval_model.FixedIdEvalLM`,
which turns lm-eval's requests into batched forwards (:mod:`analysis.evaluation.lmeval` registers it as ``fixedid``,
finds the tasks and runs them)."""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from analysis.errors import AnalysisError
from analysis.evaluation.shared_rows import host_rows


def _lm_base():
    from lm_eval.api.model import TemplateLM

    return TemplateLM


#: positions whose logits and log-softmax are held at once when scoring a batch
SCORE_CHUNK = 2048


class FixedIdEvalLM(_lm_base()):
    """lm-eval's view of a fixedid checkpoint. ``pretrained``: a checkpoint directory (or pass ``model=``, an
    already loaded model with a tokenizer); ``batch_size`` (``auto`` = 32); ``max_length`` (default: the model's
    context); ``max_gen_toks`` for ``generate_until`` (default 256); ``max_batch_tokens``: at most this many tokens in
    one forward (default 16,384), so a batch of long windows is split into fewer rows.

    Memory: a forward keeps one layer's temporaries for ``rows x width`` tokens (bounded by ``max_batch_tokens``)
    and unembeds only the positions a request scores (``generate_until``: the last one), ``SCORE_CHUNK`` of them at
    a time, never the full ``rows x width x vocab`` logits (at the study's 1.7B shape, 32 windows of 2,048 tokens
    would be 12.9 GB of them)."""

    def __init__(self, pretrained=None, batch_size=32, device="cpu", max_length=None, max_gen_toks=256,
                 model=None, max_batch_size=None, max_batch_tokens=16384, **unused):
        super().__init__()
        from analysis.loading import load

        if unused:
            raise AnalysisError(f"unknown model_args for the fixedid model: {sorted(unused)}; use pretrained, "
                                "batch_size, device, max_length, max_gen_toks, max_batch_tokens")
        if model is None:
            if pretrained is None:
                raise AnalysisError("the fixedid model needs model_args pretrained=<checkpoint directory>")
            if not device or (str(device).startswith("cuda") and not torch.cuda.is_available()):
                device = "cpu"  # lm-eval's command line asks for cuda by default; without a GPU, run on the CPU
            model = load(pretrained, device=device)
        if model.tokenizer is None:
            raise AnalysisError("this checkpoint has no tokenizer: lm-eval evaluates text")
        self.model = model.eval()
        self.tokenizer = model.tokenizer
        self._name = str(pretrained) if pretrained is not None else str(getattr(model, "ckpt_dir", "fixedid"))
        bs = 32 if batch_size in (None, "auto") or str(batch_size).startswith("auto") else int(batch_size)
        if bs < 1:
            raise AnalysisError(f"batch_size must be positive, got {batch_size}")
        self.batch_size = bs
        self.max_length = int(max_length or model.cfg.context)
        if not 1 <= self.max_length <= model.cfg.context:
            raise AnalysisError(f"max_length must be in 1..{model.cfg.context} (the model's context)")
        self.max_gen_toks = int(max_gen_toks)
        self.max_batch_tokens = int(max_batch_tokens)
        if self.max_batch_tokens < 1:
            raise AnalysisError(f"max_batch_tokens must be positive, got {max_batch_tokens}")
        self.bar_file = None  # where the progress bars go (None: sys.stderr when they start)
        from fixedid.data.tokenizer import eot_id

        self._eot = eot_id(self.tokenizer)

    # ------------------------------------------------------------------------------------------ lm-eval's API
    @property
    def eot_token_id(self) -> int:
        """The tokenizer's end-of-text id (:func:`fixedid.data.tokenizer.eot_id`): lm-eval's context for an empty
        context and its default stop token."""
        return self._eot

    @property
    def tokenizer_name(self) -> str:
        """The name lm-eval records for the tokenizer: the checkpoint path given as ``pretrained`` (else the
        model's checkpoint directory, or ``"fixedid"``)."""
        return self._name

    @property
    def device(self):
        """The device of the model's parameters, where inputs are put."""
        return next(self.model.parameters()).device

    def tok_encode(self, string: str, add_special_tokens=None, **kwargs) -> list[int]:
        """The token ids of ``string`` under the checkpoint's tokenizer, never with special tokens (lm-eval's
        ``add_special_tokens`` and other arguments are ignored)."""
        return self.tokenizer.encode(string, add_special_tokens=False).ids

    def _encode_many(self, strings: list[str]) -> list[list[int]]:
        """Token ids of each string, each distinct string tokenized once (the options of a multiple-choice
        document share their context)."""
        unique = list(dict.fromkeys(strings))
        # without offsets where the tokenizers library has it (the same ids, about a third less time)
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        ids = dict(zip(unique, (e.ids for e in encode(unique, add_special_tokens=False))))
        return [ids[s] for s in strings]

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        """lm-eval's ``TemplateLM.loglikelihood`` with the same split of each (context, continuation) - trailing
        spaces of the context move to the continuation, the continuation's tokens are those of the whole after the
        context's; an empty context becomes the end-of-text token - with all strings tokenized in one batch."""
        pairs = [req.args for req in requests]
        ctxs, wholes, empties = [], [], []
        for ctx, cont in pairs:
            if ctx == "":
                empties.append(cont)
                continue
            n = len(ctx) - len(ctx.rstrip())
            if n:
                ctx, cont = ctx[:-n], ctx[-n:] + cont
            ctxs.append(ctx)
            wholes.append(ctx + cont)
        encoded = self._encode_many(ctxs + wholes + empties)  # one call: a context is often another's whole
        it_ctx, it_whole = iter(encoded[:len(ctxs)]), iter(encoded[len(ctxs):len(ctxs) + len(wholes)])
        it_empty = iter(encoded[len(ctxs) + len(wholes):])
        reqs = []
        for ctx, cont in pairs:
            if ctx == "":
                c = next(it_empty)
                ce, ke = ([self.prefix_token_id], c) if self.prefix_token_id != c[0] else (c[:1], c[1:])
            else:
                ce, whole = next(it_ctx), next(it_whole)
                ke = whole[len(ce):]
            reqs.append(((ctx, cont), ce, ke))
        return self._loglikelihood_tokens(reqs, disable_tqdm=disable_tqdm)

    def tok_decode(self, tokens) -> str:
        """The text of token ids ``tokens``, special tokens kept."""
        return self.tokenizer.decode(list(tokens), skip_special_tokens=False)

    @torch.no_grad()
    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs):
        """``(sum of log p(continuation), is_greedy)`` per ``(key, context_ids, continuation_ids)``.

        Each request needs the logits at the positions of its input row (context and continuation, less the last
        token); only the rows that are no other row's prefix are run
        (:func:`~analysis.evaluation.shared_rows.host_rows`), and every request is scored on the row that holds it.
        Options of a multiple-choice document that differ only in their last token share one row, as do requests
        that repeat."""
        rows = []
        for _, ctx, cont in requests:
            if not cont:
                raise AnalysisError("an lm-eval request has an empty continuation")
            if len(cont) > self.max_length:
                raise AnalysisError(f"a continuation of {len(cont)} tokens does not fit the context "
                                    f"({self.max_length})")
            rows.append(tuple((list(ctx) + list(cont))[-(self.max_length + 1):]))
        where = host_rows(r[:-1] for r in rows)
        hosts = sorted(set(where.values()), key=len, reverse=True)  # longest first: little padding
        slot = {inp: j for j, inp in enumerate(hosts)}
        members: list[list[int]] = [[] for _ in hosts]
        for i, r in enumerate(rows):
            members[slot[where[r[:-1]]]].append(i)
        out: list = [None] * len(rows)
        bar = tqdm(total=len(rows), desc="loglikelihood", unit="req", disable=disable_tqdm, leave=False,
                   file=self.bar_file)
        b = 0
        while b < len(hosts):
            width = len(hosts[b])  # the longest row left: it sets the batch's width
            batch = hosts[b:b + self._rows(width)]
            x = torch.tensor([inp + (0,) * (width - len(inp)) for inp in batch], dtype=torch.long)
            # every continuation token of the batch's requests: the row, the position predicting it, its id;
            # scored in chunks of SCORE_CHUNK positions (each chunk's logits and log-softmax, not the batch's)
            reqs = [i for j in range(b, b + len(batch)) for i in members[j]]
            seg, row, pos, tok = [], [], [], []
            for k, i in enumerate(reqs):
                r, cont = rows[i], requests[i][2]
                n_in, n_cont = len(r) - 1, len(cont)
                seg += [k] * n_cont
                row += [slot[where[r[:-1]]] - b] * n_cont
                pos += range(n_in - n_cont, n_in)
                tok += r[n_in + 1 - n_cont:]
            b += len(batch)
            resid = self.model(x.to(self.device), stop_at_layer=self.model.cfg.n_layers)
            scores = torch.zeros(len(reqs), dtype=torch.float64, device=resid.device)
            misses = torch.zeros(len(reqs), device=resid.device)
            for c in range(0, len(seg), SCORE_CHUNK):
                part = slice(c, c + SCORE_CHUNK)
                at = torch.tensor([row[part], pos[part]], device=resid.device)
                lp = torch.log_softmax(self._unembed(resid[at[0], at[1]]).float(), -1)
                seg_t = torch.tensor(seg[part], device=resid.device)
                tok_t = torch.tensor(tok[part], device=resid.device)
                scores.index_add_(0, seg_t, lp.gather(1, tok_t[:, None])[:, 0].double())
                misses.index_add_(0, seg_t, (lp.argmax(-1) != tok_t).float())
            for i, score, miss in zip(reqs, scores.tolist(), misses.tolist()):
                out[i] = (score, miss == 0)
                if requests[i][0] is not None:
                    self.cache_hook.add_partial("loglikelihood", requests[i][0], out[i])
            bar.update(len(reqs))
        bar.close()
        return out

    def _rows(self, width: int) -> int:
        """Rows of one forward of ``width`` tokens: ``batch_size``, fewer where they would exceed
        ``max_batch_tokens`` (at least one)."""
        return max(1, min(self.batch_size, self.max_batch_tokens // max(1, width)))

    def _unembed(self, resid: torch.Tensor) -> torch.Tensor:
        """Logits of final-block residual vectors ``[n, d_model]``."""
        return self.model.unembed(self.model.ln_final(resid))

    def _last_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The logits ``[rows, vocab]`` at the last position of ``x``: the final norm and the unembedding there
        only."""
        return self._unembed(self.model(x, stop_at_layer=self.model.cfg.n_layers)[:, -1])

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """The log-likelihood of each whole string, in disjoint windows of the context (lm-eval's rolling windows,
        the first token conditioned on the end-of-text token)."""
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

        windows, owner = [], []
        for k, req in enumerate(requests):
            (string,) = req.args
            for ctx, cont in map(make_disjoint_window, get_rolling_token_windows(
                    self.tok_encode(string), self.prefix_token_id, self.max_length, 1)):
                windows.append((None, ctx, cont))
                owner.append(k)
        scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        totals = [0.0] * len(requests)
        for k, (s, _) in zip(owner, scores):
            totals[k] += s
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", (req.args[0],), total)
        return totals

    @torch.no_grad()
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations, cut at the first stop string (``until``) or the end-of-text token; prompts of
        equal token length (after left truncation) and equal generation arguments share a batch."""
        groups: dict = {}
        for i, req in enumerate(requests):
            ctx, kw = req.args
            kw = dict(kw or {})
            if kw.pop("do_sample", False) or float(kw.get("temperature", 0) or 0) > 0:
                raise AnalysisError("the fixedid model generates greedily; sampling (do_sample / temperature > 0) "
                                    "is not supported")
            until = kw.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kw.get("max_gen_toks", self.max_gen_toks))
            ids = self.tok_encode(ctx)[-max(1, self.max_length - 1):] or [self.prefix_token_id]
            groups.setdefault((len(ids), tuple(until), max_new), []).append((i, ids))
        out: list = [None] * len(requests)
        bar = tqdm(total=len(requests), desc="generate", unit="req", disable=disable_tqdm, leave=False,
                   file=self.bar_file)
        for (_, until, max_new), members in groups.items():
            rows = self._rows(min(self.max_length, len(members[0][1]) + max_new))
            for b in range(0, len(members), rows):
                batch = members[b:b + rows]
                x = torch.tensor([ids for _, ids in batch], device=self.device)
                start = x.shape[1]
                done = torch.zeros(len(batch), dtype=torch.bool, device=self.device)
                for _ in range(max_new):
                    nxt = self._last_logits(x[:, -self.max_length:]).argmax(-1)
                    x = torch.cat([x, nxt[:, None]], 1)
                    done |= nxt == self._eot
                    if until:
                        texts = [self.tok_decode(r[start:].tolist()) for r in x]
                        done |= torch.tensor([any(u in t for u in until) for t in texts], device=self.device)
                    if bool(done.all()):
                        break
                for (i, _), row in zip(batch, x):
                    gen = row[start:].tolist()
                    if self._eot in gen:
                        gen = gen[:gen.index(self._eot)]
                    text = self.tok_decode(gen)
                    for u in until:
                        text = text.split(u)[0]
                    out[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
                bar.update(len(batch))
        bar.close()
        return out


__all__ = ["SCORE_CHUNK", "FixedIdEvalLM"]
