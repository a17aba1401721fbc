"""Merge the tracks files of a sharded run into one file, refusing anything inconsistent."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional
from .tracks import FORMAT

PathLike = str | os.PathLike[str]
_BLOCK_BYTES = 64 * 2**20
#: Settings that legitimately differ between shards of one job.
_PER_SHARD = ("shard", "n_sequences")


def _read_shard(h5py: Any, path: Path) -> dict[str, Any]:
    func = "merge_tracks"
    if not path.is_file():
        raise parameter_error(
            func,
            "shards",
            "existing shard files",
            os.fspath(path),
            error=FileNotFoundError,
            described=True,
        )
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        if f.attrs.get("format") != FORMAT:
            raise parameter_error(
                func, "shards", "seqattrib tracks files", os.fspath(path), described=True
            )
        settings = json.loads(f.attrs["settings"])
        done = int(f.attrs["n_completed"])
        seed = int(f.attrs["seed"])
    if "shard" not in settings:
        raise parameter_error(
            func,
            "shards",
            "files written with --shard i/n",
            f"{path} (not a shard)",
            described=True,
        )
    shard = settings["shard"]
    if done != shard["stop"] - shard["start"]:
        raise parameter_error(
            func,
            "shards",
            "complete shards",
            f"{path}: {done} of {shard['stop'] - shard['start']} rows written",
            "Rerun that shard's command: it resumes where it stopped.",
            described=True,
        )
    common = {k: v for k, v in settings.items() if k not in _PER_SHARD}
    return {"path": path, "shard": shard, "common": common, "seed": seed}


def merge_tracks(shards: Sequence[PathLike], out: PathLike, *, overwrite: bool = False) -> Path:
    """Concatenate the shard files of one job into one tracks file.

    Refuses shards that are incomplete, that were written with other settings or seeds, that
    come from jobs of other sizes or shard counts, or that do not cover every row exactly once.

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
    if out.exists() and not overwrite:
        raise parameter_error(
            func,
            "overwrite",
            "True to replace an existing file",
            f"False with {out} already there",
            error=FileExistsError,
        )
    if not shards:
        raise parameter_error(func, "shards", "at least one shard file", [])
    infos = sorted(
        (_read_shard(h5py, Path(p)) for p in shards), key=lambda info: info["shard"]["start"]
    )
    first = infos[0]
    for info in infos[1:]:
        for key in sorted(set(first["common"]) | set(info["common"])):
            if first["common"].get(key) != info["common"].get(key):
                raise parameter_error(
                    func,
                    "shards",
                    "shards of one job (same settings)",
                    f"{info['path']} with {key}={info['common'].get(key)!r} but "
                    f"{first['path']} with {first['common'].get(key)!r}",
                    described=True,
                )
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
    count, total = first["shard"]["count"], first["shard"]["total"]
    indices = [info["shard"]["index"] for info in infos]
    duplicated = sorted({i for i in indices if indices.count(i) > 1})
    if duplicated:
        raise parameter_error(
            func,
            "shards",
            "each shard once",
            f"shard {duplicated[0]} more than once",
            described=True,
        )
    missing = sorted(set(range(count)) - set(indices))
    if missing:
        raise parameter_error(
            func,
            "shards",
            f"all {count} shards",
            f"no file for shard(s) {missing}",
            described=True,
        )
    position = 0
    for info in infos:
        if info["shard"]["start"] != position:
            raise parameter_error(
                func,
                "shards",
                "shards covering every row exactly once",
                f"{info['path']} starting at row {info['shard']['start']} "
                f"where row {position} was expected",
                described=True,
            )
        position = info["shard"]["stop"]
    if position != total:
        raise parameter_error(
            func,
            "shards",
            f"shards covering rows 0 to {total}",
            f"rows up to {position}",
            described=True,
        )
    partial = out.with_name(out.name + ".partial")
    with (
        h5py.File(infos[0]["path"], "r", libver="latest", swmr=True) as src,
        h5py.File(partial, "w", libver="latest") as dst,
    ):
        for name in ("attributions", "sequences", "delta"):
            if name in src:
                d = src[name]
                dst.create_dataset(
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
            group.create_dataset("chrom", shape=(total,), dtype=h5py.string_dtype())
            group.create_dataset("start", shape=(total,), dtype=np.int64)
            group.create_dataset("end", shape=(total,), dtype=np.int64)
        for key, value in src.attrs.items():
            dst.attrs[key] = value
        settings = dict(first["common"], n_sequences=total)
        dst.attrs["settings"] = json.dumps(settings, sort_keys=True, default=str)
        dst.attrs["n_sequences"] = total
        if "shard" in dst.attrs:
            del dst.attrs["shard"]
        for info in infos:
            start = info["shard"]["start"]
            with h5py.File(info["path"], "r", libver="latest", swmr=True) as f:
                for name in ("attributions", "sequences", "delta"):
                    if name not in f:
                        continue
                    d = f[name]
                    step = max(
                        1, _BLOCK_BYTES // max(1, d.dtype.itemsize * int(np.prod(d.shape[1:])))
                    )
                    for a in range(0, len(d), step):
                        block = d[a : a + step]
                        dst[name][start + a : start + a + len(block)] = block
                if "regions" in f:
                    for key in ("chrom", "start", "end"):
                        values = f["regions"][key][:]
                        dst["regions"][key][start : start + len(values)] = values
        dst.attrs["n_completed"] = np.int64(total)
    os.replace(partial, out)
    return out
