"""The notebooks' display helper: every figure a palette PNG at least 700 px wide whose smallest letter is at least
7 pt on a 96-ppi screen, shown to a text reader as its title (never ``<Figure size ...>``), set up in one call."""

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from analysis.figures.notebook import figure_dpi, figure_png, figure_text, palette_png, smallest_text  # noqa: E402


def _figure(width, height, tick_size):
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    ax.plot([0, 1, 2], [0, 1, 0])
    ax.tick_params(labelsize=tick_size)
    ax.set_title("a title", fontsize=9)
    return fig


@pytest.mark.parametrize("width", [2.0, 3.4, 7.0])
def test_a_figure_is_stored_at_least_700_px_wide(width):
    fig = _figure(width, 2.0, 8)
    png = Image.open(io.BytesIO(figure_png(fig)))
    assert png.format == "PNG" and png.mode == "P"  # a palette image
    assert png.width >= 700
    plt.close(fig)


def test_the_smallest_letter_sets_the_resolution():
    # 7 pt at 96 ppi is 9.33 px; a 5-pt letter is 9.33 px at 9.33 * 72 / 5 = 134.4 dpi; a wide figure needs no more
    fig = _figure(12.0, 3.0, 5)
    assert smallest_text(fig) == 5
    assert figure_dpi(fig) == pytest.approx(134.4, abs=0.01)
    png = Image.open(io.BytesIO(figure_png(fig)))
    assert png.width >= 12.0 * 134  # the figure at that resolution
    plt.close(fig)
    fig = _figure(12.0, 3.0, 10)  # 10-pt letters need 67.2 dpi: the floor of 100 holds
    assert figure_dpi(fig) == 100
    plt.close(fig)


def test_palette_png_keeps_few_colours_exactly_and_maps_the_rest_to_the_nearest():
    rng = np.random.default_rng(0)
    few = rng.choice(np.array([[255, 255, 255], [0, 114, 178], [230, 159, 0]], np.uint8), size=(30, 40))
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(palette_png(few))).convert("RGB")), few)
    # 300 grey levels in 300 columns, every level once per row except the darkest, which fills half the image
    many = np.repeat(np.repeat(np.linspace(0, 255, 300).round().astype(np.uint8)[None, :, None], 3, 2), 4, 0)
    many = np.concatenate([many, np.zeros((4, 300, 3), np.uint8)])
    back = np.asarray(Image.open(io.BytesIO(palette_png(many))).convert("RGB")).astype(int)
    assert len(np.unique(back.reshape(-1, 3), axis=0)) <= 256
    assert np.array_equal(back[4:], many[4:])  # the most frequent colour is exact
    assert np.abs(back - many).max() <= 3  # the others within a step of their nearest kept neighbour


def test_a_colour_bar_keeps_its_hues_beside_large_flat_areas():
    # a diverging bar of 600 colours, a pixel each, beside 20 flat colours that fill the rest (a heatmap figure)
    import matplotlib as mpl

    bar = (mpl.colormaps["RdBu_r"](np.linspace(0, 1, 600))[:, :3] * 255).round().astype(np.uint8)
    flat = np.random.default_rng(1).integers(0, 256, size=(20, 3), dtype=np.uint8)
    image = np.concatenate([np.repeat(flat[:, None, :], 500, 1).reshape(-1, 3), bar])[None]
    back = np.asarray(Image.open(io.BytesIO(palette_png(image))).convert("RGB")).astype(int)
    error = np.abs(back - image.astype(int)).max(-1)[0]
    assert error[-600:].max() <= 6  # every hue of the bar within a few steps (blues stay blue)
    assert error[:-600].max() == 0  # the flat colours exact


def test_a_figure_whose_tight_box_narrows_at_the_computed_resolution_is_still_wide_enough():
    # a title wider than the axes: rendered at figure_dpi this figure came out 697 px wide
    import pandas as pd

    from analysis.figures.circuit_graph import faithfulness_figure

    k = np.array([0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 927])
    curves = {}
    for v in ("learned", "canonical", "gf2"):
        curves[v] = pd.DataFrame({"k": k, "recovered": np.linspace(0, 1, len(k))})
        curves[v].attrs.update(area=0.5, total=927, unit="edges", ablation="corrupt", n_pairs=16, metric="logit_diff")
    fig = faithfulness_figure(curves)
    assert Image.open(io.BytesIO(figure_png(fig))).width >= 700
    plt.close(fig)


def test_a_text_reader_sees_the_title_not_the_figure_repr():
    fig = _figure(3.4, 2.0, 8)
    assert figure_text(fig) == "[figure: a title]"
    fig.suptitle("the whole figure")
    assert figure_text(fig) == "[figure: the whole figure]"
    plt.close(fig)


#: As the notebooks open: tqdm's notice that ipywidgets is missing is silenced before analysis imports tqdm.
CELLS = ["import warnings\nwarnings.filterwarnings('ignore', message='IProgress not found')\n"
         "from analysis.figures.notebook import setup\n\nsetup()",
         "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(3.4, 2.0))\nax.set_title('shown');",
         "import pandas as pd\npd.DataFrame({'a': [1, 2]})"]


def test_setup_in_one_call_makes_a_kernel_show_figures_as_wide_pngs_and_their_titles(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert not any(o.output_type in ("error", "stream") for c in nb.cells for o in c.outputs)
    (figure,), (table,) = nb.cells[1].outputs, nb.cells[2].outputs
    assert set(figure.data) == {"image/png", "text/plain"} and figure.data["text/plain"] == "[figure: shown]"
    png = Image.open(io.BytesIO(base64.b64decode(figure.data["image/png"])))
    assert png.width >= 700 and png.mode == "P"
    assert set(table.data) == {"text/plain"}  # tables as plain text, no HTML
