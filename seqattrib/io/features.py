"""Features stores: what TRAK and TracIn compute from a training set, in an HDF5 file written
block by block as it is computed, fingerprinted, locked and resumable.

Layout (``C`` checkpoints, ``n`` training rows held, ``d`` features):

- ``features`` (C, n, d) float32: projected gradients per checkpoint, chunked per block of rows;
- one (C, n) float64 dataset per per-example quantity (TRAK's out-to-loss weights ``weights``,
  TracIn's ``self_influence`` terms);
- ``row_hashes`` and ``label_hashes`` (n, 16) uint8: digests of every training sequence and label
  row (the data fingerprint; a merge of shards holds the same rows as one run);
- ``ids`` (n,) strings, when given (FASTA names or regions);
- ``kernel_inverse`` (C, d, d) float64: TRAK's ``(Phi^T Phi + lambda I)^-1``, computed by
  streaming the finished features, with the attributes ``lambdas``, ``bounds``, ``conditions``.

Attributes name the method, its settings (JSON), the model (its class, output function and
traced parameters), the checkpoints (their fingerprints), the rows held (``start``, ``stop`` of
``n_total``, and the shard) and the progress ``n_completed``: units of one (checkpoint, row),
checkpoint after checkpoint. Rows are written and flushed before ``n_completed`` moves past
them, in single-writer mode (SWMR), so a killed run leaves a file that claims only complete rows
and a rerun recomputes at most the block in progress. One process writes a store at a time
(``io.lock``). A store written for anything else is refused, naming what differs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional
from .._version import __version__
from ..shards import Shard
from . import lock as _lock
from .fingerprint import ROW_HASH_BYTES, row_hashes
from .hdf5 import LIBVER, abandon, clear_write_flags, is_hdf5, open_read
from .tracks import disk_error

FORMAT = "seqattrib.features/1"
#: Bytes of one chunk of features (a block of rows of one checkpoint).
_CHUNK_BYTES = 2**20
_HASH_BLOCK = 4096
#: What an identity part is called when a store differs in it.
_DIFFERENCES = {
    "method": "another method",
    "model": "another model (architecture, output function or traced parameters)",
    "checkpoints": "other checkpoints",
    "settings": "other settings",
    "span": "other rows of the training set (another shard or training set size)",
    "data": "other training data",
    "labels": "other labels",
    "ids": "other training ids",
}


#: The kernel step of each method that has one (``name -> step(path, func)``), registered by
#: the method's module: a merge of shards ends with it.
KERNEL_STEPS: dict[str, Callable[[str, str], None]] = {}


def register_kernel_step(method: str, step: Callable[[str, str], None]) -> None:
    """Register ``step(path, func)``, which completes a store of ``method`` holding every row
    of a training set (TRAK's kernel)."""
    KERNEL_STEPS[method] = step


@dataclass
class StoreIdentity:
    """What a store's contents depend on, compared part by part with an existing store."""

    method: str  # "TRAK" or "TracIn"
    model: str
    checkpoints: list[str]
    settings: dict[str, Any]
    dim: int
    quantities: tuple[str, ...]
    n_total: int
    shard: Shard | None
    kernel_step: bool  # the job ends with a kernel step (TRAK), once all rows are in one store
    row_hashes: np.ndarray = field(repr=False)  # (n, 16) of the rows held
    label_hashes: np.ndarray = field(repr=False)
    ids: list[str] | None = None

    @property
    def kernel(self) -> bool:
        """Whether this store ends with the kernel step (a whole training set)."""
        return self.kernel_step and self.shard is None

    @property
    def start(self) -> int:
        return 0 if self.shard is None else self.shard.start

    @property
    def n_rows(self) -> int:
        return self.n_total if self.shard is None else self.shard.stop - self.shard.start

    def span(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "stop": self.start + self.n_rows,
            "n_total": self.n_total,
            "shard": None if self.shard is None else self.shard.setting(),
        }


def data_hashes(source: Any, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Digests of every sequence of ``source`` and every row of ``labels``, (n, 16) uint8 each,
    read block by block."""
    n = source.n_sequences
    rows = np.empty((n, ROW_HASH_BYTES), np.uint8)
    marks = np.empty((n, ROW_HASH_BYTES), np.uint8)
    for start in range(0, n, _HASH_BLOCK):
        stop = min(start + _HASH_BLOCK, n)
        rows[start:stop] = row_hashes(source.read(start, stop))
        block = np.ascontiguousarray(labels[start:stop])
        kind = f"{block.dtype.str}{block.shape[1:]}".encode()
        for i, row in enumerate(block):
            digest = hashlib.blake2b(kind + row.tobytes(), digest_size=ROW_HASH_BYTES).digest()
            marks[start + i] = np.frombuffer(digest, np.uint8)
    return rows, marks


def _refuse(func: str, path: str, differs: Sequence[str]) -> Exception:
    return parameter_error(
        func,
        "store",
        "a features store of the same job, or a path that does not exist yet",
        f"{path!r}, which holds features of " + " and ".join(_DIFFERENCES[d] for d in differs),
        "Name another store, or delete this one to featurize again.",
        described=True,
    )


def _not_a_store(func: str, path: str, detail: str) -> Exception:
    return parameter_error(
        func,
        "store",
        "a features store written by seqattrib, or a path that does not exist yet",
        f"{path!r}, {detail}",
        "Name another path; nothing was written to this one.",
        described=True,
    )


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


class StoreFile:
    """An open store (read-only or being written): its datasets and attributes."""

    def __init__(self, h5file: Any, path: str) -> None:
        self.file = h5file
        self.path = path

    @property
    def attrs(self) -> Any:
        return self.file.attrs

    def json(self, name: str) -> Any:
        return json.loads(str(self.file.attrs[name]))

    @property
    def n_checkpoints(self) -> int:
        return int(self.file["features"].shape[0])

    @property
    def n_rows(self) -> int:
        return int(self.file["features"].shape[1])

    @property
    def n_completed(self) -> int:
        return int(self.file.attrs["n_completed"])

    @property
    def kernel_done(self) -> bool:
        return bool(self.file.attrs["kernel_done"])

    def features(self, checkpoint: int) -> CheckpointRows:
        return CheckpointRows(self.file["features"], checkpoint)

    def quantity(self, name: str, checkpoint: int) -> CheckpointRows:
        return CheckpointRows(self.file[name], checkpoint)

    def ids(self) -> list[str] | None:
        if "ids" not in self.file:
            return None
        return [v.decode() if isinstance(v, bytes) else str(v) for v in self.file["ids"][:]]


class CheckpointRows:
    """Rows of one checkpoint of a (C, n, ...) dataset, read on demand (``rows[a:b]``)."""

    def __init__(self, dataset: Any, checkpoint: int) -> None:
        self.dataset = dataset
        self.checkpoint = checkpoint
        self.shape = tuple(int(s) for s in dataset.shape[1:])

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        return np.asarray(self.dataset[self.checkpoint, rows])


def finished(store: StoreFile, identity: StoreIdentity) -> bool:
    """Whether ``store`` holds every unit (and the kernel, when the job has one)."""
    done = store.n_completed == len(identity.checkpoints) * identity.n_rows
    return done and (store.kernel_done or not identity.kernel)


def check_identity(store: StoreFile, identity: StoreIdentity, func: str) -> None:
    """Refuse a store whose contents were computed for anything else, naming what differs."""
    attrs = store.attrs
    if str(attrs.get("format", "")) != FORMAT:
        raise _not_a_store(func, store.path, "which is not a features store")
    differs = []
    if str(attrs["method"]) != identity.method:
        differs.append("method")
    if str(attrs["model"]) != identity.model:
        differs.append("model")
    if store.json("checkpoints") != identity.checkpoints:
        differs.append("checkpoints")
    if store.json("settings") != json.loads(_text(identity.settings)):
        differs.append("settings")
    if store.json("span") != json.loads(_text(identity.span())):
        differs.append("span")
    if not differs:
        f = store.file
        if not np.array_equal(f["row_hashes"][:], identity.row_hashes):
            differs.append("data")
        if not np.array_equal(f["label_hashes"][:], identity.label_hashes):
            differs.append("labels")
        if identity.ids is not None and store.ids() != list(identity.ids):
            differs.append("ids")
    if differs:
        raise _refuse(func, store.path, differs)


@contextmanager
def open_store(
    path: str | os.PathLike[str] | None, func: str, param: str = "store"
) -> Iterator[StoreFile]:
    """A store opened for reading (refused in one line when it is not one)."""
    h5py = import_optional("h5py")
    name = os.fspath(path or "")
    if not os.path.exists(name):
        raise parameter_error(
            func, param, "an existing features store", name, "Run fit(..., store=...) first."
        )
    fix = "Delete it and run fit again (a killed run resumes; a damaged file cannot)."
    f = open_read(h5py, name, func, param, fix)
    try:
        if str(f.attrs.get("format", "")) != FORMAT:
            raise _not_a_store(func, name, "which is not a features store")
        yield StoreFile(f, name)
    finally:
        f.close()


class StoreWriter:
    """The one writer of a store: creates it, or reopens one of the same job to resume it.

    ``write(checkpoint, start, features, quantities)`` commits one block of rows (``start`` in
    the store's rows, 0-based) and moves ``n_completed`` past it once it is on disk.
    """

    def __init__(self, path: str, identity: StoreIdentity, func: str) -> None:
        self.path, self.identity, self.func = path, identity, func
        self.file: Any = None
        self.lock: _lock.WriteLock | None = None
        self.n_completed = 0

    # ----------------------------------------------------------------- opening
    def open(self) -> StoreWriter:
        h5py = import_optional("h5py")
        path, func = self.path, self.func
        _check_path(path, func)
        held = _lock.acquire(path, func, "store")
        if held is None:
            raise parameter_error(
                func,
                "store",
                "a path in a folder this process can write to",
                path,
                "Choose a writable folder.",
                error=PermissionError,
            )
        self.lock = held
        try:
            creating = path + ".creating"
            if os.path.lexists(creating):
                os.remove(creating)  # left by a run killed while creating the store
            if os.path.exists(path):
                self._reopen(h5py)
            else:
                self._create(h5py)
        except BaseException:
            self.close()
            raise
        return self

    def _reopen(self, h5py: Any) -> None:
        path, func = self.path, self.func
        self.lock.hold_file(os.path.realpath(path), func, "store")  # type: ignore[union-attr]
        try:
            clear_write_flags(path)  # stale: we hold the lock, so their writer is gone
        except OSError:
            pass
        with open_store(path, func) as store:
            check_identity(store, self.identity, func)
            self.n_completed = store.n_completed
            done = finished(store, self.identity)
        if done:
            return
        try:
            self.file = h5py.File(path, "r+", libver=LIBVER)
            self.file.swmr_mode = True
        except (OSError, RuntimeError) as exc:
            self._abandon()
            raise self._disk_error("reopening the store", exc) from exc

    def _create(self, h5py: Any) -> None:
        identity, path = self.identity, self.path
        n_ckpt, n, dim = len(identity.checkpoints), identity.n_rows, identity.dim
        chunk = max(1, min(n, _CHUNK_BYTES // (4 * max(dim, 1))))
        temp = path + ".creating"
        try:
            f = h5py.File(temp, "w", libver=LIBVER)
        except OSError as exc:
            raise self._disk_error("creating the store", exc) from exc
        try:
            self.lock.hold_file(temp, self.func, "store")  # type: ignore[union-attr]
            f.create_dataset(
                "features", shape=(n_ckpt, n, dim), dtype=np.float32, chunks=(1, chunk, dim)
            )
            for name in identity.quantities:
                f.create_dataset(name, shape=(n_ckpt, n), dtype=np.float64)
            f.create_dataset("row_hashes", data=identity.row_hashes)
            f.create_dataset("label_hashes", data=identity.label_hashes)
            if identity.ids is not None:
                f.create_dataset(
                    "ids", data=np.array(identity.ids, dtype=object), dtype=h5py.string_dtype()
                )
            if identity.kernel_step:
                f.create_dataset("kernel_inverse", shape=(n_ckpt, dim, dim), dtype=np.float64)
            _write_attrs(f, identity)
            f.swmr_mode = True  # before the store appears: readers open it from the first moment
            os.replace(temp, path)
        except BaseException as exc:
            abandon(f)
            for leftover in (temp, path):
                if os.path.exists(leftover):
                    os.remove(leftover)
            if isinstance(exc, (OSError, RuntimeError)):
                raise self._disk_error("creating the store", exc) from exc
            raise
        self.file = f

    @classmethod
    def for_kernel(cls, path: str, func: str) -> StoreWriter | None:
        """The writer of the kernel step of a store that holds every row of a whole training
        set (a merge of shards), or None when its kernel is already there."""
        h5py = import_optional("h5py")
        with open_store(path, func) as store:
            identity = identity_of(store)
            if store.n_completed != len(identity.checkpoints) * identity.n_rows:
                raise parameter_error(
                    func,
                    "store",
                    "a store holding every row of the training set",
                    f"{path!r}, which holds {store.n_completed} of "
                    f"{len(identity.checkpoints) * identity.n_rows} rows of its checkpoints",
                    "Rerun the fit that writes it: it resumes where it stopped.",
                    described=True,
                )
            if not identity.kernel or store.kernel_done:
                return None
        writer = cls(path, identity, func)
        writer.lock = _lock.acquire(path, func, "store")
        if writer.lock is None:
            raise parameter_error(
                func,
                "store",
                "a store in a folder this process can write to",
                path,
                error=PermissionError,
            )
        try:
            writer.lock.hold_file(os.path.realpath(path), func, "store")
            with contextlib.suppress(OSError):
                clear_write_flags(path)
            writer.n_completed = len(identity.checkpoints) * identity.n_rows
            writer.file = h5py.File(path, "r+", libver=LIBVER)
            writer.file.swmr_mode = True
        except BaseException as exc:
            writer._abandon()
            if isinstance(exc, (OSError, RuntimeError)):
                raise writer._disk_error("reopening the store", exc) from exc
            raise
        return writer

    # ----------------------------------------------------------------- writing
    @property
    def finished(self) -> bool:
        """Nothing left to write (a finished store is reused as it is)."""
        return self.file is None

    def resume_point(self) -> tuple[int, int]:
        """``(checkpoint, row)`` of the first unit not yet in the store."""
        n = self.identity.n_rows
        return divmod(self.n_completed, n) if n else (len(self.identity.checkpoints), 0)

    def write(
        self,
        checkpoint: int,
        start: int,
        features: np.ndarray,
        quantities: dict[str, np.ndarray],
    ) -> None:
        stop = start + len(features)
        expected = self.resume_point()
        if (checkpoint, start) != expected:
            raise RuntimeError(f"features store expected {expected}, got {(checkpoint, start)}")
        f = self.file
        try:
            f["features"][checkpoint, start:stop] = features
            for name, values in quantities.items():
                f[name][checkpoint, start:stop] = values
            f.flush()  # the rows are on disk before the store claims them
            units = checkpoint * self.identity.n_rows + stop
            f.attrs["n_completed"] = np.int64(units)
            f.flush()
        except (OSError, RuntimeError) as exc:
            self._abandon()
            raise self._disk_error(f"writing rows {start}..{stop - 1}", exc) from exc
        self.n_completed = units

    def write_kernel(self, fits: Sequence[Any]) -> None:
        """Store each checkpoint's kernel inverse, ridge and condition bounds; mark the store
        finished."""
        f = self.file
        try:
            for c, fit in enumerate(fits):
                f["kernel_inverse"][c] = fit.inverse
            f.attrs["lambdas"] = np.array([fit.lambda_reg for fit in fits], np.float64)
            f.attrs["bounds"] = np.array([fit.bound for fit in fits], np.float64)
            conditions = [np.nan if fit.condition is None else fit.condition for fit in fits]
            f.attrs["conditions"] = np.array(conditions, np.float64)
            f.flush()
            f.attrs["kernel_done"] = np.bool_(True)
            f.flush()
        except (OSError, RuntimeError) as exc:
            self._abandon()
            raise self._disk_error("writing the kernel", exc) from exc

    def reader(self) -> StoreFile:
        """The store as it is being written (for the kernel step)."""
        return StoreFile(self.file, self.path)

    def close(self) -> None:
        f, self.file = self.file, None
        try:
            if f is not None and f.id.valid:
                try:
                    f.flush()
                    f.close()
                except (OSError, RuntimeError) as exc:
                    abandon(f)
                    raise self._disk_error("closing the store", exc) from exc
        finally:
            if self.lock is not None:
                self.lock.release()
                self.lock = None

    def _abandon(self) -> None:
        if self.file is not None:
            abandon(self.file)
            self.file = None
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def _disk_error(self, action: str, exc: BaseException) -> OSError:
        return disk_error(
            self.func,
            self.path,
            action,
            exc,
            f"The store keeps its {self.n_completed} complete units: free space (or fix the "
            "disk) and rerun the same call to resume.",
        )


def identity_of(store: StoreFile) -> StoreIdentity:
    """What an existing store was written for (to continue it, or to merge shards)."""
    f = store.file
    span = store.json("span")
    shard = None if span["shard"] is None else Shard(**span["shard"])
    ids = store.ids()
    return StoreIdentity(
        method=str(f.attrs["method"]),
        model=str(f.attrs["model"]),
        checkpoints=store.json("checkpoints"),
        settings=store.json("settings"),
        dim=int(f["features"].shape[2]),
        quantities=tuple(store.json("quantities")),
        n_total=int(span["n_total"]),
        shard=shard,
        kernel_step=bool(f.attrs["kernel_step"]),
        row_hashes=np.asarray(f["row_hashes"][:]),
        label_hashes=np.asarray(f["label_hashes"][:]),
        ids=ids,
    )


def _write_attrs(f: Any, identity: StoreIdentity) -> None:
    n_ckpt = len(identity.checkpoints)
    f.attrs["format"] = FORMAT
    f.attrs["method"] = identity.method
    f.attrs["model"] = identity.model
    f.attrs["checkpoints"] = _text(identity.checkpoints)
    f.attrs["settings"] = _text(identity.settings)
    f.attrs["span"] = _text(identity.span())
    f.attrs["quantities"] = _text(list(identity.quantities))
    f.attrs["kernel_step"] = np.bool_(identity.kernel_step)
    f.attrs["version"] = __version__
    f.attrs["n_completed"] = np.int64(0)
    f.attrs["kernel_done"] = np.bool_(False)
    f.attrs["lambdas"] = np.full(n_ckpt, np.nan)
    f.attrs["bounds"] = np.full(n_ckpt, np.nan)
    f.attrs["conditions"] = np.full(n_ckpt, np.nan)


def _check_path(path: str, func: str) -> None:
    if os.path.isdir(path):
        raise parameter_error(
            func,
            "store",
            "a file path, not a folder",
            path,
            f"Pass e.g. store={os.path.join(path, 'train_features.h5')!r}.",
        )
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise parameter_error(
            func, "store", "a path in an existing folder", path, f"Create {directory} first."
        )
    if os.path.exists(path) and not is_hdf5(path):
        raise _not_a_store(func, path, "which is not an HDF5 file")


@dataclass(frozen=True)
class StoreInfo:
    """What a features store holds (``read_store``)."""

    method: str
    settings: dict[str, Any]
    n_train: int
    start: int
    stop: int
    shard: dict[str, int] | None
    n_checkpoints: int
    n_completed: int
    finished: bool
    ids: list[str] | None


def read_store(path: str | os.PathLike[str]) -> StoreInfo:
    """Describe a features store written by ``TRAK.fit`` or ``TracIn.fit`` with ``store=``.

    Parameters
    ----------
    path : path
        The store.

    Returns
    -------
    StoreInfo
        Its method, settings, the rows it holds (``start:stop`` of ``n_train``) and its shard,
        its progress (units of one checkpoint and row), whether it is finished (every row, and
        the kernel where the method has one), and the training ids, if any.
    """
    with open_store(path, "read_store", "path") as store:
        identity = identity_of(store)
        return StoreInfo(
            method=identity.method,
            settings=identity.settings,
            n_train=identity.n_total,
            start=identity.start,
            stop=identity.start + identity.n_rows,
            shard=None if identity.shard is None else identity.shard.setting(),
            n_checkpoints=len(identity.checkpoints),
            n_completed=store.n_completed,
            finished=finished(store, identity),
            ids=identity.ids,
        )


def store_path(store: Any, func: str) -> str | None:
    """The checked ``store`` argument: None or a file path."""
    if store is None:
        return None
    if not isinstance(store, (str, os.PathLike)) or not os.fspath(store):
        raise parameter_error(func, "store", "None or a file path", store, error=TypeError)
    return os.fspath(Path(os.fspath(store)))
