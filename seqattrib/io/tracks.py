"""Attribution tracks in HDF5: written as the engine streams, resumable, never over-claiming.

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

Only the first ``n_completed`` rows are valid. Rows are written, and flushed, in whole chunks
before ``n_completed`` moves past them, so a write never touches a chunk that holds claimed
rows; the file is in HDF5's single-writer mode (SWMR), whose ordered metadata writes keep it
readable when a process is killed. One process writes a file at a time (``lock.py``). A rerun
with the same settings, model, output function, inputs and regions continues after the last
complete chunk; any difference is refused, naming it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional
from .._version import __version__
from ..engine.source import SequenceSource
from . import lock as _lock
from ._hdf5 import LIBVER, abandon, clear_write_flags, failure
from .fingerprint import ROW_HASH_BYTES, regions_fingerprint, row_hashes

FORMAT = "seqattrib.tracks/2"
#: Formats the readers accept (version 1 files have no fingerprints and are never resumed).
READABLE_FORMATS = ("seqattrib.tracks/1", FORMAT)
_CHUNK_BYTES = 2**20
_HASH_BLOCK_BYTES = 64 * 2**20
_FIX = "Pass overwrite=True to replace it, or choose another path."


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


@dataclass
class _Identity:
    """What a file must have been written with to be resumed or reused by this run."""

    settings: dict[str, Any]
    model_fingerprint: str
    output_fn: str
    provenance: dict[str, str]
    regions: TrackRegions | None


class TrackWriter:
    """A sink that writes finished sequences to an HDF5 tracks file, holding its write lock.

    Rows are committed in whole chunks (the last rows of X excepted): rows of a partial chunk
    wait in memory for the next block. While writing, SIGTERM (a scheduler's stop) abandons the
    rows being computed (a commit in progress finishes first) and stops the run with
    ``InterruptedError``; the file claims only complete rows and a rerun resumes it.
    """

    def __init__(
        self,
        path: str,
        h5file: Any,
        source: SequenceSource,
        squeeze: bool,
        n_completed: int,
        *,
        func: str = "open_track_writer",
        lock: _lock.WriteLock | None = None,
        chunk_rows: int = 1,
    ) -> None:
        self.path = path
        self.file = h5file
        self.source = source
        self.squeeze = squeeze
        self.n_completed = n_completed
        self.func = func
        self.lock = lock
        self.chunk_rows = chunk_rows
        self._pending: list[dict[str, np.ndarray]] = []
        self._n_pending = 0
        self._in_commit = False
        self._stop_signal: str | None = None
        self._previous_handler: Any = None
        # Open once and kept open: closing a dataset flushes its chunk cache, and h5py reports
        # a failure there (a full disk) nowhere; writes fail in ``flush`` instead.
        self._datasets = {name: h5file[name] for name in h5file} if h5file is not None else {}
        if h5file is not None:
            self._catch_sigterm()

    # ----------------------------------------------------------------- signals
    def _catch_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
            return  # the application handles SIGTERM itself
        self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)

    def _restore_sigterm(self) -> None:
        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self._stop_signal = "SIGTERM"
        if not self._in_commit:
            raise self._stopped()

    def _stopped(self) -> InterruptedError:
        return InterruptedError(
            f"{self.func} stopped by {self._stop_signal}: {self.path!r} holds {self.n_completed} "
            f"complete rows of {self.source.n_sequences}. Rerun the same command to resume."
        )

    # ----------------------------------------------------------------- rows
    def write(self, start: int, block: dict[str, np.ndarray]) -> None:
        if self._stop_signal is not None:
            raise self._stopped()
        expected = self.n_completed + self._n_pending
        if start != expected:
            raise RuntimeError(f"tracks file expected rows from {expected}, got {start}")
        if self.file is None:
            raise RuntimeError(f"tracks file {self.path!r} is closed")
        self._pending.append(block)
        self._n_pending += len(next(iter(block.values())))
        end = self.n_completed + self._n_pending
        stop = end if end == self.source.n_sequences else end - end % self.chunk_rows
        if stop > self.n_completed:
            self._commit(stop)
        if self._stop_signal is not None:
            raise self._stopped()

    def _take(self, n: int) -> dict[str, np.ndarray]:
        names = list(self._pending[0])
        joined = {name: np.concatenate([b[name] for b in self._pending]) for name in names}
        rest = {name: values[n:] for name, values in joined.items()}
        self._pending = [rest] if self._n_pending > n else []
        self._n_pending -= n
        return {name: values[:n] for name, values in joined.items()}

    def _commit(self, stop: int) -> None:
        first = self.n_completed
        n = stop - first
        local = first - self.source.offset
        x = self.source.read(local, local + n)  # may refuse X: before anything is written
        hashes = row_hashes(x)
        values = self._take(n)
        f, datasets = self.file, self._datasets
        self._in_commit = True
        try:
            for name, rows in values.items():
                datasets[name][first:stop] = rows[:, 0] if self.squeeze else rows
            datasets["sequences"][first:stop] = x.astype(datasets["sequences"].dtype)
            datasets["row_hashes"][first:stop] = hashes
            f.flush()  # the rows are on disk before the file claims them
            f.attrs["n_completed"] = np.int64(stop)
            f.flush()
        except (OSError, RuntimeError) as exc:  # h5py reports failed writes as either
            self._give_up()
            action = f"writing rows {first}..{stop - 1}"
            raise _write_error(self.func, self.path, action, exc, first) from exc
        finally:
            self._in_commit = False
        self.n_completed = stop

    # ----------------------------------------------------------------- end
    def _give_up(self) -> None:
        """After a failed write: close without writing more, release the lock."""
        self._restore_sigterm()
        if self.file is not None:
            abandon(self.file)
            self.file = None
            self._datasets = {}
        self._release()

    def _release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def result(self) -> str:
        self.close()
        return self.path

    def close(self) -> None:
        self._restore_sigterm()
        f, self.file, self._datasets = self.file, None, {}
        try:
            if f is not None and f.id.valid:
                try:
                    f.flush()  # a failure surfaces here, where it can be handled: not in close
                    f.close()
                except (OSError, RuntimeError) as exc:
                    abandon(f)
                    raise _write_error(
                        self.func, self.path, "closing the file", exc, self.n_completed
                    ) from exc
        finally:
            self._release()
        if self._stop_signal is not None and self.n_completed < self.source.n_sequences:
            # Whatever the signal interrupted may have turned InterruptedError into another
            # error (C code replaces the errors it sees): the stop is what the user must read.
            raise self._stopped()


def _write_error(func: str, path: str, action: str, exc: BaseException, kept: int) -> OSError:
    code, reason = failure(exc)
    error = cast(
        OSError,
        parameter_error(
            func,
            "out",
            "a file on a disk that can hold the results",
            f"{path!r}: {action} failed ({reason})",
            f"The file keeps its {kept} complete rows: free space (or fix the disk) and rerun the "
            "same command to resume.",
            error=OSError,
            described=True,
        ),
    )
    error.errno = code
    return error


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
    model_fingerprint: str,
    output_fn: str | None,
    provenance: dict[str, str] | None = None,
    regions: Any = None,
    overwrite: bool = False,
    block_sequences: int = 1024,
) -> tuple[TrackWriter, int]:
    """Create a tracks file, or reopen one written for the same job to resume (or reuse) it.

    The file is locked for writing until the writer is closed; another process writing it is
    an error naming that process.

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
    model_fingerprint : str
        ``seqattrib.io.fingerprint.model_fingerprint`` of the model (compared).
    output_fn : str or None
        ``seqattrib.io.fingerprint.function_identity`` of the output function (compared).
    provenance : dict of str, optional
        Identity of the job's inputs beyond X, e.g. ``{"genome": file digest, "regions":
        digest of the job's regions}`` (compared, and compared across shards by ``merge``).
    regions : optional
        Genome coordinates of the rows of X (stored and compared).

    Returns
    -------
    writer, seed : the sink and the seed the run must use.
    """
    h5py = import_optional("h5py")
    path = os.fspath(path)
    if not isinstance(overwrite, bool):
        raise parameter_error(func, "overwrite", "True or False", overwrite, error=TypeError)
    n = source.n_sequences
    identity = _Identity(
        json.loads(_settings_text(settings)),
        model_fingerprint,
        str(output_fn),
        {str(k): str(v) for k, v in sorted((provenance or {}).items())},
        TrackRegions.coerce(regions, n, func) if regions is not None else None,
    )
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise parameter_error(
            func, "out", "a path in an existing folder", path, f"Create {directory} first."
        )
    held = _lock.acquire(path, func)
    if held is None:
        return _reuse_read_only(
            h5py, path, func, source, squeeze, identity, seed, adopt_seed, overwrite
        )
    try:
        if os.path.exists(path + ".creating"):  # left by a run killed while creating the file
            os.remove(path + ".creating")
        if os.path.exists(path) and overwrite:
            os.remove(path)
        if os.path.exists(path):
            return _resume(h5py, path, func, source, squeeze, identity, seed, adopt_seed, held)
        writer = _create(
            h5py, path, func, source, shapes, squeeze, identity, seed, description,
            block_sequences, held,
        )  # fmt: skip
    except BaseException:
        held.release()
        raise
    return writer, seed


def _create(
    h5py: Any,
    path: str,
    func: str,
    source: SequenceSource,
    shapes: dict[str, tuple[int, ...]],
    squeeze: bool,
    identity: _Identity,
    seed: int,
    description: dict[str, str],
    block_sequences: int,
    held: _lock.WriteLock,
) -> TrackWriter:
    """A new file, built under a temporary name and renamed once complete (empty of rows)."""
    n = source.n_sequences
    rows = {name: (row[1:] if squeeze else row) for name, row in shapes.items()}
    widest = max([4 * int(np.prod(row)) for row in rows.values()] + [4 * source.row_shape[0] * 4])
    chunk = max(1, min(block_sequences, n, _CHUNK_BYTES // widest))
    temp = path + ".creating"
    try:
        f = h5py.File(temp, "w", libver=LIBVER)
    except OSError as exc:
        if os.path.exists(temp):
            os.remove(temp)
        raise _write_error(func, path, "creating the file", exc, 0) from exc
    try:
        for name, row in rows.items():
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
        f.create_dataset(
            "sequences",
            shape=(n, *source.row_shape),
            maxshape=(None, *source.row_shape),
            dtype=np.int8 if integer else np.float16,
            chunks=(chunk, *source.row_shape),
            compression="gzip",
            compression_opts=4,
        )
        f.create_dataset(
            "row_hashes",
            shape=(n, ROW_HASH_BYTES),
            maxshape=(None, ROW_HASH_BYTES),
            dtype=np.uint8,
            chunks=(chunk, ROW_HASH_BYTES),
        )
        regions = identity.regions
        if regions is not None:
            group = f.create_group("regions")
            group.create_dataset(
                "chrom", data=np.array(regions.chrom, dtype=object), dtype=h5py.string_dtype()
            )
            group.create_dataset("start", data=np.asarray(regions.start, np.int64))
            group.create_dataset("end", data=np.asarray(regions.end, np.int64))
            f.attrs["regions_fingerprint"] = regions_fingerprint(
                regions.chrom, regions.start, regions.end
            )
        f.attrs["format"] = FORMAT
        f.attrs["settings"] = _settings_text(identity.settings)
        for key, value in identity.settings.items():
            f.attrs[key] = (
                json.dumps(value, default=str)
                if isinstance(value, (list, dict))
                else ("None" if value is None else value)
            )
        for key, value in description.items():
            f.attrs[key] = value
        f.attrs["model_fingerprint"] = identity.model_fingerprint
        f.attrs["output_fn"] = identity.output_fn
        f.attrs["provenance"] = json.dumps(identity.provenance, sort_keys=True)
        f.attrs["seed"] = np.int64(seed)
        f.attrs["version"] = __version__
        f.attrs["n_completed"] = np.int64(0)
        f.swmr_mode = True  # before the file appears: readers open it from the first moment
        os.replace(temp, path)
    except BaseException as exc:
        abandon(f)
        for leftover in (temp, path):  # the path did not exist: whatever is there is ours
            if os.path.exists(leftover):
                os.remove(leftover)
        if isinstance(exc, (OSError, RuntimeError)):
            raise _write_error(func, path, "creating the file", exc, 0) from exc
        raise
    return TrackWriter(path, f, source, squeeze, 0, func=func, lock=held, chunk_rows=chunk)


def _resume(
    h5py: Any,
    path: str,
    func: str,
    source: SequenceSource,
    squeeze: bool,
    identity: _Identity,
    seed: int,
    adopt_seed: bool,
    held: _lock.WriteLock,
) -> tuple[TrackWriter, int]:
    try:
        clear_write_flags(path)  # stale: we hold the lock, so their writer is gone
    except OSError:
        pass  # not writable here, or not an HDF5 file: the checks below say which
    done, stored_seed = _inspect(h5py, path, func, source, identity)
    use_seed = stored_seed if adopt_seed else seed
    if done == source.n_sequences:
        held.release()  # finished: reused as it is, nothing is written
        return TrackWriter(path, None, source, squeeze, done, func=func), use_seed
    try:
        f = h5py.File(path, "r+", libver=LIBVER)
    except OSError as exc:
        raise _write_error(func, path, "reopening the file", exc, done) from exc
    try:
        chunk = int(f["attributions"].chunks[0])
        f.swmr_mode = True
    except BaseException as exc:
        abandon(f)
        if isinstance(exc, (OSError, RuntimeError)):
            raise _write_error(func, path, "reopening the file", exc, done) from exc
        raise
    writer = TrackWriter(path, f, source, squeeze, done, func=func, lock=held, chunk_rows=chunk)
    return writer, use_seed


def _reuse_read_only(
    h5py: Any,
    path: str,
    func: str,
    source: SequenceSource,
    squeeze: bool,
    identity: _Identity,
    seed: int,
    adopt_seed: bool,
    overwrite: bool,
) -> tuple[TrackWriter, int]:
    """In a folder this process cannot write: a finished file of the same job is reused."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(path) or overwrite:
        raise parameter_error(
            func,
            "out",
            "a path in a folder this process can write to",
            f"{path!r} in the read-only folder {folder!r}",
            "Choose a writable folder.",
            error=PermissionError,
            described=True,
        )
    done, stored_seed = _inspect(h5py, path, func, source, identity)
    if done < source.n_sequences:
        raise parameter_error(
            func,
            "out",
            "a finished file, or one in a folder this process can write to",
            f"{path!r} ({done} of {source.n_sequences} rows) in the read-only folder {folder!r}",
            "Resume it where the folder is writable (or copy it there).",
            error=PermissionError,
            described=True,
        )
    return TrackWriter(path, None, source, squeeze, done, func=func), (
        stored_seed if adopt_seed else seed
    )


def _refuse(func: str, path: str, got: str, expected: str = "") -> Exception:
    return parameter_error(
        func,
        "out",
        expected or "a new path, or a file written for the same job to resume",
        f"{path!r}, {got}",
        _FIX,
        described=True,
    )


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
            f"{path!r}, which claims {_plain(done)} completed rows of {min(rows)}",
            "The file was altered or damaged: rerun the job that wrote it.",
            described=True,
        )
    return int(done)


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _inspect(
    h5py: Any, path: str, func: str, source: SequenceSource, identity: _Identity
) -> tuple[int, int]:
    """(completed rows, stored seed) of an existing file, after checking it was written for
    this job: settings, model, output function, provenance, regions and the rows of X."""
    try:
        f = h5py.File(path, "r", swmr=True)
    except OSError as exc:
        raise _refuse(
            func, path, "an unreadable file", "a new path or a seqattrib tracks file"
        ) from exc
    with f:
        if f.attrs.get("format") not in READABLE_FORMATS:
            raise _refuse(
                func, path, "the existing file", "a new path or a seqattrib tracks file to resume"
            )
        done = check_tracks(f, path, func, "out")
        stored = json.loads(f.attrs["settings"])
        for key in sorted(set(stored) | set(identity.settings)):
            if stored.get(key) != identity.settings.get(key):
                raise _refuse(
                    func,
                    path,
                    f"written with {key}={stored.get(key)!r} (now {identity.settings.get(key)!r})",
                    "a new path, or a file written with the same settings to resume",
                )
        if f.attrs["format"] != FORMAT:
            raise _refuse(
                func,
                path,
                "written by an older seqattrib without the fingerprints that make resuming safe",
            )
        model = str(f.attrs["model_fingerprint"])
        if model != identity.model_fingerprint:
            raise _refuse(
                func,
                path,
                f"written with another model (parameters fingerprint {model[:12]}, now "
                f"{identity.model_fingerprint[:12]})",
            )
        output_fn = str(f.attrs["output_fn"])
        if output_fn != identity.output_fn:
            raise _refuse(
                func, path, f"written with output_fn {output_fn} (now {identity.output_fn})"
            )
        provenance = json.loads(f.attrs["provenance"])
        for key in sorted(set(provenance) | set(identity.provenance)):
            was, now = provenance.get(key), identity.provenance.get(key)
            if was != now:
                raise _refuse(
                    func, path, f"written from another {key} ({_short(was)}, now {_short(now)})"
                )
        _check_regions(f, path, func, identity.regions)
        _check_rows(f, path, func, source, done)
        return done, int(f.attrs["seed"])


def _short(value: str | None) -> str:
    return "none" if value is None else value[:12]


def _check_regions(f: Any, path: str, func: str, regions: TrackRegions | None) -> None:
    if regions is None and "regions" not in f:
        return
    if regions is None or "regions" not in f:
        had = "with regions" if "regions" in f else "without regions"
        now = "none" if regions is None else "regions"
        raise _refuse(func, path, f"written {had} (now {now})")
    g = f["regions"]
    stored = TrackRegions(decode_strings(g["chrom"][:]), g["start"][:], g["end"][:])
    differ = (
        (np.array(stored.chrom, dtype=object) != np.array(regions.chrom, dtype=object))
        | (stored.start != regions.start)
        | (stored.end != regions.end)
    )
    if differ.any():
        i = int(np.flatnonzero(differ)[0])
        raise _refuse(
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
    raise _refuse(
        func,
        path,
        f"whose stored sequences differ from X in rows {first}..{last}",
        "a file written for the same X to resume",
    )


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
