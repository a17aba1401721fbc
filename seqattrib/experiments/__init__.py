"""In-silico experiments: motifs inserted into backgrounds, spaced, and windows ablated, as
rows on the engine."""

from __future__ import annotations
