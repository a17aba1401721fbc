"""Merge the features stores of a sharded ``fit`` into the store of the whole training set, and
``merge``: one entry for shards of tracks files and of features stores."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._errors import parameter_error, refuse_existing
from ..shards import check_shard_set
from .features import FORMAT, KERNEL_STEPS, StoreIdentity, StoreWriter, identity_of, open_store
from .hdf5 import is_hdf5
from .lock import acquire
from .merge import merge_tracks

PathLike = str | os.PathLike[str]
_FUNC = "merge_features"
_BLOCK_BYTES = 64 * 2**20
#: What shards of one job share, with the words of a refusal.
_SAME = (
    ("method", "method"),
    ("model", "model"),
    ("checkpoints", "checkpoints"),
    ("settings", "settings"),
)


def _read(path: Path) -> StoreIdentity:
    with open_store(path, _FUNC, "shards") as store:
        identity = identity_of(store)
        if identity.shard is None:
            raise parameter_error(
                _FUNC,
                "shards",
                "stores written with shard=(i, n)",
                f"{os.fspath(path)!r} (not a shard)",
                described=True,
            )
        expected = len(identity.checkpoints) * identity.n_rows
        if store.n_completed != expected:
            raise parameter_error(
                _FUNC,
                "shards",
                "finished shards",
                f"{os.fspath(path)!r}: {store.n_completed} of {expected} rows of its "
                "checkpoints written",
                "Rerun that shard's fit: it resumes where it stopped.",
                described=True,
            )
    return identity


def _same_job(paths: list[Path], identities: list[StoreIdentity]) -> None:
    first = identities[0]
    for path, other in zip(paths[1:], identities[1:], strict=True):
        for attribute, words in _SAME:
            if getattr(other, attribute) != getattr(first, attribute):
                raise parameter_error(
                    _FUNC,
                    "shards",
                    f"shards of one job (same {words})",
                    f"{os.fspath(path)!r} written with other {words} than {os.fspath(paths[0])!r}",
                    "Rerun the odd shard with the same arguments as the others.",
                    described=True,
                )
        if (other.ids is None) != (first.ids is None):
            raise parameter_error(
                _FUNC,
                "shards",
                "shards that all hold training ids, or none",
                f"{os.fspath(path)!r} and {os.fspath(paths[0])!r}",
                described=True,
            )


def merge_features(shards: Sequence[PathLike], out: PathLike, *, overwrite: bool = False) -> Path:
    """Join the features stores of a sharded ``TRAK.fit`` / ``TracIn.fit`` into one store.

    The merged store holds the same values, bit for bit, as one ``fit`` of the whole training
    set, TRAK's kernel included (``Phi^T Phi`` streamed from the merged store, and its
    inverse, computed here). Refuses shards that
    are unfinished, repeated or missing, or that come from another job (method, model,
    checkpoints or settings). The output is written beside itself (``out.partial``) and renamed
    when complete, under a write lock.

    Parameters
    ----------
    shards : sequence of paths
        The stores written with ``fit(..., shard=(i, n), store=...)``, in any order.
    out : path
        The merged store.
    overwrite : bool
        Replace an existing ``out``.

    Returns
    -------
    Path
    """
    out = Path(out)
    refuse_existing(_FUNC, "out", out, overwrite)
    if not shards:
        raise parameter_error(_FUNC, "shards", "at least one shard store", [])
    pairs = sorted(((Path(p), _read(Path(p))) for p in shards), key=lambda pair: pair[1].start)
    paths = [p for p, _ in pairs]
    identities = [i for _, i in pairs]
    _same_job(paths, identities)
    spans = [(os.fspath(p), i.shard.setting()) for p, i in pairs if i.shard is not None]
    check_shard_set(_FUNC, spans, "row")
    held = acquire(os.fspath(out), _FUNC, "out")
    if held is None:
        raise parameter_error(
            _FUNC,
            "out",
            "a path in a folder this process can write to",
            os.fspath(out),
            error=PermissionError,
        )
    try:
        _write(paths, identities, out, overwrite)
    finally:
        held.release()
    return out


def _write(paths: list[Path], identities: list[StoreIdentity], out: Path, overwrite: bool) -> None:
    first = identities[0]
    merged = StoreIdentity(
        method=first.method,
        model=first.model,
        checkpoints=first.checkpoints,
        settings=first.settings,
        dim=first.dim,
        quantities=first.quantities,
        n_total=first.n_total,
        shard=None,
        kernel_step=first.kernel_step,
        row_hashes=np.concatenate([i.row_hashes for i in identities]),
        label_hashes=np.concatenate([i.label_hashes for i in identities]),
        ids=None if first.ids is None else [v for i in identities for v in i.ids or []],
    )
    partial = out.with_name(out.name + ".partial")
    for leftover in (partial, Path(os.fspath(partial) + ".creating")):
        if os.path.lexists(leftover):
            leftover.unlink()  # left by a merge that died
    writer = StoreWriter(os.fspath(partial), merged, _FUNC).open()
    try:
        step = max(1, _BLOCK_BYTES // (4 * max(first.dim, 1)))
        for checkpoint in range(len(first.checkpoints)):
            for path, identity in zip(paths, identities, strict=True):
                with open_store(path, _FUNC, "shards") as store:
                    features = store.file["features"]
                    for a in range(0, identity.n_rows, step):
                        b = min(a + step, identity.n_rows)
                        quantities = {
                            name: np.asarray(store.file[name][checkpoint, a:b])
                            for name in identity.quantities
                        }
                        rows = np.asarray(features[checkpoint, a:b])
                        writer.write(checkpoint, identity.start + a, rows, quantities)
    except BaseException:
        writer.close()
        if partial.exists():
            partial.unlink()
        raise
    writer.close()
    finish = KERNEL_STEPS.get(first.method) if first.kernel_step else None
    try:
        if finish is not None:
            finish(os.fspath(partial), _FUNC)
    except BaseException:
        if partial.exists():
            partial.unlink()
        raise
    if overwrite and out.exists():
        out.unlink()
    os.replace(partial, out)


def merge(shards: Sequence[PathLike], out: PathLike, *, overwrite: bool = False) -> Path:
    """Join the shards of one job: tracks files (``explain``, ``ism``) or features stores
    (``TRAK.fit``, ``TracIn.fit``), told apart by their content.

    Parameters
    ----------
    shards : sequence of paths
        The shard files, in any order.
    out : path
        The merged file.
    overwrite : bool
        Replace an existing ``out``.

    Returns
    -------
    Path
    """
    if not shards:
        raise parameter_error("merge", "shards", "at least one shard file", [])
    if _is_store(Path(shards[0])):
        return merge_features(shards, out, overwrite=overwrite)
    return merge_tracks(shards, out, overwrite=overwrite)


def _is_store(path: Path) -> bool:
    if not path.exists() or not is_hdf5(os.fspath(path)):
        return False
    try:
        with open_store(path, "merge", "shards") as store:
            return str(store.attrs.get("format", "")) == FORMAT
    except (OSError, ValueError):
        return False
