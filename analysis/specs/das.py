"""``das``: distributed alignment search of one causal variable, per layer and subspace rank, with its controls
(:mod:`analysis.causal.das`)."""

from __future__ import annotations

from analysis.specs import shared, types
from analysis.specs.base import Param, Result, Spec


def align(model, *, variable, bit, any_twin, position, layers, ranks, n_pairs, epochs, batch_size, lr, seed,
          all_pairs, no_controls, progress=False) -> Result:
    """The DAS table: one row per layer, rank, method and split."""
    from analysis.causal.das import das_sweep
    from analysis.causal.das_data import das_data

    data = das_data(model, variable, n_pairs, bit=bit, seed=seed, solved_only=not all_pairs,
                    twins="any" if any_twin else "list")
    df = das_sweep(model, data=data, layers=layers, ranks=ranks, position=position, epochs=epochs,
                   batch_size=batch_size, lr=lr, seed=seed, controls=not no_controls, progress=progress)
    return Result(tables={"das": df}, attrs={"n_layers": model.cfg.n_layers})


def das_figure(result: Result):
    from analysis.figures.das import das_figure as draw

    return draw(result.tables["das"], result.attrs["n_layers"], title=result.names[0])


def summarize(df) -> str:
    a = df.attrs
    test = df[df.split == "test"]
    lines = [f"DAS of {df.variable.iloc[0]} at the {df.position.iloc[0]} position: {a['n_pairs']} pairs "
             f"({a['n_pairs_solved']} of {a['n_pairs_drawn']} drawn solved), {a['n_train']} fitted / "
             f"{a['n_test']} held-out examples. Held-out interchange accuracy:"]
    for (layer, rank), g in test[test.method == "das"].groupby(["layer", "rank"]):
        row = g.iloc[0]
        extra = ""
        ctl = df[(df.layer == layer) & (df["rank"] == rank)]
        pick = {m: ctl[(ctl.method == m) & (ctl.split == s)].iia for m, s in
                (("random_init", "test"), ("placebo", "test"), ("arbitrary_labels", "train"))}
        if all(len(v) for v in pick.values()):
            extra = (f"  (init {float(pick['random_init'].iloc[0]):.2f}, placebo {float(pick['placebo'].iloc[0]):.2f}, "
                     f"arbitrary labels fitted {float(pick['arbitrary_labels'].iloc[0]):.2f})")
        lines.append(f"  {row.hook:>24s} rank {rank:>3d}: {row.iia:.2f} [{row.iia_lo:.2f}, {row.iia_hi:.2f}]{extra}")
    return "\n".join(lines)


SPEC = Spec(
    name="das", group="circuits", models="one",
    help="distributed alignment search (DAS) of a causal variable, with its controls",
    examples="""
  fixedid-analyze das --ckpt fixedid-demo/checkpoints/canonical --variable ioi --ranks 1,4
  fixedid-analyze das --ckpt fixedid-demo/checkpoints/gf2 --variable bit --bit 8 --layers 0,1
""",
    params=(
        Param("variable", "ioi", "ioi (the indirect object's name), agreement (the subject's number) or bit (one "
              "input-code bit of a copied token; give --bit)"),
        Param("bit", None, "the code bit of --variable bit (a column of the model's code)", type=int),
        Param("any_twin", False, "bit variable: let the bit-flipped twin be any token, not only a list word",
              switch=True),
        Param("position", "diff", "where to intervene: diff (the token where base and source differ) or last",
              choices=("diff", "last")),
        Param("layers", None, "comma-separated layers whose entering stream is intervened on; n_layers is the stream "
              "after the last block (default: all)", type=types.int_list),
        Param("ranks", (1, 4, 16), "comma-separated subspace ranks", type=types.positive_int_list),
        shared.n_pairs(64, "prompt pairs drawn (half are held out)", low=4),
        Param("epochs", 20, "passes over the fitted pairs", type=types.positive_int),
        Param("batch_size", 128, "examples per optimisation step (as TransformerLens's fit_das)",
              type=types.positive_int),
        Param("lr", 1e-2, "Adam learning rate", type=types.positive_float),
        shared.seed("seed of the pairs, the split, the bases and the controls"),
        Param("all_pairs", False, "keep pairs the model gets wrong (default: only pairs whose two prompts it answers "
              "right)", switch=True),
        Param("no_controls", False, "fit only the DAS subspace (no controls)", switch=True)),
    compute=align,
    figures={"das": das_figure},
    summary=lambda r: summarize(r.tables["das"]),
    library=("analysis.causal.das:das_sweep", "analysis.causal.das_data:das_data"),
)


__all__ = ["SPEC", "align"]
