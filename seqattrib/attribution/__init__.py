"""Gradient-based feature attribution: saliency, integrated gradients, expected IG."""

from __future__ import annotations

from .baselines import dinucleotide_shuffle
from .integrated_gradients import expected_integrated_gradients, integrated_gradients
from .project import project
from .quadrature import quadrature
from .saliency import saliency

__all__ = [
    "dinucleotide_shuffle",
    "expected_integrated_gradients",
    "integrated_gradients",
    "project",
    "quadrature",
    "saliency",
]
