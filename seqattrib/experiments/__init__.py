"""In-silico experiments: motifs inserted into backgrounds, spaced, and windows ablated, as
rows on the engine."""

from __future__ import annotations

from ..motifs.meme import read_meme
from .ablate import ablate, tile_shuffle
from .dependency import dependency_map
from .marginalize import marginalize
from .space import space

__all__ = ["ablate", "dependency_map", "marginalize", "read_meme", "space", "tile_shuffle"]
