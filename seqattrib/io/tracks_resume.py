"""Whether an existing tracks file was written for this job: the checks before resuming or
reusing it (settings, model, output function, provenance, regions and the rows of X), each
refusal naming what differs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import parameter_error
from .._validation import first_difference
from ..engine.source import SequenceSource
from .fingerprint import row_hashes
from .hdf5 import damaged, is_hdf5
from .tracks_format import (
    DAMAGED_FIX,
    FORMAT,
    READABLE_FORMATS,
    TrackRegions,
    TracksFile,
    check_tracks,
    decode_strings,
    open_hdf5,
)

FIX = "Pass overwrite=True to replace it, or choose another path."
#: Rows of X hashed at a time when checking them against a file.
_HASH_BLOCK_BYTES = 64 * 2**20


@dataclass(frozen=True)
class FileIdentity:
    """What a file must have been written with to be resumed or reused by this run.

    Built once per job (``FileIdentity.of``); the writer stores it in a new file and compares
    it with an existing one.
    """

    #: Everything that determines the results, as stored (JSON types).
    settings: dict[str, Any]
    model_fingerprint: str
    output_fn: str
    provenance: dict[str, str]
    regions: TrackRegions | None
    #: Row shape of every streamed output as stored, e.g. ``{"attributions": (K, L, 4)}``.
    streams: dict[str, tuple[int, ...]]

    @classmethod
    def of(
        cls,
        *,
        settings: dict[str, Any],
        model_fingerprint: str,
        output_fn: str | None,
        provenance: dict[str, str] | None,
        regions: Any,
        streams: dict[str, tuple[int, ...]],
        source: SequenceSource,
        func: str,
    ) -> FileIdentity:
        """The identity of a job over ``source``.

        Parameters
        ----------
        settings : dict
            Everything that determines the results; a resumed run must match it exactly.
        model_fingerprint : str
            ``seqattrib.io.fingerprint.model_fingerprint`` of the model.
        output_fn : str or None
            ``seqattrib.io.fingerprint.function_identity`` of the output function.
        provenance : dict of str, optional
            Identity of the job's inputs beyond X, e.g. ``{"genome": file digest, "regions":
            digest of the job's regions}`` (compared across shards by ``merge`` too).
        regions : optional
            Genome coordinates of the rows of X, one region per row, each as wide as a row.
        streams : dict
            Row shape of every streamed output as the file stores it.
        """
        track_regions = None
        if regions is not None:
            track_regions = TrackRegions.coerce(regions, source.n_sequences, func)
            _check_widths(track_regions, source.length, func)
        return cls(
            json.loads(settings_text(settings)),
            model_fingerprint,
            str(output_fn),
            {str(k): str(v) for k, v in sorted((provenance or {}).items())},
            track_regions,
            dict(streams),
        )


def settings_text(settings: dict[str, Any]) -> str:
    """``settings`` as the file stores them (JSON, keys sorted)."""
    return json.dumps(settings, sort_keys=True, default=str)


def _check_widths(regions: TrackRegions, length: int, func: str) -> None:
    """Every region must span as many bases as a row of X."""
    widths = regions.end - regions.start
    wrong = np.flatnonzero(widths != length)
    if len(wrong):
        i = int(wrong[0])
        raise parameter_error(
            func,
            "regions",
            f"regions as wide as the sequences ({length} bases)",
            f"region {i} ({regions.label(i)}), {int(widths[i])} bases wide",
            "Pass the windows the sequences were cut from (e.g. seqattrib.io.extract_windows).",
            described=True,
        )


def refuse(func: str, path: str, got: str, expected: str = "") -> Exception:
    return parameter_error(
        func,
        "out",
        expected or "a new path, or a file written for the same job to resume",
        f"{path!r}, {got}",
        FIX,
        described=True,
    )


def inspect(
    path: str, func: str, source: SequenceSource, identity: FileIdentity
) -> tuple[int, int]:
    """(completed rows, stored seed) of an existing file, after checking it was written for
    this job: settings, model, output function, provenance, regions and the rows of X."""
    if not is_hdf5(path):
        raise refuse(func, path, "an unreadable file", "a new path or a seqattrib tracks file")
    with open_hdf5(path, func, "out") as f:
        if f.attrs.get("format") not in READABLE_FORMATS:
            raise refuse(
                func, path, "the existing file", "a new path or a seqattrib tracks file to resume"
            )
        done = check_tracks(f, path, func, "out")
        _check_streams(f, path, func, identity.streams)
        stored = f.json_attribute("settings")
        key = first_difference(stored, identity.settings)
        if key is not None:
            raise refuse(
                func,
                path,
                f"written with {key}={stored.get(key)!r} (now {identity.settings.get(key)!r})",
                "a new path, or a file written with the same settings to resume",
            )
        if f.attrs["format"] != FORMAT:
            raise refuse(
                func,
                path,
                "written by an older seqattrib without the fingerprints that make resuming safe",
            )
        model = str(f.attrs["model_fingerprint"])
        if model != identity.model_fingerprint:
            raise refuse(
                func,
                path,
                f"written with another model (parameters fingerprint {model[:12]}, now "
                f"{identity.model_fingerprint[:12]})",
            )
        output_fn = str(f.attrs["output_fn"])
        if output_fn != identity.output_fn:
            raise refuse(
                func, path, f"written with output_fn {output_fn} (now {identity.output_fn})"
            )
        provenance = f.json_attribute("provenance")
        key = first_difference(provenance, identity.provenance)
        if key is not None:
            was, now = provenance.get(key), identity.provenance.get(key)
            raise refuse(
                func, path, f"written from another {key} ({_short(was)}, now {_short(now)})"
            )
        _check_regions(f, path, func, identity.regions)
        _check_rows(f, path, func, source, done)
        return done, int(f.attrs["seed"])


def _check_streams(
    f: TracksFile, path: str, func: str, streams: dict[str, tuple[int, ...]]
) -> None:
    """Every output this run streams is in the file, with its row shape."""
    for name, row in streams.items():
        if not f.has_dataset(name):
            raise damaged(func, "out", path, f"it lacks the {name!r} dataset", DAMAGED_FIX)
        if tuple(f[name].shape[1:]) != tuple(row):
            detail = f"its {name!r} rows have shape {tuple(f[name].shape[1:])}, not {tuple(row)}"
            raise damaged(func, "out", path, detail, DAMAGED_FIX)


def _short(value: str | None) -> str:
    return "none" if value is None else value[:12]


def _check_regions(f: Any, path: str, func: str, regions: TrackRegions | None) -> None:
    if regions is None and "regions" not in f:
        return
    if regions is None or "regions" not in f:
        had = "with regions" if "regions" in f else "without regions"
        now = "none" if regions is None else "regions"
        raise refuse(func, path, f"written {had} (now {now})")
    g = f["regions"]
    stored = TrackRegions(decode_strings(g["chrom"][:]), g["start"][:], g["end"][:])
    differ = (
        (np.array(stored.chrom, dtype=object) != np.array(regions.chrom, dtype=object))
        | (stored.start != regions.start)
        | (stored.end != regions.end)
    )
    if differ.any():
        i = int(np.flatnonzero(differ)[0])
        raise refuse(
            func,
            path,
            f"written for other regions (row {i}: {stored.label(i)}, now {regions.label(i)})",
        )


def _check_rows(f: Any, path: str, func: str, source: SequenceSource, done: int) -> None:
    """Compare the digests of rows 0..done of X with those stored; name the first range that
    differs."""
    stored = f["row_hashes"]
    step = max(1, _HASH_BLOCK_BYTES // (4 * int(np.prod(source.row_shape))))
    first: int | None = None
    for start in range(0, done, step):
        stop = min(done, start + step)
        differ = (row_hashes(source.read(start, stop)) != stored[start:stop]).any(axis=1)
        if first is None and differ.any():
            first = start + int(np.flatnonzero(differ)[0])
            differ = differ[first - start :]
            start = first
        if first is not None and not differ.all():
            _rows_differ(func, path, first, start + int(np.argmin(differ)) - 1)
    if first is not None:
        _rows_differ(func, path, first, done - 1)


def _rows_differ(func: str, path: str, first: int, last: int) -> None:
    raise refuse(
        func,
        path,
        f"whose stored sequences differ from X in rows {first}..{last}",
        "a file written for the same X to resume",
    )
