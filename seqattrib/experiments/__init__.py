"""In-silico experiments: motifs inserted into backgrounds, spaced, and windows ablated, as
rows on the engine."""

from __future__ import annotations

from .ablate import ablate, tile_shuffle
from .edits import read_meme
from .marginalize import marginalize
from .space import space

__all__ = ["ablate", "marginalize", "read_meme", "space", "tile_shuffle"]
