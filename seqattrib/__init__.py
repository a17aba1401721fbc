"""seqattrib: explain DNA sequence models in PyTorch, TensorFlow and Keras 3.

``import seqattrib`` imports numpy only; frameworks are used when a model of theirs arrives.
"""

from __future__ import annotations

from . import heads
from ._errors import SeqAttribDeprecationWarning, SeqAttribWarning
from ._version import __version__
from .attribution import (
    deep_lift_shap,
    dinucleotide_shuffle,
    expected_integrated_gradients,
    explain,
    integrated_gradients,
    ism,
    ism_to_hypothetical,
    project,
    quadrature,
    relative_standard_error,
    saliency,
)
from .backends import get_backend
from .data_attribution import TRAK, TracIn
from .experiments import ablate, dependency_map, marginalize, space, tile_shuffle
from .io import decode, one_hot
from .loader import load_model
from .motifs import motif_instances
from .variants import variant_effects

__all__ = [
    "SeqAttribDeprecationWarning",
    "SeqAttribWarning",
    "TRAK",
    "TracIn",
    "__version__",
    "ablate",
    "decode",
    "deep_lift_shap",
    "dependency_map",
    "dinucleotide_shuffle",
    "expected_integrated_gradients",
    "explain",
    "get_backend",
    "heads",
    "integrated_gradients",
    "load_model",
    "ism",
    "ism_to_hypothetical",
    "marginalize",
    "motif_instances",
    "one_hot",
    "project",
    "quadrature",
    "relative_standard_error",
    "saliency",
    "space",
    "tile_shuffle",
    "variant_effects",
]
