"""Data attribution: which training sequences are behind a model's predictions.

``TracIn`` follows gradients over training checkpoints (DESIGN section 6). Checkpoints are loaded
into the user's model one at a time; results are fresh numpy arrays.
"""

from __future__ import annotations

from .tracin import TracIn

__all__ = ["TracIn"]
