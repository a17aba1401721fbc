"""From a tracks file to the contribution scores file that ChromBPNet's ``interpret`` step
writes, for the tools of that ecosystem (TF-MoDISco, Fi-NeMo)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import parameter_error, refuse_existing
from .._optional import import_optional
from .export import (
    _all_or_none,
    _check_hypothetical,
    _hypothetical_blocks,
    _ncl,
    _report_rows,
    _targets,
    _write_error,
)
from .hdf5 import LIBVER, abandon
from .tracks_format import decode_strings, open_tracks

PathLike = str | os.PathLike[str]
#: The three groups of a ChromBPNet scores file, each holding a dataset ``seq`` (N, 4, L).
GROUPS = ("raw", "shap", "projected_shap")
#: Values per chunk of a dataset (1 MiB of float32), and the most positions one chunk spans.
_CHUNK_VALUES = 2**18
_CHUNK_POSITIONS = 2**14
_COMPRESSIONS = ("gzip", None)


def export_chrombpnet(
    tracks: PathLike,
    out: PathLike,
    *,
    target: int | None = None,
    compression: str | None = "gzip",
    max_cpu_sequences: int | None = None,
    overwrite: bool = False,
    verbose: bool = False,
) -> list[Path]:
    """Write one target of a tracks file as a ChromBPNet contribution scores file.

    Use it to hand scores to the tools built around ChromBPNet and BPNet, which read the
    ``{prefix}.counts_scores.h5`` / ``{prefix}.profile_scores.h5`` files that ChromBPNet's
    ``interpret`` step writes: ``modisco motifs -i scores.h5`` (TF-MoDISco) and ``finemo
    extract-regions-chrombpnet-h5`` (Fi-NeMo). For TF-MoDISco alone, :func:`export_modisco`
    writes its ``.npz`` inputs for every target at once.

    The file holds three groups, each with one dataset ``seq`` of shape (N, 4, L):
    ``raw/seq`` the one-hot sequences (int8), ``shap/seq`` the hypothetical scores (float32)
    and ``projected_shap/seq`` their product, the contribution of the base present at each
    position (float32). ISM scores are mean-centred per position first; gradient and DeepLIFT
    tracks must be hypothetical (``multiply_by_inputs=False``). ChromBPNet stores the scores
    as float16 and compresses them with blosc, which plain ``h5py`` cannot read; this file
    keeps float32 and uses gzip (or no compression), which every HDF5 reader reads.

    When the tracks file has genome regions, ``{out without .h5}.interpreted_regions.bed``
    is written beside it, as ChromBPNet writes ``{prefix}.interpreted_regions.bed``: one
    10-column narrowPeak line per row (chrom, start, end, ``.``, 0, ``.``, -1, -1, -1, summit)
    whose summit is the window's centre, so that tools which rebuild windows around
    ``start + summit`` find the rows' windows again.

    Parameters
    ----------
    tracks : path
        A tracks file written with ``out=`` (hypothetical scores, or ISM).
    out : path
        The scores file to write, e.g. ``prefix.counts_scores.h5``. Its folder is made (with
        its parents) if missing. Written under a temporary name and renamed when complete, so
        an interrupted export leaves no file under this name.
    target : int, optional
        The model output whose scores to write, one of the tracks file's targets; required
        when the file holds several.
    compression : {"gzip", None}
        ``"gzip"`` (with the shuffle filter) or None for uncompressed datasets.
    max_cpu_sequences : int, optional
        Sequences read and written at a time (default: as many as fit in 64 MiB), which
        bounds the memory of the export whatever the number of sequences.
    overwrite : bool
        Replace existing files.
    verbose : bool
        Show a progress bar (on stderr).

    Returns
    -------
    list of Path
        The files written: the scores file, then the regions file when there is one. A tracks
        file still being written (or interrupted) gives its completed rows, with a warning
        saying how many of how many.
    """
    func = "export_chrombpnet"
    _check_options(target, compression, max_cpu_sequences, overwrite, verbose, func)
    h5py = import_optional("h5py")
    f = open_tracks(tracks, func, "tracks")
    try:
        target, index = _target_index(f, target, func)
        _check_hypothetical(f, func)
        paths = _out_paths(out, tracks, "regions" in f, overwrite, func)
        done = int(f.attrs["n_completed"])
        axis = int(f.attrs["alphabet_axis"])
        length = int(f["sequences"].shape[1 if axis == -1 else 2])
        with _all_or_none(paths, func) as staged:
            h5 = h5py.File(staged[paths[0]], "w", libver=LIBVER)
            try:
                _create_datasets(h5, (done, 4, length), compression, max_cpu_sequences)
                h5.attrs["method"] = str(f.attrs["method"])
                h5.attrs["target"] = target
                _write_rows(h5, f, index, axis, max_cpu_sequences, verbose, func)
            except BaseException as exc:
                abandon(h5)
                if isinstance(exc, OSError):
                    raise _write_error(paths[0], exc, func) from exc
                raise
            try:
                h5.close()
            except OSError as exc:
                raise _write_error(paths[0], exc, func) from exc
            if len(paths) > 1:
                _write_regions(staged[paths[1]], f, done, func)
        _report_rows(tracks, done, len(f["attributions"]), func)
    finally:
        f.close()
    return paths


def _check_options(
    target: Any,
    compression: Any,
    max_cpu_sequences: Any,
    overwrite: Any,
    verbose: Any,
    func: str,
) -> None:
    if target is not None and (
        not isinstance(target, (int, np.integer)) or isinstance(target, (bool, np.bool_))
    ):
        raise parameter_error(func, "target", "None or an int", target, error=TypeError)
    if compression not in _COMPRESSIONS:
        raise parameter_error(
            func,
            "compression",
            "'gzip' or None",
            compression,
            "ChromBPNet's own blosc filter is not readable without a plugin; gzip is.",
        )
    if max_cpu_sequences is not None and (
        not isinstance(max_cpu_sequences, (int, np.integer))
        or isinstance(max_cpu_sequences, (bool, np.bool_))
        or max_cpu_sequences < 1
    ):
        raise parameter_error(
            func, "max_cpu_sequences", "None or a positive int", max_cpu_sequences
        )
    for name, value in (("overwrite", overwrite), ("verbose", verbose)):
        if not isinstance(value, bool):
            raise parameter_error(func, name, "True or False", value, error=TypeError)


def _target_index(f: Any, target: int | None, func: str) -> tuple[int, int | None]:
    """The target to write and its index along the attributions' target axis (None: the
    file has no such axis)."""
    targets, squeezed = _targets(f)
    if target is None:
        if len(targets) == 1:
            return targets[0], None if squeezed else 0
        raise parameter_error(
            func,
            "target",
            f"one of the tracks file's targets {targets}",
            None,
            f"Pass target={targets[0]} (one export per target: the file holds one output's "
            "scores).",
            described=True,
        )
    if int(target) not in targets:
        raise parameter_error(func, "target", f"one of the tracks file's targets {targets}", target)
    return int(target), None if squeezed else targets.index(int(target))


def _out_paths(
    out: PathLike, tracks: PathLike, has_regions: bool, overwrite: bool, func: str
) -> list[Path]:
    """The scores file and (with regions) its regions file, after refusing a folder, the
    tracks file itself and existing files (without ``overwrite``); the folder is made."""
    if not isinstance(out, (str, os.PathLike)) or not os.fspath(out):
        raise parameter_error(func, "out", "a file path", out, error=TypeError)
    path = Path(out)
    if path.is_dir():
        raise parameter_error(
            func, "out", "a file name, not a folder", os.fspath(path), "Name the file to write.",
        )  # fmt: skip
    if path.exists() and os.path.samefile(path, tracks):
        raise parameter_error(
            func,
            "out",
            "a path other than the tracks file",
            os.fspath(path),
            "Choose another name: the export reads the tracks file while it writes.",
        )
    paths = [path]
    if has_regions:
        paths.append(path.with_name(path.with_suffix("").name + ".interpreted_regions.bed"))
    for p in paths:
        refuse_existing(func, "out", p, overwrite)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _write_error(path, exc, func) from exc
    return paths


def _create_datasets(
    h5: Any, shape: tuple[int, int, int], compression: str | None, rows: int | None
) -> None:
    """Create the three datasets (chunked, and compressed when asked, unless empty)."""
    done, _, length = shape
    options: dict[str, Any] = {}
    if done:
        positions = min(length, _CHUNK_POSITIONS)
        per_chunk = max(1, min(done, rows or done, _CHUNK_VALUES // (4 * positions)))
        options["chunks"] = (per_chunk, 4, positions)
        if compression is not None:
            options.update(compression=compression, shuffle=True)
    for name, dtype in zip(GROUPS, (np.int8, np.float32, np.float32), strict=True):
        h5.create_group(name).create_dataset("seq", shape=shape, dtype=dtype, **options)


def _write_rows(
    h5: Any, f: Any, index: int | None, axis: int, rows: int | None, verbose: bool, func: str
) -> None:
    """Stream the sequences and the hypothetical scores into the file, one block at a time."""
    from tqdm.auto import tqdm

    sequences = f["sequences"]
    raw, shap, projected = (h5[name]["seq"] for name in GROUPS)
    with tqdm(
        total=raw.shape[0], disable=not verbose, unit="seq", desc=func, file=sys.stderr
    ) as progress:
        for start, block in _hypothetical_blocks(f, index, func, rows):
            stop = start + len(block)
            seq = _one_hot_int8(_ncl(sequences[start:stop], axis), start, func)
            scores = _ncl(block, axis).astype(np.float32, copy=False)
            raw[start:stop] = seq
            shap[start:stop] = scores
            projected[start:stop] = seq * scores
            progress.update(stop - start)


def _one_hot_int8(block: np.ndarray, start: int, func: str) -> np.ndarray:
    """``block`` as int8, refusing values other than 0 and 1 (soft encodings of N)."""
    soft = (block != 0) & (block != 1)
    if soft.any():
        row = start + int(np.flatnonzero(soft.any(axis=(1, 2)))[0])
        value = float(block[soft][0])
        raise parameter_error(
            func,
            "tracks",
            "a tracks file of one-hot sequences of 0 and 1 (the raw sequences of a ChromBPNet "
            "scores file are int8)",
            f"row {row} holding the value {value:g}",
            "Encode N as an all-zero column (as seqattrib.one_hot does) and rerun the tracks.",
            described=True,
        )
    return block.astype(np.int8)


def _write_regions(path: Path, f: Any, done: int, func: str) -> None:
    """The narrowPeak rows of ChromBPNet's ``interpreted_regions.bed``, summits at the centre."""
    g = f["regions"]
    chrom = decode_strings(g["chrom"][:done])
    start, end = g["start"][:done], g["end"][:done]
    try:
        with open(path, "w") as bed:
            for c, s, e in zip(chrom, start, end, strict=True):
                bed.write(f"{c}\t{s}\t{e}\t.\t0\t.\t-1\t-1\t-1\t{(e - s) // 2}\n")
    except OSError as exc:
        raise _write_error(path, exc, func) from exc
