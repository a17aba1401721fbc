"""Motif instances from a tracks file: seqlets, their names and genome coordinates, as tables.

:func:`motif_instances` calls seqlets block by block (:func:`~seqattrib.motifs.iter_seqlets`),
names each against a motif database (:func:`~seqattrib.motifs.annotate`) and appends the rows
of each block to a TSV table (``OUT.tsv``, every field). When every block is in, it writes the
BED6 file (``OUT.bed``, sorted by chromosome and start, for genome browsers) and the count
summary (``OUT.summary.tsv``) from that table, in bounded memory.

The TSV table starts with one line ``#seqattrib.motif_instances/1 {settings}``, then the
header, then the rows of each block followed by a line ``#done N`` (rows ``0 .. N-1`` of the
tracks file are in). A killed run leaves complete blocks and, at most, part of one: a rerun
with the same settings drops that part and continues after the last ``#done`` line. The
settings hold the fingerprints of the tracks file, of the motif file and of the control
tracks: a rerun with other inputs or settings is refused, naming the difference, unless
``overwrite=True``. One process writes the tables at a time (the lock of
``seqattrib.io.lock``).
"""

from __future__ import annotations

import heapq
import inspect
import json
import os
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._errors import SeqAttribWarning, parameter_error, user_stacklevel
from .._validation import first_difference
from ..io import lock as _lock
from ..io.fingerprint import file_fingerprint
from .annotate import Matches, annotate
from .meme import Motif, read_motifs
from .seqlets import Seqlets, iter_seqlets

FORMAT = "seqattrib.motif_instances/1"
#: Keywords passed on to :func:`iter_seqlets` (their defaults are its defaults).
SEQLET_KEYWORDS = (
    "threshold",
    "min_length",
    "max_length",
    "flank",
    "sign",
    "max_fdr",
    "n_bins",
)
#: Bytes of contributions read per block (as iter_seqlets's default blocks).
_BLOCK_BYTES = 64 * 2**20
#: BED lines sorted in memory at a time (the BED is merged from sorted runs of this many).
_RUN_LINES = 1 << 18
_FIX = "Pass overwrite=True to replace it, or choose another path."
_UNNAMED = "seqlet"
BED_COLUMNS = ("chrom", "start", "end", "name", "score", "strand")
SUMMARY_COLUMNS = ("target", "name", "count")


@dataclass(frozen=True)
class InstanceFiles:
    """The files :func:`motif_instances` wrote and what they hold.

    Attributes
    ----------
    bed, tsv, summary : str
        The BED6 file, the full table and the count summary.
    n_seqlets : int
        Rows of the tables.
    n_rows : int
        Rows of the tracks file the seqlets were called on.
    """

    bed: str
    tsv: str
    summary: str
    n_seqlets: int
    n_rows: int


def companions(out: str | os.PathLike[str]) -> tuple[str, str, str]:
    """The BED, TSV and summary paths of ``out`` (``x.bed`` -> ``x.bed``, ``x.tsv``,
    ``x.summary.tsv``)."""
    path = Path(out)
    stem = path.with_suffix("") if path.suffix.lower() in (".bed", ".tsv") else path
    bed = path if path.suffix.lower() == ".bed" else stem.with_name(stem.name + ".bed")
    return str(bed), str(stem) + ".tsv", str(stem) + ".summary.tsv"


def columns(n_matches: int, coordinates: str) -> list[str]:
    """The header of the TSV table."""
    names = ["example", "target", "start", "end"]
    if coordinates == "genome":
        names = ["region_chrom", "region_start", "region_end", "region", "example", "target"]
        names += ["chrom", "start", "end"]
    names += ["strand", "sign", "attribution"]
    names += ["p_value", "fdr", "name", "score"]
    for r in range(1, n_matches + 1):
        names += [f"match{r}_{q}" for q in ("id", "name", "p_value", "e_value", "q_value")]
        names += [f"match{r}_{q}" for q in ("offset", "strand")]
    return names


def bed_score(p_value: np.ndarray) -> np.ndarray:
    """The BED score of seqlets: ``min(1000, round(100 * -log10(p)))`` of their seqlet p-value
    (0 for p = 1, 1000 for p <= 1e-10 and p = 0)."""
    with np.errstate(divide="ignore"):
        score = np.round(-100 * np.log10(np.clip(p_value, 0, 1)))
    return np.clip(np.nan_to_num(score, nan=0.0, posinf=1000.0), 0, 1000).astype(np.int64)


def _clean(text: str) -> str:
    """A name as one BED/TSV field: whitespace runs become ``_``, ``#`` (which starts a comment
    for table readers) becomes ``%23``."""
    return "_".join(str(text).replace("#", "%23").split()) or "."


@dataclass
class _Block:
    """One block of rows of the tracks file, as the names need it (NLC)."""

    first: int
    one_hot: np.ndarray  # (n, L, 4)
    projected: np.ndarray  # (n, K, L)
    chrom: list[str] | None
    start: np.ndarray | None
    end: np.ndarray | None


class _Tracks:
    """Reads blocks of a tracks file: one-hot, projected contributions of the chosen targets and
    regions."""

    def __init__(self, path: str, targets: list[int], func: str) -> None:
        from ..io.tracks_format import decode_strings, open_tracks

        self.path, self.func = path, func
        self._decode = decode_strings
        self.f = open_tracks(path, func, "tracks")
        self.rows = int(self.f.attrs["n_completed"])
        data = self.f["attributions"]
        self.ncl = int(self.f.attrs["alphabet_axis"]) != -1
        self.ism = str(self.f.attrs["method"]) == "ism"
        file_targets = [int(t) for t in self.f.json_attribute("settings")["targets"]]
        self.index = None if data.ndim == 3 else [file_targets.index(t) for t in targets]
        self.has_regions = "regions" in self.f
        self.row_bytes = int(np.prod(data.shape[1:])) * 4

    def read(self, first: int, stop: int) -> _Block:
        block = self.f["attributions"][first:stop]
        block = block[:, None] if self.index is None else block[:, self.index]
        one_hot = self.f["sequences"][first:stop].astype(np.float32)
        if self.ncl:
            block = block.transpose(0, 1, 3, 2)
            one_hot = one_hot.transpose(0, 2, 1)
        if self.ism:  # ISM scores centred on each position's mean, as the seqlets take them
            block = block - block.mean(axis=-1, keepdims=True)
        projected = (block * one_hot[:, None]).sum(axis=-1)
        chrom = start = end = None
        if self.has_regions:
            g = self.f["regions"]
            chrom = self._decode(g["chrom"][first:stop])
            start = np.asarray(g["start"][first:stop], np.int64)
            end = np.asarray(g["end"][first:stop], np.int64)
        return _Block(first, one_hot, projected, chrom, start, end)

    def close(self) -> None:
        self.f.close()


def _named(matches: Matches | None, n: int, max_q_value: float) -> tuple[list[str], list[str]]:
    """The BED name and strand of each seqlet: its top match when that passes ``max_q_value``."""
    if matches is None or len(matches) == 0:
        return [_UNNAMED] * n, ["."] * n
    top = matches.rank == 1
    passed = matches.q_value[top] <= max_q_value
    names = [
        _clean(m) if ok else _UNNAMED for m, ok in zip(matches.motif_name[top], passed, strict=True)
    ]
    strands = [s if ok else "." for s, ok in zip(matches.strand[top], passed, strict=True)]
    return names, strands


def _rows(
    seqlets: Seqlets,
    block: _Block,
    targets: list[int],
    database: list[Motif] | None,
    settings: dict[str, Any],
    n_jobs: int,
) -> str:
    """The TSV lines of one block's seqlets."""
    n, k = len(seqlets), settings["n_matches"]
    matches: Matches | None = None
    if database is not None and n:
        local = replace(seqlets, example=seqlets.example - block.first)
        parts, order = [], []
        for ti, target in enumerate(targets):
            chosen = np.flatnonzero(local.target == target)
            if not len(chosen):
                continue
            parts.append(
                annotate(
                    local.take(chosen),
                    block.one_hot,
                    database,
                    attributions=block.projected[:, ti],
                    n_matches=k,
                    matrix=settings["matrix"],
                    n_jobs=n_jobs,
                )
            )
            order.append(chosen)
        matches = _reorder(parts, order)
    names, strands = _named(matches, n, settings["max_q_value"])
    scores = bed_score(seqlets.p_value)
    width = min(k, len(database)) if database is not None else 0
    lines = []
    genome = settings["coordinates"] == "genome"
    for i in range(n):
        row = int(seqlets.example[i]) - block.first
        start, end = int(seqlets.start[i]), int(seqlets.end[i])
        fields: list[Any] = []
        if genome:
            assert block.chrom is not None and block.start is not None and block.end is not None
            chrom, offset = block.chrom[row], int(block.start[row])
            fields += [chrom, offset, int(block.end[row]), f"{chrom}:{offset}-{block.end[row]}"]
            fields += [int(seqlets.example[i]), int(seqlets.target[i]), chrom]
            fields += [offset + start, offset + end]
        else:
            fields += [int(seqlets.example[i]), int(seqlets.target[i]), start, end]
        fields += [strands[i], int(seqlets.sign[i]), f"{seqlets.attribution[i]:.9g}"]
        fields += [f"{seqlets.p_value[i]:.6g}", f"{seqlets.fdr[i]:.6g}", names[i], scores[i]]
        for r in range(k):
            if r < width and matches is not None:
                j = i * width + r
                fields += [_clean(matches.motif_id[j]), _clean(matches.motif_name[j])]
                fields += [f"{v:.6g}" for v in (matches.p_value[j], matches.e_value[j])]
                fields += [f"{matches.q_value[j]:.6g}", int(matches.offset[j]), matches.strand[j]]
            else:
                fields += [".", ".", "nan", "nan", "nan", 0, "."]
        lines.append("\t".join(map(str, fields)) + "\n")
    return "".join(lines)


def _reorder(parts: list[Matches], order: list[np.ndarray]) -> Matches:
    """The matches of per-target subsets of seqlets, put back in the seqlets' order."""
    fields = {
        name: np.concatenate([getattr(p, name) for p in parts])
        for name in Matches.__dataclass_fields__
    }
    seqlet = np.concatenate([o[p.seqlet] for o, p in zip(order, parts, strict=True)])
    rank = fields["rank"]
    sort = np.lexsort((rank, seqlet))
    fields = {name: value[sort] for name, value in fields.items()}
    fields["seqlet"] = seqlet[sort]
    return Matches(**fields)


def _settings_line(settings: dict[str, Any]) -> str:
    return f"#{FORMAT} " + json.dumps(settings, sort_keys=True) + "\n"


def _read_settings(path: str) -> dict[str, Any] | None:
    with open(path, "rb") as handle:
        first = handle.readline(1 << 20)
    prefix = f"#{FORMAT} ".encode()
    if not (first.startswith(prefix) and first.endswith(b"\n")):
        return None
    try:
        settings = json.loads(first[len(prefix) : -1])
    except ValueError:
        return None
    return settings if isinstance(settings, dict) else None


def _resume_point(path: str, header: str) -> tuple[int, int]:
    """(rows of the tracks done, bytes up to the last ``#done`` line) of a table to resume."""
    done, size = 0, 0
    with open(path, "rb") as handle:
        handle.readline(1 << 20)
        if handle.readline(len(header) + 1) != header.encode():
            return -1, 0
        size = handle.tell()
        for raw in handle:
            if raw.startswith(b"#done ") and raw.endswith(b"\n"):
                done, size = int(raw[6:-1]), handle.tell()
    return done, size


def _append(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _check_choice(func: str, param: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise parameter_error(
            func, param, " or ".join(repr(c) for c in choices), value,
        )  # fmt: skip


def motif_instances(
    tracks: str | os.PathLike[str],
    motifs: str | os.PathLike[str] | None,
    *,
    out: str | os.PathLike[str] = "motifs.bed",
    target: int | list[int] | None = None,
    coordinates: Literal["genome", "sequence"] = "genome",
    n_matches: int = 3,
    matrix: Literal["contributions", "sequence"] = "contributions",
    max_q_value: float = 0.05,
    controls: str | os.PathLike[str] | None = None,
    block_size: int | None = None,
    n_jobs: int = -1,
    overwrite: bool = False,
    verbose: bool = False,
    **seqlet_options: Any,
) -> InstanceFiles:
    """Motif instances of a tracks file: seqlets named against a motif database, with genome
    coordinates, as a BED file, a TSV table and a count summary.

    Use this on a tracks file (``explain(..., out=)``, ``seqattrib explain``) made from genome
    regions; it streams the file block by block (host memory holds one block) and can be
    stopped and rerun: it resumes. On arrays, use :func:`~seqattrib.motifs.seqlets` and
    :func:`~seqattrib.motifs.annotate`.

    Parameters
    ----------
    tracks : str or path
        A tracks file of attributions (hypothetical ones are projected on its one-hot
        sequences).
    motifs : str or path, or None
        A MEME motif database (JASPAR, HOCOMOCO, TF-MoDISco patterns); None: seqlets without
        names.
    out : str or path
        The BED file; the TSV table and the summary go beside it (``x.bed``, ``x.tsv``,
        ``x.summary.tsv``).
    target : int or list of int, optional
        Targets of the tracks file (its ``targets`` values); default: all.
    coordinates : {"genome", "sequence"}
        ``"genome"``: chromosome, start and end of each seqlet from the file's regions (start =
        region start + position in the sequence); a file without regions is refused.
        ``"sequence"``: positions within the sequences; the BED's first column is then the
        example (the file's row).
    n_matches : int
        Matches per seqlet in the table (their id, name, p-, E- and q-value, offset, strand).
    matrix : {"contributions", "sequence"}
        What stands for a seqlet when it is compared with motifs (see
        :func:`~seqattrib.motifs.seqlet_matrices`).
    max_q_value : float
        A seqlet is named after its top match (BED name and strand) when the match's q-value is
        at most this; otherwise it is named ``seqlet`` with strand ``.``.
    controls : str or path, optional
        A tracks file of control attributions (dinucleotide-shuffled sequences or background
        regions, same model and targets) for each seqlet's false-discovery rate.
    block_size : int, optional
        Rows of the tracks file per block; default: 64 MiB of contributions.
    n_jobs : int
        Threads of TOMTOM (-1: all that numba allows).
    overwrite : bool
        Replace tables written with other settings or inputs (otherwise refused).
    verbose : bool
        A progress bar over the blocks (stderr).
    **seqlet_options
        ``threshold``, ``min_length``, ``max_length``, ``flank``, ``sign``, ``max_fdr``,
        ``n_bins`` of :func:`~seqattrib.motifs.iter_seqlets` (its defaults otherwise).

    Returns
    -------
    InstanceFiles
        The paths written and the numbers of seqlets and of rows.

    Notes
    -----
    TSV columns, one row per seqlet, in the order of the tracks file's rows: ``region_chrom``,
    ``region_start``, ``region_end``, ``region`` (the sequence's region), ``example`` (its row
    in the file), ``target``, ``chrom``, ``start``, ``end`` (0-based, end exclusive, genome
    coordinates; positions in the sequence with ``coordinates="sequence"``), ``strand`` (of
    the named match, ``.`` unnamed), ``sign`` (+1 or -1), ``attribution`` (sum of the projected
    contributions), ``p_value`` (the seqlet's), ``fdr`` (NaN without controls), ``name``,
    ``score`` (the BED score, ``min(1000, round(-100 log10 p_value))``), then for each match
    ``r``: ``match{r}_id``, ``_name``, ``_p_value``, ``_e_value``, ``_q_value``, ``_offset``
    (where the motif starts relative to the seqlet's start), ``_strand``. Lines starting with
    ``#`` are the settings and the block marks: ``pandas.read_csv(path, sep="\\t",
    comment="#")`` reads the table.
    """
    func = "motif_instances"
    for key in seqlet_options:
        if key not in SEQLET_KEYWORDS:
            raise parameter_error(
                func, key, "one of " + ", ".join(SEQLET_KEYWORDS), key,
                "Pass seqlet settings by these names.", error=TypeError,
            )  # fmt: skip
    _check_choice(func, "coordinates", coordinates, ("genome", "sequence"))
    _check_choice(func, "matrix", matrix, ("contributions", "sequence"))
    if isinstance(n_matches, bool) or not isinstance(n_matches, (int, np.integer)) or n_matches < 1:
        raise parameter_error(func, "n_matches", "a positive int", n_matches, "Pass e.g. 3.")
    if not isinstance(max_q_value, (int, float)) or not 0 <= max_q_value <= 1:
        raise parameter_error(func, "max_q_value", "a number in [0, 1]", max_q_value)
    if controls is not None and not isinstance(controls, (str, os.PathLike)):
        raise parameter_error(
            func, "controls", "None or the path of a tracks file", type(controls).__name__,
            "Write the control attributions to a tracks file (out=) and pass its path.",
            error=TypeError, described=True,
        )  # fmt: skip
    tracks = os.fspath(tracks)
    defaults = inspect.signature(iter_seqlets).parameters
    options = {key: seqlet_options.get(key, defaults[key].default) for key in SEQLET_KEYWORDS}
    database = read_motifs(motifs) if motifs is not None else None
    # checks the file, the targets, the controls and the settings before anything is written
    iter_seqlets(tracks, target=target, block_size=1, controls=controls, **options)
    from ..io.tracks_format import open_tracks

    with open_tracks(tracks, func, "tracks") as f:
        file_targets = [int(t) for t in f.json_attribute("settings")["targets"]]
        has_regions = "regions" in f
    targets = (
        file_targets
        if target is None
        else ([int(target)] if isinstance(target, (int, np.integer)) else list(target))
    )
    if coordinates == "genome" and not has_regions:
        raise parameter_error(
            func, "tracks", "a tracks file with regions (for genome coordinates)",
            tracks,
            "Write the tracks from --genome/--regions (or regions=), or pass "
            "coordinates='sequence' for positions within the sequences.",
        )  # fmt: skip
    bed, tsv, summary = companions(out)
    settings = {
        "tracks": file_fingerprint(tracks),
        "motifs": file_fingerprint(motifs) if motifs is not None else None,
        "controls": file_fingerprint(controls) if controls is not None else None,
        "targets": targets,
        "coordinates": coordinates,
        "n_matches": int(n_matches),
        "matrix": matrix,
        "max_q_value": float(max_q_value),
        **options,
    }
    directory = os.path.dirname(os.path.abspath(bed))
    if not os.path.isdir(directory):
        raise parameter_error(
            func,
            "out",
            "a path in an existing folder",
            os.fspath(out),
            f"Create {directory} first.",
        )
    held = _lock.acquire(bed, func)
    try:
        reader = _Tracks(tracks, targets, func)
        try:
            _write_table(
                reader, tsv, bed, summary, settings, database, targets, options, controls,
                block_size, n_jobs, overwrite, verbose, func,
            )  # fmt: skip
        finally:
            reader.close()
        n_seqlets = _finish(tsv, bed, summary, settings, func)
    finally:
        if held is not None:
            held.release()
    if n_seqlets == 0:
        warnings.warn(
            f"No seqlets were found in {tracks!r} at these settings; the tables are empty "
            "(a higher threshold or a shorter min_length finds more).",
            SeqAttribWarning,
            stacklevel=user_stacklevel(),
        )
    return InstanceFiles(bed, tsv, summary, n_seqlets, reader.rows)


def _write_table(
    reader: _Tracks,
    tsv: str,
    bed: str,
    summary: str,
    settings: dict[str, Any],
    database: list[Motif] | None,
    targets: list[int],
    options: dict[str, Any],
    controls: Any,
    block_size: int | None,
    n_jobs: int,
    overwrite: bool,
    verbose: bool,
    func: str,
) -> None:
    """Append the rows of every block not yet in the TSV table (under the lock)."""
    header = "\t".join(columns(settings["n_matches"], settings["coordinates"])) + "\n"
    if overwrite:
        for path in (tsv, bed, summary):
            if os.path.exists(path):
                os.remove(path)
    done, size = 0, 0
    if os.path.exists(tsv):
        stored = _read_settings(tsv)
        if stored is None:
            raise parameter_error(
                func, "out", "a new path or a motif instances table to resume",
                f"the existing file {tsv!r}", _FIX, described=True,
            )  # fmt: skip
        key = first_difference(stored, json.loads(json.dumps(settings)))
        if key is not None:
            what = {
                "tracks": "another tracks file",
                "motifs": "another motif file",
                "controls": "other control tracks (controls=)",
            }.get(key, f"{key}={stored.get(key)!r} (now {settings.get(key)!r})")
            raise parameter_error(
                func, "out", "a new path, or tables written with the same settings to resume",
                f"{tsv!r}, written with {what}", _FIX, described=True,
            )  # fmt: skip
        done, size = _resume_point(tsv, header)
        if done < 0:
            raise parameter_error(
                func, "out", "a motif instances table to resume",
                f"{tsv!r}, whose header (line 2) is not the columns it should have", _FIX,
                described=True,
            )  # fmt: skip
    else:
        for path in (bed, summary):
            if os.path.exists(path):
                raise parameter_error(
                    func, "out", "a path without tables seqattrib did not write", path, _FIX,
                    error=FileExistsError,
                )  # fmt: skip
        with open(tsv, "w", encoding="utf-8") as handle:
            handle.write(_settings_line(settings) + header)
        size = os.path.getsize(tsv)
    rows = reader.rows
    if block_size is None:
        block_size = max(1, _BLOCK_BYTES // (reader.row_bytes * max(1, len(targets))))
    fd = os.open(tsv, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)  # a block cut by a killed run: its rows are written again
        os.lseek(fd, 0, os.SEEK_END)
        if done >= rows:
            return
        blocks = iter_seqlets(
            reader.path, target=targets, block_size=block_size, controls=controls, **options
        )
        progress = _progress(-(-rows // block_size), verbose, done // block_size)
        for b, seqlets in enumerate(blocks):
            first, stop = b * block_size, min(rows, (b + 1) * block_size)
            if stop <= done:
                continue
            if first < done:  # blocks of another size on resume: keep the rows not yet in
                seqlets = seqlets.take(seqlets.example >= done)
            block = reader.read(first, stop)
            text = _rows(seqlets, block, targets, database, settings, n_jobs)
            _append(fd, (text + f"#done {stop}\n").encode("utf-8"))
            progress.update(1)
        progress.close()
    finally:
        os.close(fd)


def _progress(total: int, verbose: bool, initial: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, disable=not verbose, desc="seqlets", unit="block")


def _table_lines(tsv: str) -> Iterator[list[str]]:
    """The fields of every data line of the TSV table."""
    with open(tsv, encoding="utf-8") as handle:
        handle.readline()
        handle.readline()
        for line in handle:
            if not line.startswith("#"):
                yield line.rstrip("\n").split("\t")


def _bed_rows(handle: Any) -> Iterator[tuple[str, int, int, str]]:
    """(chrom, start, end, rest of the line) of each line of a sorted run."""
    for line in handle:
        chrom, start, end, rest = line.split("\t", 3)
        yield chrom, int(start), int(end), rest


def _finish(tsv: str, bed: str, summary: str, settings: dict[str, Any], func: str) -> int:
    """The BED file (sorted by chromosome and start, by merging sorted runs of ``_RUN_LINES``
    lines) and the summary, from the complete TSV table."""
    names = columns(settings["n_matches"], settings["coordinates"])
    at = {name: i for i, name in enumerate(names)}
    genome = settings["coordinates"] == "genome"
    counts: Counter[tuple[int, str]] = Counter()
    n = 0
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(bed))) as scratch:
        runs: list[str] = []
        chunk: list[tuple[str, int, int, str]] = []

        def spill() -> None:
            chunk.sort()
            run = os.path.join(scratch, f"run{len(runs)}.bed")
            with open(run, "w", encoding="utf-8") as handle:
                handle.writelines(f"{c}\t{s}\t{e}\t{rest}" for c, s, e, rest in chunk)
            runs.append(run)
            chunk.clear()

        for fields in _table_lines(tsv):
            n += 1
            chrom = fields[at["chrom"]] if genome else str(fields[at["example"]])
            start, end = int(fields[at["start"]]), int(fields[at["end"]])
            rest = f"{fields[at['name']]}\t{fields[at['score']]}\t{fields[at['strand']]}\n"
            chunk.append((chrom, start, end, rest))
            counts[(int(fields[at["target"]]), fields[at["name"]])] += 1
            if len(chunk) == _RUN_LINES:
                spill()
        if chunk:
            spill()
        partial = bed + ".partial"
        with open(partial, "w", encoding="utf-8") as handle:
            files = [open(run, encoding="utf-8") for run in runs]
            try:
                for chrom, start, end, line in heapq.merge(*map(_bed_rows, files)):
                    handle.write(f"{chrom}\t{start}\t{end}\t{line}")
            finally:
                for f in files:
                    f.close()
        os.replace(partial, bed)
    partial = summary + ".partial"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write("\t".join(SUMMARY_COLUMNS) + "\n")
        ordered = sorted(counts.items(), key=lambda item: (item[0][0], -item[1], item[0][1]))
        handle.writelines(f"{t}\t{name}\t{c}\n" for (t, name), c in ordered)
    os.replace(partial, summary)
    return n


def read_instances(path: str | os.PathLike[str]) -> Any:
    """The TSV table of :func:`motif_instances` as a pandas DataFrame (its settings in
    ``frame.attrs["settings"]``)."""
    from .._optional import import_optional

    pd = import_optional("pandas")
    path = os.fspath(path)
    tsv = companions(path)[1] if not path.endswith(".tsv") else path
    settings = _read_settings(tsv)
    if settings is None:
        raise parameter_error(
            "read_instances", "path", "a table written by motif_instances", tsv,
            "Pass the .tsv (or .bed) that motif_instances wrote.",
        )  # fmt: skip
    frame = pd.read_csv(tsv, sep="\t", comment="#", keep_default_na=False, na_values=["nan"])
    frame.attrs["settings"] = settings
    return frame
