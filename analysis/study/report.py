"""Over seeds: summaries with 95% intervals, paired comparisons between variants, the study's figures and report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fixedid.atomic import write_text_atomic

from analysis.errors import AnalysisError
from analysis.outputs import read_csv
from analysis.stats import crossed_mean, t_interval
from analysis.study.comparisons import POOLED, compare, recodings_of, variant_order, with_pooled
from analysis.study.sections import (BOUNDED, SECTIONS, _clip, _study_references, comparison_lines, matched_lines,
                                     similarity_lines, study_pairs, table_lines, circuit_lines)

#: The columns that name one measurement: analysis, metric and key.
KEYS = ["analysis", "metric", "key"]
#: The columns of a study's long-format measurement table (``measurements.csv``).
MEASUREMENT_COLUMNS = ["analysis", "metric", "key", "variant", "seed", "step", "value"]


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Per (analysis, metric, key, variant, step): ``n`` seeds, ``mean`` and its Student-t 95% interval
    (``lo``/``hi``), the ``seeds``; ``gf2 (pooled)`` (per seed the mean over trained recodings) where several were
    trained, its mean, ``n`` and interval over the seeds with every recoding measured, the recodings a random effect
    (:func:`analysis.stats.crossed_mean`; no interval with fewer than two such seeds or one recoding)."""
    rows = []
    df = with_pooled(df)
    df = df.assign(_o=df.variant.map({v: i for i, v in enumerate(variant_order(df.variant))})).sort_values(
        ["_o", "step"], kind="stable").drop(columns="_o")
    recs = recodings_of(df.variant)
    tables = {}  # per (analysis, metric, key, step): the [seeds, recodings] values of the pooled rows
    if POOLED in set(df.variant):
        wide = df[df.variant.isin(recs)].pivot_table(index=KEYS + ["step", "seed"], columns="variant",
                                                     values="value").reindex(columns=recs)
        tables = {k: t.to_numpy(float) for k, t in wide.groupby(level=list(range(len(KEYS) + 1)), sort=False)}
    for k, g in df.groupby(KEYS + ["variant", "step"], sort=False):
        m, lo, hi = t_interval(g.value.to_numpy(float))
        n = int(g.value.notna().sum())
        if k[3] == POOLED:  # recodings as a random effect (analysis.stats.crossed_mean)
            r = crossed_mean(tables.get(k[:3] + k[4:], np.empty((0, len(recs)))))
            n, m, lo, hi = r["n"], r["mean"], r["lo"], r["hi"]
        rows.append(dict(zip(KEYS + ["variant", "step"], k), n=n, mean=m, lo=lo, hi=hi,
                         seeds=",".join(map(str, sorted(g.seed)))))
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------------- figures
def _points(ax, x, values, colour, horizontal=False):
    if not len(values):
        return
    jitter = np.linspace(-0.12, 0.12, len(values)) if len(values) > 1 else np.zeros(1)
    if horizontal:
        ax.scatter(values, x + jitter, s=9, color=colour, alpha=0.45, linewidths=0, zorder=2)
    else:
        ax.scatter(x + jitter, values, s=9, color=colour, alpha=0.45, linewidths=0, zorder=2)


def _legend_and_title(fig, axes, title: str) -> None:
    """The variants' legend below the panels (never over the data; up to 5 a row): every variant drawn in any of
    ``axes`` once, in the study's order (a panel may lack some: bit flips have no learned variant), and the title,
    wrapped to the figure's width."""
    import textwrap

    seen = {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    labels = variant_order(seen)
    fig.legend([seen[v] for v in labels], labels, loc="outside lower center", fontsize=7, frameon=False,
               ncol=min(5, len(labels)))
    fig.suptitle("\n".join(textwrap.wrap(title, 115)), fontsize=9, x=0.02, ha="left")


def forest(df: pd.DataFrame, panels: list[tuple[str, str, str]], *, title: str, step=None):
    """One panel per ``(analysis, metric, label)``: a row per key, each variant's mean with its 95% interval
    (bar) and its per-seed values (dots)."""
    from analysis.figures.style import subplots, variant_colours

    panels = [p for p in panels if not df[(df.analysis == p[0]) & (df.metric == p[1])].empty]
    if not panels:
        return None
    step = df.step.max() if step is None else step
    variants = variant_order(df.variant)
    colours = variant_colours(variants)
    heights = [max(1, df[(df.analysis == a) & (df.metric == m)].key.nunique()) for a, m, _ in panels]
    fig, axes = subplots(2, height=0.9 + 0.28 * sum(heights) + 0.35 * len(panels), nrows=len(panels),
                         height_ratios=heights)
    for ax, (analysis, metric, label) in zip(axes[:, 0], panels):
        d = df[(df.analysis == analysis) & (df.metric == metric) & (df.step == step)]
        keys = list(dict.fromkeys(d.key))
        vs = [v for v in variants if v in set(d.variant)]
        width = 0.7 / max(1, len(vs))
        for j, v in enumerate(vs):
            for i, key in enumerate(keys):
                vals = d[(d.variant == v) & (d.key == key)].value.to_numpy(float)
                if not len(vals):
                    continue
                y = i + (j - (len(vs) - 1) / 2) * width
                m, lo, hi = t_interval(vals)
                lo, hi = _clip(metric, lo, hi)
                if np.isfinite(lo):
                    ax.plot([lo, hi], [y, y], color=colours[v], linewidth=2, zorder=3)
                ax.plot([m], [y], marker="o", color=colours[v], markersize=4, zorder=4,
                        label=v if i == 0 else None)
                _points(ax, np.array(y), vals, colours[v], horizontal=True)
        ax.set_yticks(range(len(keys)), keys, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(label, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", color="0.9")
        ax.set_axisbelow(True)
    _legend_and_title(fig, axes, title)
    return fig


def depth_figure(df: pd.DataFrame, analysis: str, metric: str, *, ylabel: str, title: str, control=None):
    """Lines over hook points (keys ``group@hook``, one panel per group): mean and 95% band per variant, per-seed
    dots, and the mean of ``control`` dashed (a metric name, or several: the first a group has)."""
    from analysis.figures.probes import GROUP_LABELS
    from analysis.figures.style import short_hook, subplots, variant_colours

    d = df[(df.analysis == analysis) & (df.step == df[df.analysis == analysis].step.max())]
    if d.empty:
        return None
    d = d.assign(group=d.key.str.split("@").str[0], hook=d.key.str.split("@").str[1])
    groups = list(dict.fromkeys(d[d.metric == metric].group))  # the groups that have the metric (and its hooks)
    if not groups:
        return None
    colours = variant_colours(variant_order(d.variant))
    fig, axes = subplots(2, height=2.5, ncols=len(groups), sharey=True)
    for ax, group in zip(axes[0], groups):
        g = d[d.group == group]
        hooks = list(dict.fromkeys(g[g.metric == metric].hook))
        for v in variant_order(g.variant):
            stat = [t_interval(g[(g.variant == v) & (g.hook == h) & (g.metric == metric)].value.to_numpy(float))
                    for h in hooks]
            m, lo, hi = (np.array(x) for x in zip(*stat))
            if metric in BOUNDED:
                lo, hi = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
            x = np.arange(len(hooks))
            ax.plot(x, m, marker="o", markersize=3, color=colours[v], label=v)
            ax.fill_between(x, lo, hi, color=colours[v], alpha=0.2, linewidth=0)
            for i, h in enumerate(hooks):
                _points(ax, np.array(float(i)), g[(g.variant == v) & (g.hook == h) & (g.metric == metric)].value,
                        colours[v])
            ref = next((c for c in ((control,) if isinstance(control, str) else control or ())
                        if (g.metric == c).any()), None)
            if ref:
                c = [g[(g.variant == v) & (g.hook == h) & (g.metric == ref)].value.mean() for h in hooks]
                ax.plot(x, c, linestyle="--", color=colours[v], linewidth=0.9, alpha=0.8)
        ax.set_xticks(range(len(hooks)), [short_hook(h) for h in hooks], rotation=30, ha="right", fontsize=7)
        ax.set_title({**GROUP_LABELS, "lens": "logit lens", "cka": "same hook point",
                      "own_code_bit": "the model's own code column"}.get(group, group), fontsize=8)
        ax.grid(color="0.9")
    axes[0, 0].set_ylabel(ylabel, fontsize=8)
    _legend_and_title(fig, axes, title)
    return fig


def training_figure(df: pd.DataFrame):
    """Behaviours and validation loss across the kept steps: mean and 95% band per variant, per-seed dots."""
    from analysis.figures.style import subplots, variant_colours

    steps = sorted(df.step.unique())
    if len(steps) < 2:
        return None
    b = df[(df.analysis == "behaviours") & (df.metric == "accuracy")]
    panels = [("behaviours", "accuracy", t, f"{t} accuracy") for t in dict.fromkeys(b.key)]
    panels.append(("loss", "val_loss", "validation", "validation loss (nats/token)"))
    colours = variant_colours(variant_order(df.variant))
    fig, axes = subplots(2, height=2.3, ncols=len(panels))
    for ax, (analysis, metric, key, label) in zip(axes[0], panels):
        d = df[(df.analysis == analysis) & (df.metric == metric) & (df.key == key)]
        for v in variant_order(d.variant):
            g = d[d.variant == v]
            xs = sorted(g.step.unique())
            m, lo, hi = (np.array(x) for x in zip(*[t_interval(g[g.step == s].value.to_numpy(float)) for s in xs]))
            if metric in BOUNDED:
                lo, hi = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
            ax.plot(xs, m, marker="o", markersize=3, color=colours[v], label=v)
            ax.fill_between(xs, lo, hi, color=colours[v], alpha=0.2, linewidth=0)
            ax.scatter(g.step, g.value, s=7, color=colours[v], alpha=0.4, linewidths=0)
        ax.set_title(label, fontsize=8)
        ax.set_xlabel("training step", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(color="0.9")
    _legend_and_title(fig, axes,
                      "across training (kept snapshots and the final step; bands: 95% interval over seeds)")
    return fig


def comparison_figure(comp: pd.DataFrame):
    """Each headline paired difference (a - b over seeds) in units of its own 95% half-width (t x standard error),
    so that the band [-1, 1] holds the differences whose interval includes 0: a point outside it (filled) has an
    interval that excludes 0 (unadjusted; the report's primary family is Holm-adjusted). Units differ between
    rows (accuracy, nats); the report gives the differences themselves."""
    from analysis.figures.style import subplots

    d = study_pairs(comp)
    d = d[d.apply(lambda r: (r.analysis, r.metric) in HEADLINE, axis=1) & (d.n >= 2)] if len(d) else d
    if d.empty:
        return None
    d = d[d.step == d.step.max()]
    half = (d.hi - d.lo) / 2
    z = np.where(half > 0, d["diff"] / half.where(half > 0, 1), np.sign(d["diff"]) * np.inf)
    d = d.assign(pair=d.a + " - " + d.b, label=d.analysis + ": " + d.metric + " " + d.key, z=np.clip(z, -4, 4),
                 clipped=np.abs(z) > 4)
    pairs = list(dict.fromkeys(d.pair))
    labels = list(dict.fromkeys(d.label))
    fig, axes = subplots(2, height=1.0 + 0.2 * len(labels), ncols=len(pairs), sharey=True, sharex=True)
    for ax, pair in zip(axes[0], pairs):
        g = d[d.pair == pair].set_index("label")
        ax.axvspan(-1, 1, color="0.92", linewidth=0)
        ax.axvline(0, color="0.5", linewidth=0.8)
        for i, lab in enumerate(labels):
            if lab not in g.index:
                continue
            r = g.loc[lab]
            marker = (">" if r.z > 0 else "<") if r.clipped else "o"
            ax.plot([r.z], [i], marker=marker, markersize=4, color="k", markerfacecolor="k" if r.exceeds else "w")
        ax.set_title(pair, fontsize=7, rotation=90, va="bottom")  # upright titles overlap beyond ~6 columns
        ax.set_xlim(-4.4, 4.4)
        ax.set_xticks([-4, 0, 4])
        ax.tick_params(labelsize=6)
    axes[0, 0].set_yticks(range(len(labels)), labels, fontsize=6)
    axes[0, 0].invert_yaxis()
    fig.supxlabel("paired difference / its 95% half-width, t x standard error over seeds (gf2 (pooled): seeds and "
                  "recodings random) (grey: interval includes 0; arrows: beyond 4)", fontsize=7)
    fig.suptitle("differences between variants over seeds (filled: 95% interval excludes 0, unadjusted)",
                 fontsize=9, x=0.02, ha="left")
    return fig


#: The comparisons the figure and the report lead with.
HEADLINE = {("behaviours", "accuracy"), ("eval", "acc"), ("loss", "val_loss"), ("head", "nn_overlap_excess"),
            ("interventions", "bitflip_delta_loss"), ("interventions", "noise_delta_loss"),
            ("recoding", "delta_loss_at_hamming"), ("erasure", "minus_placebo")}


def study_figures(df: pd.DataFrame, sim: pd.DataFrame, comp: pd.DataFrame, references=None) -> dict:
    """``{stem: figure or None}``: every figure of a study, from its measurements (``df``, one variant per row),
    the canonical-vs-gf2 similarity rows (``sim``), the paired comparisons and the similarity references."""
    from analysis.figures.similarity import references_figure

    refs = _study_references(references) if references is not None else None
    return {
        "behaviours_eval": forest(df, [("behaviours", "accuracy", "held-out accuracy (built-in tasks)"),
                                       ("eval", "acc", "lm-eval accuracy"),
                                       ("loss", "val_loss", "validation loss (nats/token)")],
                                  title="behaviours, lm-eval and loss at the final step (mean, 95% interval over "
                                        "seeds, seeds as dots)"),
        "interventions": forest(df, [("interventions", "bitflip_delta_loss", "loss change, one code bit flipped"),
                                     ("interventions", "noise_delta_loss", "loss change, input noise"),
                                     ("recoding", "delta_loss_at_hamming", "loss change under transvections at "
                                                                          "matched Hamming distance"),
                                     ("erasure", "minus_placebo", "loss change, LEACE minus its placebo "
                                                                  "(held-out sequences, nats)"),
                                     ("patching", "final", "IOI info restored at the final position"),
                                     ("context", "loss", "loss with the context limited to k tokens (window mask / "
                                                         "crop)"),
                                     ("context", "ablation_delta_loss", "loss increase, attention/MLP output from "
                                                                        "other windows (nats)")],
                                title="interventions, recoding, erasure, patching (final step; 95% interval over "
                                      "seeds)"),
        "probes": depth_figure(df, "probes", "score", ylabel="held-out accuracy", control=("control", "lexical"),
                               title="probes across depth, held-out sequences (dashed: the control task for id bits, "
                                     "each type's majority label for contextual labels; band: 95% interval over "
                                     "seeds)"),
        "probes_types": depth_figure(df, "probes", "score_types", ylabel="held-out accuracy (unseen token types)",
                                     control="majority_types",
                                     title="probes of id bits on token types never seen in training (dashed: the "
                                           "majority baseline; band: 95% interval over seeds)"),
        "lens": depth_figure(df, "lens", "accuracy", ylabel="next-token accuracy of the lens",
                             title="logit lens: the final norm and head at each depth (band: 95% interval over "
                                   "seeds)"),
        "erasure": depth_figure(df, "erasure", "minus_placebo", ylabel="loss change, LEACE - placebo (nats)",
                                title="erasure by depth: LEACE minus a matched placebo (band: 95% interval over "
                                      "seeds)"),
        "head": forest(df, [("head", "logfreq_r2", "held-out R^2 of head rows from log-frequency alone"),
                            ("head", "bits_r2", "held-out R^2 of head rows from code bits"),
                            ("head", "bits_partial_r2", "partial R^2 of the bits beyond log-frequency"),
                            ("head", "debiased_cka_to_learned_input", "debiased CKA, head rows vs a learned input "
                                                                      "table of another seed"),
                            ("head", "nn_overlap_excess", "neighbour overlap with another seed's learned table, "
                                                          "minus its frequency-binned null")],
                       title="the output head's geometry (final step; 95% interval over seeds)"),
        "similarity": (references_figure(refs) if refs is not None and len(refs) else
                       depth_figure(sim.assign(key="cka@" + sim.key), "similarity", "debiased",
                                    ylabel="debiased linear CKA",
                                    title="canonical vs gf2, same hook point (95% interval over seeds)")),
        "training": training_figure(df),
        "comparisons": comparison_figure(comp),
    }


def draw_figures(df: pd.DataFrame, out_dir, comp: pd.DataFrame | None = None, references=None) -> list[str]:
    """Every figure of a study (:func:`~analysis.study.report.study_figures`) from its measurement table (and
    ``references``, the similarity table of :func:`analysis.study.pipeline.measure_similarity`); returns the stems
    written (PNG + PDF each)."""
    from analysis.figures.style import save_figure

    missing = set(MEASUREMENT_COLUMNS) - set(df.columns)
    if missing:
        raise AnalysisError(f"the measurement table lacks the column(s) {sorted(missing)}")
    pair = df.variant.str.contains(" vs ")
    figures = study_figures(df[~pair], df[pair], compare(df[~pair]) if comp is None else comp, references)
    written = []
    for stem, fig in figures.items():
        if fig is not None:
            save_figure(fig, out_dir, stem)
            written.append(stem)
    return written


# ------------------------------------------------------------------------------------------------------ report
def write_report(out: Path, df: pd.DataFrame, summary: pd.DataFrame, comp: pd.DataFrame, figures: list[str],
                 meta: dict, controls: pd.DataFrame | None = None, reading: pd.DataFrame | None = None,
                 circuits: pd.DataFrame | None = None, claims: pd.DataFrame | None = None) -> Path:
    """Write ``out/report.md``: the claims (``claims``: :func:`~analysis.study.claims.claims_table`, with the rules
    stated at ``meta["alpha"]``), every analysis with its means and 95% intervals over seeds, the paired comparisons,
    the controls and the reading. Returns its path."""
    from analysis.study.claims import claim_lines
    from analysis.study.controls import control_lines, seeds_statement

    controls = pd.DataFrame() if controls is None else controls
    final = int(df.step.max())
    seeds = sorted(df.seed.unique())
    lines = ["# Study report", "",
             f"Seeds {', '.join(map(str, seeds))} (initialisation and data order); GF(2) recodings trained: "
             f"{', '.join(map(str, meta.get('gf2_seeds', [0])))}; {final} training steps"
             + (f", snapshots kept at {meta['keep']}" if meta.get("keep") else "") + ".", "",
             "Every cell: mean over seeds [95% interval: mean +- t x standard error over seeds; for accuracies "
             "clipped to 0-100%]. Every comparison after the claims: the mean paired per-seed difference [its 95% t "
             "interval], the paired t test's p and the exact sign-flip p, unadjusted and exploratory: a description, "
             "not a finding. Differences that are identical on every seed are never counted as evidence. `gf2 "
             "(pooled)` is the mean over seeds and every trained recoding, with the recodings as a random effect (its "
             "interval and p from a two-way random-effects ANOVA of the seeds x recodings table: for recodings in "
             "general, wide with two or three of them); the claims test each recoding on its own. The per-seed values are in measurements.csv and as dots in the figures.", ""]
    lines += claim_lines(pd.DataFrame() if claims is None else claims,
                         meta.get("claims_source", "the study's claims file"), meta.get("claims_note"),
                         meta.get("alpha"), df[~df.variant.str.contains(" vs ")])
    for title, analysis, metric, pct, text in SECTIONS:
        table = table_lines(summary, analysis, metric, final, pct)
        if not table:
            continue
        lines += [f"## {title}", "", text, ""] + table
        if (analysis, metric) in HEADLINE or analysis == "behaviours":
            lines += comparison_lines(comp, analysis, metric, final)
    if "training" in figures:
        lines += ["## Across training", "", "Accuracy on the built-in tasks at each kept snapshot:", ""]
        for step in sorted(df.step.unique()):
            lines += [f"Step {step}:", ""] + table_lines(summary, "behaviours", "accuracy", step, True)
        lines += ["![across training](figures/training.png)", ""]
    lines += similarity_lines(reading)
    lines += circuit_lines(circuits)
    lines += matched_lines(comp, final)
    lines += control_lines(controls)
    lines += ["## Figures", ""] + [f"![{f}](figures/{f}.png)" for f in figures] + [""]
    capacity = ("The parameter-matched control answers whether a gap is capacity; the other controls each remove "
                "one further explanation, and none removes all at once." if "canonical-matched" in set(df.variant)
                else "The fixed-code variants have fewer trainable parameters than the learned one, so a gap mixes "
                "the interface with capacity (train canonical-matched to separate them).")
    lines += ["## What this does not show", "", seeds_statement(len(seeds)), "",
              capacity + " The built-in language is small and synthetic: these are tests of whether mechanisms "
              "form, not of general language ability.", ""]
    return write_text_atomic(out / "report.md", "\n".join(lines))


def write_results(df: pd.DataFrame, out, meta: dict | None = None, items: pd.DataFrame | None = None,
                  similarity=(None, None), circuits: pd.DataFrame | None = None, claims=None) -> Path:
    """``measurements.csv``, ``summary.csv``, ``comparisons.csv``, ``claims.csv``, ``controls.csv`` (when controls
    were trained), ``figures/`` and ``report.md`` in ``out``; ``claims``: a claims file (default
    :data:`analysis.study.claims.DEFAULT_CLAIMS`) or a list of :class:`~analysis.study.claims.Claim`; ``items``:
    per-item values (the behaviours' per-prompt scores) for
    the bootstrap over seeds and prompts; ``similarity``: ``(references, reading)`` of
    :func:`analysis.study.report.load_similarity`; ``circuits``: the circuit overlap's reading
    (:func:`~analysis.study.report.load_circuits`)."""
    from analysis.outputs import write_csv

    from analysis.study.claims import claims_alpha, claims_table
    from analysis.study.controls import control_table

    out = Path(out)
    pair = df.variant.str.contains(" vs ")
    summary, comp, controls = summarise(df), compare(df[~pair], items), control_table(df)
    claim_table = claims_table(df[~pair], claims)
    write_csv(df, out / "measurements.csv")
    write_csv(summary, out / "summary.csv")
    write_csv(comp, out / "comparisons.csv")
    write_csv(claim_table, out / "claims.csv")
    if not controls.empty:
        write_csv(controls, out / "controls.csv")
    references, reading = similarity
    figures = draw_figures(df, out / "figures", comp, references)
    meta = {"alpha": claims_alpha(claims), **(meta or {})}
    return write_report(out, df, summary, comp, figures, meta, controls, reading, circuits, claim_table)


def load_similarity(out: Path):
    """``(references, reading)`` of a study directory's last similarity measurement
    (:func:`analysis.study.pipeline.measure_similarity`), or ``(None, None)``."""
    found = sorted(Path(out).glob("similarity/step*/reading.csv"), key=lambda p: int(p.parent.name[4:]))
    if not found:
        return None, None
    return read_csv(found[-1].parent / "references.csv"), read_csv(found[-1])


def load_circuits(out: Path):
    """The reading of a study directory's last circuit overlap (``similarity/step<N>/circuits_reading.csv``, written
    by :func:`analysis.study.pipeline.measure_similarity`), or None."""
    found = sorted(Path(out).glob("similarity/step*/circuits_reading.csv"), key=lambda p: int(p.parent.name[4:]))
    return read_csv(found[-1]) if found else None


def read_measurements(results) -> pd.DataFrame:
    """A study directory's ``measurements.csv`` (:data:`MEASUREMENT_COLUMNS`); one that is missing, unreadable, empty
    or of other columns raises :class:`~analysis.errors.AnalysisError` saying so."""
    path = Path(results) / "measurements.csv"
    if not path.is_file():
        raise AnalysisError(f"{results} has no measurements.csv: point at a study directory written by fixedid-study")
    try:
        df = read_csv(path, dtype={"key": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise AnalysisError(f"{path} is not a readable CSV: {e}") from None
    if df.empty:
        raise AnalysisError(f"{path} has no rows")
    if list(df.columns) != MEASUREMENT_COLUMNS:
        raise AnalysisError(f"{path} has columns {list(df.columns)}, not {', '.join(MEASUREMENT_COLUMNS)}")
    return df


def redraw(results) -> list[Path]:
    """Redraw every figure of a study directory from its ``measurements.csv`` (no model is loaded)."""
    results = Path(results)
    df = read_measurements(results)
    stems = draw_figures(df, results / "figures", references=load_similarity(results)[0])
    return [results / "figures" / f"{s}.png" for s in stems]


__all__ = ["summarise", "compare", "study_figures", "draw_figures", "write_results", "redraw", "read_measurements",
           "load_similarity", "load_circuits", "forest", "depth_figure", "training_figure", "comparison_figure"]
