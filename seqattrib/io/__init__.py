"""Sequences in and results out: one-hot encoding, FASTA genomes, regions and windows, tracks
files, TF-MoDISco, bigWig and ChromBPNet exports.

Only numpy is imported here; file formats import their libraries when first used.
"""

from __future__ import annotations

from .bigwig import write_bigwig
from .chrombpnet import export_chrombpnet
from .export import export_bigwig, export_modisco
from .fasta import Genome, chrom_sizes, read_fasta
from .features import StoreInfo, read_store
from .features_merge import merge, merge_features
from .merge import merge_tracks
from .onehot import decode, one_hot
from .regions import Regions, read_regions, write_bed
from .tracks_format import Tracks, read_tracks
from .windows import GenomeWindows, extract_windows, fasta_windows, genome_windows

__all__ = [
    "Genome",
    "GenomeWindows",
    "Regions",
    "StoreInfo",
    "Tracks",
    "chrom_sizes",
    "decode",
    "export_bigwig",
    "export_chrombpnet",
    "export_modisco",
    "extract_windows",
    "fasta_windows",
    "genome_windows",
    "merge",
    "merge_features",
    "merge_tracks",
    "one_hot",
    "read_fasta",
    "read_regions",
    "read_store",
    "read_tracks",
    "write_bed",
    "write_bigwig",
]
