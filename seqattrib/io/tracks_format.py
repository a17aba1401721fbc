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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional

FORMAT = "seqattrib.tracks/2"
#: Formats the readers accept (version 1 files have no fingerprints and are never resumed).
READABLE_FORMATS = ("seqattrib.tracks/1", FORMAT)


@dataclass
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


def open_tracks(path: str | os.PathLike[str], func: str, param: str) -> Any:
    """Open a tracks file for reading (no lock; SWMR, so a file being written opens too) after
    checking its format and its completed row count. The caller closes it."""
    h5py = import_optional("h5py")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise parameter_error(
            func, param, "an existing tracks file", path, error=FileNotFoundError, described=True
        )
    try:
        f = h5py.File(path, "r", swmr=True)
    except OSError as exc:
        raise parameter_error(
            func, param, "a tracks file written with out=", f"an unreadable file {path!r}",
            described=True,
        ) from exc  # fmt: skip
    try:
        check_tracks(f, path, func, param)
    except BaseException:
        f.close()
        raise
    return f


def check_tracks(f: Any, path: str, func: str, param: str) -> int:
    """The completed row count of an open tracks file, after checking format and counts."""
    if f.attrs.get("format") not in READABLE_FORMATS:
        raise parameter_error(
            func, param, "a tracks file written with out=", os.fspath(path), described=True
        )
    done = f.attrs.get("n_completed")
    names = ("attributions", "sequences", "delta", "row_hashes")
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
    with open_tracks(path, "read_tracks", "path") as f:
        done = int(f.attrs["n_completed"])
        select = range(done)[rows if rows is not None else slice(None)]
        part = slice(select.start, select.stop, select.step) if len(select) else slice(0, 0)
        attributions = f["attributions"][part]
        sequences = f["sequences"][part].astype(np.float32)
        delta = f["delta"][part] if "delta" in f else None
        regions = None
        if "regions" in f:
            g = f["regions"]
            chrom = decode_strings(g["chrom"][part])
            regions = TrackRegions(chrom, g["start"][part], g["end"][part])
        attrs = {
            key: (value.item() if isinstance(value, np.generic) else value)
            for key, value in f.attrs.items()
        }
    return Tracks(attributions, sequences, delta, regions, attrs)
