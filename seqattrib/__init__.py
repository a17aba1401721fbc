"""seqattrib: explain DNA sequence models in PyTorch, TensorFlow and Keras 3.

``import seqattrib`` imports numpy only; frameworks are used when a model of theirs arrives.
"""

from __future__ import annotations

from ._errors import SeqAttribWarning
from ._version import __version__
from .attribution import (
    dinucleotide_shuffle,
    expected_integrated_gradients,
    integrated_gradients,
    project,
    quadrature,
    saliency,
)
from .backends import get_backend
from .io import decode, one_hot

__all__ = [
    "SeqAttribWarning",
    "__version__",
    "decode",
    "dinucleotide_shuffle",
    "expected_integrated_gradients",
    "get_backend",
    "integrated_gradients",
    "one_hot",
    "project",
    "quadrature",
    "saliency",
]
