"""The main job on the embedded default: three tiny variants, their behaviours, an IOI patching study, a report."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fixedid.atomic import write_text_atomic

from analysis.evaluation.behaviours import CONTROLS, TASKS
from analysis.demo.bitflip import TOKENS, bitflip_reading, bitflip_tables
from analysis.demo.probes import probe_reading, probe_tables
from analysis.demo.recoding import recoding_reading, recoding_table
from analysis.figures.recoding import disturbance_plot, recoding_plot
from analysis.figures.evaluation import task_columns
from analysis.figures.style import save_figure
from analysis.figures.patching import side_by_side
from analysis.outputs import check_out, write_csv
from analysis.figures.interventions import bit_layer_figure, effect_plot, flip_split_plot, noise_decode_plot
from analysis.figures.probes import probe_figure
from analysis.causal.flow import information_flow
from analysis.loading import load
from analysis.causal.patching import MIN_GAP
from analysis.specs import get_spec, run_spec
from analysis.tasks import task_pairs
from analysis.variants import VARIANTS, cache_root, ensure_variants

N_PAIRS = 16  # IOI pairs patched
N_EVAL = 64  # held-out pairs per task for the behaviours table
HAS_BEHAVIOUR = 0.9  # accuracy from which a variant is said to have a behaviour



def reading(variant: str, b: pd.DataFrame, df: pd.DataFrame) -> str:
    """A few sentences on one variant's IOI map, written from the measured numbers only."""
    ioi = b.set_index("task").loc["ioi"]
    a = df.attrs
    gap = a["raw_clean"] - a["raw_corrupt"]
    head = (f"**{variant}** prefers the indirect object in {100 * ioi.accuracy:.0f}% of held-out IOI prompts (mean "
            f"logit difference {ioi.logit_diff:+.2f}); on the patched pairs the clean and corrupted logit differences "
            f"are {a['raw_clean']:+.2f} and {a['raw_corrupt']:+.2f}.")
    if ioi.accuracy < HAS_BEHAVIOUR or abs(gap) < MIN_GAP:
        return head + (f" Below {100 * HAS_BEHAVIOUR:.0f}% accuracy (or with a clean-corrupt gap under {MIN_GAP} "
                       "logits) the map is not read here as a mechanism.")
    toks = a["str_tokens"]
    flow = information_flow(df)
    where = ", ".join(f"{p} ({toks[p]!r})" for p in flow.source_positions)
    s = (f" The prompts differ at position {where}; entering layer 0 a patch there restores the clean behaviour by "
         f"construction ({flow.source[0]:.2f}).")
    if flow.moved_at is None:
        s += (f" Entering the last block it still restores {flow.source[-1]:.2f} there against "
              f"{flow.final[-1]:.2f} at the final position: the last block moves the information.")
    else:
        m = flow.moved_at
        s += (f" The information has moved to the final position by layer {m}: entering it, a final-position patch "
              f"restores {flow.final[m]:.2f} and the differing position {flow.source[m]:.2f}"
              + (f" (at layer {m - 1}: {flow.final[m - 1]:.2f} and {flow.source[m - 1]:.2f})." if m else "."))
    if flow.elsewhere.max() > 0.25:
        lay = int(flow.elsewhere.argmax())
        s += f" Some passes through other positions (up to {flow.elsewhere.max():.2f} entering layer {lay})."
    return head + s


def write_report(out: Path, run_dir: Path, table: pd.DataFrame, results: dict, pairs,
                 recoding: pd.DataFrame, bitflips: list[str], probes: list[str], circuits: list[str]) -> Path:
    """Write ``out/report.md``: the behaviours, the IOI patching study, recoding, bit flips, probes and circuits, each
    with a reading generated from its numbers. Returns its path."""
    toks = next(iter(results.values())).attrs["str_tokens"]
    columns = task_columns(table)
    ex = pairs.texts[0]
    lines = ["# The three input interfaces on the built-in language", "",
             f"Models: the `tiny` variants in `{run_dir}` (one recipe, one seed, one data order; only the input "
             "interface differs).", "", "## Behaviours", "",
             f"Held-out prompts of each task ({N_EVAL} per task): a prompt counts as correct when the answer's logit "
             "beats the wrong answer's (chance is 50%; a unigram or bigram model of the same training text scores "
             "at chance on every task).", "",
             "| variant | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for v in VARIANTS:
        t = table[table.variant == v].set_index("task")
        lines.append(f"| {v} | " + " | ".join(f"{100 * t.loc[k, 'accuracy']:.0f}% ({t.loc[k, 'logit_diff']:+.1f})"
                                               for k in columns) + " |")
    lines += ["", "Cells: accuracy (mean logit difference answer - wrong)."]
    if "induction_unlisted" in columns:
        lines += ["", "`induction_unlisted` is a control, not a behaviour: the induction prompts with lists of the "
                  "words no training list uses (the training lists draw their words from a pool of 57). A model that "
                  "copies any word scores there as on `induction`; one that copies only the pool's words scores at "
                  "chance, and a circuit found on `induction` is then the pool's."]
    lines += ["", "![behaviours](behaviours.png)", ""]
    have = {k: [v for v in VARIANTS if table[(table.variant == v) & (table.task == k)].accuracy.item()
                >= HAS_BEHAVIOUR] for k in TASKS}
    for k in TASKS:
        who = have[k]
        lines.append(f"- {k}: " + (f"all three variants reach {100 * HAS_BEHAVIOUR:.0f}%" if len(who) == 3 else
                                   f"at or above {100 * HAS_BEHAVIOUR:.0f}%: {', '.join(who) if who else 'none'}"))
    if "induction_unlisted" in columns:
        c = table[table.task == "induction_unlisted"].set_index("variant")
        chance = [v for v in VARIANTS if c.loc[v, "accuracy_low"] <= 0.5 <= c.loc[v, "accuracy_high"]]
        accs = ", ".join(f"{v} {100 * c.loc[v, 'accuracy']:.0f}%" for v in VARIANTS)
        lines.append(f"- induction_unlisted (the control): {accs}; at chance (the 95% interval holds 50%): "
                     f"{', '.join(chance) if chance else 'none'}. A variant with induction but at chance here copies "
                     "only the pool's words")
    lines += ["", "## IOI activation patching", "",
              f"{len(pairs)} clean/corrupt pairs of {len(toks)} tokens, e.g.", "",
              f"- clean: `{ex['clean']}` -> ` {ex['answer']}`", f"- corrupt: `{ex['corrupt']}` (the second subject "
              "becomes the indirect object, so the answer flips)", "",
              "Method: activation patching, denoising - the clean residual stream before each block, one position at "
              "a time, is written into the corrupted run; the metric is the logit difference (IO - S) normalised so "
              "the corrupted run scores 0 and the clean run 1 (white: no effect).", "",
              "![Residual-stream patching, side by side](ioi_resid_pre.png)", ""]
    lines += [reading(v, table[table.variant == v], df) + "\n" for v, df in results.items()]
    lines += circuits
    lines += recoding_reading(recoding, hamming_figure="recoding_hamming.png")
    lines += bitflips
    lines += probes
    lines += ["## What this does not show", "",
              "Positions before the second subject are identical in the two prompts, so patching them is a no-op by "
              "construction (white columns). One seed and one tiny scale per variant: differences between the "
              "variants are not tested over seeds here (`fixedid-study` measures every analysis over "
              "seeds with intervals and paired tests; `python experiments/benchmarks/behaviours.py` the behaviours "
              "over seeds 0-2 and trained recodings), and the fixed-code variants have fewer trainable parameters "
              "than the learned one (no capacity reallocation). Patching one site at a time misses redundant routes; "
              "`fixedid-analyze patching --mode noise` probes necessity rather than sufficiency.", ""]
    return write_text_atomic(out / "report.md", "\n".join(lines))


def _circuits_section(models: dict, pairs, out: Path) -> list[str]:
    """Each variant's IOI circuit: its tables and figures under ``out``, and the report's lines."""
    from analysis.demo.circuits import circuit_csv, circuit_reading, circuit_tables
    from analysis.figures.attention import attention_figure
    from analysis.figures.circuit_graph import circuit_figure, faithfulness_figure
    from analysis.readouts.attention import attention_patterns

    tables = circuit_tables(models, pairs)
    for name, df in circuit_csv(tables).items():
        write_csv(df, out / f"circuit_{name}.csv")
    save_figure(faithfulness_figure({v: t["curve"] for v, t in tables.items()}), out, "circuit_faithfulness")
    figures = {"curve": "circuit_faithfulness.png", "graph": {}, "attention": {}}
    for v, t in tables.items():
        m = models[v]
        save_figure(circuit_figure(t["kept"], m.cfg.n_layers, m.cfg.n_heads,
                                   title=f"{v}: the top {len(t['kept'])} IOI edges (recovered "
                                         f"{t['checks'].attrs['recovered']:.2f})"), out, f"circuit_{v}")
        figures["graph"][v] = f"circuit_{v}.png"
        if t["key_heads"]:
            patterns = {v: attention_patterns(m, pairs.texts[0]["clean"])}
            save_figure(attention_figure(patterns, heads=t["key_heads"], title=f"{v}: where the circuit's key "
                                         "heads attend (first clean IOI prompt)"), out, f"circuit_heads_{v}")
            figures["attention"][v] = f"circuit_heads_{v}.png"
    return circuit_reading(tables, figures)


def check_demo_out(out: Path, overwrite: bool = False) -> None:
    """Refuse an ``--out`` that holds something other than an earlier demo's output (its ``report.md`` and
    ``behaviours.csv``), unless ``overwrite``: rerunning the demo replaces its own results, never another run's."""
    earlier = (out / "report.md").is_file() and (out / "behaviours.csv").is_file()
    check_out(out, overwrite=overwrite or earlier)


def link_checkpoints(run_dir: Path, out: Path) -> Path:
    """``out/checkpoints/<variant>``: a symbolic link to each trained variant in the cache (a copy of its files,
    without its snapshots, where the file system has no links), put in place by a rename; returns
    ``out/checkpoints``."""
    import os
    import shutil

    where = out / "checkpoints"
    where.mkdir(parents=True, exist_ok=True)
    for v in VARIANTS:
        target, dest, tmp = (run_dir / v).resolve(), where / v, where / f".{v}.new"
        if tmp.is_symlink() or tmp.is_file():
            tmp.unlink()
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.symlink_to(target, target_is_directory=True)
        except OSError:
            shutil.copytree(target, tmp, ignore=shutil.ignore_patterns("steps"))
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    return where


def _behaviours(models: dict):
    """The behaviours analysis of every variant (its table, the variant first, and its figure), controls included."""
    return run_spec(get_spec("behaviours"), models, tasks=TASKS + CONTROLS, n=N_EVAL)


def _patching(models: dict) -> dict:
    """Each variant's IOI activation patching of the residual stream, with the patching analysis's defaults (the
    same pairs for all: one tokenizer)."""
    spec = get_spec("patching")
    return {v: run_spec(spec, {v: m}, task="ioi", n_pairs=N_PAIRS, seed=0, progress=True, draw=False)
            .tables["patching"] for v, m in models.items()}


def _write_patching(out: Path, behaviours, results: dict) -> None:
    """The behaviours and IOI patching CSVs (with the information flow where the pairs separate clean from corrupt)
    and their figures."""
    table = behaviours.tables["behaviours"]
    tidy = pd.concat([df.assign(variant=v) for v, df in results.items()], ignore_index=True)
    flows = []
    for v, df in results.items():
        if abs(df.attrs["raw_clean"] - df.attrs["raw_corrupt"]) >= MIN_GAP:
            flows.append(information_flow(df).to_frame().assign(variant=v))
    write_csv(table, out / "behaviours.csv")
    write_csv(tidy[["variant", "site", "layer", "pos", "head", "value"]], out / "ioi_patching.csv")
    if flows:
        write_csv(pd.concat(flows, ignore_index=True)[["variant", "layer", "source", "final", "elsewhere"]],
                  out / "ioi_flow.csv")
    save_figure(behaviours.figures["behaviours"], out, "behaviours")
    ioi = table[table.task == "ioi"].set_index("variant")
    titles = {v: f"{v} (IOI {100 * ioi.loc[v, 'accuracy']:.0f}%)" for v in VARIANTS}
    save_figure(side_by_side(results, titles=titles, suptitle="IOI: clean residual stream patched into the "
                             "corrupted run (1 = clean behaviour restored)"), out, "ioi_resid_pre")


def _recoding_section(models: dict, out: Path) -> pd.DataFrame:
    """The recoding table, its CSV and figures."""
    recoding = recoding_table(models)
    write_csv(recoding, out / "recoding.csv")
    save_figure(recoding_plot(recoding[recoding.family == "transvection"],
                              title="Fixed-code variants fed their code through k random transvections"),
                out, "recoding")
    save_figure(disturbance_plot(recoding), out, "recoding_hamming")
    return recoding


def _bitflip_section(models: dict, pairs, out: Path):
    """``(flips, noise, maps, split)``: the bit-flip, input-noise and bit-by-layer tables and the flip split (None
    without one), with their CSVs and figures."""
    flips, noise, maps = bitflip_tables(models, pairs)
    split = pd.DataFrame(flips.attrs["split"]) if flips.attrs.get("split") else None
    write_csv(flips, out / "bitflips.csv")
    write_csv(noise, out / "input_noise.csv")
    save_figure(noise_decode_plot({v: g for v, g in noise.groupby("variant", sort=False)}), out, "input_noise")
    if split is not None and len(split):
        write_csv(split, out / "flip_split.csv")
        save_figure(flip_split_plot(split), out, "flip_split")
    write_csv(pd.concat([d.assign(variant=v) for v, d in maps.items()], ignore_index=True), out / "bit_layer.csv")
    save_figure(effect_plot({v: g for v, g in flips.groupby("variant", sort=False)},
                            title=f"One code bit flipped for every token ({TOKENS:,} validation tokens)"),
                out, "bitflips")
    save_figure(bit_layer_figure(maps), out, "bit_layer")
    return flips, noise, maps, split


def _probes_section(models: dict, out: Path) -> pd.DataFrame:
    """The probe table, its CSV and figure."""
    probes = probe_tables(models)
    write_csv(probes, out / "probes.csv")
    save_figure(probe_figure(probes), out, "probes")
    return probes


def _print_summary(table: pd.DataFrame, report, out: Path, checkpoints: Path) -> None:
    """Each variant's task accuracies and where the report and checkpoints are."""
    for v in VARIANTS:
        t = table[table.variant == v].set_index("task")
        print(f"{v:>9}: " + ", ".join(f"{k} {100 * t.loc[k, 'accuracy']:.0f}%" for k in TASKS))
    print(f"wrote {report} with its figures and CSVs in {out}")
    print(f"the three checkpoints: {checkpoints}/{{{','.join(VARIANTS)}}} (try: fixedid-analyze patching --ckpt "
          f"{checkpoints / 'canonical'} --task ioi)")


def run_demo(out: Path, *, overwrite: bool = False, cache=None, config=None) -> int:
    """Train (or reuse) the three variants (``config``, default ``tiny``, cached under ``cache``), measure them,
    write the report and link the checkpoints in ``out``/checkpoints."""
    out = Path(out)
    check_demo_out(out, overwrite)
    run_dir = ensure_variants(config or "tiny", cache_root(cache))
    checkpoints = link_checkpoints(run_dir, out)
    models = {v: load(run_dir / v) for v in VARIANTS}
    behaviours = _behaviours(models)
    table = behaviours.tables["behaviours"]
    pairs = task_pairs(models["canonical"], "ioi", N_PAIRS, seed=0)  # one tokenizer, so the same pairs for all
    results = _patching(models)
    _write_patching(out, behaviours, results)
    circuit_text = _circuits_section(models, pairs, out)
    recoding = _recoding_section(models, out)
    flips, noise, maps, split = _bitflip_section(models, pairs, out)
    probes = _probes_section(models, out)
    flip_text = bitflip_reading(flips, noise, maps, split=split,
                                split_figure="flip_split.png" if split is not None and len(split) else None,
                                noise_figure="input_noise.png")
    report = write_report(out, run_dir, table, results, pairs, recoding, flip_text, probe_reading(probes),
                          circuit_text)
    _print_summary(table, report, out, checkpoints)
    return 0
