"""Variant colours: every variant the study trains has its own, the GF(2) recodings are shades of gf2's green."""

import matplotlib.colors as mcolors
import pytest

from analysis.figures.style import EXTRA_COLOURS, recoding_shade, variant_colour, variant_colours

STUDY = ["learned", "canonical", "gf2", "permuted", "frozen_random", "canonical-matched", "learned-randomhead",
         "canonical-randomhead", "gf2-r1", "gf2-r2", "gf2-matched"]


def test_the_studys_variants_have_distinct_colours_whatever_their_order():
    for order in (STUDY, STUDY[::-1]):
        colours = variant_colours(order)
        assert len(set(colours.values())) == len(STUDY)
        assert colours == variant_colours(STUDY)  # fixed, not by place


def test_recodings_are_shades_of_gf2():
    # by hand: gf2 is #009E73 = (0, 158, 115); recoding 1 a third of the way to black, recoding 2 a third to white
    assert recoding_shade(1) == "#00694D"  # (0, 105.3, 76.7) rounded
    assert recoding_shade(2) == "#55BEA2"  # (85, 190.3, 161.7) rounded
    hue = mcolors.rgb_to_hsv(mcolors.to_rgb("#009E73"))[0]
    for r in range(1, 7):
        h, _, v = mcolors.rgb_to_hsv(mcolors.to_rgb(recoding_shade(r)))
        assert h == pytest.approx(hue, abs=0.01)
    values = [mcolors.rgb_to_hsv(mcolors.to_rgb(recoding_shade(r)))[2] for r in (1, 3, 5)]
    assert values == sorted(values, reverse=True)  # each odd recoding darker than the last
    with pytest.raises(ValueError, match="recoding 0"):
        recoding_shade(0)


def test_other_names_take_the_extra_colours_in_order():
    colours = variant_colours(["learned", "mine", "gf2-r1", "yours"])
    assert colours["mine"] == EXTRA_COLOURS[0] and colours["yours"] == EXTRA_COLOURS[1]
    assert variant_colour("gf2-r0") == EXTRA_COLOURS[0]  # not a recoding's name: gf2 itself is recoding 0
