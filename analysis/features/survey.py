"""Features read against the code, across depth, variants and seeds, with their references, in one call."""

from __future__ import annotations

import re

import pandas as pd

from analysis.errors import AnalysisError
from analysis.features.code_reading import (bit_tables, code_auroc, latent_activations, latent_tokens,
                                             token_feature_share)
from analysis.features.dictionary import SparseDictionary
from analysis.features.matching import match_dictionaries
from analysis.features.metrics import dictionary_metrics
from analysis.features.run import dictionary_config, split_windows
from analysis.features.train import train_dictionary
from analysis.loading import random_init_twin
from analysis.engine import names as hooknames


def residual_sites(model) -> list[str]:
    """The residual stream across depth: ``blocks.0.hook_resid_pre`` (what the first block reads: the code, for a
    fixed-code model) and ``blocks.L.hook_resid_post`` for every block."""
    return [hooknames.resid_pre(0)] + [hooknames.resid_post(i) for i in range(model.cfg.n_layers)]


def site_depth(hook: str) -> float:
    """Depth of a hook in blocks: ``blocks.L.hook_resid_pre`` is ``L``, ``blocks.L.hook_resid_post`` ``L + 1`` and
    anything inside block ``L`` ``L + 0.5``."""
    m = re.match(r"blocks\.(\d+)\.(.*)", hook)
    if not m:
        raise AnalysisError(f"{hook!r} is not inside a block (blocks.L.<hook>)")
    layer, rest = int(m.group(1)), m.group(2)
    return layer + {"hook_resid_pre": 0.0, "hook_resid_post": 1.0}.get(rest, 0.5)


def _same_code(a, b) -> bool:
    ra, rb = a.cfg.recoding(), b.cfg.recoding()
    if ra is None or rb is None:
        return ra is None and rb is None
    return (ra.matrix == rb.matrix).all() and (ra.offset == rb.offset).all()


def pair_kind(a, b) -> str:
    """``seed`` (same interface and code, other training seed), ``variant`` (another interface or recoding) or
    ``other checkpoint`` (same interface, code and seed: another recipe or snapshot)."""
    if a.cfg.interface != b.cfg.interface or not _same_code(a, b):
        return "variant"
    return "seed" if a.cfg.seed != b.cfg.seed else "other checkpoint"


def _check(models: dict) -> None:
    if not models:
        raise AnalysisError("a feature survey needs at least one model")
    first = next(iter(models.values()))
    vocab = getattr(first, "tokenizer", None)
    for name, m in models.items():
        if m.cfg.vocab_size != first.cfg.vocab_size or (
                vocab is not None and m.tokenizer is not None and m.tokenizer.get_vocab() != vocab.get_vocab()):
            raise AnalysisError(f"{name} does not share the first model's tokenizer: a survey compares models on the "
                                "same token ids")


_DESC = ["model", "interface", "model_seed", "init", "dict_seed", "hook", "depth"]
_PAIR = ["pair", "a", "b", "interface_a", "interface_b", "init_b", "hook", "depth"]


def _first(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return df[cols + [c for c in df.columns if c not in cols]]


def feature_survey(models: dict, data=None, *, sites: list[str] | None = None, train_tokens: int = 262_144,
                   eval_tokens: int = 16_384, expansion: int = 8, k: int = 8, twins: bool = True,
                   dictionary_seeds: int = 1, seed: int = 0, purity: float = 0.9, min_fires: int = 10,
                   batch_tokens: int = 1024, progress: bool = True) -> dict[str, pd.DataFrame]:
    """The tables of the module docstring (``code``, ``tokens``, ``matching``, ``dictionaries``) for ``models``
    (``{name: model}``); each row carries ``model``, ``interface``, ``model_seed``, ``init`` (``trained`` or
    ``random_init``), ``dict_seed``, ``hook`` and ``depth``."""
    from tqdm.auto import tqdm

    _check(models)
    if dictionary_seeds not in (1, 2):
        raise AnalysisError(f"dictionary_seeds is 1 or 2, got {dictionary_seeds}")
    first = next(iter(models.values()))
    sites = sites or residual_sites(first)
    for m in models.values():  # every site of every model checked before anything trains
        for s in sites:
            dictionary_config(m, hook=s, expansion=expansion, k=k)
            site_depth(s)
    train, held_out = split_windows(first, data, train_tokens=train_tokens, eval_tokens=eval_tokens)
    runs = [(name, "trained", m, ds) for name, m in models.items() for ds in range(dictionary_seeds)]
    if twins:
        runs += [(name, "random_init", random_init_twin(m), 0) for name, m in models.items()]
    tables: dict[str, list] = {"code": [], "tokens": [], "matching": [], "dictionaries": []}
    bar = tqdm(total=len(sites) * len(runs), disable=not progress, desc="feature survey", unit="dictionary")
    for site in sites:
        fitted: dict[tuple, tuple[SparseDictionary, object]] = {}
        for r, (name, init, m, ds) in enumerate(runs):
            cfg = dictionary_config(m, hook=site, expansion=expansion, k=k)
            d, _ = train_dictionary(m, cfg, train, batch_tokens=batch_tokens, seed=seed + r, progress=False)
            lat = latent_activations(m, d, held_out)
            fitted[(name, init, ds)] = (d, lat)
            desc = {"model": name, "interface": m.cfg.interface, "model_seed": m.cfg.seed, "init": init,
                    "dict_seed": seed + r, "hook": site, "depth": site_depth(site)}
            tables["code"].append(code_auroc(lat, bit_tables(m.cfg, seed=seed)).drop(columns="hook").assign(**desc))
            tables["tokens"].append(pd.DataFrame([{**desc, **token_feature_share(
                latent_tokens(lat), purity=purity, min_fires=min_fires)}]))
            tables["dictionaries"].append(dictionary_metrics(m, d, held_out).drop(columns="hook").assign(**desc))
            bar.update()
        names = list(models)
        pairs = [(a, b, pair_kind(models[a], models[b]), ("trained", 0), ("trained", 0))
                 for i, a in enumerate(names) for b in names[i + 1:]]
        if twins:
            pairs += [(a, a, "random init", ("trained", 0), ("random_init", 0)) for a in names]
        if dictionary_seeds == 2:
            pairs += [(a, a, "dictionary seed", ("trained", 0), ("trained", 1)) for a in names]
        for a, b, kind, (ia, da), (ib, db) in pairs:
            (d_a, lat_a), (d_b, lat_b) = fitted[(a, ia, da)], fitted[(b, ib, db)]
            tables["matching"].append(match_dictionaries(d_a, d_b, lat_a, lat_b, seed=seed).assign(
                a=a, b=b, pair=kind, interface_a=models[a].cfg.interface, interface_b=models[b].cfg.interface,
                init_b=ib, hook=site, depth=site_depth(site)))
    bar.close()
    cols = {k: _DESC if k != "matching" else _PAIR for k in tables}  # nothing to match: one model, no twins
    out = {k: _first(pd.concat(v, ignore_index=True) if v else pd.DataFrame(columns=cols[k]), cols[k])
           for k, v in tables.items()}
    for df in out.values():
        df.attrs.update(n_train_tokens=int(train.numel()), n_eval_tokens=int(held_out.numel()), expansion=expansion,
                        k=k)
    return out


__all__ = ["residual_sites", "site_depth", "pair_kind", "feature_survey"]
