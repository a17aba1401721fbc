"""Attribution logos and ISM heatmaps.

Only numpy is imported here; matplotlib is imported by the functions that draw
(``pip install 'seqattrib[plot]'``).
"""

from __future__ import annotations

from .logo import plot_ism, plot_logo
from .variant import plot_variant

__all__ = ["plot_ism", "plot_logo", "plot_variant"]
