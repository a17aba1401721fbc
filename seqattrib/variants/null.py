"""Empirical p-values of variant scores against a null of variants the user picks.

The null is a set of ``n_null`` single-base variants scored exactly as the table is (same model,
head, scores, strands, shifts and window length), once per job, before the table's rows:

- ``"shuffle"`` (the null of ChromBPNet's variant scorer): draw j takes the reference window of
  a scored variant (drawn at random), shuffles it with the dinucleotide shuffle of
  ``seqattrib.attribution.baselines`` (every dinucleotide count kept), writes that variant's REF
  base at the centre and scores its ALT there. A drawn variant that is not an SNV (an indel, an
  MNV) gives a random SNV instead: the shuffled centre base to one of the three others.
- ``"matched"``: draw j takes a scored SNV at random and a random genome position with the
  same REF base, at least ``min(length // 2, 1000)`` bases from every scored variant, whose
  window lies inside its chromosome, and scores the same ALT there.

Every draw has its own generator, seeded by ``random_state``, the fingerprint of the whole
variant input and the genome's fingerprint, and by j: the same variants, genome and seed give
the same null in every run, shard and chunk of a job, and the first m draws of a larger null
are the null of ``n_null=m``.

The p-value of a score s is one-sided on absolute values, ``(1 + #{|null| >= |s|}) /
(n + 1)`` over the n finite null scores of its target: ChromBPNet's right-tailed ``get_pvals``
applied to ``|logfc|``, ``jsd`` and ``|logfc| x jsd`` (a non-negative score is its own absolute
value). It can never be below ``1 / (n_null + 1)``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import SeqAttribWarning, parameter_error, user_stacklevel
from .._validation import resolve_seed
from ..attribution.baselines import dinucleotide_shuffle
from ..io.fasta import Genome
from ..io.onehot import LOOKUP
from .catalog import Catalog
from .windows import centre

#: The nulls ``variant_effects`` draws (``null=``).
NULLS = ("shuffle", "matched")
#: ``n_null`` when not given: p-values down to 1e-4, and about 10 % relative error at p = 0.01
#: (``benchmarks/bench_variant_null.py`` and the guide give the numbers).
N_NULL = 10_000
#: The smallest ``n_null`` accepted: below it no p-value can reach 0.01.
MIN_N_NULL = 100
#: A matched null SNV lies at least ``min(length // 2, MAX_DISTANCE)`` bases from every scored
#: variant.
MAX_DISTANCE = 1000
#: Positions tried per matched draw before the null is refused as impossible to draw.
_TRIES = 200
_BASES = "ACGT"
_LETTERS = np.frombuffer(b"ACGTN", dtype=np.uint8)
_EYE = np.vstack([np.eye(4, dtype=np.float32), np.zeros((1, 4), np.float32)])


def check_null(null: Any, n_null: Any, func: str) -> tuple[str | None, int]:
    """``null`` and ``n_null`` checked: the kind (or None) and the number of draws."""
    if null is not None and null not in NULLS:
        raise parameter_error(func, "null", "None, 'shuffle' or 'matched'", null)
    if isinstance(n_null, bool) or not isinstance(n_null, (int, np.integer)):
        raise parameter_error(
            func, "n_null", f"an int of at least {MIN_N_NULL}", n_null, error=TypeError
        )
    if n_null < MIN_N_NULL:
        raise parameter_error(
            func,
            "n_null",
            f"at least {MIN_N_NULL} (a p-value is never below 1 / (n_null + 1))",
            n_null,
            f"Pass n_null={N_NULL} (the default) or more for thresholds such as p < 0.01.",
        )
    return null, int(n_null)


def null_seed(random_state: Any, func: str) -> int:
    """The seed of the null (an int; a Generator or None draws one)."""
    return resolve_seed(random_state, func)


def genome_fetcher(genome: Any) -> Callable[[str, int, int], str]:
    """Uncached genome text by span (the draws read short spans at random places)."""
    if isinstance(genome, (str, os.PathLike)):
        genome = Genome(genome)
    if isinstance(genome, Genome):
        return genome.fetch
    return lambda chrom, lo, hi: str(genome[chrom][lo:hi])


def _draw_rng(seed: int, fingerprints: tuple[str, ...], j: int) -> np.random.Generator:
    return np.random.default_rng([seed, *(int(f, 16) for f in fingerprints), j])


def _codes(text: str) -> np.ndarray:
    """Base codes 0-3 of ACGT (either case), 4 for N and any other letter."""
    codes = LOOKUP[np.frombuffer(text.encode("latin-1", "replace"), dtype=np.uint8)]
    return np.where(codes == 255, 4, codes).astype(np.int64)


def _text(codes: np.ndarray) -> str:
    return bytes(_LETTERS[codes]).decode("ascii")


@dataclass(frozen=True)
class NullVariants:
    """The null's SNVs on a genome of their own: one contig per draw, the SNV at its centre."""

    contigs: dict[str, str]
    table: dict[str, list[Any]]

    @property
    def n(self) -> int:
        return len(self.table["pos"])


def draw_null(
    kind: str,
    n_null: int,
    found: Catalog,
    genome: Any,
    sizes: Mapping[str, int],
    length: int,
    pad: int,
    seed: int,
    fingerprints: tuple[str, ...],
    func: str,
) -> NullVariants:
    """The null's variants: ``n_null`` SNVs, each on a contig of ``length + 2 * pad`` bases
    (``pad``: the largest window shift) with the SNV at base ``pad + length // 2``.

    ``found`` is the job's whole catalog (never a shard of it), ``genome`` the user's genome,
    ``fingerprints`` those of the variants and the genome (hex digests). The contigs are held in
    memory (``n_null * (length + 2 * pad)`` bytes): a warning says so beyond 1 GiB.
    """
    fetch = genome_fetcher(genome)
    span = length + 2 * pad
    if n_null * span > 2**30:
        warnings.warn(
            f"{func}: the null holds {n_null} windows of {span} bases in memory "
            f"({n_null * span / 2**30:.1f} GiB); pass a smaller n_null to hold less.",
            SeqAttribWarning,
            stacklevel=user_stacklevel(),
        )
    at = pad + centre(length)
    snv = np.flatnonzero(found.snv_base >= 0)
    contigs: dict[str, str] = {}
    chroms, positions, refs, alts = [], [], [], []
    if kind == "matched":
        matcher = _Matcher(found, fetch, sizes, length, pad, snv, func)
    for j in range(n_null):
        rng = _draw_rng(seed, fingerprints, j)
        if kind == "shuffle":
            text, ref, alt = _shuffled(found, fetch, sizes, span, at, rng)
        else:
            text, ref, alt = matcher.draw(rng, j)
        name = f"null{j}"
        contigs[name] = text
        chroms.append(name)
        positions.append(at + 1)
        refs.append(ref)
        alts.append(alt)
    table: dict[str, list[Any]] = {
        "chrom": chroms,
        "pos": positions,
        "id": chroms,
        "ref": refs,
        "alt": alts,
    }
    return NullVariants(contigs, table)


def _snv_of(found: Catalog, fetch: Callable[[str, int, int], str], i: int) -> tuple[str, str]:
    """REF and ALT of the SNV at catalog row ``i``."""
    chrom, pos = found.chroms[found.chrom[i]], int(found.pos[i])
    return fetch(chrom, pos - 1, pos).upper(), _BASES[found.snv_base[i]]


def _shuffled(
    found: Catalog,
    fetch: Callable[[str, int, int], str],
    sizes: Mapping[str, int],
    span: int,
    at: int,
    rng: np.random.Generator,
) -> tuple[str, str, str]:
    """One shuffle draw: the contig's text, REF and ALT."""
    i = int(rng.integers(found.n))
    chrom, pos = found.chroms[found.chrom[i]], int(found.pos[i])
    # the variant's window widened by the shifts, moved inside its chromosome if need be
    lo = min(max(0, pos - 1 - at), max(0, sizes[chrom] - span))
    codes = _codes(fetch(chrom, lo, lo + span))  # the catalog kept windows that fit
    walk = dinucleotide_shuffle(_EYE[codes], 1, rng)[0]
    shuffled = np.where(walk.any(axis=1), walk.argmax(axis=1), 4)
    if found.snv_base[i] >= 0:
        ref, alt = _snv_of(found, fetch, i)
    else:
        ref = _BASES[shuffled[at]] if shuffled[at] < 4 else _BASES[int(rng.integers(4))]
        alt = [b for b in _BASES if b != ref][int(rng.integers(3))]
    shuffled[at] = _BASES.index(ref) if ref in _BASES else 4
    return _text(shuffled), ref, alt


class _Matcher:
    """Draws of the matched null: random genome positions with a scored SNV's REF base."""

    def __init__(
        self,
        found: Catalog,
        fetch: Callable[[str, int, int], str],
        sizes: Mapping[str, int],
        length: int,
        pad: int,
        snv: np.ndarray,
        func: str,
    ) -> None:
        self.found, self.fetch, self.func = found, fetch, func
        self.span, self.at = length + 2 * pad, pad + centre(length)
        self.distance = min(length // 2, MAX_DISTANCE)
        self.snv = snv
        if not len(snv):
            raise parameter_error(
                func,
                "null",
                "'shuffle' for variants without SNVs ('matched' draws SNVs with the REF and "
                "ALT bases of the scored SNVs)",
                "'matched'",
                "Pass null='shuffle'.",
            )
        # chromosomes that hold a window (the scored variants' chromosomes among them)
        names = [c for c, size in sizes.items() if size >= self.span]
        room = np.array([sizes[c] - self.span + 1 for c in names], dtype=np.float64)
        self.names, self.room, self.weights = names, room.astype(np.int64), room / room.sum()
        self.scored = {
            name: np.sort(found.pos[found.chrom == k] - 1) for k, name in enumerate(found.chroms)
        }

    def _near(self, chrom: str, start: int) -> bool:
        scored = self.scored.get(chrom)
        if scored is None or not len(scored):
            return False
        k = int(np.searchsorted(scored, start))
        near = [scored[i] for i in (k - 1, k) if 0 <= i < len(scored)]
        return any(abs(int(p) - start) < self.distance for p in near)

    def _pair(self, rng: np.random.Generator, j: int) -> tuple[str, str]:
        """REF and ALT of a scored SNV drawn at random (one whose REF is A, C, G or T)."""
        for _ in range(_TRIES):
            ref, alt = _snv_of(self.found, self.fetch, int(self.snv[rng.integers(len(self.snv))]))
            if ref in _BASES:
                return ref, alt
        raise parameter_error(
            self.func,
            "null",
            "'shuffle' for variants whose SNVs have N as REF ('matched' matches REF bases)",
            f"'matched', with no SNV of REF A, C, G or T in {_TRIES} tries for null draw {j}",
            "Pass null='shuffle'.",
            described=True,
        )

    def draw(self, rng: np.random.Generator, j: int) -> tuple[str, str, str]:
        ref, alt = self._pair(rng, j)
        for _ in range(_TRIES):
            k = int(rng.choice(len(self.names), p=self.weights))
            chrom = self.names[k]
            lo = int(rng.integers(self.room[k]))
            start = lo + self.at
            if self.fetch(chrom, start, start + 1).upper() != ref or self._near(chrom, start):
                continue
            return self.fetch(chrom, lo, lo + self.span).upper(), ref, alt
        raise parameter_error(
            self.func,
            "null",
            "a null that the genome can give ('matched' draws positions with the scored SNVs' "
            f"REF bases, at least {self.distance} bases from every scored variant)",
            f"no such position in {_TRIES} tries for null draw {j} (REF {ref})",
            "Pass null='shuffle', or a larger genome.",
            described=True,
        )


def ranked_null(null: np.ndarray) -> np.ndarray:
    """The finite ``|null|`` values of one column, sorted (float64)."""
    return np.sort(np.abs(null[np.isfinite(null)].astype(np.float64)))


def empirical_pvalues(observed: np.ndarray, ranked: np.ndarray) -> np.ndarray:
    """One-sided empirical p-values of ``|observed|`` among a null.

    Parameters
    ----------
    observed : array of shape (n,)
    ranked : array of shape (m,)
        The null's finite absolute values, sorted (``ranked_null``).

    Returns
    -------
    array of float32, shape (n,)
        ``(1 + #{|null| >= |observed|}) / (m + 1)``; NaN where ``observed`` is NaN, or
        everywhere when m is 0.
    """
    value = np.abs(observed.astype(np.float64))
    if not len(ranked):  # no finite null score: no p-value
        return np.full(len(value), np.nan, np.float32)
    above = len(ranked) - np.searchsorted(ranked, value, side="left")
    p = (1.0 + above) / (len(ranked) + 1.0)
    return np.where(np.isnan(value), np.nan, p).astype(np.float32)


class NullScores:
    """The null's scores and the ``pvalue_<score>`` columns of a block of the table.

    Parameters
    ----------
    scores : dict of str to array of shape (n_null, K)
    """

    def __init__(self, scores: Mapping[str, np.ndarray]) -> None:
        self.ranked = {
            name: [ranked_null(null[:, k]) for k in range(null.shape[1])]
            for name, null in scores.items()
        }
        self.names = tuple(f"pvalue_{s}" for s in scores)

    def __call__(self, out: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The p-value columns of a block of the table (each score (n, K))."""
        return {
            f"pvalue_{name}": np.stack(
                [empirical_pvalues(out[name][:, k], r) for k, r in enumerate(ranked)], axis=1
            )
            for name, ranked in self.ranked.items()
        }
