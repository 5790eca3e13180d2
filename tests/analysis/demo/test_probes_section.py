"""The demo's probes section on test-sized models: every number it writes is recomputed from its table by hand."""

import re

import numpy as np
import pytest

import analysis.demo.probes as section

from tests._helpers import tiny_checkpoint


@pytest.fixture(scope="module")
def table(tmp_path_factory, tokenizer):
    models = {v: tiny_checkpoint(tmp_path_factory, tokenizer, v, seed=6) for v in ("learned", "canonical", "gf2")}
    with pytest.MonkeyPatch.context() as mp:  # a few windows: the section's arithmetic, not its statistics
        mp.setattr(section, "TOKENS", 1024)
        df = section.probe_tables(models)
        yield df, section.probe_reading(df)


def test_the_table_has_both_splits_and_the_references(table):
    df, _ = table
    assert set(df.variant) == {"learned", "canonical", "gf2"} and set(df.split) == {"sequence", "type"}
    typed = set(df[df.split == "type"].target.str.split(":").str[0])
    assert typed == {"canonical_bit", "perm_bit"}  # number and IOI role are contextual: no held-out-types split
    ctx = df[(df.level == "context") & (df.status == "fitted")]
    assert set(ctx.target) == {"number", "ioi_role"} and ctx.lexical.notna().all() and ctx.selectivity.isna().all()


def test_each_cell_and_line_is_the_table_read_by_hand(table):
    df, lines = table
    d = df[df.status == "fitted"].assign(group=df.target.str.split(":").str[0])
    hooks = list(dict.fromkeys(d.hook))
    for v in ("learned", "canonical", "gf2"):
        dv = d[d.variant == v]
        row = next(s for s in lines if s.startswith(f"| {v} | {section.GROUPS['ioi_role']} |"))
        by = dv[dv.group == "ioi_role"].set_index("hook")
        assert row == (f"| {v} | {section.GROUPS['ioi_role']} | "
                       + " | ".join(f"{by.loc[h, 'score']:.2f} ({by.loc[h, 'lexical']:.2f})" for h in hooks) + " |")
        typed = dv[(dv.group == "canonical_bit") & (dv.split == "type")].groupby("hook")[["score", "majority"]].mean()
        row = next(s for s in lines if s.startswith(f"| {v} | {section.GROUPS['canonical_bit']}, held-out token"))
        assert row.endswith(" | ".join(f"{typed.loc[h, 'score']:.2f} ({typed.loc[h, 'majority']:.2f})"
                                       for h in hooks) + " |")
        line = next(s for s in lines if s.startswith(f"- {v}: the id's bits"))
        seq = dv[(dv.group == "canonical_bit") & (dv.split == "sequence")].groupby("hook").score.mean()
        assert f"read at {seq[hooks[0]]:.2f} at the input and {seq[hooks[-1]]:.2f} at the final norm" in line
        assert f"{typed.score[hooks[0]]:.2f} and {typed.score[hooks[-1]]:.2f} on held-out token types" in line
        w = dv[(dv.group == "canonical_bit") & (dv.split == "sequence")].drop_duplicates("target")
        if v == "learned":
            assert "GF(2) weight" not in line
        elif v == "canonical":
            assert "1 for every one" in line and (w.gf2_weight == 1).all()
        else:
            said = {int(b): int(w) for b, w in re.findall(r"bit (\d+): (\d+)", line)}
            assert said == {int(t.split(":")[1]): int(g) for t, g in zip(w.target, w.gf2_weight)}
    assert np.isfinite(d.score).all()
