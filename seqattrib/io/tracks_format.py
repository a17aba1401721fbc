"""The tracks file format: its layout, the checks every reader makes, and the reader.

Layout of a tracks file:

- ``attributions``: (N, [K,] L, 4) float32 in the layout of X, chunked, gzip-compressed,
  resizable along N;
- ``sequences``: X itself, int8 for integer input, float16 (exact for 0, 1 and 0.25) for float
  input;
- ``row_hashes``: (N, 16) uint8, a digest of each row of X (its float32 values);
- ``delta``: (N, [K]) float32 when ``return_delta=True``;
- ``regions/chrom``, ``regions/start``, ``regions/end`` when regions are given;
- attributes: every setting of the run (``settings``, JSON, plus one attribute per setting),
  backend, model description, package version, ``model_fingerprint`` (every parameter and
  buffer value), ``output_fn`` (its identity, or "None"), ``provenance`` (JSON: the genome and
  the regions of the whole job, when the command line knows them), ``regions_fingerprint``,
  and ``n_completed``.

Only the first ``n_completed`` rows are valid.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional
from .hdf5 import damaged, is_hdf5, open_read, short_reason

FORMAT = "seqattrib.tracks/2"
#: Formats the readers accept (version 1 files have no fingerprints and are never resumed).
READABLE_FORMATS = ("seqattrib.tracks/1", FORMAT)


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

    def label(self, i: int) -> str:
        return f"{self.chrom[i]}:{self.start[i]}-{self.end[i]}"


#: The way out of a damaged tracks file, in the message of every reader.
DAMAGED_FIX = "Delete it and rerun the job that wrote it (or rerun it with overwrite=True)."
#: Datasets every tracks file has (``row_hashes`` since format 2).
_REQUIRED = ("sequences",)
#: The results of a tracks file: one of these (``dependency`` for ``dependency_map``).
_RESULTS = ("attributions", "dependency", "predictions")


class TracksFile:
    """An open tracks file (or a group, dataset or attributes in it) whose reads report a
    damaged file on one line: a missing dataset or attribute, or data HDF5 cannot read.

    It reads like the h5py object it wraps (``f["attributions"][a:b]``, ``f.attrs[...]``,
    ``"delta" in f``) and closes like it (``with``, ``close``).
    """

    def __init__(self, obj: Any, h5py: Any, path: str, func: str, param: str) -> None:
        self._obj = obj
        self._h5py = h5py
        self._where = (path, func, param)

    def _wrap(self, value: Any) -> Any:
        h5py = self._h5py
        if isinstance(value, (h5py.Group, h5py.Dataset, h5py.AttributeManager)):
            return TracksFile(value, h5py, *self._where)
        return value

    def _call(self, function: Any, *args: Any) -> Any:
        try:
            return self._wrap(function(*args))
        except (OSError, RuntimeError, KeyError) as exc:
            path, func, param = self._where
            detail = short_reason(exc)
            if isinstance(exc, KeyError) and function == self._obj.__getitem__:
                kind = (
                    "attribute" if isinstance(self._obj, self._h5py.AttributeManager) else "entry"
                )
                detail = f"it lacks the {kind} {args[0]!r}"
            raise damaged(func, param, path, detail, DAMAGED_FIX) from exc

    def __getitem__(self, key: Any) -> Any:
        return self._call(self._obj.__getitem__, key)

    def __contains__(self, key: str) -> bool:
        return bool(self._call(self._obj.__contains__, key))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._call(list, self._obj))

    def __len__(self) -> int:
        return int(self._call(len, self._obj))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # ours are set in __init__; h5py's private ones stay hidden
            raise AttributeError(name)
        value = self._call(getattr, self._obj, name)
        if callable(value) and not isinstance(value, TracksFile):
            return lambda *args: self._call(value, *args)
        return value

    def has_dataset(self, name: str) -> bool:
        """Whether ``name`` is a dataset of this file or group."""
        return name in self and isinstance(getattr(self[name], "_obj", None), self._h5py.Dataset)

    def json_attribute(self, key: str, default: str | None = None) -> Any:
        """The attribute ``key`` parsed as JSON (``default`` when it is absent)."""
        text = self.attrs[key] if default is None else self.attrs.get(key, default)
        try:
            return json.loads(text)
        except (TypeError, ValueError) as exc:
            path, func, param = self._where
            detail = f"its {key!r} attribute is not JSON"
            raise damaged(func, param, path, detail, DAMAGED_FIX) from exc

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def close(self) -> None:
        self._obj.close()

    def __enter__(self) -> TracksFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_tracks(path: str | os.PathLike[str], func: str, param: str) -> TracksFile:
    """Open a tracks file for reading (no lock; a file being written opens too) after checking
    its format, its datasets and its completed row count. A damaged or truncated file is
    refused at once. The caller closes it."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise parameter_error(
            func, param, "an existing tracks file", path, error=FileNotFoundError, described=True
        )
    if not is_hdf5(path):
        raise parameter_error(
            func, param, "a tracks file written with out=", f"an unreadable file {path!r}",
            "It is not an HDF5 file.", described=True,
        )  # fmt: skip
    f = open_hdf5(path, func, param)
    try:
        check_tracks(f, path, func, param)
    except BaseException:
        f.close()
        raise
    return f


def open_hdf5(path: str, func: str, param: str) -> TracksFile:
    """Open an HDF5 file for reading, unchecked; a damaged or truncated one is refused."""
    h5py = import_optional("h5py")
    return TracksFile(open_read(h5py, path, func, param, DAMAGED_FIX), h5py, path, func, param)


def check_tracks(f: TracksFile, path: str, func: str, param: str) -> int:
    """The completed row count of an open tracks file, after checking its format, datasets,
    settings and counts."""
    if f.attrs.get("format") not in READABLE_FORMATS:
        raise parameter_error(
            func, param, "a tracks file written with out=", os.fspath(path), described=True
        )
    required = _REQUIRED + (("row_hashes",) if f.attrs["format"] == FORMAT else ())
    for name in required:
        if not f.has_dataset(name):
            detail = f"it lacks the {name!r} dataset"
            raise damaged(func, param, path, detail, DAMAGED_FIX)
    if not any(f.has_dataset(name) for name in _RESULTS):
        raise damaged(func, param, path, "it lacks the 'attributions' dataset", DAMAGED_FIX)
    settings = f.json_attribute("settings")
    if not isinstance(settings, dict) or "targets" not in settings:
        detail = "its 'settings' attribute is not the settings of a run"
        raise damaged(func, param, path, detail, DAMAGED_FIX)
    done = f.attrs.get("n_completed")
    names = (*_RESULTS, "effects", "sequences", "delta", "row_hashes")
    rows = [len(f[name]) for name in names if name in f]
    if "regions" in f:
        rows += [len(f["regions"][key]) for key in ("chrom", "start", "end")]
    if (
        not isinstance(done, (int, np.integer))
        or isinstance(done, (bool, np.bool_))
        or not 0 <= int(done) <= min(rows)
    ):
        raise parameter_error(
            func,
            param,
            "an intact tracks file",
            f"{path!r}, which claims {plain(done)} completed rows of {min(rows)}",
            "The file was altered or damaged: rerun the job that wrote it.",
            described=True,
        )
    return int(done)


def plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def decode_strings(values: Any) -> list[str]:
    return [c.decode() if isinstance(c, bytes) else str(c) for c in values]


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
    func = "read_tracks"
    if rows is not None and not isinstance(rows, slice):
        raise parameter_error(
            func, "rows", "None or a slice", rows, "Pass e.g. rows=slice(5, 6) for row 5.",
            error=TypeError,
        )  # fmt: skip
    with open_tracks(path, func, "path") as f:
        done = int(f.attrs["n_completed"])
        select = _select(done, rows)
        part = slice(select.start, select.stop, select.step) if len(select) else slice(0, 0)
        attributions = f["attributions"][part]
        sequences = f["sequences"][part].astype(np.float32)
        delta = f["delta"][part] if "delta" in f else None
        regions = None
        if "regions" in f:
            g = f["regions"]
            chrom = decode_strings(g["chrom"][part])
            regions = TrackRegions(chrom, g["start"][part], g["end"][part])
        attrs = {key: plain(value) for key, value in f.attrs.items()}
    return Tracks(attributions, sequences, delta, regions, attrs)


def _select(done: int, rows: slice | None) -> range:
    """The completed rows a slice selects; a slice starting past them, or going backwards,
    is refused."""
    if rows is None:
        return range(done)
    try:
        select = range(done)[rows]
    except (TypeError, ValueError) as exc:
        raise parameter_error(
            "read_tracks", "rows", "a slice of integers", rows, error=TypeError
        ) from exc
    if select.step < 0:
        raise parameter_error(
            "read_tracks",
            "rows",
            "a slice with a positive step",
            rows,
            "Reverse the rows after reading.",
        )
    if rows.start is not None and rows.start > done:
        raise parameter_error(
            "read_tracks",
            "rows",
            f"a slice within the {done} completed rows",
            rows,
            f"Pass rows that start at most at {done}.",
        )
    return select
