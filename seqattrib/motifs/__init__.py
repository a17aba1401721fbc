"""From attribution tracks to motifs: seqlets, their names in a motif database, and motif
instances with genome coordinates.

Only numpy is imported here; memelite (TOMTOM) and h5py when first used.
"""

from __future__ import annotations

from .annotate import Matches, annotate, seqlet_matrices
from .instances import InstanceFiles, motif_instances, read_instances
from .meme import Motif, read_meme, read_motifs
from .seqlets import Seqlets, iter_seqlets, seqlets

__all__ = [
    "InstanceFiles",
    "Matches",
    "Motif",
    "Seqlets",
    "annotate",
    "iter_seqlets",
    "motif_instances",
    "read_instances",
    "read_meme",
    "read_motifs",
    "seqlet_matrices",
    "seqlets",
]
