"""``unembed`` (formerly ``head``): the geometry of each variant's output head against code bits, frequency and a
learned input table of another run (:mod:`analysis.readouts.head`); the study's ``head`` measurement."""

from __future__ import annotations

from analysis.errors import AnalysisError
from analysis.specs import shared, types
from analysis.specs.base import Measure, Param, Result, Spec


def _serves(model, reference) -> bool:
    """Whether ``reference`` may serve ``model`` (another run, the same tokenizer)."""
    from analysis.readouts.head import check_reference

    try:
        check_reference(model, reference)
    except AnalysisError:
        return False
    return True


def geometry(models, *, reference, k, data, tokens, null_draws, progress=False) -> Result:
    """Each head's geometry, against ``--reference`` or the learned checkpoint among them (for other runs only)."""
    from analysis.loading import load
    from analysis.readouts.head import check_reference, head_geometry
    from analysis.specs.execute import stacked

    if reference:
        ref = load(reference, device=models.device, dtype=models.dtype)
        if ref.cfg.is_fixed:
            raise AnalysisError(f"--reference {reference} is a fixed-code checkpoint; name a learned one")
        for m in models.values():  # refuse before anything is computed or written
            check_reference(m, ref)
        refs = {n: ref for n in models}
    else:
        learned = next((m for m in models.values() if not m.cfg.is_fixed), None)
        refs = {n: learned if learned is not None and _serves(m, learned) else None for n, m in models.items()}
    frames = [head_geometry(models[n], refs[n], k=k, data=data, tokens=tokens, null_draws=null_draws,
                            progress=progress) for n in models]
    return Result(tables={"unembed": stacked(frames, list(models))},
                  attrs={"alone": [n for n, r in refs.items() if r is None]})


def head_figure(result: Result):
    from analysis.figures.output import head_figure as draw

    return draw(result.tables["unembed"])


def summarize(result: Result) -> str:
    df, alone = result.tables["unembed"], result.attrs["alone"]
    lines = ["output head geometry" + (f" (no reference of another run for {', '.join(alone)}: R^2 only; pass "
                                       "--reference a learned checkpoint of another seed)" if alone else "") + ":"]
    for n, g in df.groupby("variant", sort=False):
        g = g.set_index(["measure", "basis"])
        cells = [f"{m} ({b}) {r.value:.3f} [{r.lo:.3f}, {r.hi:.3f}]" for (m, b), r in g.iterrows()
                 if m in ("bits_r2", "logfreq_r2", "bits_partial_r2")]
        cells += [f"{m} {r.value:.3f} (null {r.null_mean:.3f} [{r.null_lo:.3f}, {r.null_hi:.3f}])"
                  for (m, b), r in g.iterrows() if m in ("debiased_cka_to_learned_input", "nn_overlap")]
        lines.append(f"  {n}: " + "; ".join(cells))
    return "\n".join(lines)


def measure(model, reference, sizes):
    """The output head's geometry; ``reference``: the learned variant of another seed (never the same run)."""
    from analysis.readouts.head import head_geometry
    from analysis.specs.rows import rows

    df = head_geometry(model, reference, progress=False)
    items = [(r.measure, r.basis, r.value) for r in df.itertuples()]
    for r in df.itertuples():
        if r.null_mean == r.null_mean:
            items += [(f"{r.measure}_null", r.basis, r.null_mean), (f"{r.measure}_excess", r.basis,
                                                                     r.value - r.null_mean)]
    return rows("head", items)


SPEC = Spec(
    name="unembed", group="readouts", joint=True,
    help="the output head's geometry: R^2 from code bits and frequency, similarity to a learned input table",
    examples="""
  fixedid-analyze unembed --ckpt fixedid-demo/checkpoints/learned --ckpt fixedid-demo/checkpoints/canonical \\
      --ckpt fixedid-demo/checkpoints/gf2
""",
    params=(
        Param("reference", None, "a learned-interface checkpoint of another seed whose input table every head is "
              "compared with (default: the learned one among --ckpt, for the checkpoints of other runs)",
              metavar="DIR", type=types.directory),
        Param("k", 10, "nearest neighbours compared", type=types.positive_int),
        shared.data("text/JSONL/.npy data whose token counts are the frequencies (default: the checkpoint's own "
                    "validation stream)"),
        shared.tokens(65_536, "tokens counted for the frequencies"),
        Param("null_draws", 100, "draws of the within-frequency-bin permutation null", type=types.at_least(2))),
    compute=geometry,
    figures={"unembed": head_figure},
    summary=summarize,
    library=("analysis.readouts.head:head_geometry",),
    measures=(Measure("head", measure, reference=True),),
)


__all__ = ["SPEC", "geometry", "measure"]
