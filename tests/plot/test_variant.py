"""The reference-above-alternative plot of one variant."""

from __future__ import annotations

import numpy as np
import pytest

from seqattrib.plot import plot_variant

pytest.importorskip("matplotlib")


def test_the_title_gives_the_variant_position_not_the_window_start():
    # variant_effects puts the variant's first reference base at length // 2 of its window:
    # a 41-base window starting at 0-based 1,000 holds a variant at 0-based 1,020, which a
    # browser shows as chr2:1,021
    rng = np.random.default_rng(0)
    ref, alt = rng.normal(size=(41, 4)), rng.normal(size=(41, 4))
    fig = plot_variant(ref, alt, coordinates=("chr2", 1000), title="GATA, ism")
    top = fig.axes[0].get_title()
    assert "chr2:1,021" in top and "1,001" not in top and top.startswith("GATA, ism")
    untitled = plot_variant(ref, alt, coordinates=("chr2", 1000)).axes[0].get_title()
    assert "chr2:1,021" in untitled
