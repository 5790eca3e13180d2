"""What a report prints beside a noise claim: the same contrast at equal noise scale, marked exploratory, with what
matched decodability means; the numbers recomputed here from the per-seed values."""

import numpy as np
import pandas as pd
from scipy import stats

from analysis.study.claims import Claim, claim_lines, claims_table
from analysis.study.companions import companion_lines

#: Per seed: the loss noise costs at 90% decoding (the claim's measure) and at half the input RMS (the companion's),
#: and the share of rows still decoding at half the RMS: the sign of the two contrasts is opposite, as measured.
VALUES = {("noise_delta_loss", "decode 90%"): {"learned": [3.1, 3.3, 3.2, 3.4, 3.0],
                                                "canonical": [1.2, 1.3, 1.25, 1.3, 1.2]},
          ("noise_delta_loss", "scale 0.5"): {"learned": [0.05, 0.09, 0.07, 0.08, 0.06],
                                               "canonical": [2.1, 2.3, 2.2, 2.15, 2.25]},
          ("noise_decode_acc", "scale 0.5"): {"learned": [1.0] * 5, "canonical": [0.81] * 5}}
CLAIM = Claim("noise-canonical", "At matched decodability, noise costs canonical less than learned.", "primary",
              "difference", "nats per token", "interventions/noise_delta_loss/decode 90%", "canonical", "learned",
              direction="negative")


def _measurements(values=VALUES) -> pd.DataFrame:
    return pd.DataFrame([{"analysis": "interventions", "metric": m, "key": k, "variant": v, "seed": s, "step": 9,
                          "value": x} for (m, k), by in values.items() for v, xs in by.items()
                         for s, x in enumerate(xs)])


def _interval(x) -> tuple[float, float, float]:
    x = np.asarray(x, dtype=float)
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return x.mean(), x.mean() - half, x.mean() + half


def test_a_noise_claim_gets_the_equal_scale_contrast_beside_it():
    df = _measurements()
    table = claims_table(df, [CLAIM])
    assert table.verdict.iloc[0] == "supported"  # the claim itself stands
    lines = companion_lines(table, df)
    lead, bullet = lines[0], lines[2]
    assert lead.startswith("Beside these claims, exploratory (a description, not a finding")
    assert "Matched decodability gives each model its own amount of noise" in lead and "90%" in lead
    assert "half the RMS of each model's own input table" in lead
    scale = VALUES[("noise_delta_loss", "scale 0.5")]
    c, le = _interval(scale["canonical"]), _interval(scale["learned"])
    d = _interval(np.subtract(scale["canonical"], scale["learned"]))
    assert bullet.startswith(f"- *{CLAIM.claim}* At equal noise scale")
    assert f"canonical {c[0]:.3g} [{c[1]:.3g}, {c[2]:.3g}]" in bullet
    assert f"learned {le[0]:.3g} [{le[1]:.3g}, {le[2]:.3g}]" in bullet
    assert f"canonical - learned {d[0]:+.3g} [{d[1]:+.3g}, {d[2]:+.3g}], 5 seeds" in bullet and d[1] > 0
    assert "canonical 81%, learned 100%" in bullet
    text = "\n".join(claim_lines(table, measurements=df))  # in the report: under the claim's family table
    assert text.index("| **supported** |") < text.index(bullet)


def test_nothing_is_printed_without_the_measurements_or_a_tested_noise_claim():
    df = _measurements()
    table = claims_table(df, [CLAIM])
    assert companion_lines(table, None) == []
    assert companion_lines(table, _measurements({k: v for k, v in VALUES.items() if k[1] != "scale 0.5"})) == []
    untested = claims_table(df[df.variant == "learned"], [CLAIM])  # canonical not measured: no row to sit beside
    assert untested.n_seeds.iloc[0] == 0 and companion_lines(untested, df) == []
    facts = Claim("f", "canonical trails learned.", "primary", "difference", "share", "behaviours/accuracy/facts",
                  "canonical", "learned")
    both = pd.concat([df, df.assign(analysis="behaviours", metric="accuracy", key="facts")])
    assert companion_lines(claims_table(both, [facts]), both) == []
