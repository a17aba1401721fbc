"""Attribution tracks in HDF5: written as the engine streams, resumable, never over-claiming.

Layout of a tracks file:

- ``attributions``: (N, [K,] L, 4) float32 in the layout of X, chunked per block of sequences,
  gzip-compressed, resizable along N;
- ``sequences``: X itself, int8 for integer input, float16 (exact for 0, 1 and 0.25) for float
  input;
- ``delta``: (N, [K]) float32 when ``return_delta=True``;
- ``regions/chrom``, ``regions/start``, ``regions/end`` when regions are given;
- attributes: every setting of the run (``settings``, JSON, plus one attribute per setting),
  backend, model description, package version, and ``n_completed``.

Only the first ``n_completed`` rows are valid. A block of rows is written and flushed before
``n_completed`` moves past it, and the file is in HDF5's single-writer mode (SWMR), whose ordered
metadata writes keep the file readable when a process is killed. A rerun with the same settings
continues after the last complete block.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional
from .._version import __version__
from ..engine.source import SequenceSource

FORMAT = "seqattrib.tracks/1"
_CHUNK_BYTES = 2**20


@dataclass
class TrackRegions:
    """Genome coordinates of the rows of X (0-based, end exclusive)."""

    chrom: Sequence[str]
    start: np.ndarray
    end: np.ndarray

    @classmethod
    def coerce(cls, regions: Any, n: int, func: str) -> TrackRegions:
        try:
            out = cls(
                [str(c) for c in regions.chrom],
                np.asarray(regions.start, np.int64),
                np.asarray(regions.end, np.int64),
            )
        except AttributeError as exc:
            raise parameter_error(
                func,
                "regions",
                "None or an object with chrom, start and end (e.g. seqattrib.io.read_regions)",
                type(regions).__name__,
                error=TypeError,
                described=True,
            ) from exc
        if not len(out.chrom) == len(out.start) == len(out.end) == n:
            raise parameter_error(
                func,
                "regions",
                f"one region per sequence ({n})",
                f"{len(out.chrom)} regions",
                described=True,
            )
        return out


class TrackWriter:
    """A sink that writes finished sequences to an HDF5 tracks file."""

    def __init__(
        self, path: str, h5file: Any, source: SequenceSource, squeeze: bool, n_completed: int
    ) -> None:
        self.path = path
        self.file = h5file
        self.source = source
        self.squeeze = squeeze
        self.n_completed = n_completed

    def write(self, start: int, block: dict[str, np.ndarray]) -> None:
        if start != self.n_completed:
            raise RuntimeError(f"tracks file expected rows from {self.n_completed}, got {start}")
        f = self.file
        n = 0
        for name, values in block.items():
            n = len(values)
            f[name][start : start + n] = values[:, 0] if self.squeeze else values
        sequences = f["sequences"]
        local = start - self.source.offset
        sequences[start : start + n] = self.source.read(local, local + n).astype(sequences.dtype)
        f.flush()  # the rows are on disk before the file claims them
        f.attrs["n_completed"] = np.int64(start + n)
        f.flush()
        self.n_completed = start + n

    def result(self) -> str:
        self.close()
        return self.path

    def close(self) -> None:
        if self.file.id.valid:
            self.file.close()


def _settings_text(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True, default=str)


def open_track_writer(
    path: str | os.PathLike[str],
    *,
    func: str,
    source: SequenceSource,
    shapes: dict[str, tuple[int, ...]],
    squeeze: bool,
    settings: dict[str, Any],
    seed: int,
    adopt_seed: bool,
    description: dict[str, str],
    regions: Any = None,
    overwrite: bool = False,
    block_sequences: int = 1024,
) -> tuple[TrackWriter, int]:
    """Create a tracks file, or reopen one written with the same settings to resume it.

    Parameters
    ----------
    shapes : dict
        Row shape of every streamed output, e.g. ``{"attributions": (K, L, 4)}``.
    squeeze : bool
        Drop the target axis (an int target).
    settings : dict
        Everything that determines the results; a resumed run must match it exactly.
    seed, adopt_seed : int, bool
        The run's random seed; with ``adopt_seed`` (random_state None or a Generator) a resumed
        run takes the seed stored in the file instead.
    description : dict
        Backend and model description (stored, not compared).

    Returns
    -------
    writer, seed : the sink and the seed the run must use.
    """
    h5py = import_optional("h5py")
    path = os.fspath(path)
    if not isinstance(overwrite, bool):
        raise parameter_error(func, "overwrite", "True or False", overwrite, error=TypeError)
    n = source.n_sequences
    if os.path.exists(path) and overwrite:
        os.remove(path)
    if os.path.exists(path):
        return _resume(h5py, path, func, source, squeeze, settings, seed, adopt_seed)
    regions_ = TrackRegions.coerce(regions, n, func) if regions is not None else None
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise parameter_error(
            func, "out", "a path in an existing folder", path, f"Create {directory} first."
        )
    f = h5py.File(path, "w", libver="latest")
    try:
        for name, row in shapes.items():
            row = row[1:] if squeeze else row
            row_bytes = 4 * int(np.prod(row)) or 4
            chunk = max(1, min(block_sequences, n, _CHUNK_BYTES // row_bytes))
            f.create_dataset(
                name,
                shape=(n, *row),
                maxshape=(None, *row),
                dtype=np.float32,
                chunks=(chunk, *row),
                compression="gzip",
                compression_opts=4,
                shuffle=True,
                fillvalue=np.nan,
            )
        integer = np.dtype(getattr(source.data, "dtype", np.float32)).kind in "iub"
        row_bytes = int(np.prod(source.row_shape))
        f.create_dataset(
            "sequences",
            shape=(n, *source.row_shape),
            maxshape=(None, *source.row_shape),
            dtype=np.int8 if integer else np.float16,
            chunks=(max(1, min(n, block_sequences, _CHUNK_BYTES // row_bytes)), *source.row_shape),
            compression="gzip",
            compression_opts=4,
        )
        if regions_ is not None:
            group = f.create_group("regions")
            group.create_dataset(
                "chrom", data=np.array(regions_.chrom, dtype=object), dtype=h5py.string_dtype()
            )
            group.create_dataset("start", data=np.asarray(regions_.start, np.int64))
            group.create_dataset("end", data=np.asarray(regions_.end, np.int64))
        f.attrs["format"] = FORMAT
        f.attrs["settings"] = _settings_text(settings)
        for key, value in settings.items():
            f.attrs[key] = (
                json.dumps(value, default=str)
                if isinstance(value, (list, dict))
                else ("None" if value is None else value)
            )
        for key, value in description.items():
            f.attrs[key] = value
        f.attrs["seed"] = np.int64(seed)
        f.attrs["version"] = __version__
        f.attrs["n_completed"] = np.int64(0)
        f.swmr_mode = True
    except BaseException:
        f.close()
        os.remove(path)
        raise
    return TrackWriter(path, f, source, squeeze, 0), seed


def _resume(
    h5py: Any,
    path: str,
    func: str,
    source: SequenceSource,
    squeeze: bool,
    settings: dict[str, Any],
    seed: int,
    adopt_seed: bool,
) -> tuple[TrackWriter, int]:
    fix = "Pass overwrite=True to replace it, or choose another path."
    try:
        f = h5py.File(path, "r+", libver="latest")
    except OSError:
        try:  # a writer killed in SWMR mode leaves the file flagged as open: copy it clean
            _recover(h5py, path)
            f = h5py.File(path, "r+", libver="latest")
        except OSError as exc:
            raise parameter_error(
                func,
                "out",
                "a new path or a seqattrib tracks file",
                f"an unreadable file {path!r}",
                fix,
                described=True,
            ) from exc
    try:
        if f.attrs.get("format") != FORMAT:
            raise parameter_error(
                func,
                "out",
                "a new path or a seqattrib tracks file to resume",
                f"the existing file {path!r}",
                fix,
                described=True,
            )
        stored = json.loads(f.attrs["settings"])
        current = json.loads(_settings_text(settings))
        for key in sorted(set(stored) | set(current)):
            if stored.get(key) != current.get(key):
                raise parameter_error(
                    func,
                    "out",
                    "a new path, or a file written with the same settings to resume",
                    f"{path!r}, written with {key}={stored.get(key)!r} (now {current.get(key)!r})",
                    fix,
                    described=True,
                )
        done = int(f.attrs["n_completed"])
        if done:
            check = sorted({0, done - 1})
            written = f["sequences"][check].astype(np.float32)
            now = np.stack([source.read(i, i + 1)[0] for i in check])
            if not np.array_equal(written, now.astype(f["sequences"].dtype).astype(np.float32)):
                raise parameter_error(
                    func,
                    "out",
                    "a file written for the same X to resume",
                    f"{path!r}, whose stored sequences differ from X",
                    fix,
                    described=True,
                )
        stored_seed = int(f.attrs["seed"])
        f.swmr_mode = True
    except BaseException:
        f.close()
        raise
    use_seed = stored_seed if adopt_seed else seed
    return TrackWriter(path, f, source, squeeze, done), use_seed


def _recover(h5py: Any, path: str) -> None:
    """Rewrite a file whose writer died (readable in SWMR read mode) without its open flag."""
    partial = path + ".recovering"
    with h5py.File(path, "r", libver="latest", swmr=True) as source:
        if source.attrs.get("format") != FORMAT:
            raise OSError("not a tracks file")
        with h5py.File(partial, "w", libver="latest") as target:
            for name in source:
                source.copy(source[name], target, name=name)
            for key, value in source.attrs.items():
                target.attrs[key] = value
    os.replace(partial, path)


@dataclass
class Tracks:
    """The valid rows of a tracks file, read into memory."""

    attributions: np.ndarray
    sequences: np.ndarray
    delta: np.ndarray | None = None
    regions: TrackRegions | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def settings(self) -> dict[str, Any]:
        return dict(json.loads(self.attrs["settings"]))


def read_tracks(path: str | os.PathLike[str], rows: slice | None = None) -> Tracks:
    """Read the completed rows of a tracks file.

    Parameters
    ----------
    path : str
        A file written with ``out=``.
    rows : slice, optional
        Read only these rows (of the completed ones).

    Returns
    -------
    Tracks
        ``attributions`` (n, [K,] L, 4) float32 in the layout of X, ``sequences`` (n, L, 4)-like
        as float32, ``delta`` or None, ``regions`` or None, and the file's attributes.
    """
    h5py = import_optional("h5py")
    if not os.path.isfile(path):
        raise parameter_error(
            "read_tracks",
            "path",
            "an existing tracks file",
            os.fspath(path),
            error=FileNotFoundError,
            described=True,
        )
    with h5py.File(os.fspath(path), "r", libver="latest", swmr=True) as f:
        if f.attrs.get("format") != FORMAT:
            raise parameter_error(
                "read_tracks",
                "path",
                "a seqattrib tracks file",
                os.fspath(path),
                described=True,
            )
        done = int(f.attrs["n_completed"])
        select = range(done)[rows if rows is not None else slice(None)]
        part = slice(select.start, select.stop, select.step) if len(select) else slice(0, 0)
        attributions = f["attributions"][part]
        sequences = f["sequences"][part].astype(np.float32)
        delta = f["delta"][part] if "delta" in f else None
        regions = None
        if "regions" in f:
            g = f["regions"]
            regions = TrackRegions(
                [c.decode() if isinstance(c, bytes) else str(c) for c in g["chrom"][part]],
                g["start"][part],
                g["end"][part],
            )
        attrs = {
            key: (value.item() if isinstance(value, np.generic) else value)
            for key, value in f.attrs.items()
        }
    return Tracks(attributions, sequences, delta, regions, attrs)
