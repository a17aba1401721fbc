"""Merge the tracks files of a sharded run into one file, refusing anything inconsistent."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import parameter_error, refuse_existing
from .._optional import import_optional
from .._validation import first_difference
from ..shards import check_complete, check_same_settings, check_shard_set
from .fingerprint import regions_fingerprint
from .hdf5 import LIBVER, abandon, failure
from .lock import acquire
from .tracks_format import FORMAT, decode_strings, open_tracks

PathLike = str | os.PathLike[str]
_BLOCK_BYTES = 64 * 2**20
#: Settings that legitimately differ between shards of one job.
_PER_SHARD = ("shard", "n_sequences")
_ROWS = ("attributions", "dependency", "effects", "sequences", "delta", "row_hashes")


def _read_shard(path: Path) -> dict[str, Any]:
    func = "merge_tracks"
    with open_tracks(path, func, "shards") as f:
        settings = f.json_attribute("settings")
        done = int(f.attrs["n_completed"])
        info = {
            "path": path,
            "seed": int(f.attrs["seed"]),
            "format": str(f.attrs["format"]),
            "model": str(f.attrs.get("model_fingerprint", "")),
            "output_fn": str(f.attrs.get("output_fn", "")),
            "provenance": f.json_attribute("provenance", "{}"),
            "regions": "regions" in f,
        }
    if "shard" not in settings:
        raise parameter_error(
            func,
            "shards",
            "files written with --shard i/n",
            f"{path} (not a shard)",
            described=True,
        )
    if info["format"] != FORMAT:
        raise parameter_error(
            func,
            "shards",
            "shards with fingerprints (written by this version of seqattrib)",
            f"{path}, written by an older version without them",
            "Rerun that shard with --overwrite.",
            described=True,
        )
    shard = settings["shard"]
    check_complete(func, path, done, shard, "row")
    common = {k: v for k, v in settings.items() if k not in _PER_SHARD}
    return dict(info, shard=shard, common=common)


def _same_job(first: dict[str, Any], info: dict[str, Any]) -> None:
    """Refuse a shard that differs from the first in model, output function, provenance,
    regions, settings or seed, naming the difference."""
    func = "merge_tracks"
    fix = "Rerun the odd shard with the same command as the others (and --overwrite)."
    for what, key in (("model", "model"), ("output_fn", "output_fn"), ("regions", "regions")):
        if first[key] != info[key]:
            raise parameter_error(
                func,
                "shards",
                f"shards of one job (same {what})",
                f"{info['path']} written with another {what} than {first['path']}",
                fix,
                described=True,
            )
    differs = first_difference(first["provenance"], info["provenance"])
    if differs is not None:
        raise parameter_error(
            func,
            "shards",
            f"shards of one job (same {differs})",
            f"{info['path']} made from another {differs} than {first['path']}",
            fix,
            described=True,
        )
    check_same_settings(func, (first["path"], first["common"]), (info["path"], info["common"]))
    if info["seed"] != first["seed"]:
        raise parameter_error(
            func,
            "shards",
            "shards that share a random seed",
            f"seeds {first['seed']} and {info['seed']}",
            "Pass the same --random-state to every shard.",
            described=True,
        )
    for key in ("count", "total"):
        if info["shard"][key] != first["shard"][key]:
            raise parameter_error(
                func,
                "shards",
                f"shards of one job (same shard {key})",
                f"{info['path']} with {key} {info['shard'][key]}",
                described=True,
            )


def merge_tracks(shards: Sequence[PathLike], out: PathLike, *, overwrite: bool = False) -> Path:
    """Concatenate the shard files of one job into one tracks file.

    Refuses shards that are incomplete, that were made with another model, output function,
    genome or regions file (their fingerprints), other settings or seeds, that come from jobs
    of other sizes or shard counts, or that do not cover every row exactly once. The output is
    written beside itself (``out.partial``) and renamed when complete, under a write lock.

    Parameters
    ----------
    shards : sequence of paths
        The files written by ``seqattrib explain|ism --shard i/n``, in any order.
    out : path
        The merged file (as if one process had written it).
    overwrite : bool
        Replace an existing ``out``.

    Returns
    -------
    Path
    """
    h5py = import_optional("h5py")
    func = "merge_tracks"
    out = Path(out)
    refuse_existing(func, "out", out, overwrite)
    if not shards:
        raise parameter_error(func, "shards", "at least one shard file", [])
    infos = sorted((_read_shard(Path(p)) for p in shards), key=lambda info: info["shard"]["start"])
    first = infos[0]
    for info in infos[1:]:
        _same_job(first, info)
    total = first["shard"]["total"]
    check_shard_set(func, [(info["path"], info["shard"]) for info in infos], "row")
    held = acquire(os.fspath(out), func, "out")
    if held is None:
        raise parameter_error(
            func,
            "out",
            "a path in a folder this process can write to",
            os.fspath(out),
            error=PermissionError,
        )
    try:
        _write_merged(h5py, infos, out, total)
    finally:
        held.release()
    return out


def _write_merged(h5py: Any, infos: list[dict[str, Any]], out: Path, total: int) -> None:
    """Copy the shards into ``out.partial``, check the regions, then rename it to ``out``."""
    partial = out.with_name(out.name + ".partial")
    try:
        _remove(partial)  # left by a merge that died (or a link: never written through)
        dst = h5py.File(partial, "w", libver=LIBVER)
    except OSError as exc:
        _remove(partial)
        raise _merge_error(out, exc) from exc
    try:
        written = _create_like(h5py, dst, infos, total)
        chrom: list[str] = []
        starts: list[np.ndarray] = []
        ends: list[np.ndarray] = []
        for info in infos:
            with open_tracks(info["path"], "merge_tracks", "shards") as f:
                regions = _copy_shard(f, written, info["shard"]["start"])
            if regions is not None:
                chrom += regions[0]
                starts.append(regions[1])
                ends.append(regions[2])
        if infos[0]["regions"]:
            digest = regions_fingerprint(chrom, np.concatenate(starts), np.concatenate(ends))
            job = infos[0]["provenance"].get("regions")
            if job is not None and job != digest:
                raise parameter_error(
                    "merge_tracks",
                    "shards",
                    "shards whose regions together are the regions of their job",
                    "regions that differ from those the job was started with",
                    "Rerun the shards with the same --regions file.",
                    described=True,
                )
            dst.attrs["regions_fingerprint"] = digest
        dst.attrs["n_completed"] = np.int64(total)
        dst.flush()  # a failure surfaces here, where it can be handled: not in close
        dst.close()
        os.replace(partial, out)
    except BaseException as exc:
        abandon(dst)
        _remove(partial)
        if isinstance(exc, (OSError, RuntimeError)):
            raise _merge_error(out, exc) from exc
        raise


def _create_like(h5py: Any, dst: Any, infos: list[dict[str, Any]], total: int) -> dict[str, Any]:
    """The datasets and attributes of the first shard in ``dst``, sized for ``total`` rows.

    Datasets are kept open until the end: closing one flushes its chunks, and h5py reports a
    failure there (a full disk) nowhere; writes fail in ``flush`` instead."""
    written: dict[str, Any] = {}
    with open_tracks(infos[0]["path"], "merge_tracks", "shards") as src:
        for name in _ROWS:
            if name in src:
                d = src[name]
                written[name] = dst.create_dataset(
                    name,
                    shape=(total, *d.shape[1:]),
                    maxshape=(None, *d.shape[1:]),
                    dtype=d.dtype,
                    chunks=d.chunks,
                    compression=d.compression,
                    compression_opts=d.compression_opts,
                    shuffle=d.shuffle,
                )
        if "regions" in src:
            group = dst.create_group("regions")
            written["chrom"] = group.create_dataset(
                "chrom", shape=(total,), dtype=h5py.string_dtype()
            )
            written["start"] = group.create_dataset("start", shape=(total,), dtype=np.int64)
            written["end"] = group.create_dataset("end", shape=(total,), dtype=np.int64)
        for key, value in src.attrs.items():
            dst.attrs[key] = value
    settings = dict(infos[0]["common"], n_sequences=total)
    dst.attrs["settings"] = json.dumps(settings, sort_keys=True, default=str)
    dst.attrs["n_sequences"] = total
    if "shard" in dst.attrs:
        del dst.attrs["shard"]
    return written


def _copy_shard(
    f: Any, written: dict[str, Any], start: int
) -> tuple[list[str], np.ndarray, np.ndarray] | None:
    """Copy the rows of shard file ``f`` to rows ``start...`` of ``written`` in blocks; its
    regions (chrom, start, end), or None."""
    for name in _ROWS:
        if name not in f:
            continue
        d = f[name]
        step = max(1, _BLOCK_BYTES // max(1, d.dtype.itemsize * int(np.prod(d.shape[1:]))))
        for a in range(0, len(d), step):
            block = d[a : a + step]
            written[name][start + a : start + a + len(block)] = block
    if "regions" not in f:
        return None
    for key in ("chrom", "start", "end"):
        values = f["regions"][key][:]
        written[key][start : start + len(values)] = values
    g = f["regions"]
    return decode_strings(g["chrom"][:]), g["start"][:], g["end"][:]


def _remove(path: Path) -> None:
    if os.path.lexists(path):
        path.unlink()


def _merge_error(out: Path, exc: BaseException) -> Exception:
    _, reason = failure(exc)
    return parameter_error(
        "merge_tracks",
        "out",
        "a file on a disk that can hold the merged results",
        f"{os.fspath(out)!r}: writing it failed ({reason})",
        "Nothing was written and the shards are untouched: free space and rerun the merge.",
        error=OSError,
        described=True,
    )
