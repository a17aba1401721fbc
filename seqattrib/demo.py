"""The embedded demo: a tiny CNN on synthetic DNA with planted JASPAR motifs.

``data/`` holds the sequences (made by ``data/make_demo.py``), the motif positions and the
trained model for torch and Keras (defined in ``loader``); ``seqattrib demo`` explains it end to
end. ``seqattrib.demo:torch_model`` and ``seqattrib.demo:keras_model`` name it for ``--model``.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ._demo_files import data_dir
from ._errors import SeqAttribWarning, parameter_error
from ._optional import available, install_hint
from .loader import DEMO_LENGTH as LENGTH
from .loader import demo_keras_model, demo_torch_model

TASKS = ("GATA", "Ebox", "CTCF")
#: The demo model was trained on the first sequences of ``demo_sequences.fa``; the rest are
#: held out (``data/make_demo.py``).
N_TRAIN = 1600


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
    overwrite: bool = False,
) -> dict[str, Any]:
    """EIG on the demo model, then every export: tracks.h5, TF-MoDISco npz, bigWig, a logo.

    Only held-out sequences (the end of the demo file, which the model was not trained on) are
    explained. Run again into the same folder, the demo reuses (or, interrupted, resumes) its
    own ``tracks.h5`` and replaces its own other files; any other file of the names it writes
    is refused unless ``overwrite=True``. Outputs whose optional dependency is missing (bigWig:
    pyBigWig; the logo: matplotlib) are skipped, with a warning before the work starts.

    Returns what was written, the fraction of sequences whose top projected base lies in
    the planted motif of the explained task, and the outputs skipped (each with why: the
    missing module, or no held-out GATA sequence to draw the logo of).
    """
    import seqattrib as sa

    from .io import export_bigwig, export_modisco
    from .plot import plot_logo

    func = "run_demo"
    demo = load_data(data)
    held_out = len(demo["names"]) - N_TRAIN
    if not 1 <= n_sequences <= held_out:
        raise parameter_error(
            func,
            "n_sequences",
            f"from 1 to {held_out}, the held-out demo sequences (the other {N_TRAIN} trained "
            "the model, so their motif hit rates would not measure anything)",
            n_sequences,
            f"Pass at most {held_out}.",
        )
    skipped = {"bigWig tracks": "pyBigWig", "logo": "matplotlib"}
    skipped = {what: name for what, name in skipped.items() if not available(name)}
    for what, name in skipped.items():
        warnings.warn(f"{what} skipped: {install_hint(name)}", SeqAttribWarning, stacklevel=2)
    outdir = Path(outdir)
    model = torch_model() if framework == "torch" else keras_model()
    products = [f"{task}_{kind}" for task in TASKS for kind in ("ohe.npz", "attr.npz")]
    products += [f"{task}_regions.bed" for task in TASKS]
    if "bigWig tracks" not in skipped:
        products += [f"{task}.bw" for task in TASKS]
    if "logo" not in skipped:
        products.append("logo_GATA.png")
    own = _check_outdir(outdir, ["tracks.h5", *products], model, demo, overwrite)
    layout: Literal["NLC", "NCL"] = "NCL" if framework == "torch" else "NLC"
    test = np.arange(len(demo["names"]))[-n_sequences:]  # the held-out end of the file
    X = sa.one_hot([demo["sequences"][i] for i in test], layout=layout, dtype=np.int8)
    regions = demo["regions"].take(test)
    tick = time.perf_counter()
    eig = dict(
        target=[0, 1, 2],
        multiply_by_inputs=False,
        out=outdir / "tracks.h5",
        regions=regions,
        verbose=verbose,
    )
    try:  # the demo's own file of this same run is reused, or resumed
        tracks = sa.expected_integrated_gradients(model, X, overwrite=overwrite, **eig)
    except ValueError:
        if not own:
            raise
        tracks = sa.expected_integrated_gradients(model, X, overwrite=True, **eig)
    seconds = time.perf_counter() - tick
    assert isinstance(tracks, str)
    written = [Path(tracks)]
    written += export_modisco(tracks, outdir, class_names=TASKS, overwrite=True)
    if "bigWig tracks" not in skipped:
        written += export_bigwig(
            tracks, outdir, demo["chrom_sizes"], class_names=TASKS, overwrite=True
        )
    hypothetical = sa.io.read_tracks(tracks).attributions  # (N, 3, ...) hypothetical scores
    hits = {}
    for k, task in enumerate(TASKS):
        positive = np.flatnonzero(demo["labels"][test, k] > 0)
        scores = sa.project(hypothetical[positive, k], X[positive])
        top = scores.argmax(axis=1)
        start, end = demo["motif_starts"][test[positive], k], demo["motif_ends"][test[positive], k]
        inside = (top >= start) & (top < end)
        hits[task] = (float(inside.mean()) if inside.size else float("nan"), len(positive))
    gata_rows = np.flatnonzero(demo["labels"][test, 0] > 0)
    if "logo" not in skipped and gata_rows.size == 0:
        skipped["logo"] = "no held-out sequence of this run has a planted GATA site"
        warnings.warn(f"logo skipped: {skipped['logo']}", SeqAttribWarning, stacklevel=2)
    if "logo" not in skipped:
        first = int(gata_rows[0])
        s = int(demo["motif_starts"][test[first], 0])
        contributions = hypothetical[first, 0] * X[first]
        logo = outdir / "logo_GATA.png"
        plot_logo(
            contributions,
            start=max(0, s - 20),
            end=min(LENGTH, s + 30),
            out=logo,
            title=f"{demo['names'][test[first]]}: GATA task, planted motif at {s}",
        )
        written.append(logo)
    return {
        "files": written,
        "hits": hits,
        "seconds": seconds,
        "n_sequences": len(test),
        "skipped": skipped,
    }


def _check_outdir(
    outdir: Path, names: list[str], model: Any, demo: dict[str, Any], overwrite: bool
) -> bool:
    """Make ``outdir``, after refusing files of ``names`` there that are not the demo's own
    (without ``overwrite``). Returns whether its ``tracks.h5`` is the demo's own."""
    func = "run_demo"
    if outdir.exists() and not outdir.is_dir():
        raise parameter_error(
            func,
            "outdir",
            "a folder (made if missing)",
            f"{os.fspath(outdir)!r}, a file",
            "Choose another folder name.",
            error=FileExistsError,
            described=True,
        )
    existing = [name for name in names if os.path.lexists(outdir / name)]
    own = "tracks.h5" in existing and _own_tracks(outdir / "tracks.h5", model, demo)
    if existing and not own and not overwrite:
        raise parameter_error(
            func,
            "outdir",
            "a folder without files of the names the demo writes, or the demo's own output",
            f"{os.fspath(outdir)!r} holding {existing[0]} (not written by this demo model)",
            "Choose another folder, or pass overwrite=True to replace those files.",
            error=FileExistsError,
            described=True,
        )
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise parameter_error(
            func,
            "outdir",
            "a folder that can be made",
            f"{os.fspath(outdir)!r} ({exc.strerror or exc})",
            "Choose a folder on a writable disk.",
            error=OSError,
            described=True,
        ) from exc
    return own


def _own_tracks(path: Path, model: Any, demo: dict[str, Any]) -> bool:
    """Whether ``path`` holds tracks of an earlier demo run: the demo model's fingerprint, the
    demo's settings and the regions of the held-out end of the demo sequences."""
    from .backends import get_backend
    from .io.fingerprint import model_fingerprint
    from .io.tracks_format import decode_strings, open_tracks

    try:
        f = open_tracks(path, "run_demo", "outdir")
    except (OSError, ValueError):
        return False
    with f:
        settings = json.loads(f.attrs["settings"])
        fingerprint = str(f.attrs.get("model_fingerprint", ""))
        if "regions" not in f or settings.get("targets") != [0, 1, 2]:
            return False
        chrom = decode_strings(f["regions"]["chrom"][:])
        start = np.asarray(f["regions"]["start"][:])
    n = len(chrom)
    if not 0 < n <= len(demo["names"]) - N_TRAIN or str(settings.get("method")) != (
        "expected_integrated_gradients"
    ):
        return False
    expected = demo["regions"].take(np.arange(len(demo["names"]))[-n:])
    same_rows = list(map(str, expected.chrom)) == chrom and np.array_equal(expected.start, start)
    return same_rows and fingerprint == model_fingerprint(model, get_backend(model).state)
