"""Feature attribution: saliency, integrated gradients, expected IG, DeepLIFT/DeepSHAP and
in-silico mutagenesis, each a kernel on the engine behind one job layer."""

from __future__ import annotations

from .adaptive import relative_standard_error
from .baselines import dinucleotide_shuffle
from .deeplift import deep_lift_shap
from .gradient_methods import expected_integrated_gradients, integrated_gradients, saliency
from .methods import explain
from .mutagenesis import ism, ism_to_hypothetical
from .paths import quadrature
from .projection import project

__all__ = [
    "deep_lift_shap",
    "dinucleotide_shuffle",
    "expected_integrated_gradients",
    "explain",
    "integrated_gradients",
    "ism",
    "ism_to_hypothetical",
    "project",
    "quadrature",
    "relative_standard_error",
    "saliency",
]
