"""The analysis model: the checkpoint's own FixedIdLM, with the conveniences a notebook expects."""

from __future__ import annotations

import torch

from fixedid import FixedIdLM

from analysis.errors import AnalysisError


class HookedFixedIdLM(FixedIdLM):
    """A FixedIdLM with ``to_tokens``, ``to_str_tokens``, ``to_single_token``, ``to_string`` and greedy ``generate``."""

    def _tok(self):
        if self.tokenizer is None:
            raise AnalysisError("this model has no tokenizer (the checkpoint carries none); pass token ids instead")
        return self.tokenizer

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters, where ``to_tokens`` puts its ids."""
        return next(self.parameters()).device

    def to_tokens(self, text: str | list[str]) -> torch.Tensor:
        """Token ids ``[batch, pos]`` of one string or a list of strings of equal token length (no BOS added)."""
        texts = [text] if isinstance(text, str) else list(text)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise AnalysisError("to_tokens needs a string or a non-empty list of strings")
        ids = [e.ids for e in self._tok().encode_batch(texts, add_special_tokens=False)]
        lengths = {len(i) for i in ids}
        if len(lengths) != 1:
            raise AnalysisError(f"the strings tokenize to different lengths {sorted(lengths)}; pass them one by one")
        if 0 in lengths:
            raise AnalysisError("an empty string has no tokens")
        return torch.tensor(ids, dtype=torch.long, device=self.device)

    def to_str_tokens(self, text_or_tokens) -> list[str]:
        """Each token as the text it decodes to (leading spaces kept), for one prompt."""
        tokens = self.to_tokens(text_or_tokens) if isinstance(text_or_tokens, str) else text_or_tokens
        ids = torch.as_tensor(tokens).reshape(-1).tolist()
        return [self._tok().decode([i], skip_special_tokens=False) for i in ids]

    def to_single_token(self, word: str) -> int:
        """The id of ``word`` (write the leading space: ``" Mary"``); an error if it is not exactly one token."""
        ids = self._tok().encode(word, add_special_tokens=False).ids
        if len(ids) != 1:
            pieces = [self._tok().decode([i]) for i in ids]
            raise AnalysisError(f"{word!r} is {len(ids)} tokens {pieces}, not one; pick a word that is a single "
                                "token (remember the leading space)")
        return ids[0]

    def to_string(self, tokens) -> str:
        """The text token ids decode to (any shape, read in row-major order; special tokens kept)."""
        return self._tok().decode(torch.as_tensor(tokens).reshape(-1).tolist(), skip_special_tokens=False)

    @torch.no_grad()
    def generate(self, prompt: str | torch.Tensor, max_new_tokens: int = 20, *, stop_at_eot: bool = True):
        """Greedy continuation. A string in, the completed string out; token ids in, token ids out."""
        tokens = self.to_tokens(prompt) if isinstance(prompt, str) else torch.as_tensor(prompt).to(self.device)
        if tokens.dim() == 1:
            tokens = tokens[None]
        eot = None
        if stop_at_eot and self.tokenizer is not None:
            from fixedid.data.tokenizer import EOT_TOKENS

            eot = next((i for i in map(self.tokenizer.token_to_id, EOT_TOKENS) if i is not None), None)
        for _ in range(max_new_tokens):
            nxt = self(tokens[:, -self.cfg.context:])[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
            if eot is not None and bool((nxt == eot).all()):
                break
        return self.to_string(tokens[0]) if isinstance(prompt, str) else tokens

    def to_transformer_lens(self):
        """A TransformerLens 4.x ``TransformerBridge`` over these weights (see :mod:`analysis.interop.bridge`)."""
        from analysis.interop.bridge import to_transformer_bridge

        return to_transformer_bridge(self)

    def to_nnsight(self):
        """An nnsight wrapper over this model that accepts several invokes in one trace (see
        :mod:`analysis.interop.nnsight_view`). Raises :class:`~analysis.errors.AnalysisError` on an nnsight version it
        is not tested with, since the wrapper reads nnsight internals."""
        check_nnsight_version()
        from analysis.interop.nnsight_view import FixedIdNNsight

        return FixedIdNNsight(self)


#: The nnsight releases the wrapper is tested with (it reads their internals): 0.8.x.
NNSIGHT_SUPPORTED = ((0, 8), (0, 9))


def check_nnsight_version(version: str | None = None) -> None:
    """Refuse, with one clear line, an nnsight version outside :data:`~analysis.model.NNSIGHT_SUPPORTED`."""
    from importlib import metadata

    try:
        version = version or metadata.version("nnsight")
    except metadata.PackageNotFoundError:
        raise AnalysisError("nnsight is not installed; pip install 'nnsight>=0.8,<0.9'") from None
    try:
        parts = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        parts = (-1, -1)
    lo, hi = NNSIGHT_SUPPORTED
    if not lo <= parts < hi:
        raise AnalysisError(f"nnsight {version} is not supported: the nnsight view reads nnsight internals and is "
                            "tested with 0.8.x; pip install 'nnsight>=0.8,<0.9'")
