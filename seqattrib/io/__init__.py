"""Sequences and files: one-hot encoding, genomes and regions, tracks files, TF-MoDISco and bigWig.

Only numpy is imported here; file formats import their libraries when first used.
"""

from __future__ import annotations

from .bigwig import write_bigwig
from .export import export_bigwig, export_modisco
from .genome import (
    Genome,
    Regions,
    chrom_sizes,
    extract_windows,
    read_fasta,
    read_regions,
    write_bed,
)
from .onehot import decode, one_hot
from .tracks import Tracks, read_tracks

__all__ = [
    "Genome",
    "Regions",
    "Tracks",
    "chrom_sizes",
    "decode",
    "export_bigwig",
    "export_modisco",
    "extract_windows",
    "one_hot",
    "read_fasta",
    "read_regions",
    "read_tracks",
    "write_bed",
    "write_bigwig",
]
