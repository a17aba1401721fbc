"""Saturation mutagenesis with a torch model, and the same scan on a window only.

python examples/ism_scan.py [outdir]     # writes outdir/ism_gata.png (default: ism-example)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import seqattrib as sa
from seqattrib import demo
from seqattrib.plot import plot_ism

data = demo.load_data()
model = demo.torch_model()  # (batch, 4, 200) -> (batch, 3)
i = int(np.flatnonzero(data["labels"][:, 0] > 0)[0])  # a sequence with a planted GATA site
X = sa.one_hot([data["sequences"][i]], layout="NCL")
start, end = int(data["motif_starts"][i, 0]), int(data["motif_ends"][i, 0])

scores = sa.ism(model, X, target=0)  # (1, 4, 200): f(mutant) - f(reference)
window = sa.ism(model, X, target=0, positions=(start - 5, end + 5))  # zeros elsewhere
assert np.allclose(window[..., start - 5 : end + 5], scores[..., start - 5 : end + 5], atol=1e-5)
effect = scores[0].min(axis=0)  # the most damaging substitution at each position
print(
    f"planted GATA site at {start}-{end}; most damaging positions:",
    sorted(np.argsort(effect)[:6].tolist()),
)
outdir = Path(sys.argv[1] if len(sys.argv) > 1 else "ism-example")
outdir.mkdir(exist_ok=True)
plot_ism(scores[0], start=start - 10, end=end + 10, path=outdir / "ism_gata.png", title="GATA")
print("wrote", outdir / "ism_gata.png")
