"""One legend per figure and a key for every colour: the attribution graph (edge colour by sign), the XOR probes
(one legend for every panel), each on a small table built by hand."""

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.figures.attribution_graph import EDGE_COLOURS, graph_figure  # noqa: E402
from analysis.figures.probes import xor_figure  # noqa: E402


def _legends(fig):
    return list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]


def _drawn_line_colours(fig) -> set:
    """The colours of every data line drawn (grid lines and the legend's own lines left out)."""
    return {mcolors.to_hex(line.get_color()) for ax in fig.axes for line in ax.get_lines()
            if len(line.get_xdata()) and line not in ax.get_xgridlines() + ax.get_ygridlines()}


def _keyed_colours(fig) -> set:
    return {mcolors.to_hex(h.get_color()) for leg in _legends(fig) for h in leg.legend_handles
            if hasattr(h, "get_color")}


def _graph():
    """Two layers over a three-token prompt: input -> feature -> logit edges of both signs."""
    nodes = pd.DataFrame({"id": ["i0", "i1", "f0", "f1", "e0", "l0"],
                          "kind": ["input", "input", "feature", "feature", "error", "logit"],
                          "layer": [-1, -1, 0, 1, 1, 2], "position": [0, 1, 1, 2, 2, 2], "kept": True})
    edges = pd.DataFrame({"source": ["i0", "i1", "f0", "f1", "e0"], "target": ["f0", "f0", "f1", "l0", "l0"],
                          "weight": [0.5, -0.2, 1.0, -0.8, 0.1], "kept": True})
    return SimpleNamespace(nodes=nodes, edges=edges, attrs={"prompt": ["a", "b", "c"]},
                           scores={"replacement": 0.8, "completeness": 0.9})


def test_the_attribution_graph_has_one_legend_that_keys_edge_colour_by_sign():
    fig = graph_figure({"one": _graph(), "two": _graph()})
    (legend,) = _legends(fig)  # one for the figure, not one per panel
    labels = [t.get_text() for t in legend.get_texts()]
    assert {"edge, positive weight", "edge, negative weight"} <= set(labels)
    assert {"input", "feature", "error", "logit"} <= set(labels)
    drawn = _drawn_line_colours(fig)
    assert drawn == {EDGE_COLOURS["positive"].lower(), EDGE_COLOURS["negative"].lower()}  # both signs drawn
    assert drawn <= _keyed_colours(fig)
    assert "2 feature" in fig.axes[0].get_title()  # each panel's counts in its title
    plt.close(fig)


def _xor_probes():
    rows = []
    for variant, weights in (("learned", [None, None]), ("canonical", [2, 2]), ("gf2", [1, 3])):
        for target, w in zip(("xor:0,1", "xor:0,2"), weights):
            for depth, hook in enumerate(("hook_embed", "blocks.0.hook_resid_post")):
                for split in ("sequence", "type"):
                    rows.append(dict(variant=variant, target=target, gf2_weight=w, depth=depth, hook=hook,
                                     split=split, status="fitted", score=0.6 + 0.1 * depth, majority=0.5))
    return pd.DataFrame(rows).astype({"gf2_weight": "Int64"})


def test_the_xor_figure_has_one_legend_for_every_panel_and_keys_every_colour():
    fig = xor_figure(_xor_probes())
    (legend,) = _legends(fig)
    labels = [t.get_text() for t in legend.get_texts()]
    assert len(labels) == len(set(labels))  # no entry twice
    assert any(lbl.startswith("weight 1") for lbl in labels) and any(lbl.startswith("weight 3") for lbl in labels)
    assert "no code (learned): all pairs" in labels
    assert _drawn_line_colours(fig) <= _keyed_colours(fig)
    plt.close(fig)
