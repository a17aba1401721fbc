"""FASTA files: small ones read whole (``read_fasta``), genomes read lazily (``Genome``), and
chrom sizes files."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal, cast

from .._errors import parameter_error
from .._optional import import_optional

PathLike = str | os.PathLike[str]

#: Largest FASTA that ``Genome(backend="auto")`` reads into memory when pyfaidx is missing.
MEMORY_LIMIT_BYTES = 100 * 2**20


def parse_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def open_text(path: PathLike) -> IO[str]:
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt")
    return open(path)


def read_fasta(path: PathLike) -> dict[str, str]:
    """Read a whole (small) FASTA file into memory.

    Use this for a handful of sequences; use :class:`Genome` for a genome (indexed, lazy).

    Parameters
    ----------
    path : str or path
        FASTA file, optionally gzip-compressed (``.gz``). Sequences may span many lines; the name of
        a record is the first word of its ``>`` line (``>chr1 some description`` gives ``chr1``).

    Returns
    -------
    dict of str to str
        Name to sequence, in file order, letters as written (soft-masked lowercase is kept).
    """
    records: dict[str, str] = {}
    name: str | None = None
    parts: list[str] = []

    def _finish() -> None:
        if name is not None:
            records[name] = "".join(parts)

    check_fasta(path, "read_fasta")
    with open_text(path) as handle:
        for lineno, raw in enumerate(handle, start=1):
            line = raw.strip()
            if not line or line.startswith(";"):
                continue
            if line.startswith(">"):
                _finish()
                words = line[1:].split()
                if not words:
                    raise parameter_error(
                        "read_fasta",
                        "path",
                        "a FASTA file whose '>' lines name their sequence",
                        f"an empty name on line {lineno} of {os.fspath(path)!r}",
                        described=True,
                    )
                name, parts = words[0], []
                if name in records:
                    raise parameter_error(
                        "read_fasta",
                        "path",
                        "a FASTA file with unique sequence names",
                        f"{name!r} twice (again on line {lineno}) in {os.fspath(path)!r}",
                        described=True,
                    )
            elif name is None:
                raise parameter_error(
                    "read_fasta",
                    "path",
                    "a FASTA file starting with a '>' line",
                    f"sequence before any '>' line on line {lineno} of {os.fspath(path)!r}",
                    described=True,
                )
            else:
                parts.append(line)
    _finish()
    return records


#: Bytes of a FASTA file read to tell text from binary data.
_HEAD_BYTES = 1 << 16


def check_fasta(path: PathLike, func: str) -> None:
    """Refuse at once a file that is no FASTA text: binary data, a file without any ``>``
    line, or text before the first ``>`` line (in its first 64 KiB)."""
    name = os.fspath(path)
    with open(path, "rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
    try:
        with gzip.open(path, "rb") if compressed else open(path, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
    except (OSError, EOFError) as exc:
        raise _fasta_error(func, "a readable FASTA file", f"{name!r} ({exc})") from exc
    try:
        text = head.decode()
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not a character cut at the end of the head
            raise _fasta_error(func, "a FASTA text file", f"{name!r}, binary data") from exc
        text = head[: exc.start].decode()
    if "\0" in text:
        raise _fasta_error(func, "a FASTA text file", f"{name!r}, binary data")
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(";"):
            continue
        if line.startswith(">"):
            return
        got = f"text before any '>' line (line {lineno}) in {name!r}"
        raise _fasta_error(func, "a FASTA file starting with a '>' line", got)
    if len(head) < _HEAD_BYTES:
        raise _fasta_error(func, "a FASTA file with at least one '>' record", f"{name!r}, empty")


def _fasta_error(func: str, expected: str, got: str) -> ValueError:
    return cast(
        ValueError,
        parameter_error(
            func,
            "path",
            expected,
            got,
            "Pass a FASTA file: '>name' lines, each followed by its sequence.",
            described=True,
        ),
    )


def chrom_sizes(path: PathLike) -> dict[str, int]:
    """Read a chrom sizes file (``chrom<TAB>size`` per line, as UCSC's ``fetchChromSizes``).

    Parameters
    ----------
    path : str or path

    Returns
    -------
    dict of str to int
        Chromosome to length, in file order (the order of a bigWig header).
    """
    sizes: dict[str, int] = {}
    with open_text(path) as handle:
        for lineno, raw in enumerate(handle, start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split()
            size = parse_int(fields[1]) if len(fields) >= 2 else None
            if size is None or size <= 0 or fields[0] in sizes:
                problem = "a repeated name" if fields[0] in sizes else "a bad line"
                raise parameter_error(
                    "chrom_sizes",
                    "path",
                    "a file of unique 'chrom<TAB>size' lines with positive sizes",
                    f"{problem} {line!r} (line {lineno} of {os.fspath(path)!r})",
                    described=True,
                )
            sizes[fields[0]] = size
    return sizes


def cache_folder() -> Path:
    """Where seqattrib keeps files it makes for reuse (FASTA indexes): ``$SEQATTRIB_CACHE``, else
    ``$XDG_CACHE_HOME/seqattrib``, else ``~/.cache/seqattrib``."""
    if os.environ.get("SEQATTRIB_CACHE"):
        return Path(os.environ["SEQATTRIB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "seqattrib"


def cached_index(path: Path) -> Path:
    """The cache file of ``path``'s FASTA index, named by the file and its size and time."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    digest = hashlib.blake2b(key.encode(), digest_size=8).hexdigest()
    folder = cache_folder() / "fai"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{path.name}.{digest}.fai"


def _plain_gzip(path: Path) -> bool:
    """gzip-compressed without the BGZF block header that indexed reading needs."""
    with open(path, "rb") as handle:
        head = handle.read(18)
    is_gzip = head[:2] == b"\x1f\x8b"
    bgzf = len(head) >= 16 and head[3] & 4 and head[12:14] == b"BC"
    return is_gzip and not bgzf


class Genome:
    """A FASTA genome read lazily, one window at a time.

    Nothing is read when the object is made: the file is opened (and indexed) on first use.

    Parameters
    ----------
    path : str or path
        FASTA file, plain or compressed with ``bgzip`` (which pyfaidx reads with BioPython); a
        file compressed with plain ``gzip`` is read whole into memory when small, and refused
        when large (recompress it with ``bgzip``).
    backend : {"auto", "pyfaidx", "memory"}
        ``"pyfaidx"`` reads windows through a ``.fai`` index (``pip install 'seqattrib[genome]'``);
        ``"memory"`` reads the whole file with :func:`read_fasta`. ``"auto"`` (default) uses pyfaidx
        when it is installed, and otherwise reads files up to 100 MiB into memory (small genomes,
        test data); for larger files without pyfaidx it raises ImportError naming the extra.
    index_path : str or path, optional
        Where the pyfaidx index lives. By default ``<path>.fai`` when it exists (as samtools
        makes it); otherwise the index is built once in the user's cache folder
        (``$SEQATTRIB_CACHE``, else ``$XDG_CACHE_HOME/seqattrib``, else
        ``~/.cache/seqattrib``), under ``fai/``, and reused: nothing is written beside the
        genome.

    Examples
    --------
    >>> genome = Genome("hg38.fa")                 # doctest: +SKIP
    >>> genome.fetch("chr1", 1_000_000, 1_000_010)  # doctest: +SKIP
    'ACGTacgtNN'
    """

    def __init__(
        self,
        path: PathLike,
        *,
        backend: Literal["auto", "pyfaidx", "memory"] = "auto",
        index_path: PathLike | None = None,
    ) -> None:
        if backend not in ("auto", "pyfaidx", "memory"):
            raise parameter_error("Genome", "backend", "'auto', 'pyfaidx' or 'memory'", backend)
        self.path = Path(path)
        if not self.path.is_file():
            raise parameter_error(
                "Genome", "path", "an existing FASTA file", os.fspath(path), error=FileNotFoundError
            )
        self.backend = backend
        self.index_path = None if index_path is None else Path(index_path)
        self._fasta: Any = None
        self._records: dict[str, str] | None = None
        self._sizes: dict[str, int] | None = None

    def __repr__(self) -> str:
        return f"Genome({os.fspath(self.path)!r}, backend={self.backend!r})"

    def _open(self) -> None:
        if self._sizes is not None:
            return
        backend = self.backend
        small = self.path.stat().st_size <= MEMORY_LIMIT_BYTES
        if backend == "auto":
            try:
                import_optional("pyfaidx")
                backend = "pyfaidx"
            except ImportError:
                if not small:
                    raise
                backend = "memory"
        if backend == "pyfaidx" and _plain_gzip(self.path):
            if not small or self.backend == "pyfaidx":
                raise parameter_error(
                    "Genome",
                    "path",
                    "a plain or bgzip-compressed FASTA file",
                    f"{os.fspath(self.path)!r}, compressed with plain gzip",
                    "Recompress it with bgzip (gunzip -c genome.fa.gz | bgzip > genome.fa.bgz) "
                    "or decompress it.",
                    described=True,
                )
            backend = "memory"
        check_fasta(self.path, "Genome")
        if backend == "memory":
            self._records = read_fasta(self.path)
            self._sizes = {name: len(seq) for name, seq in self._records.items()}
            return
        pyfaidx = import_optional("pyfaidx")
        index = self.index_path
        if index is None:
            beside = Path(f"{self.path}.fai")
            index = beside if beside.exists() else cached_index(self.path)
        try:
            self._fasta = pyfaidx.Fasta(
                os.fspath(self.path),
                indexname=os.fspath(index),
                as_raw=True,
                sequence_always_upper=False,
                read_long_names=False,
            )
        except (ValueError, pyfaidx.FastaIndexingError, UnicodeDecodeError) as exc:
            raise self._index_error(exc) from exc
        self._sizes = {name: len(rec) for name, rec in self._fasta.records.items()}

    def _index_error(self, exc: BaseException) -> ValueError:
        name = os.fspath(self.path)
        duplicate = re.match(r'Duplicate key "(.*)"', str(exc))
        if duplicate:
            got = f"the name {duplicate.group(1)!r} twice in {name!r}"
            return _fasta_error("Genome", "a FASTA file with unique sequence names", got)
        reason = " ".join(str(exc).split())[:200]
        return _fasta_error("Genome", "a FASTA file that can be indexed", f"{name!r} ({reason})")

    @property
    def chrom_sizes(self) -> dict[str, int]:
        """Sequence name to length, in file order."""
        self._open()
        assert self._sizes is not None
        return dict(self._sizes)

    def __contains__(self, chrom: object) -> bool:
        self._open()
        assert self._sizes is not None
        return chrom in self._sizes

    def __iter__(self) -> Iterator[str]:
        return iter(self.chrom_sizes)

    def __len__(self) -> int:
        return len(self.chrom_sizes)

    def fetch(self, chrom: str, start: int, end: int) -> str:
        """Bases ``start .. end - 1`` (0-based) of ``chrom``, letters as in the file.

        Raises
        ------
        KeyError
            When ``chrom`` is not in the genome.
        ValueError
            When the window is not inside the sequence.
        """
        self._open()
        assert self._sizes is not None
        if chrom not in self._sizes:
            raise parameter_error(
                "Genome.fetch",
                "chrom",
                f"a sequence name of {self.path.name}",
                chrom,
                error=KeyError,
            )
        size = self._sizes[chrom]
        if not 0 <= start <= end <= size:
            raise parameter_error(
                "Genome.fetch",
                "start",
                f"a window inside {chrom} (0 <= start <= end <= {size})",
                f"{chrom}:{start}-{end}",
                described=True,
            )
        if self._records is not None:
            return self._records[chrom][start:end]
        return str(self._fasta[chrom][start:end])

    def close(self) -> None:
        """Close the file; the next use opens it again."""
        if self._fasta is not None:
            self._fasta.close()
        self._fasta = self._records = self._sizes = None

    def __enter__(self) -> Genome:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
