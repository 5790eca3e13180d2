"""``similarity``: CKA between checkpoints hook point by hook point (:mod:`analysis.readouts.similarity`), or every
pair under its kind beside its references - the same variant across seeds, each model's initialisation, a
permutation null (:mod:`analysis.readouts.references`)."""

from __future__ import annotations

from pathlib import Path

from analysis.errors import AnalysisError
from analysis.specs import shared, types
from analysis.specs.base import Param, Result, Spec


def check(params: dict) -> None:
    if params["references"] and params["random_init"]:
        raise AnalysisError("--random-init is for the matrices; --references compares each checkpoint with its "
                            "initialisation already (--no-init skips it)")


def _seed(path: Path) -> int:
    """The checkpoint's seed (``[train] seed``), from its config without loading its weights."""
    from fixedid.checkpoint import load_config

    from analysis.interop.hf import is_hf_dir
    from analysis.loading import load

    return load(path).cfg.seed if is_hf_dir(path) else load_config(path).seed


def compare(models, *, references, random_init, keep_first, boot, null, no_init, no_procrustes, seed, data, tokens,
            progress=False) -> Result:
    """The CKA matrices of two checkpoints (or one against its initialisation), or the references table."""
    if references:
        return _references(models, boot, null, no_init, no_procrustes, seed, data, tokens, keep_first, progress)
    from analysis.loading import random_init_twin
    from analysis.readouts.similarity import cka_matrix

    if len(models) > 2:
        raise AnalysisError("more than two checkpoints: add --references to compare them all under their kinds")
    if len(models) == 1 and not random_init:
        raise AnalysisError("give two checkpoints (--ckpt A --ckpt B), or one with --random-init")
    names = [models.labels[k] for k in models]
    if len(names) == 2 and names[0] == names[1]:
        names = [str(models.paths[k]) for k in models]
    loaded = [models[k] for k in models]
    pairs = [(f"{names[0]} vs {names[1]}", loaded[0], loaded[1])] if len(loaded) == 2 else []
    if random_init:
        pairs += [(f"{n} vs its initialisation", m, random_init_twin(m)) for n, m in zip(names, loaded)]
    frames = {label: cka_matrix(a, b, data, tokens=tokens, skip_first=not keep_first, progress=progress)
              for label, a, b in pairs}
    import pandas as pd

    df = pd.concat([f.assign(comparison=k) for k, f in frames.items()], ignore_index=True)
    return Result(tables={"similarity": df[["comparison"] + [c for c in df.columns if c != "comparison"]]},
                  attrs={"frames": frames})


def _references(models, boot, null, no_init, no_procrustes, seed, data, tokens, keep_first, progress) -> Result:
    from analysis.readouts.references import similarity_references

    keyed = {}
    for key in models:
        name, path = models.labels[key], models.paths[key]
        run = (name, _seed(path) if path is not None else models[key].cfg.seed)
        if run in keyed:
            raise AnalysisError(f"{keyed[run]} and {path} are both {name} of seed {run[1]}; name them apart "
                                "(--ckpt NAME=DIR)")
        keyed[run] = path if path is not None else models[key]
    refs = similarity_references(keyed, data, tokens=tokens, skip_first=not keep_first, boot=boot, null_draws=null,
                                 init=not no_init, procrustes=not no_procrustes, seed=seed, device=models.device,
                                 dtype=models.dtype, progress=progress)
    return Result(tables={"similarity_references": refs.table, "similarity_reading": refs.reading()})


def matrices_figure(result: Result):
    from analysis.figures.similarity import cka_figure

    return None if result.params["references"] else cka_figure(result.attrs["frames"])


def references_figure(result: Result):
    from analysis.figures.similarity import references_figure as draw

    if not result.params["references"]:
        return None
    measures = ("debiased_cka",) if result.params["no_procrustes"] else ("debiased_cka", "procrustes")
    return draw(result.tables["similarity_references"], measures)


def summarize(result: Result) -> str:
    from analysis.figures.style import short_hook

    p = result.params
    where = "every position" if p["keep_first"] else "position 0 left out"
    if p["references"]:
        return _references_summary(result, where)
    frames = result.attrs["frames"]
    n_tok = next(iter(frames.values())).attrs["n_tokens"]
    lines = [f"debiased linear CKA over {n_tok:,} tokens ({where}), same hook point in both (linear CKA in brackets):"]
    for label, f in frames.items():
        same = f[f.layer_a == f.layer_b]
        lines.append(f"  {label}: " + ", ".join(f"{short_hook(h)} {d:.2f} ({c:.2f})"
                                              for h, d, c in zip(same.hook_a, same.debiased, same.cka)))
    return "\n".join(lines)


def _references_summary(result: Result, where: str) -> str:
    from analysis.readouts.references import reading_lines

    p, t = result.params, result.tables["similarity_references"]
    lines = [f"debiased linear CKA over {t.n_tokens.iloc[0]:,} tokens in {t.n_windows.iloc[0]} windows ({where}); "
             f"[95% bootstrap interval over windows, {p['boot']} draws]; null: {p['null']} permutations of one side's "
             "tokens:"]
    found = reading_lines(result.tables["similarity_reading"])
    lines += [f"  {line}" for line in found]
    if not found:  # one variant: its ceiling and initialisation alone
        d = t[(t.measure == "debiased_cka") & t.reference.isin(["same_interface_cross_seed", "own_initialisation"])]
        for (kind, v, hook), g in d.groupby(["reference", "variant_a", "hook"], sort=False):
            lines.append(f"  {v} {kind.replace('_', ' ')} @ {hook}: {g.value.mean():.2f} (over {len(g)} pairs)")
    return "\n".join(lines)


SPEC = Spec(
    name="similarity", group="readouts", joint=True, repeat_names=True,
    help="CKA between checkpoints hook point by hook point, or with its references (--references)",
    examples="""
  fixedid-analyze similarity --ckpt fixedid-demo/checkpoints/canonical --ckpt fixedid-demo/checkpoints/gf2
  fixedid-analyze similarity --ckpt fixedid-demo/checkpoints/gf2 --random-init
""",
    params=(
        Param("references", False, "compare every pair under its kind (same variant across seeds, variants across "
              "seeds, variants of one seed), each checkpoint against its initialisation and a permutation null, with "
              "bootstrap intervals and Procrustes similarity; each --ckpt NAME is the variant, the seed is read from "
              "the checkpoint", switch=True),
        Param("random_init", False, "(matrices) also compare each checkpoint with its own initialisation (the same "
              "seed, untrained)", switch=True),
        Param("keep_first", False, "keep position 0 of each window (default: left out; it is an attention sink in a "
              "trained model)", switch=True),
        Param("boot", 1000, "(references) bootstrap draws over windows (0: no intervals)",
              type=types.nonnegative_int),
        Param("null", 20, "(references) permutations of the null (0: none)", type=types.nonnegative_int),
        Param("no_init", False, "(references) skip each checkpoint against its initialisation", switch=True),
        Param("no_procrustes", False, "(references) CKA only (Procrustes' bootstrap costs an SVD per draw)",
              switch=True),
        shared.seed("(references) seed of the bootstrap and the null"),
        shared.data("a .txt, .jsonl or .npy file (default: the first checkpoint's validation data)"),
        shared.tokens(8192, "tokens to compare on")),
    compute=compare, check=check,
    figures={"similarity": matrices_figure, "similarity_references": references_figure},
    summary=summarize,
    library=("analysis.readouts.similarity:cka_matrix", "analysis.readouts.references:similarity_references"),
)


__all__ = ["SPEC", "compare"]
