"""The figure of an lm-eval run: accuracy per task, variants side by side, with 95% intervals and the study's
figure where it has one."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fixedid.data.synthetic import SyntheticLanguage

from analysis.figures.style import variant_colours


def headline_metric(task: str, metrics) -> str | None:
    """The metric a task is read by: the study's for its benchmarks, else ``acc``, else ``acc_norm``."""
    from analysis.evaluation.lmeval import STUDY_FIGURES

    if task in STUDY_FIGURES and STUDY_FIGURES[task][0] in set(metrics):
        return STUDY_FIGURES[task][0]
    return next((m for m in ("acc", "acc_norm", "exact_match") if m in set(metrics)), None)


def eval_figure(df, *, title: str | None = None):
    """Points with 95% intervals (1.96 x lm-eval's standard error over documents) for each task's headline metric,
    one colour per variant, dodged; a black bar marks the study's canonical figure for its benchmarks."""
    import matplotlib.pyplot as plt
    import numpy as np

    variants = list(dict.fromkeys(df.variant)) if "variant" in df else [None]
    tasks = [t for t in dict.fromkeys(df.task) if headline_metric(t, df[df.task == t].metric)]
    fig, ax = plt.subplots(figsize=(1.5 + 1.3 * len(tasks), 3.2), layout="constrained")
    width = 0.7 / max(1, len(variants))
    colours = variant_colours(v for v in variants if v is not None)
    labels = []
    for i, task in enumerate(tasks):
        metric = headline_metric(task, df[df.task == task].metric)
        labels.append(f"{task.removeprefix('fixedid_')}\n({metric})")
        for j, v in enumerate(variants):
            row = df[(df.task == task) & (df.metric == metric) & ((df.variant == v) if v is not None else True)]
            if row.empty:
                continue
            r = row.iloc[0]
            x = i + (j - (len(variants) - 1) / 2) * width
            err = 1.96 * r.stderr if np.isfinite(r.stderr) else 0
            ax.errorbar(x, r.value, yerr=err, fmt="o", capsize=2, color=colours.get(v, f"C{j}"),
                        label=v if i == 0 else None)
            if np.isfinite(r.study_canonical) and j == 0:
                ax.plot([i - 0.4, i + 0.4], [r.study_canonical] * 2, color="k", linewidth=1.2,
                        label="study (canonical, 1.7B)" if "study" not in str(ax.get_legend_handles_labels()[1])
                        else None)
    ax.set_xticks(range(len(tasks)), labels, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("score (95% interval over documents)")
    ax.grid(axis="y", color="0.9")
    ax.set_axisbelow(True)
    ax.legend(frameon=False, fontsize=7, loc="lower left")
    ax.set_title(title or "lm-eval, 0-shot", fontsize=10)
    return fig


#: The built-in language's tasks and controls, in its order (the behaviours' columns).
TASKS, CONTROLS = SyntheticLanguage.TASKS, SyntheticLanguage.CONTROLS


def task_columns(table: pd.DataFrame) -> list[str]:
    """The tasks of a behaviours table in the language's order, its controls last."""
    return [k for k in TASKS + CONTROLS if k in set(table.task)]


def behaviour_figure(table: pd.DataFrame):
    """Held-out accuracy per task and variant (a ``variant`` column, drawn in its order) with 95% intervals, chance
    marked and the controls set apart."""
    tasks = task_columns(table)
    controls = [k for k in tasks if k in CONTROLS]
    variants = list(dict.fromkeys(table.variant))
    fig, ax = plt.subplots(figsize=(6.5, 3.0))
    width = 0.8 / len(variants)
    colors = variant_colours(variants)
    for i, v in enumerate(variants):
        t = table[table.variant == v].set_index("task").loc[tasks]
        x = np.arange(len(tasks)) + (i - (len(variants) - 1) / 2) * width
        err = np.vstack([t.accuracy - t.accuracy_low, t.accuracy_high - t.accuracy])
        ax.bar(x, 100 * t.accuracy, width, yerr=100 * err, capsize=2, label=v, color=colors.get(v))
    ax.axhline(50, color="k", lw=0.8, ls="--")
    ax.text(len(tasks) - 0.5, 51, "chance", ha="right", va="bottom", fontsize=7)
    labels = {"induction_unlisted": "induction,\nunlisted words\n(control)"}
    ax.set_xticks(range(len(tasks)), [labels.get(k, k) for k in tasks], fontsize=8)
    if controls:  # the controls apart from the behaviours
        ax.axvline(len(tasks) - len(controls) - 0.5, color="0.5", lw=0.8, ls=":")
    ax.set_ylabel("held-out accuracy (%)")
    ax.set_ylim(0, 118)
    ax.set_yticks(range(0, 101, 20))
    n = int(table.n_pairs.min())
    what = "the three variants" if len(variants) == 3 else ", ".join(variants)
    ax.set_title(f"Behaviours of {what} ({n}+ pairs per task, 95% Wilson intervals)", fontsize=9)
    ax.legend(fontsize=7, frameon=False, ncol=min(len(variants), 4), loc="upper center")
    return fig
