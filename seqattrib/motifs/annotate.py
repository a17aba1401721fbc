"""Name seqlets against a motif database with TOMTOM statistics (through memelite).

Each seqlet becomes a (width, 4) probability matrix (:func:`seqlet_matrices`) and is compared with
every motif of the database by memelite's TOMTOM (both strands of each motif, complete scores,
the database's columns as the background). For one seqlet and a database of ``n`` motifs:

- ``p_value``: TOMTOM's p-value of the best alignment of the motif with the seqlet;
- ``e_value``: ``p_value * n`` (the expected number of motifs of the database that match as
  well by chance), as MEME's tomtom reports it;
- ``q_value``: the Benjamini-Hochberg adjustment of the seqlet's ``n`` p-values:
  ``q_(i) = min_{j >= i} p_(j) n / j`` over the p-values sorted in increasing order, at most 1.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .._errors import parameter_error
from .._optional import import_optional
from .meme import Motif, read_motifs

if TYPE_CHECKING:
    import pandas

    from .seqlets import Seqlets

MATRICES = ("contributions", "sequence")
#: Seqlets x motifs compared in one call of TOMTOM (bounds its (seqlets, motifs) tables).
_PAIRS_PER_CALL = 1 << 21


@dataclass(frozen=True)
class Matches:
    """The best motif matches of each seqlet, as columns: ``n_matches`` rows per seqlet, in
    seqlet order and, within a seqlet, from the best match (rank 1) down.

    Attributes
    ----------
    seqlet : array of shape (m,), int64
        Row of the seqlets (``0 .. len(seqlets) - 1``).
    rank : array of shape (m,), int64
        1 for a seqlet's best match (smallest p-value), 2 for the next, ...
    motif_id, motif_name : arrays of shape (m,), str
        The motif's id and name in the database (see :class:`~seqattrib.motifs.meme.Motif`).
    p_value, e_value, q_value : arrays of shape (m,), float64
        TOMTOM's p-value, ``p_value`` times the number of motifs, and the Benjamini-Hochberg
        q-value over the database (for this seqlet).
    offset : array of shape (m,), int64
        Where the motif's first column lies relative to the seqlet's first base in the best
        alignment (negative: the motif starts before the seqlet); on the ``-`` strand, the
        motif's reverse complement's first column.
    overlap : array of shape (m,), int64
        Aligned columns of seqlet and motif.
    strand : array of shape (m,), str
        ``"+"``: the motif as given matches the seqlet; ``"-"``: its reverse complement does.
    """

    seqlet: np.ndarray
    rank: np.ndarray
    motif_id: np.ndarray
    motif_name: np.ndarray
    p_value: np.ndarray
    e_value: np.ndarray
    q_value: np.ndarray
    offset: np.ndarray
    overlap: np.ndarray
    strand: np.ndarray

    def __len__(self) -> int:
        return len(self.seqlet)

    def to_frame(self) -> pandas.DataFrame:
        """The matches as a pandas DataFrame, one column per attribute."""
        pd = import_optional("pandas")
        return pd.DataFrame({name: getattr(self, name) for name in self.__dataclass_fields__})


def _motifs(motifs: Any, func: str) -> list[Motif]:
    if isinstance(motifs, (str, os.PathLike)):
        return read_motifs(motifs)
    if isinstance(motifs, Mapping):
        items = list(motifs.items())
    elif isinstance(motifs, Sequence) and all(isinstance(m, Motif) for m in motifs):
        items = [(m.id, m) for m in motifs]
    else:
        raise parameter_error(
            func, "motifs", "a MEME file path, a list of Motif or a dict of name to matrix",
            type(motifs).__name__, "Pass e.g. 'JASPAR2024_CORE.meme'.", error=TypeError,
            described=True,
        )  # fmt: skip
    out = []
    for name, value in items:
        if isinstance(value, Motif):
            out.append(value)
            continue
        pwm = np.asarray(value, dtype=np.float64)
        if pwm.ndim != 2 or pwm.shape[1] != 4 or len(pwm) < 1 or not np.isfinite(pwm).all():
            raise parameter_error(
                func, f"motifs[{name!r}]", "a finite matrix of shape (width, 4), ACGT columns",
                pwm, "Transpose a (4, width) matrix.",
            )  # fmt: skip
        out.append(Motif(str(name), str(name), pwm))
    if not out:
        raise parameter_error(func, "motifs", "at least one motif", "none", described=True)
    return out


def _projected(attributions: np.ndarray, one_hot: np.ndarray) -> np.ndarray:
    if attributions.ndim == 3:
        return np.asarray((attributions * one_hot).sum(axis=-1), dtype=np.float64)
    return np.asarray(attributions, dtype=np.float64)


def _check(
    seqlets: Seqlets, one_hot: Any, attributions: Any, matrix: str, func: str
) -> tuple[np.ndarray, np.ndarray | None]:
    if matrix not in MATRICES:
        raise parameter_error(
            func, "matrix", "'contributions' or 'sequence'", matrix,
            "'contributions' weighs each base by its contribution; 'sequence' is the bases.",
        )  # fmt: skip
    x = np.asarray(one_hot)
    if x.ndim != 3 or x.shape[-1] != 4:
        raise parameter_error(
            func, "one_hot", "an array of shape (n_sequences, length, 4)", x,
            "Pass the one-hot sequences the seqlets were called on, in the NLC layout.",
        )  # fmt: skip
    if len(seqlets) and (
        seqlets.example.min() < 0
        or seqlets.example.max() >= len(x)
        or seqlets.end.max() > x.shape[1]
    ):
        raise parameter_error(
            func, "one_hot", "the sequences the seqlets were called on", x,
            "Seqlets name rows or positions beyond it: pass the same rows.",
        )  # fmt: skip
    if matrix == "sequence":
        return x, None
    if attributions is None:
        raise parameter_error(
            func, "attributions", "the contributions the seqlets were called on",
            None, "Pass attributions=..., or matrix='sequence' to compare the bases alone.",
        )  # fmt: skip
    a = np.asarray(attributions)
    if a.shape[:2] != x.shape[:2] or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[-1] != 4):
        raise parameter_error(
            func, "attributions", f"an array of shape {x.shape} or {x.shape[:2]} (projected)", a,
            "Pass the contributions of the same sequences, in the NLC layout.",
        )  # fmt: skip
    return x, _projected(a, x)


def seqlet_matrices(
    seqlets: Seqlets,
    one_hot: np.ndarray,
    *,
    attributions: np.ndarray | None = None,
    matrix: Literal["contributions", "sequence"] = "contributions",
) -> list[np.ndarray]:
    """The probability matrix of each seqlet, as :func:`annotate` compares it with motifs.

    ``"sequence"``: the one-hot of the seqlet's bases. ``"contributions"``: each position's
    base weighted by its share of the seqlet's contribution, ``w_i = max(s c_i, 0) / max_j
    max(s c_j, 0)`` (``c`` the projected contributions, ``s`` the seqlet's sign), the rest of the
    column spread evenly: column ``i`` is ``w_i * onehot_i + (1 - w_i) / 4``. Bases that drive the
    prediction become sharp columns and the others uninformative ones, as in a motif whose
    flanks carry no preference. An ``N`` base is a uniform column in both.

    Parameters
    ----------
    seqlets : Seqlets
        Seqlets of ``one_hot`` (their ``example`` indexes its rows).
    one_hot : array of shape (n_sequences, length, 4)
    attributions : array of shape (n_sequences, length, 4) or (n_sequences, length), optional
        The contributions (hypothetical or projected); needed for ``"contributions"``.
    matrix : {"contributions", "sequence"}

    Returns
    -------
    list of arrays of shape (width, 4), float64
        One per seqlet, rows summing to 1.
    """
    x, a = _check(seqlets, one_hot, attributions, matrix, "seqlet_matrices")
    return _matrices(seqlets, x, a)


def _matrices(seqlets: Seqlets, x: np.ndarray, a: np.ndarray | None) -> list[np.ndarray]:
    """The matrices of :func:`seqlet_matrices`, from checked arrays (``a``: projected)."""
    widths = (seqlets.end - seqlets.start).astype(np.int64)
    if len(widths) == 0:
        return []
    # every seqlet's positions as one flat run: seqlet k holds rows first[k] .. first[k + 1] - 1
    first = np.concatenate([[0], np.cumsum(widths)])
    owner = np.repeat(np.arange(len(widths)), widths)
    rows = np.repeat(seqlets.example.astype(np.int64), widths)
    cols = np.repeat(seqlets.start.astype(np.int64), widths) + np.arange(first[-1]) - first[owner]
    bases = np.asarray(x[rows, cols], dtype=np.float64)
    if a is None:
        weight = np.ones(len(rows))
    else:
        values = a[rows, cols]
        signed = np.maximum(np.repeat(seqlets.sign, widths).astype(values.dtype) * values, 0)
        top = np.maximum.reduceat(signed, first[:-1])[owner]
        weight = np.divide(signed, top, out=np.ones_like(signed), where=top > 0)
    weight = np.where(bases.sum(axis=1) > 0, weight, 0.0)
    flat = weight[:, None] * bases + (1 - weight[:, None]) / 4
    return np.split(flat, first[1:-1])


def _tomtom(queries: list[np.ndarray], targets: list[np.ndarray], n_jobs: int) -> tuple:
    memelite = import_optional("memelite")
    numba = import_optional("numba")
    if n_jobs != -1:
        n_jobs = max(1, min(int(n_jobs), numba.config.NUMBA_NUM_THREADS))
    return tuple(
        memelite.tomtom([q.T for q in queries], targets, n_jobs=n_jobs)  # type: ignore[misc]
    )


def annotate(
    seqlets: Seqlets,
    one_hot: np.ndarray,
    motifs: str | os.PathLike[str] | Sequence[Motif] | Mapping[str, np.ndarray],
    *,
    attributions: np.ndarray | None = None,
    n_matches: int = 3,
    matrix: Literal["contributions", "sequence"] = "contributions",
    n_jobs: int = -1,
) -> Matches:
    """Name seqlets: the best matches of each in a motif database, with TOMTOM statistics.

    Use this after :func:`~seqattrib.motifs.seqlets` on arrays; :func:`call_motifs` does
    seqlets, names and genome coordinates straight from a tracks file into tables.

    Parameters
    ----------
    seqlets : Seqlets
        Seqlets of ``one_hot`` (their ``example`` indexes its rows).
    one_hot : array of shape (n_sequences, length, 4)
        The sequences the seqlets were called on (NLC).
    motifs : str, path, list of Motif, or dict of str to array of shape (width, 4)
        The database: a MEME file (JASPAR, HOCOMOCO, TF-MoDISco patterns), read with
        :func:`~seqattrib.motifs.read_motifs`, or motifs in memory. TOMTOM's background is the
        database's columns: use a whole database (tens of motifs at least).
    attributions : array of shape (n_sequences, length, 4) or (n_sequences, length), optional
        The contributions the seqlets were called on; needed for ``matrix="contributions"``.
    n_matches : int
        Matches kept per seqlet (at most the number of motifs).
    matrix : {"contributions", "sequence"}
        What stands for a seqlet (:func:`seqlet_matrices`): its bases weighted by their
        contributions (the default), or its bases alone.
    n_jobs : int
        Threads of TOMTOM (-1: all that numba allows).

    Returns
    -------
    Matches
        ``min(n_matches, n_motifs)`` rows per seqlet: motif, p-, E- and q-value, offset,
        overlap and strand.
    """
    func = "annotate"
    if isinstance(n_matches, bool) or not isinstance(n_matches, (int, np.integer)) or n_matches < 1:
        raise parameter_error(func, "n_matches", "a positive int", n_matches, "Pass e.g. 3.")
    x, a = _check(seqlets, one_hot, attributions, matrix, func)
    database = _motifs(motifs, func)
    targets = [np.ascontiguousarray(m.pwm.T) for m in database]
    n, k = len(database), min(int(n_matches), len(database))
    matrices = _matrices(seqlets, x, a)
    parts: list[tuple[np.ndarray, ...]] = []
    step = max(1, _PAIRS_PER_CALL // n)
    for first in range(0, len(matrices), step):
        p, _, offsets, overlaps, strands = _tomtom(matrices[first : first + step], targets, n_jobs)
        order = np.argsort(p, axis=1, kind="stable")
        ranked = np.take_along_axis(p, order, axis=1)
        q = np.minimum.accumulate((ranked * n / np.arange(1, n + 1))[:, ::-1], axis=1)[:, ::-1]
        top = order[:, :k]
        parts.append(
            (
                top,
                ranked[:, :k],
                np.minimum(q[:, :k], 1.0),
                -np.take_along_axis(offsets, top, axis=1),
                np.take_along_axis(overlaps, top, axis=1),
                np.take_along_axis(strands, top, axis=1),
            )
        )
    m = len(matrices)
    if parts:
        top, p_top, q_top, offset, overlap, strand = (
            np.concatenate(c) for c in zip(*parts, strict=True)
        )
    else:
        top = np.zeros((0, k), np.int64)
        p_top = q_top = offset = overlap = strand = np.zeros((0, k))
    ids = np.array([d.id for d in database], dtype=object)
    names = np.array([d.name for d in database], dtype=object)
    flat = top.reshape(-1)
    return Matches(
        seqlet=np.repeat(np.arange(m, dtype=np.int64), k),
        rank=np.tile(np.arange(1, k + 1, dtype=np.int64), m),
        motif_id=ids[flat].astype(str),
        motif_name=names[flat].astype(str),
        p_value=p_top.reshape(-1).astype(np.float64),
        e_value=p_top.reshape(-1).astype(np.float64) * n,
        q_value=q_top.reshape(-1).astype(np.float64),
        offset=offset.reshape(-1).astype(np.int64),
        overlap=overlap.reshape(-1).astype(np.int64),
        strand=np.where(strand.reshape(-1) > 0, "-", "+"),
    )
