"""Data attribution: which training sequences are behind a model's predictions.

``TracIn`` follows loss gradients over training checkpoints; ``TRAK`` linearises the model at
each checkpoint and weighs training examples through the kernel of their projected gradients.
Checkpoints are loaded into the user's model one at a time; results are
fresh numpy arrays.
"""

from __future__ import annotations

from .tracin import TracIn
from .trak import TRAK

__all__ = ["TRAK", "TracIn"]
