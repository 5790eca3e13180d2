"""A study's claims: sentences declared in a TOML file, each tested on the study's per-seed measurements."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.errors import AnalysisError
from analysis.stats import paired_difference, tost
from analysis.study import verdicts

#: The study's default claims file.
DEFAULT_CLAIMS = Path(__file__).with_name("claims.toml")


@dataclass(frozen=True)
class Claim:
    """One declared claim (the fields of a ``[[claim]]`` table; see the module docstring)."""

    id: str
    claim: str
    family: str
    kind: str
    unit: str
    measure: str = ""
    a: str = ""
    b: str = ""
    c: str = ""
    d: str = ""
    direction: str = "either"
    margin: float | None = None
    threshold: float | None = None
    measures: tuple = field(default_factory=tuple)
    variants: tuple = field(default_factory=tuple)

    @property
    def contrast(self) -> str:
        """The contrast in words: ``a - b``, ``(a - b) - (c - d)``, or the variants a descriptive claim covers."""
        if self.kind == "interaction":
            return f"({self.a} - {self.b}) - ({self.c} - {self.d})"
        if self.kind == "descriptive":
            return "every seed of " + ", ".join(self.variants)
        return f"{self.a} - {self.b}"

    @property
    def named_variants(self) -> list[str]:
        """Every variant the claim reads."""
        if self.kind == "descriptive":
            return list(self.variants)
        return [v for v in (self.a, self.b, self.c, self.d) if v]


_FIELDS = {f.name for f in fields(Claim)}


def _claim(raw: dict, where: str) -> Claim:
    name = raw.get("id", "?")
    bad = sorted(set(raw) - _FIELDS)
    if bad:
        raise AnalysisError(f"{where}: claim {name!r} has unknown fields {bad}; use {sorted(_FIELDS)}")
    for k in ("id", "claim", "family", "kind", "unit"):
        if not isinstance(raw.get(k), str) or not raw[k].strip():
            raise AnalysisError(f"{where}: claim {name!r} needs a non-empty {k!r}")
    kind, family = raw["kind"], raw["family"]
    if kind not in verdicts.KINDS:
        raise AnalysisError(f"{where}: claim {name!r} has kind {kind!r}; use one of {list(verdicts.KINDS)}")
    if family not in verdicts.FAMILIES:
        raise AnalysisError(f"{where}: claim {name!r} has family {family!r}; use one of {list(verdicts.FAMILIES)}")
    need = {"difference": ("measure", "a", "b", "direction"), "equivalence": ("measure", "a", "b", "margin"),
            "interaction": ("measure", "a", "b", "c", "d", "direction"),
            "descriptive": ("measures", "variants", "threshold")}[kind]
    missing = [k for k in need if k not in raw]
    if missing:
        raise AnalysisError(f"{where}: {kind} claim {name!r} needs {missing}")
    if "direction" in raw and raw["direction"] not in verdicts.DIRECTIONS:
        raise AnalysisError(f"{where}: claim {name!r} has direction {raw['direction']!r}; use one of "
                            f"{list(verdicts.DIRECTIONS)}")
    if kind == "equivalence" and not (isinstance(raw["margin"], (int, float)) and raw["margin"] > 0):
        raise AnalysisError(f"{where}: equivalence claim {name!r} needs a positive margin, got {raw['margin']!r}")
    for m in ([raw["measure"]] if "measure" in raw else []) + list(raw.get("measures", [])):
        if not isinstance(m, str) or m.count("/") < 2:
            raise AnalysisError(f"{where}: claim {name!r} has measure {m!r}; write analysis/metric/key")
    return Claim(**{**raw, "measures": tuple(raw.get("measures", ())), "variants": tuple(raw.get("variants", ()))})


def load_claims(path=None) -> tuple[list[Claim], float]:
    """The claims of a claims file (default :data:`DEFAULT_CLAIMS`) and its ``alpha``; a file that does not parse, or
    a claim that lacks what its kind needs, raises :class:`~analysis.errors.AnalysisError` naming it."""
    path = Path(DEFAULT_CLAIMS if path is None else path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as e:
        raise AnalysisError(f"claims file {path} cannot be read ({e.strerror}); give a TOML file of [[claim]] tables")
    except tomllib.TOMLDecodeError as e:
        raise AnalysisError(f"claims file {path} is not TOML ({e})") from None
    alpha = raw.get("alpha", verdicts.ALPHA)
    if not (isinstance(alpha, float) and 0 < alpha < 1):
        raise AnalysisError(f"claims file {path}: alpha {alpha!r} must be a number between 0 and 1")
    claims = [_claim(c, str(path)) for c in raw.get("claim", [])]
    if not claims:
        raise AnalysisError(f"claims file {path} declares no [[claim]]")
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise AnalysisError(f"claims file {path}: claim ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    return claims, alpha


def _per_seed(df: pd.DataFrame, measure: str, variants: list[str]) -> pd.DataFrame | str:
    """``[seed, variant]`` values of ``measure`` over the seeds every variant has, or what is missing (a string)."""
    analysis, metric, key = measure.split("/", 2)
    g = df[(df.analysis == analysis) & (df.metric == metric) & (df.key.astype(str) == key)]
    if g.empty:
        return f"not measured: no {measure} in this study"
    wide = g[g.variant.isin(variants)].pivot_table(index="seed", columns="variant", values="value", aggfunc="mean")
    missing = [v for v in variants if v not in wide.columns]
    if missing:
        return f"not measured: {', '.join(missing)} not in this study"
    wide = wide[variants].dropna()
    return wide if len(wide) else f"not measured: no seed has {measure} for every one of {', '.join(variants)}"


def _row(c: Claim, df: pd.DataFrame, alpha: float) -> dict:
    base = dict(id=c.id, claim=c.claim, kind=c.kind, family=c.family, contrast=c.contrast,
                direction=c.direction if c.kind in ("difference", "interaction") else "", unit=c.unit,
                margin=c.margin if c.kind == "equivalence" else np.nan,
                threshold=c.threshold if c.kind == "descriptive" else np.nan, note="")
    empty = {"measure": c.measure or "; ".join(c.measures), "estimate": np.nan, "ci_low": np.nan, "ci_high": np.nan,
             "ci_level": np.nan, "p": np.nan, "n_seeds": 0, "seeds": ""}
    if c.kind == "descriptive":
        tables = [_per_seed(df, m, list(c.variants)) for m in c.measures]
        missing = [t for t in tables if isinstance(t, str)]
        if missing:
            return {**base, **empty, "note": missing[0]}
        values = np.concatenate([t.to_numpy().ravel() for t in tables])
        seeds = sorted(set().union(*(t.index for t in tables)))
        return {**base, "measure": "; ".join(c.measures), "estimate": values.min(), "ci_low": values.min(),
                "ci_high": values.max(), "ci_level": np.nan, "p": np.nan, "n_seeds": len(seeds),
                "seeds": ",".join(map(str, seeds)),
                "note": f"smallest and largest of {len(values)} values (seed x variant x measure)"}
    wide = _per_seed(df, c.measure, c.named_variants)
    if isinstance(wide, str):
        return {**base, **empty, "note": wide}
    d = wide[c.a] - wide[c.b]
    if c.kind == "interaction":
        d = d - (wide[c.c] - wide[c.d])
    level = verdicts.interval_level(c.kind, alpha)
    if c.kind == "equivalence":
        r = tost(d.to_numpy(), c.margin, alpha)
    else:
        r = paired_difference(d.to_numpy(), np.zeros(len(d)), level)
    note = "identical on every seed: no test" if r["identical"] else ""
    return {**base, "measure": c.measure, "estimate": r["diff"], "ci_low": r["lo"], "ci_high": r["hi"],
            "ci_level": level, "p": r["p"], "n_seeds": r["n"], "seeds": ",".join(map(str, wide.index)), "note": note}


def claims_table(df: pd.DataFrame, claims=None, alpha: float | None = None, step: int | None = None) -> pd.DataFrame:
    """One row per claim (columns :data:`analysis.study.verdicts.COLUMNS`) tested on the per-seed measurements ``df``
    (long format: ``analysis, metric, key, variant, seed, step, value``) at ``step`` (default: the last step);
    ``claims``: a list of :class:`Claim` or a claims file's path (default :data:`DEFAULT_CLAIMS`, whose ``alpha`` is
    used unless ``alpha`` is given). ``estimate`` is the mean paired per-seed difference (descriptive: the smallest
    value); ``ci_low``/``ci_high`` its t interval at :func:`~analysis.study.verdicts.interval_level` (at alpha 0.05:
    95%; equivalence: the 90% interval of the two one-sided tests);
    ``p`` the paired t test's two-sided p (equivalence: the larger one-sided p); ``p_adjusted`` and ``verdict`` by
    :mod:`analysis.study.verdicts`."""
    if claims is None or isinstance(claims, (str, Path)):
        claims, file_alpha = load_claims(claims)
        alpha = file_alpha if alpha is None else alpha
    alpha = verdicts.ALPHA if alpha is None else alpha
    step = int(df.step.max()) if step is None else step
    at = df[df.step == step]
    rows = [_row(c, at, alpha) for c in claims]
    table = pd.DataFrame(rows, columns=[c for c in verdicts.COLUMNS if c not in ("p_adjusted", "verdict")])
    return verdicts.apply(table, alpha)[verdicts.COLUMNS]


def claims_alpha(claims=None) -> float:
    """The alpha a claims table of ``claims`` is tested at (:func:`claims_table`): a claims file's own (default
    :data:`DEFAULT_CLAIMS`), else :data:`analysis.study.verdicts.ALPHA`."""
    return load_claims(claims)[1] if claims is None or isinstance(claims, (str, Path)) else verdicts.ALPHA


def _num(x) -> str:
    return f"{x:+.3g}" if np.isfinite(x) else "-"


def claim_lines(table: pd.DataFrame, source: str = "the study's claims file", note: str | None = None,
                alpha: float | None = None, measurements: pd.DataFrame | None = None) -> list[str]:
    """The report's claims section: what the verdicts mean (:func:`analysis.study.verdicts.rules_text` at ``alpha``,
    default :data:`analysis.study.verdicts.ALPHA`; and ``note``, a paragraph on where the claims come from), then one
    Markdown table per family (claim, contrast, estimate with its interval, margin or threshold, p, Holm-adjusted p,
    seeds, verdict), how many of each family's claims are supported and, given the per-seed ``measurements``, the
    exploratory comparisons printed beside some claims (:func:`analysis.study.companions.companion_lines`)."""
    from analysis.study.companions import companion_lines

    if table.empty:
        return []
    lines = ["## Claims", "",
             f"This report's only conclusions: the claims of {source}, each tested on these seeds (`claims.csv`) by "
             f"the rules of `analysis.study.verdicts`. {verdicts.rules_text(alpha)} Every other number in this report "
             "is a description.", ""] + ([note, ""] if note else [])
    for family in verdicts.FAMILIES:
        t = table[table.family == family]
        if t.empty:
            continue
        k = int((t.verdict == "supported").sum())
        title = {"primary": "Primary", "control": "Controls", "exploratory": "Exploratory (not findings)"}[family]
        lines += [f"### {title}: {k} of {len(t)} supported" if family != "exploratory" else f"### {title}", "",
                  f"Holm adjustment over the {int(np.isfinite(t.p).sum())} tested rows of this family.", "",
                  "| claim | contrast (unit) | estimate [interval] | margin / threshold | p | p (Holm) | seeds | "
                  "verdict |", "|---|---|---|---:|---:|---:|---:|---|"]
        for r in t.itertuples():
            level = "" if not np.isfinite(r.ci_level) else f" ({100 * r.ci_level:.0f}%)"
            if r.n_seeds == 0:
                interval = "-"
            elif r.kind == "descriptive":
                interval = f"min {r.ci_low:.3g}, max {r.ci_high:.3g}"
            else:
                interval = f"{_num(r.estimate)} [{_num(r.ci_low)}, {_num(r.ci_high)}]{level}"
            bound = (f"+-{r.margin:g}" if r.kind == "equivalence" else
                     f">= {r.threshold:g}" if r.kind == "descriptive" else "-")
            p = lambda x: f"{x:.2g}" if np.isfinite(x) else "-"  # noqa: E731
            shown = r.kind != "descriptive" or r.n_seeds == 0
            note = f" ({r.note})" if isinstance(r.note, str) and r.note and shown else ""
            lines.append(f"| {r.claim} | {r.contrast}: {r.measure} ({r.unit}) | {interval}{note} | {bound} | "
                         f"{p(r.p)} | {p(r.p_adjusted)} | {r.n_seeds} | **{r.verdict}** |")
        lines.append("")
        lines += companion_lines(t, measurements)
    return lines


__all__ = ["Claim", "DEFAULT_CLAIMS", "load_claims", "claims_table", "claims_alpha", "claim_lines"]
