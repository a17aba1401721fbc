"""The embedded demo: a tiny CNN on synthetic DNA with planted JASPAR motifs.

``data/`` holds the sequences (made by ``data/make_demo.py``), the motif positions and the
trained model for torch and Keras (defined in ``loader``); ``seqattrib demo`` explains it end to
end. ``seqattrib.demo:torch_model`` and ``seqattrib.demo:keras_model`` name it for ``--model``.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ._errors import parameter_error
from .loader import DEMO_LENGTH as LENGTH
from .loader import demo_keras_model, demo_torch_model

TASKS = ("GATA", "Ebox", "CTCF")


def data_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The demo data folder: ``path``, ``$SEQATTRIB_DEMO_DATA``, the data installed with the
    package, or ``data/`` of a checkout."""
    candidates = [path, os.environ.get("SEQATTRIB_DEMO_DATA"), _installed()]
    candidates.append(Path(__file__).resolve().parents[1] / "data")
    for candidate in candidates:
        if candidate is not None and (Path(candidate) / "demo_sequences.fa").exists():
            return Path(candidate)
    raise parameter_error(
        "demo",
        "data",
        "a folder with the demo files (demo_sequences.fa, demo_model.pt, ...)",
        str(path) if path else "none installed with the package",
        "Reinstall seqattrib, or pass the folder of the demo files.",
        described=True,
    )


def _installed() -> Path | None:
    """The demo files installed with the package (``seqattrib.demo_data``), if any."""
    try:
        spec = importlib.util.find_spec("seqattrib.demo_data")
    except ModuleNotFoundError:  # a checkout on sys.path: the files are in data/
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


#: The ``pkg.module:factory`` names of the demo model (``--model seqattrib.demo:torch_model``).
torch_model = demo_torch_model
keras_model = demo_keras_model


def load_data(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Sequences, labels, planted motif positions and made-up genome coordinates."""
    from .io import chrom_sizes, read_fasta, read_regions

    folder = data_dir(path)
    records = read_fasta(folder / "demo_sequences.fa")
    names = list(records)
    table = np.genfromtxt(
        folder / "demo_motifs.tsv", delimiter="\t", names=True, dtype=None, encoding="ascii"
    )
    return {
        "names": names,
        "sequences": [records[n] for n in names],
        "labels": np.stack([table[f"has_{t}"] for t in TASKS], axis=1).astype(np.float32),
        "motif_starts": np.stack([table[f"{t}_start"] for t in TASKS], axis=1),
        "motif_ends": np.stack([table[f"{t}_end"] for t in TASKS], axis=1),
        "regions": read_regions(folder / "demo_regions.bed"),
        "chrom_sizes": chrom_sizes(folder / "demo.chrom.sizes"),
        "folder": folder,
    }


def run_demo(
    outdir: str | os.PathLike[str],
    *,
    n_sequences: int = 100,
    framework: str = "torch",
    data: str | os.PathLike[str] | None = None,
    verbose: bool = True,
) -> dict[str, Any]:
    """EIG on the demo model, then every export: tracks.h5, TF-MoDISco npz, bigWig, a logo.

    The demo replaces the files it wrote in ``outdir`` before, so it can run again.

    Returns what was written and the fraction of sequences whose top projected base lies in
    the planted motif of the explained task.
    """
    import seqattrib as sa

    from .io import export_bigwig, export_modisco
    from .plot import plot_logo

    demo = load_data(data)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    layout: Literal["NLC", "NCL"] = "NCL" if framework == "torch" else "NLC"
    model = torch_model() if framework == "torch" else keras_model()
    test = np.arange(len(demo["names"]))[-n_sequences:]  # the held-out end of the file
    X = sa.one_hot([demo["sequences"][i] for i in test], layout=layout, dtype=np.int8)
    regions = demo["regions"].take(test)
    tick = time.perf_counter()
    tracks = sa.expected_integrated_gradients(
        model,
        X,
        target=[0, 1, 2],
        multiply_by_inputs=False,
        out=outdir / "tracks.h5",
        regions=regions,
        overwrite=True,
        verbose=verbose,
    )
    seconds = time.perf_counter() - tick
    assert isinstance(tracks, str)
    written = [Path(tracks)]
    written += export_modisco(tracks, outdir, class_names=TASKS, overwrite=True)
    written += export_bigwig(tracks, outdir, demo["chrom_sizes"], class_names=TASKS, overwrite=True)
    hypothetical = sa.io.read_tracks(tracks).attributions  # (N, 3, ...) hypothetical scores
    hits = {}
    for k, task in enumerate(TASKS):
        positive = np.flatnonzero(demo["labels"][test, k] > 0)
        scores = sa.project(hypothetical[positive, k], X[positive])
        top = scores.argmax(axis=1)
        start, end = demo["motif_starts"][test[positive], k], demo["motif_ends"][test[positive], k]
        hits[task] = (float(np.mean((top >= start) & (top < end))), len(positive))
    first = int(np.flatnonzero(demo["labels"][test, 0] > 0)[0])
    s = int(demo["motif_starts"][test[first], 0])
    contributions = hypothetical[first, 0] * X[first]
    logo = outdir / "logo_GATA.png"
    plot_logo(
        contributions,
        start=max(0, s - 20),
        end=min(LENGTH, s + 30),
        path=logo,
        title=f"{demo['names'][test[first]]}: GATA task, planted motif at {s}",
    )
    written.append(logo)
    return {"files": written, "hits": hits, "seconds": seconds, "n_sequences": len(test)}
