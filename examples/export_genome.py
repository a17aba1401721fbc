"""Genome regions in, tracks file, TF-MoDISco inputs and bigWig tracks out.

    python examples/export_genome.py [outdir]

Uses the demo's made-up genome coordinates: data/demo_regions.bed on chromosome "demo".
"""

from __future__ import annotations

import sys
from pathlib import Path

import seqattrib as sa
from seqattrib import demo
from seqattrib.io import export_bigwig, export_modisco, read_tracks

outdir = Path(sys.argv[1] if len(sys.argv) > 1 else "export-example")
outdir.mkdir(exist_ok=True)
data = demo.load_data()
X = sa.one_hot(data["sequences"][-50:], layout="NCL", dtype="int8")
regions = data["regions"].take(range(len(data["names"]) - 50, len(data["names"])))

tracks = sa.expected_integrated_gradients(
    demo.torch_model(),
    X,
    target=[0, 1, 2],
    multiply_by_inputs=False,
    out=outdir / "tracks.h5",
    regions=regions,
    overwrite=True,
    verbose=True,
)  # rerunning without overwrite=True would resume an interrupted run instead
print(read_tracks(tracks).attributions.shape)  # (50, 3, 4, 200)
export_modisco(tracks, outdir, class_names=demo.TASKS, overwrite=True)
export_bigwig(tracks, outdir, data["chrom_sizes"], class_names=demo.TASKS, overwrite=True)
print("wrote", sorted(p.name for p in outdir.iterdir()))
