"""From a tracks file to the files other tools read: TF-MoDISco inputs and bigWig tracks."""

from __future__ import annotations

import os
import warnings
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import SeqAttribWarning, deprecated_alias, parameter_error, user_stacklevel
from .._optional import import_optional
from .hdf5 import failure
from .tracks_format import decode_strings, open_tracks

PathLike = str | os.PathLike[str]
_BLOCK_BYTES = 64 * 2**20


def _class_names(targets: Sequence[int], class_names: Any, func: str) -> list[str]:
    if class_names is None:
        return [f"target{t}" for t in targets]
    if isinstance(class_names, Mapping):
        names = [str(class_names.get(t, f"target{t}")) for t in targets]
    else:
        names = [str(n) for n in class_names]
    if len(names) != len(targets) or len(set(names)) != len(names):
        raise parameter_error(
            func,
            "class_names",
            f"{len(targets)} distinct names (one per target {list(targets)}) or a dict",
            class_names,
        )
    for name in names:
        check_file_name(name, func, "class_names")
    return names


def check_file_name(name: str, func: str, param: str) -> None:
    """Refuse a name that is not a plain file name: it would leave (or miss) the folder."""
    separators = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if name in ("", ".", "..") or "\0" in name or any(sep in name for sep in separators):
        raise parameter_error(
            func,
            param,
            "names usable as file names (no path separators, not '.' or '..', not empty)",
            name,
            "Choose names made of letters, digits, '-', '_' and '.'.",
        )


def _check_hypothetical(f: Any, func: str) -> None:
    """Refuse a tracks file of contributions: TF-MoDISco takes hypothetical scores."""
    method = str(f.attrs["method"])
    if method != "ism" and bool(f.attrs.get("multiply_by_inputs", False)):
        raise parameter_error(
            func,
            "tracks",
            "hypothetical scores (multiply_by_inputs=False, or ISM)",
            f"{method} attributions multiplied by the inputs",
            "Rerun with multiply_by_inputs=False: TF-MoDISco takes hypothetical scores.",
            described=True,
        )


def _hypothetical_blocks(
    f: Any, k: int | None, func: str, rows: int | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """(start, hypothetical scores (n, L, 4)-or-layout block) of one target, block by block
    (``rows`` rows each; default: as many as fit in 64 MiB)."""
    _check_hypothetical(f, func)
    settings = f.attrs
    method = str(settings["method"])
    done = int(settings["n_completed"])
    data = f["attributions"]
    row_bytes = int(np.prod(data.shape[1:])) * 4
    step = rows or max(1, _BLOCK_BYTES // row_bytes)
    axis = int(settings["alphabet_axis"])
    for start in range(0, done, step):
        stop = min(done, start + step)
        block = data[start:stop] if k is None else data[start:stop, k]
        if method == "ism":
            block = block - block.mean(axis=axis, keepdims=True)
        yield start, block


def _export_arrays(
    scores: Any,
    sequences: Any,
    out: Path,
    class_names: Any,
    overwrite: bool,
    func: str,
) -> list[Path]:
    """TF-MoDISco inputs of hypothetical scores and sequences held in memory."""
    from ..engine.source import infer_alphabet_axis

    if sequences is None:
        raise parameter_error(
            func,
            "sequences",
            "the one-hot sequences when the scores are arrays",
            None,
            "Pass sequences=X, the array the scores explain.",
        )
    X = np.asarray(sequences, dtype=np.float32)
    axis = infer_alphabet_axis(X.shape, None, func)
    values = np.asarray(scores, dtype=np.float32)
    if values.ndim == 3:
        values = values[:, None]
    if values.ndim != 4 or values.shape[0] != X.shape[0] or values.shape[2:] != X.shape[1:]:
        raise parameter_error(
            func,
            "tracks",
            f"scores of shape (N, [K,] {X.shape[1]}, {X.shape[2]}) for sequences of shape "
            f"{X.shape}",
            f"shape {values.shape}",
            described=True,
        )
    names = _class_names(list(range(values.shape[1])), class_names, func)
    paths = [out / f"{name}_{kind}" for name in names for kind in ("ohe.npz", "attr.npz")]
    _check_outdir(out, paths, overwrite, func)
    ohe = _ncl(X, axis).astype(np.int8)
    with _all_or_none(paths, func) as staged:
        for k, name in enumerate(names):
            _write_npz(staged[out / f"{name}_ohe.npz"], ohe.shape, np.int8, iter([ohe]), func)
            attr = _ncl(values[:, k], axis)
            _write_npz(staged[out / f"{name}_attr.npz"], attr.shape, np.float32, iter([attr]), func)
    return paths


def _ncl(block: np.ndarray, alphabet_axis: int) -> np.ndarray:
    return block.transpose(0, 2, 1) if alphabet_axis == -1 else block


def _write_npz(
    path: Path, shape: tuple[int, ...], dtype: Any, blocks: Iterator[np.ndarray], func: str
) -> None:
    """An ``.npz`` with one member ``arr_0``, streamed block by block (bounded memory)."""
    try:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            with archive.open("arr_0.npy", "w", force_zip64=True) as member:
                header = {
                    "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                    "fortran_order": False,
                    "shape": shape,
                }
                np.lib.format.write_array_header_2_0(member, header)
                for block in blocks:
                    member.write(np.ascontiguousarray(block, dtype=dtype).tobytes())
    except OSError as exc:
        raise _write_error(path, exc, func) from exc


def _write_bed(path: Path, chrom: list[str], start: Any, end: Any, func: str) -> None:
    try:
        with open(path, "w") as bed:
            for c, s, e in zip(chrom, start, end, strict=True):
                bed.write(f"{c}\t{s}\t{e}\n")
    except OSError as exc:
        raise _write_error(path, exc, func) from exc


def _write_error(path: Path, exc: OSError, func: str) -> Exception:
    _, reason = failure(exc)
    return parameter_error(
        func,
        "out",
        "a folder on a disk that can hold the exported files",
        f"{os.fspath(path)!r}: writing it failed ({reason})",
        "The tracks file is untouched and no exported file was kept: free space (or choose a "
        "writable folder) and rerun the export.",
        error=OSError,
        described=True,
    )


@contextmanager
def _all_or_none(paths: list[Path], func: str) -> Iterator[dict[Path, Path]]:
    """Temporary names beside ``paths`` to write; all are renamed to ``paths`` once every one is
    written, and none is kept when writing fails: an export leaves all its files or none."""
    staged = {p: p.with_name(f".{p.name}.{os.getpid()}.partial") for p in paths}
    try:
        for path, temp in staged.items():  # a folder that cannot be written fails before work
            try:
                with open(temp, "wb"):
                    pass
            except OSError as exc:
                raise _write_error(path, exc, func) from exc
        yield staged
        for path, temp in staged.items():
            try:
                os.replace(temp, path)
            except OSError as exc:
                raise _write_error(path, exc, func) from exc
    finally:
        for temp in staged.values():
            if temp.exists():
                temp.unlink()


def _targets(f: Any) -> tuple[list[int], bool]:
    import json

    targets = json.loads(f.attrs["settings"])["targets"]
    squeezed = f["attributions"].ndim == 3
    return [int(t) for t in targets], squeezed


def _check_outdir(out: PathLike, paths: list[Path], overwrite: bool, func: str) -> None:
    """Refuse existing files (without ``overwrite``), then make the folder (parents too)."""
    existing = [p for p in paths if p.exists()]
    if existing and not overwrite:
        raise parameter_error(
            func,
            "out",
            "a folder without the files to write, unless overwrite=True",
            f"{os.fspath(out)!r} with {existing[0].name} already there",
            "Pass overwrite=True to replace them, or choose another folder.",
            error=FileExistsError,
            described=True,
        )
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _, reason = failure(exc)
        if Path(out).exists() and not Path(out).is_dir():
            reason = "a file of that name exists"
        raise parameter_error(
            func,
            "out",
            "a folder (made if missing)",
            f"{os.fspath(out)!r}, which cannot be made ({reason})",
            "Choose a writable folder that is not the name of a file.",
            error=OSError,
            described=True,
        ) from exc


def _report_rows(path: PathLike, done: int, total: int, func: str) -> None:
    """Warn when a tracks file holds fewer completed rows than its job has."""
    if done < total:
        warnings.warn(
            f"{func} exported {done} of the {total} rows of {os.fspath(path)!r}: the others are "
            "not written yet (the file is still being written, or its run was interrupted; "
            "rerun that run to complete it, then the export with overwrite=True).",
            SeqAttribWarning,
            stacklevel=user_stacklevel(),
        )


@deprecated_alias(outdir="out")
def export_modisco(
    tracks: PathLike | np.ndarray,
    out: PathLike,
    *,
    sequences: Any = None,
    class_names: Sequence[str] | Mapping[int, str] | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """Write TF-MoDISco inputs for every target class of a tracks file, or of arrays.

    Per class: ``{class}_ohe.npz`` and ``{class}_attr.npz`` (member ``arr_0``, shape
    (n_sequences, 4, length), hypothetical scores), and ``{class}_regions.bed`` when the file
    has regions, in the form ``modisco motifs -s {class}_ohe.npz -a {class}_attr.npz`` reads.
    ISM scores are mean-centred per position; gradient tracks must be hypothetical
    (``multiply_by_inputs=False``). Files are streamed, so memory stays bounded.

    Parameters
    ----------
    tracks : path, or array of shape (N, [K,] L, 4) or (N, [K,] 4, L)
        A tracks file written with ``out=``, or hypothetical scores in memory (from
        ``multiply_by_inputs=False``, or ``ism_to_hypothetical``), in the layout of
        ``sequences``.
    out : path
        The folder, made (with its parents) if missing.
    sequences : array of shape (N, L, 4) or (N, 4, L), optional
        With scores in memory: the one-hot sequences they explain.
    class_names : list or dict, optional
        Names per target (default ``target{index}``).
    overwrite : bool
        Replace existing files.

    Returns
    -------
    list of Path
        The files written: all of them or, when the export fails, none. Existing files are
        only replaced with ``overwrite=True``. A file still being written (or interrupted)
        gives its completed rows, with a warning saying how many of how many.
    """
    func = "export_modisco"
    if not isinstance(tracks, (str, os.PathLike)):
        return _export_arrays(tracks, sequences, Path(out), class_names, overwrite, func)
    f = open_tracks(tracks, func, "tracks")
    try:
        targets, squeezed = _targets(f)
        names = _class_names(targets, class_names, func)
        done = int(f.attrs["n_completed"])
        axis = int(f.attrs["alphabet_axis"])
        length = int(f["sequences"].shape[1 if axis == -1 else 2])
        out = Path(out)
        has_regions = "regions" in f
        paths = [
            out / f"{name}_{kind}"
            for name in names
            for kind in (["ohe.npz", "attr.npz"] + (["regions.bed"] if has_regions else []))
        ]
        _check_hypothetical(f, func)
        _check_outdir(out, paths, overwrite, func)
        shape = (done, 4, length)
        seq = f["sequences"]
        step = max(1, _BLOCK_BYTES // (4 * length))
        with _all_or_none(paths, func) as staged:
            for k, name in enumerate(names):
                ohe = (_ncl(seq[s : min(done, s + step)], axis) for s in range(0, done, step))
                _write_npz(staged[out / f"{name}_ohe.npz"], shape, np.int8, ohe, func)
                index = None if squeezed else k
                hyp = (_ncl(b, axis) for _, b in _hypothetical_blocks(f, index, func))
                _write_npz(staged[out / f"{name}_attr.npz"], shape, np.float32, hyp, func)
            if has_regions:
                g = f["regions"]
                chrom = decode_strings(g["chrom"][:done])
                start, end = g["start"][:done], g["end"][:done]
                for name in names:
                    _write_bed(staged[out / f"{name}_regions.bed"], chrom, start, end, func)
        _report_rows(tracks, done, len(f["attributions"]), func)
    finally:
        f.close()
    return paths


@deprecated_alias(outdir="out")
def export_bigwig(
    tracks: PathLike,
    out: PathLike,
    chrom_sizes: Mapping[str, int] | PathLike,
    *,
    class_names: Sequence[str] | Mapping[int, str] | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """Write one bigWig of per-base projected scores per target class of a tracks file.

    The projected score of a base is its attribution at the base present (``project``); for
    ISM it is the mean-centred score at the reference base (minus the mean effect of its
    mutations). Windows overlapping each other are resolved at the midpoint between their
    centres (``seqattrib.io.write_bigwig``).

    Parameters
    ----------
    tracks : path
        A tracks file written with ``out=`` and ``regions=`` (genome coordinates).
    out : path
        The folder, made (with its parents) if missing; files are ``{class}.bw``, all written
        or (when the export fails) none.
    chrom_sizes : dict or path
        Chromosome sizes for the bigWig header.
    class_names : list or dict, optional
        Names per target (default ``target{index}``).
    overwrite : bool
        Replace existing files.

    Returns
    -------
    list of Path
    """
    from .bigwig import write_bigwig
    from .regions import Regions

    func = "export_bigwig"
    import_optional("pyBigWig")
    f = open_tracks(tracks, func, "tracks")
    try:
        targets, squeezed = _targets(f)
        names = _class_names(targets, class_names, func)
        if "regions" not in f:
            raise parameter_error(
                func,
                "tracks",
                "a tracks file with genome regions",
                "a file written without regions=",
                "Pass regions= (e.g. from seqattrib.io.extract_windows) when writing the tracks.",
                described=True,
            )
        out = Path(out)
        paths = [out / f"{name}.bw" for name in names]
        _check_outdir(out, paths, overwrite, func)
        done = int(f.attrs["n_completed"])
        axis = int(f.attrs["alphabet_axis"])
        g = f["regions"]
        regions = Regions.from_arrays(
            decode_strings(g["chrom"][:done]),
            g["start"][:done],
            g["end"][:done],
        )
        seq_axis = axis if axis == -1 else 1
        with _all_or_none(paths, func) as staged:
            for k, path in enumerate(paths):
                projected = []
                index = None if squeezed else k
                blocks = (
                    _hypothetical_blocks(f, index, func)
                    if f.attrs["method"] == "ism"
                    else _raw_blocks(f, index)
                )
                for start, block in blocks:
                    x = f["sequences"][start : start + len(block)].astype(np.float32)
                    projected.append((block * x).sum(axis=seq_axis))
                scores = np.concatenate(projected)
                write_bigwig(staged[path], scores, regions, chrom_sizes, overwrite=True)
        _report_rows(tracks, done, len(f["attributions"]), func)
    finally:
        f.close()
    return paths


def _raw_blocks(f: Any, k: int | None) -> Iterator[tuple[int, np.ndarray]]:
    done = int(f.attrs["n_completed"])
    data = f["attributions"]
    step = max(1, _BLOCK_BYTES // (int(np.prod(data.shape[1:])) * 4))
    for start in range(0, done, step):
        block = data[start : min(done, start + step)]
        yield start, block if k is None else block[:, k]
