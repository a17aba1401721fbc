"""Sequence encoding and (later) genome and track files.

Only numpy is imported here; file formats import their libraries when first used.
"""

from __future__ import annotations

from .onehot import decode, one_hot

__all__ = ["decode", "one_hot"]
