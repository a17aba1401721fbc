"""Attribution logos, ISM heatmaps, spacing curves and dependency maps.

Only numpy is imported here; matplotlib is imported by the functions that draw
(``pip install 'seqattrib[plot]'``).
"""

from __future__ import annotations

from .experiments import plot_dependency_map, plot_spacing
from .logo import plot_ism, plot_logo
from .motifs import plot_seqlet
from .variant import plot_variant

__all__ = [
    "plot_dependency_map",
    "plot_ism",
    "plot_logo",
    "plot_seqlet",
    "plot_spacing",
    "plot_variant",
]
