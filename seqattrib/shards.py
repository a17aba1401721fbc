"""Splitting one job over many processes: contiguous shards of X, their file names, the shard a
scheduler assigned to this process, and the checks a merge of shards makes.

A shard run with ``out=`` records which rows of the whole job it holds, so that
``seqattrib.io.merge_tracks`` (``seqattrib merge``) can check the set and join it.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._errors import parameter_error
from ._validation import first_difference


@dataclass(frozen=True)
class Shard:
    """Rows ``[start, stop)`` of a job of ``total`` rows split in ``count`` contiguous shards."""

    index: int
    count: int
    start: int
    stop: int
    total: int

    def setting(self) -> dict[str, int]:
        """What a tracks file records of its shard."""
        return {
            "index": self.index,
            "count": self.count,
            "start": self.start,
            "stop": self.stop,
            "total": self.total,
        }


def check_shard(shard: Any, func: str) -> tuple[int, int] | None:
    """``shard`` as (index, count) with 0 <= index < count, or None."""
    if shard is None:
        return None
    ok = (
        isinstance(shard, (tuple, list))
        and len(shard) == 2
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in shard)
        and 0 <= shard[0] < shard[1]
    )
    if not ok:
        raise parameter_error(
            func,
            "shard",
            "None or (index, count) with 0 <= index < count",
            shard,
            "shard=(0, 4) runs the first of four contiguous blocks of X.",
        )
    return int(shard[0]), int(shard[1])


def shard_rows(index: int, count: int, total: int, func: str) -> Shard:
    """The rows of shard ``index`` of ``count`` of a job of ``total`` rows."""
    start, stop = index * total // count, (index + 1) * total // count
    if stop == start:
        raise parameter_error(
            func,
            "shard",
            f"at most {total} shards for {total} sequences",
            f"({index}, {count})",
        )
    return Shard(index, count, start, stop, total)


def resolve_shard(
    text: str | None, environ: Mapping[str, str] | None = None
) -> tuple[int, int] | None:
    """(index, count) from ``--shard i/n``, a SLURM job array or torchrun; None: no sharding."""
    env = dict(os.environ if environ is None else environ)
    if text:
        try:
            index, count = (int(v) for v in text.split("/"))
        except ValueError as exc:
            raise parameter_error("seqattrib", "--shard", "i/n with 0 <= i < n", text) from exc
    elif "SLURM_ARRAY_TASK_ID" in env and "SLURM_ARRAY_TASK_COUNT" in env:
        index = _env_int(env, "SLURM_ARRAY_TASK_ID") - _env_int(env, "SLURM_ARRAY_TASK_MIN", 0)
        count = _env_int(env, "SLURM_ARRAY_TASK_COUNT")
    elif _env_int(env, "WORLD_SIZE", 1) > 1 and "RANK" in env:
        index, count = _env_int(env, "RANK"), _env_int(env, "WORLD_SIZE")
    else:
        return None
    if not 0 <= index < count:
        raise parameter_error("seqattrib", "--shard", "i/n with 0 <= i < n", f"{index}/{count}")
    return index, count


def _env_int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    """The integer in environment variable ``name`` (set by SLURM or torchrun)."""
    text = env.get(name)
    if text is None and default is not None:
        return default
    try:
        return int(str(text).strip())
    except ValueError:
        raise parameter_error(
            "seqattrib",
            "--shard",
            f"given, or the shard taken from an integer environment variable {name}",
            f"{name}={text!r}",
            f"Pass --shard i/n, or set {name} to an integer (or unset it).",
            described=True,
        ) from None


def check_complete(func: str, path: Any, written: int, span: Mapping[str, int], unit: str) -> None:
    """Refuse a shard file (``span``: its ``start``/``stop``) that holds fewer than all its
    ``unit``s (rows, variants)."""
    expected = span["stop"] - span["start"]
    if written != expected:
        raise parameter_error(
            func,
            "shards",
            "complete shards",
            f"{path}: {written} of {expected} {unit}s written",
            "Rerun that shard's command: it resumes where it stopped.",
            described=True,
        )


def check_same_settings(
    func: str, first: tuple[Any, Mapping[str, Any]], other: tuple[Any, Mapping[str, Any]]
) -> None:
    """Refuse two shards, each (path, settings that every shard of a job shares), whose
    settings differ, naming the first difference."""
    (first_path, first_settings), (path, settings) = first, other
    key = first_difference(first_settings, settings)
    if key is not None:
        raise parameter_error(
            func,
            "shards",
            "shards of one job (same settings)",
            f"{path} with {key}={settings.get(key)!r} but "
            f"{first_path} with {first_settings.get(key)!r}",
            described=True,
        )


def check_shard_set(func: str, spans: Sequence[tuple[Any, Mapping[str, int]]], unit: str) -> None:
    """Refuse shards, each (path, span with ``index``, ``count``, ``start``, ``stop``,
    ``total``) in order of ``start``, that repeat a shard, miss one, or do not cover ``unit``s
    0 to ``total`` exactly once."""
    count, total = spans[0][1]["count"], spans[0][1]["total"]
    indices = [span["index"] for _, span in spans]
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
    check_coverage(func, spans, total, unit)


def check_coverage(
    func: str, spans: Sequence[tuple[Any, Mapping[str, int]]], total: int, unit: str
) -> None:
    """Refuse shards, each (path, span) in order of ``start``, that do not cover ``unit``s
    0 to ``total`` exactly once."""
    position = 0
    for path, span in spans:
        if span["start"] != position:
            raise parameter_error(
                func,
                "shards",
                f"shards covering every {unit} exactly once",
                f"{path} starting at {unit} {span['start']} where {unit} {position} was expected",
                described=True,
            )
        position = span["stop"]
    if position != total:
        raise parameter_error(
            func,
            "shards",
            f"shards covering {unit}s 0 to {total}",
            f"{unit}s up to {position}",
            described=True,
        )


def shard_path(out: str, index: int, count: int) -> str:
    """``out`` with ``{shard}`` replaced, else ``.shard-i-of-n`` before the extension."""
    if "{shard}" in out:
        return out.replace("{shard}", str(index))
    path = Path(out)
    return str(path.with_name(f"{path.stem}.shard-{index}-of-{count}{path.suffix}"))
