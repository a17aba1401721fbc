"""Attribution logos and ISM heatmaps: Axes returned, files written, letters as tall as scores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from seqattrib.plot import plot_ism, plot_logo  # noqa: E402
from seqattrib.plot.logo import COLORS, LETTER_WIDTH  # noqa: E402

SCORES = np.array(
    [
        [1.0, 2.0, -0.5, 0.0],  # A up 0..1, C up 1..3, G down -0.5..0, no T
        [0.0, -1.0, -3.0, 0.25],  # T up 0..0.25, C down -1..0, G down -4..-1
        [0.5, 0.5, 0.5, 0.5],
        [0.0, 0.0, 0.0, 0.0],
    ]
)


def _letters(ax) -> list[tuple[str, float, float, float, float]]:
    """(letter, x0, x1, y0, y1) of each glyph, the letter told by its colour."""
    by_colour = {tuple(np.round(rgb, 3)): base for base, rgb in COLORS.items()}
    out = []
    for patch in ax.patches:
        box = patch.get_path().get_extents()
        base = by_colour[tuple(np.round(to_rgb(patch.get_facecolor()), 3))]
        out.append((base, box.x0, box.x1, box.y0, box.y1))
    return out


def _fresh_axes():
    return Figure().add_subplot()


def test_logo_letters_are_as_tall_as_their_scores():
    ax = plot_logo(SCORES, ax=_fresh_axes(), alphabet_axis=-1)
    letters = _letters(ax)
    assert len(letters) == int(np.count_nonzero(SCORES))
    for base, x0, x1, y0, y1 in letters:
        pos = int(round((x0 + x1) / 2))
        value = SCORES[pos, "ACGT".index(base)]
        assert y1 - y0 == pytest.approx(abs(value), abs=1e-9)
        assert x0 == pytest.approx(pos - LETTER_WIDTH / 2) and x1 == pytest.approx(
            pos + LETTER_WIDTH / 2
        )
    spans = {(int(round((x0 + x1) / 2)), b): (y0, y1) for b, x0, x1, y0, y1 in letters}
    expected = {
        (0, "A"): (0, 1),
        (0, "C"): (1, 3),
        (0, "G"): (-0.5, 0),
        (1, "T"): (0, 0.25),
        (1, "C"): (-1, 0),
        (1, "G"): (-4, -1),
    }
    for key, (lo, hi) in expected.items():
        assert spans[key] == pytest.approx((lo, hi), abs=1e-9)
    assert ax.get_ylim()[0] < -4 and ax.get_ylim()[1] > 3


def test_logo_window_layouts_and_positions():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(30, 4))
    ax_lc = plot_logo(scores, start=10, end=20, ax=_fresh_axes())
    ax_cl = plot_logo(scores.T, start=10, end=20, ax=_fresh_axes())
    ax_n = plot_logo(scores.T[None], start=10, end=20, ax=_fresh_axes(), alphabet_axis=1)
    assert _letters(ax_lc) == _letters(ax_cl) == _letters(ax_n)
    centres = {round((x0 + x1) / 2) for _, x0, x1, _, _ in _letters(ax_lc)}
    assert centres == set(range(10, 20)) and ax_lc.get_xlim() == (9.5, 19.5)


def test_logo_and_ism_write_png_and_pdf(tmp_path: Path):
    scores = np.random.default_rng(1).normal(size=(4, 20))
    for suffix, magic in ((".png", b"\x89PNG"), (".pdf", b"%PDF")):
        logo = tmp_path / f"logo{suffix}"
        ax = plot_logo(scores, path=logo, title="GATA site")
        assert ax.get_title() == "GATA site"
        assert logo.read_bytes()[:4] == magic and logo.stat().st_size > 1000
        heat = tmp_path / f"ism{suffix}"
        plot_ism(scores, path=heat)
        assert heat.read_bytes()[:4] == magic and heat.stat().st_size > 1000


def test_ism_heatmap_bases_down_and_symmetric_colours():
    rng = np.random.default_rng(2)
    scores = rng.normal(size=(50, 4))
    scores[7, 2] = 5.0
    ax = plot_ism(scores, start=5, end=25, ax=_fresh_axes())
    image = ax.images[0]
    np.testing.assert_array_equal(np.asarray(image.get_array()), scores[5:25].T)
    assert image.get_clim() == (-5.0, 5.0)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["A", "C", "G", "T"]
    assert ax.get_xlim() == (4.5, 24.5)


def test_plots_without_ax_use_pyplot_for_display():
    plt = pytest.importorskip("matplotlib.pyplot")
    ax = plot_logo(SCORES, alphabet_axis=-1)
    try:
        assert plt.fignum_exists(ax.figure.number)
    finally:
        plt.close(ax.figure)


def test_plot_errors():
    with pytest.raises(ValueError, match="alphabet_axis"):
        plot_logo(np.zeros((4, 4)))
    with pytest.raises(ValueError, match="one sequence"):
        plot_logo(np.zeros((2, 10, 4)))
    with pytest.raises(ValueError, match="0 <= start < end <= 10"):
        plot_ism(np.zeros((10, 4)), start=5, end=12)
    with pytest.raises(ValueError, match="finite"):
        plot_logo(np.full((10, 4), np.nan))
    with pytest.raises(ValueError, match="alphabet_axis"):
        plot_ism(np.zeros((10, 4)), alphabet_axis=0)


@pytest.mark.parametrize("draw", [plot_logo, plot_ism])
def test_genome_coordinates_label_the_axis(draw):
    scores = np.random.default_rng(1).standard_normal((40, 4)).astype(np.float32)
    ax = draw(scores, start=10, end=30, coordinates=("chr8", 1_000_000), path=None)
    ax.figure.canvas.draw()
    assert ax.get_xlabel() == "chr8 (1-based)"
    formatter = ax.xaxis.get_major_formatter()
    assert formatter(10, 0) == "1,000,011"  # position 10 of a window starting at 1,000,000
