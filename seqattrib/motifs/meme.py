"""Motif databases in MEME format (JASPAR, HOCOMOCO, TF-MoDISco and MEME-suite exports).

A file is read whole and checked line by line: a file that does not parse, or whose alphabet is
not DNA (``ACGT``), is refused with one line that names the file and the line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

from .._errors import parameter_error

_FIX = "Pass a MEME motif file of DNA motifs (ALPHABET= ACGT), e.g. a JASPAR or HOCOMOCO export."
#: Row sums of a letter-probability matrix further than this from 1 are refused.
_ROW_SUM_TOLERANCE = 0.02


@dataclass(frozen=True)
class Motif:
    """One motif of a MEME file.

    Attributes
    ----------
    id : str
        The first word after ``MOTIF`` (e.g. ``MA0035.5`` in JASPAR, the full name in
        HOCOMOCO); unique in a file.
    name : str
        The alternative name after the id (e.g. ``Gata1``), or the id when there is none.
    pwm : array of shape (width, 4), float64
        Letter probabilities in ``ACGT`` order, one row per position.
    """

    id: str
    name: str
    pwm: np.ndarray


def _refuse(func: str, path: str, what: str) -> ValueError:
    error = parameter_error(
        func, "path", "a MEME motif file of DNA motifs", f"{path!r}, {what}", _FIX, described=True
    )
    assert isinstance(error, ValueError)
    return error


def _alphabet(lines: list[str], i: int, func: str, path: str) -> int:
    """Check the alphabet declared at line ``i`` (0-based); return the line after it."""
    line = lines[i].strip()
    if line.startswith("ALPHABET="):
        letters = line[len("ALPHABET=") :].strip().upper()
        if letters != "ACGT":
            raise _refuse(func, path, f"whose line {i + 1} declares the alphabet {letters!r}")
        return i + 1
    # a custom alphabet block: ALPHABET "name" [DNA-LIKE], one symbol per line, END ALPHABET
    core: list[str] = []
    j = i + 1
    while j < len(lines) and not lines[j].strip().upper().startswith("END ALPHABET"):
        words = lines[j].split()
        if words and "=" not in words[1:2]:  # ``X = ACGT`` lines are ambiguity codes
            core.append(words[0].upper())
            if "~" in words[:-1]:  # ``A "Adenine" CC0000 ~ T "Thymine" 008000``: a pair
                core.append(words[words.index("~") + 1].upper())
        j += 1
    if j == len(lines):
        raise _refuse(func, path, f"whose alphabet at line {i + 1} has no END ALPHABET line")
    if sorted(core) != ["A", "C", "G", "T"]:
        raise _refuse(
            func,
            path,
            f"whose line {i + 1} declares an alphabet of {''.join(sorted(core))!r}, not ACGT",
        )
    return j + 1


def read_motifs(path: str | os.PathLike[str]) -> list[Motif]:
    """The motifs of a MEME-format file, in file order.

    Use this to name seqlets against a database (:func:`seqattrib.motifs.annotate` reads a path
    through it); :func:`read_meme` gives the same matrices as a dict by id.

    Parameters
    ----------
    path : str or path
        A MEME motif file: an optional ``ALPHABET= ACGT`` line (or a DNA alphabet block), then
        ``MOTIF id [name]`` lines, each followed by a ``letter-probability matrix`` line and its
        ``w`` rows of 4 probabilities in ``ACGT`` order.

    Returns
    -------
    list of Motif
        Each with its id, name and (width, 4) probability matrix.

    Raises
    ------
    ValueError
        A file that does not parse (naming the line), another alphabet, a repeated id, or a
        file without motifs.
    """
    return _parse(os.fspath(path), "read_motifs")


def _parse(path: str, func: str) -> list[Motif]:
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except UnicodeDecodeError:
        raise _refuse(func, path, "which is not text") from None
    except OSError as exc:
        raise parameter_error(
            func, "path", "a readable MEME motif file", path, str(exc).split("] ")[-1]
        ) from None
    motifs: list[Motif] = []
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        words = lines[i].split()
        if lines[i].startswith("ALPHABET"):
            i = _alphabet(lines, i, func, path)
            continue
        if not words or words[0] != "MOTIF":
            i += 1
            continue
        if len(words) < 2:
            raise _refuse(func, path, f"whose line {i + 1} is a MOTIF line without an id")
        motif_id, name = words[1], " ".join(words[2:]) or words[1]
        if motif_id in seen:
            raise _refuse(func, path, f"whose line {i + 1} repeats the motif id {motif_id!r}")
        header = i + 1
        i += 1
        while i < len(lines) and not lines[i].startswith(("letter-probability", "MOTIF")):
            i += 1
        if i == len(lines) or lines[i].startswith("MOTIF"):
            raise _refuse(
                func, path, f"whose motif {motif_id!r} (line {header}) has no letter-probability "
                "matrix",
            )  # fmt: skip
        alength = re.search(r"alength=\s*(\d+)", lines[i])
        if alength is not None and int(alength.group(1)) != 4:
            raise _refuse(func, path, f"whose line {i + 1} gives alength={alength.group(1)}")
        width = re.search(r"\bw=\s*(\d+)", lines[i])
        i += 1
        rows: list[list[float]] = []
        while i < len(lines) and (width is None or len(rows) < int(width.group(1))):
            values = lines[i].split()
            if not values and width is None and rows:
                break
            if not values:
                i += 1
                continue
            if values[0] in ("URL", "MOTIF") and width is None and rows:
                break
            try:
                row = [float(v) for v in values]
            except ValueError:
                row = []
            if len(row) != 4 or not all(np.isfinite(row)) or min(row) < 0:
                raise _refuse(
                    func, path, f"whose line {i + 1} is not a row of 4 probabilities "
                    f"(motif {motif_id!r})",
                )  # fmt: skip
            if abs(sum(row) - 1) > _ROW_SUM_TOLERANCE:
                raise _refuse(
                    func, path, f"whose line {i + 1} has probabilities summing to "
                    f"{sum(row):.3g}, not 1 (motif {motif_id!r})",
                )  # fmt: skip
            rows.append(row)
            i += 1
        if not rows or (width is not None and len(rows) < int(width.group(1))):
            raise _refuse(
                func, path, f"whose motif {motif_id!r} (line {header}) has {len(rows)} rows of "
                f"{width.group(1) if width else 'at least 1'}",
            )  # fmt: skip
        seen.add(motif_id)
        motifs.append(Motif(motif_id, name, np.asarray(rows, dtype=np.float64)))
    if not motifs:
        raise _refuse(func, path, "which holds no MOTIF")
    return motifs


def read_meme(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The motifs of a MEME-format file, by id.

    Parameters
    ----------
    path : str or path
        A MEME motif file (JASPAR, HOCOMOCO and MEME-suite exports): ``MOTIF id [name]``
        lines, each followed by a ``letter-probability matrix`` of ``w`` rows of 4 numbers in
        ``ACGT`` order. Checked as :func:`read_motifs` checks it.

    Returns
    -------
    dict of str to array of shape (width, 4), float32
        Probability matrices in file order.
    """
    return {m.id: m.pwm.astype(np.float32) for m in _parse(os.fspath(path), "read_meme")}
