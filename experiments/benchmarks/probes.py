"""Probe fitting and activation collection speed, measured side by side in one run.

1. The fast path of the probes (``analysis.readouts.probe_fitting``: every class target of a hook point in one
   batched L-BFGS solve, ``analysis.readouts.logistic``; scalar targets in closed form) against the anchor a user
   would write, scikit-learn on the same standardised activations, one estimator per target:
   - fixed C (C = 1): one ``LogisticRegression`` (or ``Ridge``) per target;
   - C by cross-validation (the probes' default): one ``LogisticRegressionCV`` (or ``RidgeCV``) per target over the
     same grid and the same grouped folds of the training sequences (scikit-learn warm-starts along the grid within
     a fold, then refits on all training rows), against the fast path's own cross-validation;
   on the target sets: binary (canonical bits, XORs, permuted-id bits), multi-class alone (token, previous token,
   frequency bucket: the unfavourable case, where batching shares the least), the CLI's default, and with ``--ckpt``
   the CLI's default on the built-in language (with its latent labels) and every target family (``probe_table``'s
   default). Prints the time ratio (target >= 10x) and the largest test-accuracy (R^2) difference between the two on
   any target (target: within 0.005, half a point).
2. ``analysis.readouts.activations.collect`` against plain forwards over the same token windows (target: one
   forward per batch, nothing more; its bound is 1.0x, or above where the hooks stop before the last block).

Model: the demo's tiny recipe, untrained, or with ``--ckpt DIR`` a trained checkpoint on its own validation data
(a trained model's activations take a solver more steps than an untrained one's). Usage:
python experiments/benchmarks/probes.py [--ckpt fixedid-demo/checkpoints/gf2] [--tokens 16384] [--rounds 3]
[--cv-rounds 1] [--threads 1,2] [--only collect]. At each thread count (torch's: the fast path's) it first prints
the machine's bare training-loop speed; scikit-learn runs with one BLAS thread, its fastest setting on this 2-core
machine (with two, beside torch's threads in one process, its fits took 4-16x as long: an anchor that slow would
flatter the ratio). The collection is measured on the demo's (tiny) and the small recipe's shapes.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
from _models import untrained_tiny  # noqa: E402
from _timing import machine_line, median_ratio, thread_counts  # noqa: E402

from analysis import load  # noqa: E402
from analysis.specs.probes import DEFAULT_TARGETS, LABELS  # noqa: E402
from analysis.corpus import corpus_tokens  # noqa: E402
from analysis.readouts.activations import collect  # noqa: E402
from analysis.readouts.probe_fitting import C_GRID, CV_FOLDS, _fit, _folds, _r2, _standardise  # noqa: E402
from analysis.readouts.probes import TARGET_FAMILIES, split_by_sequence, targets  # noqa: E402
from fixedid.clitools import ArgumentParser  # noqa: E402


def sklearn_cv(x, tgts, test, groups, chosen: dict, seed=0) -> dict[str, float]:
    """Test score per target of scikit-learn's own cross-validated estimators on the fast path's folds; the C each
    class target's estimator chose goes into ``chosen``."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegressionCV, RidgeCV

    xtr, xte = _standardise(np.asarray(x[~test], dtype=np.float64), np.asarray(x[test], dtype=np.float64))
    fold = _folds(groups[~test], CV_FOLDS, seed)
    out = {}
    for t in tgts:
        ytr, yte = t.labels[~test], t.labels[test]
        if t.kind == "scalar":
            splits = [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(fold.max() + 1)]
            ridge = RidgeCV(alphas=[1 / c for c in C_GRID], cv=splits).fit(xtr, ytr)
            out[t.name], chosen[t.name] = _r2(yte, ridge.predict(xte)), 1 / ridge.alpha_
            continue
        keep, keep_te = ytr >= 0, yte >= 0
        if len(np.unique(ytr[keep])) < 2 or not keep_te.any():
            out[t.name] = float("nan")
            continue
        f = fold[keep]
        splits = [(np.flatnonzero(f != k), np.flatnonzero(f == k)) for k in range(fold.max() + 1) if (f == k).any()]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.simplefilter("ignore", UserWarning)  # a class absent from a fold's training rows
            warnings.simplefilter("ignore", FutureWarning)  # scikit-learn 1.9's notices of changing defaults
            clf = LogisticRegressionCV(Cs=list(C_GRID), cv=splits, tol=1e-4, max_iter=1000, scoring="accuracy")
            clf.fit(xtr[keep], ytr[keep])
        out[t.name] = float((clf.predict(xte[keep_te]) == yte[keep_te]).mean())
        chosen[t.name] = float(np.ravel(clf.C_)[0])
    return out


def main(argv=None):
    p = ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=16_384)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds at fixed C")
    p.add_argument("--cv-rounds", type=int, default=1, help="interleaved rounds with C by cross-validation")
    p.add_argument("--ckpt", help="a trained checkpoint (default: the tiny recipe, untrained, gf2)")
    p.add_argument("--threads", type=thread_counts, default=[1, 2],
                   help="torch's thread counts, each a run (default 1,2); scikit-learn always has one BLAS thread")
    p.add_argument("--collect-rounds", type=int, default=9, help="interleaved rounds of the collection (default 9)")
    p.add_argument("--only", help="run only the target sets whose label contains this text (e.g. multi-class), or "
                                  "'collect': only the collection")
    p.add_argument("--cv-every-set", action="store_true",
                   help="cross-validate on every target set (default: the multi-class set and the CLI's default, "
                        "on the built-in language with --ckpt; "
                        "scikit-learn's LogisticRegressionCV takes ~10 s a binary target here)")
    args = p.parse_args(argv)
    for n in args.threads:
        torch.set_num_threads(n)
        print(machine_line())
        run(args)


def run(args) -> None:
    """Every comparison once, at the current thread count."""
    torch.manual_seed(0)
    model = load(args.ckpt) if args.ckpt else untrained_tiny("gf2")
    x = corpus_tokens(model, tokens=args.tokens)
    hook = "blocks.1.hook_resid_pre"
    acts = collect(model, None, tokens=args.tokens, hooks=[hook]) if args.ckpt else collect(model, x, hooks=[hook])
    a = acts.acts[hook]
    seq = acts.tokens["seq"].to_numpy()
    test = split_by_sequence(seq)
    print(f"model: {args.ckpt or 'tiny recipe, gf2, untrained'}; {hook}, {len(acts):,} tokens, width {a.shape[1]}; "
          f"median of {args.rounds} interleaved rounds at fixed C, {args.cv_rounds} with C by cross-validation")
    cli = DEFAULT_TARGETS.split(",")
    sets = [("binary (canonical bits, XORs, permuted-id bits)", ["canonical_bits", "xor", "perm_bits"]),
            ("multi-class only (token, previous token, freq bucket)", ["token", "prev_token", "freq_bucket"]),
            ("the CLI's default", cli)]
    if args.ckpt:
        sets += [("the CLI's default on the built-in language (+ latent labels)", cli + LABELS.split(",")),
                 ("every target family (probe_table's default)", list(TARGET_FAMILIES))]
    cv_sets = {sets[1][0], sets[min(3, len(sets) - 1)][0]}  # multi-class; the CLI's default on the built-in language
    for label, fams in sets:
        if args.only and (args.only == "collect" or args.only not in label):
            continue
        tg = targets(acts, fams)
        for cv in (False, True):
            if not cv or args.cv_every_set or label in cv_sets:
                print(f"  {label}, " + compare_fits(a, tg, test, seq, cv, args.cv_rounds if cv else args.rounds))

    if args.only and args.only != "collect":
        return
    name = args.ckpt or "the demo's tiny recipe"
    print("  " + compare_collect(model, x, args.collect_rounds, name))
    small = untrained_tiny("gf2", "small")
    print("  " + compare_collect(small, corpus_tokens(small, tokens=args.tokens), args.collect_rounds,
                                 "the small recipe's shape, untrained"))


def compare_fits(a, tg, test, seq, cv: bool, rounds: int) -> str:
    """One line: the fast path against scikit-learn on targets ``tg``, at C = 1 or with C by cross-validation."""
    res, picks = {}, {}

    def fast():
        fits = _fit(a, tg, test, C="cv", groups=seq) if cv else _fit(a, tg, test, C=1.0)
        res["fast"], picks["fast"] = {k: v.score for k, v in fits.items()}, {k: v.C for k, v in fits.items()}

    def sklearn():  # at its fastest: one BLAS thread (at two, beside torch's threads, it ran 4-16x slower here)
        picks["sklearn"] = {}
        with threadpool_limits(limits=1, user_api="blas"):
            res["sklearn"] = sklearn_cv(a, tg, test, seq, picks["sklearn"]) if cv else \
                {k: v.score for k, v in _fit(a, tg, test, C=1.0, method="sklearn").items()}

    ratio, t = median_ratio({"fast": fast, "sklearn": sklearn}, "sklearn", "fast", rounds=rounds,
                            warmup=0 if cv else 1)
    scored = [k for k in res["fast"] if not np.isnan(res["fast"][k])]
    diff = max(abs(res["fast"][k] - res["sklearn"][k]) for k in scored)
    line = (f"{'C by 3-fold CV' if cv else 'fixed C = 1'}: {len(scored)} fitted targets; fast {t['fast']:.2f} s, "
            f"scikit-learn {t['sklearn']:.2f} s: {ratio:.1f}x (target >= 10x); max score difference {diff:.4f} "
            "(target <= 0.005)")
    if cv:
        agree = [k for k in scored if np.isclose(picks["fast"][k], picks["sklearn"][k])]
        line += (f"; the same C chosen for {len(agree)} of {len(scored)} targets, max score difference among them "
                 f"{max((abs(res['fast'][k] - res['sklearn'][k]) for k in agree), default=0):.4f}")
    return line


def compare_collect(model, x, rounds: int, name: str) -> str:
    """One line: activation collection against plain forwards over the same windows."""
    @torch.no_grad()
    def plain():
        for i in range(0, x.shape[0], 64):
            model(x[i:i + 64])

    ratio, t = median_ratio({"collect": lambda: collect(model, x), "plain": plain}, "plain", "collect",
                            rounds=rounds, warmup=1)
    return (f"{name}: collect (hook_embed, every block's input, final norm) {x.numel() / t['collect']:,.0f} tok/s, "
            f"plain forwards {x.numel() / t['plain']:,.0f} tok/s: {ratio:.2f}x (target: 1.0x, one forward per batch)")


if __name__ == "__main__":
    main()
