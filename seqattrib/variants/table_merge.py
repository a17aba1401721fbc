"""Merging the shard tables of one job (``merge_effects``): checked, then joined in order, with
their attribution tracks and skipped lists; the shards are only read."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard

from .._errors import parameter_error, refuse_existing
from .._optional import import_optional
from ..io.lock import acquire
from ..io.tracks import disk_error
from ..shards import check_complete, check_coverage, check_same_settings
from . import vcf_output
from .table import (
    IDENTITY,
    Reading,
    _complete_lines,
    _is_parquet,
    _read_settings,
    _settings_line,
    companion,
    compared_settings,
    escape,
    expected_columns,
    parquet_batches,
    text_rows,
    to_parquet,
)

#: Settings that differ between the shards of one job.
_PER_SHARD = ("shard",)


def merge_effects(
    shards: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
) -> Path:
    """Join the shard tables of one job (``variant_effects(..., shard=(i, n))``) into one table,
    and their attribution tracks and skipped lists beside it.

    Refuses shards that are incomplete, written with other settings or another model (its
    parameters' fingerprint) or output function, damaged, or that do not cover every variant
    exactly once.

    Parameters
    ----------
    shards : sequence of paths
        Every shard table of the job, in any order (TSV, Parquet or VCF).
    out : path
        The merged table (TSV, or Parquet or VCF by its suffix), as if one process had
        written it. A VCF (``.vcf``, ``.vcf.gz``, ``.bcf``) is merged from VCF shards: their
        records in order, a multi-allelic record whose ALT alleles two shards share written
        once with the values of both.
    overwrite : bool
        Replace an existing ``out``.

    Returns
    -------
    Path
    """
    func = "merge_effects"
    out = os.fspath(out)
    refuse_existing(func, "out", out, overwrite)
    if not shards:
        raise parameter_error(func, "shards", "at least one shard table", [])
    infos = []
    for shard in shards:
        path = os.fspath(shard)
        if not os.path.isfile(path):
            raise parameter_error(
                func, "shards", "existing shard tables", path, error=FileNotFoundError
            )
        settings = _read_settings(path)
        span = {} if settings is None else settings.get("shard")
        if settings is None or not _is_span(span):
            raise parameter_error(
                func,
                "shards",
                "tables written with --shard i/n",
                path,
                "Pass the shard tables of one job; rewrite a damaged one (rerun its command with "
                "overwrite=True).",
                described=True,
            )
        check_complete(func, path, _rows(path, settings), span, "variant")
        infos.append((span, settings, path))
    infos.sort(key=lambda info: info[0]["start"])
    common = {k: v for k, v in infos[0][1].items() if k not in _PER_SHARD}

    def compared(settings: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in compared_settings(settings).items() if k not in _PER_SHARD}

    for _, settings, path in infos[1:]:
        check_same_settings(func, (infos[0][2], compared(common)), (path, compared(settings)))
    names = expected_columns(common)
    if names is None:
        raise parameter_error(
            func, "shards", "tables written with --shard i/n", infos[0][2], described=True
        )
    check_coverage(func, [(path, span) for span, _, path in infos], infos[0][0]["total"], "variant")
    paths = [path for _, _, path in infos]
    if vcf_output.is_vcf(out) and not all(vcf_output.is_vcf(p) for p in paths):
        raise parameter_error(
            func,
            "out",
            "a TSV or Parquet table when the shards are not all VCF tables",
            f"{out!r}, from {next(p for p in paths if not vcf_output.is_vcf(p))!r}",
            "Name a .tsv or .parquet out, or write every shard as a VCF (out=...vcf.gz).",
            described=True,
        )
    kinds = _companion_kinds(paths, out, overwrite, func)
    held = acquire(out, func, "out")  # one writer of the merged table, as of every table
    if held is None:
        raise parameter_error(
            func, "out", "a path in a folder this process can write to", out, error=PermissionError
        )
    text = out + ".partial.tsv" if _is_parquet(out) else out + ".partial"
    try:
        try:
            if vcf_output.is_vcf(out):
                for index in vcf_output.indexes(out):
                    if os.path.exists(index):
                        os.remove(index)
                vcf_output.merge_vcf(paths, out, common, names[len(IDENTITY) :], func)
            else:
                with open(text, "w", encoding="utf-8") as target:
                    target.write(_settings_line(common) + "\t".join(names) + "\n")
                    for path in paths:
                        _copy_lines(path, names, target, func)
                if _is_parquet(out):
                    to_parquet(text, out, common)
                    os.remove(text)
                else:
                    os.replace(text, out)
        except OSError as exc:
            fix = "Free space (or fix the disk) and merge again: the shards are unchanged."
            raise disk_error(func, out, "writing the merged table", exc, fix) from exc
        finally:
            for leftover in (text, out + ".new"):
                if os.path.exists(leftover):
                    os.remove(leftover)
        _merge_companions(paths, out, kinds, overwrite)
    finally:
        held.release()
    return Path(out)


def _is_span(span: Any) -> TypeGuard[dict[str, int]]:
    """Whether a table's ``shard`` setting is one (``start``, ``stop``, ``total``: integers)."""
    keys = ("start", "stop", "total")
    if not isinstance(span, dict) or not all(isinstance(span.get(k), int) for k in keys):
        return False
    return bool(0 <= span["start"] <= span["stop"] <= span["total"])


def _rows(path: str, settings: dict[str, Any]) -> int:
    if _is_parquet(path):
        pq = import_optional("pyarrow.parquet")
        return int(pq.ParquetFile(path).metadata.num_rows)
    if vcf_output.is_vcf(path):
        names = expected_columns(settings)
        if names is None:
            return 0
        reading = Reading(
            "merge_effects", "shards", "Rerun that shard's command with overwrite=True."
        )
        return sum(1 for _ in vcf_output.vcf_rows(path, names, reading))
    return _complete_lines(path)


def _copy_lines(path: str, names: list[str], target: Any, func: str) -> None:
    """The rows of a shard table, each checked, into an open text file."""
    reading = Reading(func, "shards", "Rerun that shard's command with overwrite=True.")
    if vcf_output.is_vcf(path):
        for fields, numbers in vcf_output.vcf_rows(path, names, reading):
            chrom, pos, id_, ref, alt = fields
            identity = [escape(vcf_output.unescape(chrom)), pos, escape(vcf_output.unescape(id_))]
            values = [_text(v) for v in numbers]
            target.write("\t".join([*identity, ref, alt, *values]) + "\n")
        return
    if not _is_parquet(path):
        for _, fields, _ in text_rows(path, names, reading):
            target.write("\t".join(fields) + "\n")
        return
    for batch in parquet_batches(path, names, reading):
        cols = [c.to_pylist() for c in batch.columns]
        for i in (IDENTITY.index("chrom"), IDENTITY.index("id")):
            cols[i] = [escape(v) for v in cols[i]]
        for row in zip(*cols, strict=True):
            target.write("\t".join(_text(v) for v in row) + "\n")


def _text(value: Any) -> str:
    """A Parquet entry as the TSV writer writes it (a null number, NaN in tables of older
    versions, as nan)."""
    if value is None or isinstance(value, float):
        return "%.9g" % (float("nan") if value is None else value)
    return str(value)


def _companion_kinds(paths: list[str], out: str, overwrite: bool, func: str) -> list[str]:
    """The files beside the shards to merge beside ``out``, checked before anything is written.

    Attribution tracks (``ref``, ``alt``) must be beside every shard or beside none; the skipped
    list (the same in every shard) is taken from the first shard that has one. An existing file
    beside ``out`` is replaced only with ``overwrite``.
    """
    kinds = []
    for kind in ("ref", "alt", "skipped"):
        have = [p for p in paths if os.path.exists(companion(p, kind))]
        if not have:
            continue
        lacking = [p for p in paths if p not in have]
        if kind != "skipped" and lacking:
            raise parameter_error(
                func,
                "shards",
                f"shards that all have {kind} attribution tracks, or none",
                f"{companion(have[0], kind)!r} but no {companion(lacking[0], kind)!r}",
                "Rerun the shards that lack them with the same command: it keeps the table and "
                "writes the tracks.",
                described=True,
            )
        beside = companion(out, kind)
        if os.path.exists(beside) and not overwrite:  # named in full: not the path given
            raise parameter_error(
                func,
                "out",
                f"a path with no {kind} file beside it yet",
                f"{out!r}, beside which {beside!r} exists",
                "Pass overwrite=True to replace it, or choose another path.",
                error=FileExistsError,
                described=True,
            )
        kinds.append(kind)
    return kinds


def _merge_companions(paths: list[str], out: str, kinds: list[str], overwrite: bool) -> None:
    """Attribution tracks (merged as tracks) and the skipped list (the same in every shard)."""
    from ..io.merge import merge_tracks

    for kind in kinds:
        if kind == "skipped":
            source = next(companion(p, kind) for p in paths if os.path.exists(companion(p, kind)))
            partial = companion(out, kind) + ".new"
            try:
                shutil.copyfile(source, partial)
                os.replace(partial, companion(out, kind))
            except OSError as exc:
                if os.path.exists(partial):
                    os.remove(partial)
                fix = "Free space (or fix the disk) and merge again with overwrite=True."
                raise disk_error(
                    "merge_effects", companion(out, kind), "copying the skipped list", exc, fix
                ) from exc
        else:
            tracks = [companion(p, kind) for p in paths]
            merge_tracks(tracks, companion(out, kind), overwrite=overwrite)
