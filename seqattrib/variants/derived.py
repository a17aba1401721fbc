"""The columns ``variant_effects`` derives from each block of scores: empirical p-values against
a null (``null.py``) and allele quantiles among peak predictions (``quantiles.py``), both made
once per job, before its rows, by the job's own scoring."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import SeqAttribWarning, user_stacklevel
from .catalog import Catalog
from .null import NullScores, draw_null
from .quantiles import PeakQuantiles, peak_table, peak_windows, peaks_fingerprint

if TYPE_CHECKING:
    from .effects import VariantEffects

#: ``derive(block) -> {name: (n, K) array}``: the hook of the variant kernel.
Derive = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
#: ``rescore(genome, table)``: the job's own scoring of other variants, in memory.
Rescore = Callable[[Any, dict[str, list[Any]]], "VariantEffects"]


def _columns(values: np.ndarray) -> np.ndarray:
    """(n,) or (n, K) as (n, K)."""
    return values.reshape(len(values), -1)


def _quietly(rescore: Rescore, genome: Any, table: dict[str, list[Any]]) -> VariantEffects:
    """``rescore`` without its warnings: they would name the null's and the peaks' made-up
    variants; the job's own run warns about its rows."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeqAttribWarning)
        return rescore(genome, table)


def _check_finite(scores: Mapping[str, np.ndarray], n_null: int, func: str) -> None:
    for name, values in scores.items():
        finite = int(np.isfinite(values).all(axis=1).sum())
        if finite < n_null:
            warnings.warn(
                f"{func}: pvalue_{name} counts {finite} of the {n_null} null draws: the "
                f"others' {name} is NaN (a prediction that is not positive).",
                SeqAttribWarning,
                stacklevel=user_stacklevel(),
            )


def derived_columns(
    *,
    null: str | None,
    n_null: int,
    seed: int,
    peaks: Any,
    found: Catalog,
    genome: Any,
    sizes: Mapping[str, int],
    length: int,
    pad: int,
    fingerprints: tuple[str, ...],
    rescore: Rescore,
    func: str,
) -> tuple[Derive | None, tuple[str, ...], dict[str, Any]]:
    """The ``derive`` function, the names it adds and the settings that identify them.

    ``found`` is the whole job's catalog (the same null for every shard), ``pad`` the largest
    window shift, ``fingerprints`` those of the variants and the genome.
    """
    parts: list[NullScores | PeakQuantiles] = []
    settings: dict[str, Any] = {"null": None, "peaks": None}
    if null is not None:
        drawn = draw_null(null, n_null, found, genome, sizes, length, pad, seed, fingerprints, func)
        result = _quietly(rescore, drawn.contigs, drawn.table)
        scores = {s: _columns(v) for s, v in result.scores.items()}
        _check_finite(scores, n_null, func)
        parts.append(NullScores(scores))
        settings["null"] = {"kind": null, "n_null": n_null, "random_state": seed}
    if peaks is not None:
        windows = peak_windows(peaks, sizes, length, pad, func)
        result = _quietly(rescore, genome, peak_table(windows, genome, length))
        parts.append(PeakQuantiles(_columns(result.predictions["ref"])))
        settings["peaks"] = {"n_peaks": len(windows), "fingerprint": peaks_fingerprint(windows)}
    if not parts:
        return None, (), settings

    def derive(out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: value for part in parts for name, value in part(out).items()}

    return derive, tuple(name for part in parts for name in part.names), settings
