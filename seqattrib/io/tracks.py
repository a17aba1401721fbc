"""Attribution tracks in HDF5: written as the engine streams, resumable, never over-claiming.

The layout of a file and its reader are in ``tracks_format``; the checks that an existing file
was written for this job, in ``tracks_resume``. Only the first ``n_completed`` rows of a file
are valid. Rows are written, and flushed, in whole chunks before ``n_completed`` moves past
them, so a write never touches a chunk that holds claimed rows; the file is in HDF5's
single-writer mode (SWMR), whose ordered metadata writes keep it readable when a process is
killed. One process writes a file at a time (``lock.py``). A rerun with the same settings,
model, output function, inputs and regions continues after the last complete chunk; any
difference is refused, naming it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from typing import Any, cast

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional
from .._version import __version__
from ..engine.source import SequenceSource
from . import lock as _lock
from .fingerprint import ROW_HASH_BYTES, regions_fingerprint, row_hashes
from .hdf5 import LIBVER, abandon, clear_write_flags, failure
from .tracks_format import FORMAT
from .tracks_resume import FileIdentity, inspect, settings_text

_CHUNK_BYTES = 2**20


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
        n_completed: int,
        *,
        func: str = "open_track_writer",
        lock: _lock.WriteLock | None = None,
        chunk_rows: int = 1,
    ) -> None:
        self.path = path
        self.file = h5file
        self.source = source
        self.n_completed = n_completed
        self.func = func
        self.lock = lock
        self.chunk_rows = chunk_rows
        self._pending: list[dict[str, np.ndarray]] = []
        self._n_pending = 0
        self._in_commit = False
        self._stop_signal: str | None = None
        self._previous_handlers: dict[int, Any] = {}
        # Open once and kept open: closing a dataset flushes its chunk cache, and h5py reports
        # a failure there (a full disk) nowhere; writes fail in ``flush`` instead.
        self._datasets = {name: h5file[name] for name in h5file} if h5file is not None else {}
        if h5file is not None:
            self._catch_signals()

    # ----------------------------------------------------------------- signals
    def _catch_signals(self) -> None:
        """SIGTERM and Ctrl-C (SIGINT) stop the run between rows, never inside a commit, and
        are remembered: an interrupt that C code swallowed still stops the next write."""
        if threading.current_thread() is not threading.main_thread():
            return
        defaults = {
            signal.SIGTERM: (signal.SIG_DFL, None),
            signal.SIGINT: (signal.default_int_handler,),
        }
        for signum, default in defaults.items():
            if signal.getsignal(signum) in default:  # else the application handles it itself
                self._previous_handlers[signum] = signal.signal(signum, self._on_signal)

    def _restore_signals(self) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        self._previous_handlers = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop_signal = signal.Signals(signum).name
        if not self._in_commit:
            raise self._stopped()

    def _stopped(self) -> BaseException:
        message = (
            f"{self.func} stopped by {self._stop_signal}: {self.path!r} holds {self.n_completed} "
            f"complete rows of {self.source.n_sequences}. Rerun the same command to resume."
        )
        return (
            KeyboardInterrupt(message)
            if self._stop_signal == "SIGINT"
            else InterruptedError(message)
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
        if len(self._pending) == 1:  # the usual case: one host block, written as it is
            joined = self._pending[0]
        else:
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
                datasets[name][first:stop] = rows
            datasets["sequences"][first:stop] = x.astype(datasets["sequences"].dtype)
            datasets["row_hashes"][first:stop] = hashes
            f.flush()  # the rows are on disk before the file claims them
            f.attrs["n_completed"] = np.int64(stop)
            f.flush()
        except (OSError, RuntimeError) as exc:  # h5py reports failed writes as either
            self._give_up()
            action = f"writing rows {first}..{stop - 1}"
            raise write_error(self.func, self.path, action, exc, first) from exc
        finally:
            self._in_commit = False
        self.n_completed = stop

    # ----------------------------------------------------------------- end
    def _give_up(self) -> None:
        """After a failed write: close without writing more, release the lock."""
        self._restore_signals()
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
        self._restore_signals()
        f, self.file, self._datasets = self.file, None, {}
        try:
            if f is not None and f.id.valid:
                try:
                    f.flush()  # a failure surfaces here, where it can be handled: not in close
                    f.close()
                except (OSError, RuntimeError) as exc:
                    abandon(f)
                    raise write_error(
                        self.func, self.path, "closing the file", exc, self.n_completed
                    ) from exc
        finally:
            self._release()
        if self._stop_signal is not None and self.n_completed < self.source.n_sequences:
            # Whatever the signal interrupted may have turned InterruptedError into another
            # error (C code replaces the errors it sees): the stop is what the user must read.
            raise self._stopped()


def disk_error(func: str, path: str, action: str, exc: BaseException, fix: str) -> OSError:
    """The one-line error of a failed write of ``out`` (a full disk: errno 28), naming it; the
    errno of the failure is kept."""
    code, reason = failure(exc)
    error = cast(
        OSError,
        parameter_error(
            func,
            "out",
            "a file on a disk that can hold the results",
            f"{path!r}: {action} failed ({reason})",
            fix,
            error=OSError,
            described=True,
        ),
    )
    error.errno = code
    return error


def write_error(func: str, path: str, action: str, exc: BaseException, kept: int) -> OSError:
    """``disk_error`` of a tracks file that keeps ``kept`` complete rows."""
    return disk_error(
        func,
        path,
        action,
        exc,
        f"The file keeps its {kept} complete rows: free space (or fix the disk) and rerun the "
        "same command to resume.",
    )


def open_track_writer(
    path: str | os.PathLike[str],
    *,
    func: str,
    source: SequenceSource,
    identity: FileIdentity,
    seed: int,
    adopt_seed: bool,
    description: dict[str, str],
    overwrite: bool = False,
    block_sequences: int = 1024,
) -> tuple[TrackWriter, int]:
    """Create a tracks file, or reopen one written for the same job to resume (or reuse) it.

    The file is locked for writing until the writer is closed; another process writing it is
    an error naming that process.

    Parameters
    ----------
    identity : FileIdentity
        What the job's results depend on (settings, model, output function, provenance,
        regions) and the row shape of every stream: stored in a new file, compared with an
        existing one. The writer takes rows of exactly these shapes.
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
    _check_out(path, func)
    held = _lock.acquire(path, func)
    if held is None:
        return _reuse_read_only(path, func, source, identity, seed, adopt_seed, overwrite)
    try:
        _remove(path + ".creating", func, path)  # left by a run killed while creating the file
        if overwrite:
            _remove(path, func, path)
        if os.path.exists(path):
            return _resume(h5py, path, func, source, identity, seed, adopt_seed, held)
        writer = _create(
            h5py, path, func, source, identity, seed, description, block_sequences, held
        )
    except BaseException:
        held.release()
        raise
    return writer, seed


def _check_out(path: str, func: str) -> None:
    """Refuse an ``out`` that cannot name a results file: empty, a folder, a link to nothing,
    or a path in a folder that does not exist."""
    if not path:
        raise parameter_error(func, "out", "a file path", path, "Pass e.g. out='tracks.h5'.")
    if os.path.isdir(path):
        raise parameter_error(
            func,
            "out",
            "a file path, not a folder",
            path,
            f"Pass e.g. out={os.path.join(path, 'tracks.h5')!r}.",
        )
    if os.path.islink(path) and not os.path.exists(path):
        raise parameter_error(
            func,
            "out",
            "a new path, or a link to an existing file",
            f"{path!r}, a link to the missing {os.path.realpath(path)!r}",
            "Remove the link, or pass the path it should lead to.",
            described=True,
        )
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise parameter_error(
            func, "out", "a path in an existing folder", path, f"Create {directory} first."
        )


def _remove(name: str, func: str, path: str) -> None:
    """Remove the file ``name`` if it exists (a leftover, or ``path`` under overwrite)."""
    if not os.path.lexists(name):
        return
    try:
        os.remove(name)
    except OSError as exc:
        raise parameter_error(
            func,
            "out",
            "a path whose file this process can replace",
            f"{path!r}: removing {name!r} failed ({os.strerror(exc.errno or 0)})",
            "Remove it yourself or choose another path.",
            error=OSError,
            described=True,
        ) from exc


def _create(
    h5py: Any,
    path: str,
    func: str,
    source: SequenceSource,
    identity: FileIdentity,
    seed: int,
    description: dict[str, str],
    block_sequences: int,
    held: _lock.WriteLock,
) -> TrackWriter:
    """A new file, built under a temporary name and renamed once complete (empty of rows)."""
    n = source.n_sequences
    rows = identity.streams
    widest = max([4 * int(np.prod(row)) for row in rows.values()] + [4 * source.row_shape[0] * 4])
    chunk = max(1, min(block_sequences, n, _CHUNK_BYTES // widest))
    temp = path + ".creating"
    try:
        f = h5py.File(temp, "w", libver=LIBVER)
    except OSError as exc:
        if os.path.exists(temp):
            os.remove(temp)
        raise write_error(func, path, "creating the file", exc, 0) from exc
    try:
        held.hold_file(temp, func)  # the file itself, whatever name will lead to it
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
        f.attrs["settings"] = settings_text(identity.settings)
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
            raise write_error(func, path, "creating the file", exc, 0) from exc
        raise
    return TrackWriter(path, f, source, 0, func=func, lock=held, chunk_rows=chunk)


def _resume(
    h5py: Any,
    path: str,
    func: str,
    source: SequenceSource,
    identity: FileIdentity,
    seed: int,
    adopt_seed: bool,
    held: _lock.WriteLock,
) -> tuple[TrackWriter, int]:
    held.hold_file(os.path.realpath(path), func)  # refused if written under another name
    try:
        clear_write_flags(path)  # stale: we hold the lock, so their writer is gone
    except OSError:
        pass  # not writable here, or not an HDF5 file: the checks below say which
    done, stored_seed = inspect(path, func, source, identity)
    use_seed = stored_seed if adopt_seed else seed
    if done == source.n_sequences:
        held.release()  # finished: reused as it is, nothing is written
        return TrackWriter(path, None, source, done, func=func), use_seed
    try:
        f = h5py.File(path, "r+", libver=LIBVER)
    except OSError as exc:
        raise write_error(func, path, "reopening the file", exc, done) from exc
    try:
        chunk = int(f["sequences"].chunks[0])  # every dataset of rows has this chunk
        f.swmr_mode = True
    except BaseException as exc:
        abandon(f)
        if isinstance(exc, (OSError, RuntimeError)):
            raise write_error(func, path, "reopening the file", exc, done) from exc
        raise
    writer = TrackWriter(path, f, source, done, func=func, lock=held, chunk_rows=chunk)
    return writer, use_seed


def _reuse_read_only(
    path: str,
    func: str,
    source: SequenceSource,
    identity: FileIdentity,
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
    done, stored_seed = inspect(path, func, source, identity)
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
    return TrackWriter(path, None, source, done, func=func), (stored_seed if adopt_seed else seed)
