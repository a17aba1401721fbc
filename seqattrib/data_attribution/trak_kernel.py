"""TRAK's kernel on the host: ``(Phi^T Phi + lambda I)^-1`` of one checkpoint's training features
in float64 (accumulated block by block of rows, so the features may be read from a store), its
ridge and condition number, and the scores it gives test features, block by block of training
rows."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import parameter_error

#: lambda_reg="auto": this fraction of trace(Phi^T Phi), the sum of the kernel's eigenvalues.
AUTO_RIDGE = 1e-6
#: Condition numbers of Phi^T Phi + lambda I above this get a warning: float32 features resolve
#: the kernel's eigenvalues only down to about 1e-7 of the largest.
CONDITION_WARNING = 1e7
#: Host bytes of one float64 block of training features (or of test rows times the kernel).
HOST_BYTES = 64 * 2**20


@dataclass
class KernelFit:
    """What one checkpoint contributes: its training features and kernel inverse."""

    #: (n_train, d) float32, Phi_c: an array, or rows of a features store read on demand
    features: Any
    inverse: np.ndarray  # (d, d) float64, (Phi_c^T Phi_c + lambda_c I)^-1
    weights: Any  # (n_train,) float64, Q_c (an array or rows of a store)
    lambda_reg: float
    #: an upper bound of the condition number, free to compute (see ``fit_kernel``)
    bound: float
    #: largest / smallest eigenvalue of K, computed when the bound exceeds CONDITION_WARNING
    #: (else on demand, from the inverse)
    condition: float | None

    def exact_condition(self) -> float:
        if self.condition is None:
            self.condition = condition(np.linalg.eigvalsh(self.inverse)[::-1] ** -1.0)
        return self.condition


def fit_kernel(
    features: Any, weights: Any, lambda_reg: float | str, index: int, func: str
) -> KernelFit:
    """``(Phi^T Phi + lambda I)^-1`` in float64, its ridge and condition number, for the
    features of checkpoint ``index`` (``lambda_reg``: "auto" or an absolute ridge)."""
    dim = features.shape[1]
    gram = np.zeros((dim, dim), np.float64)
    for block in row_blocks(features.shape[0], dim):
        part = np.asarray(features[block], np.float64)
        gram += part.T @ part
    trace = float(np.trace(gram))
    lam = AUTO_RIDGE * trace if lambda_reg == "auto" else float(lambda_reg)
    gram[np.diag_indices(dim)] += lam
    try:
        inverse = np.linalg.inv(gram)
    except np.linalg.LinAlgError as exc:
        raise parameter_error(
            func,
            "lambda_reg",
            "large enough to make every kernel Phi^T Phi + lambda I invertible",
            f"{lambda_reg!r}, with which the kernel of checkpoint {index} is singular "
            f"(lambda = {lam:.3g}, trace of Phi^T Phi = {trace:.3g})",
            "Use lambda_reg='auto' or a positive lambda_reg; a zero trace means the model's "
            "output does not depend on its trainable parameters at this checkpoint.",
            described=True,
        ) from exc
    # Two free upper bounds of the condition number: the 1-norm one, and (trace + lambda) /
    # lambda (Phi^T Phi is positive semi-definite); the eigenvalues (0.6 s at d = 2048)
    # only where neither rules a warning out.
    norms = (np.linalg.norm(inverse, 1), np.linalg.norm(inverse, np.inf))
    bound = float(np.linalg.norm(gram, 1) * max(norms))
    if lam > 0:
        bound = min(bound, (trace + lam) / lam)
    exact = None if bound <= CONDITION_WARNING else condition(np.linalg.eigvalsh(gram))
    return KernelFit(features, inverse, weights, lam, bound, exact)


def row_blocks(n_rows: int, dim: int) -> Iterator[slice]:
    """Slices of rows whose float64 copy of ``dim`` columns stays within ``HOST_BYTES``."""
    step = max(1, HOST_BYTES // (8 * dim))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def block_rows(dim: int) -> int:
    """Training rows per block of scores: a float64 copy of their ``dim`` features within
    ``HOST_BYTES`` (the fixed grid every score is computed on, whatever the test set)."""
    return max(1, HOST_BYTES // (8 * dim))


def solve(features: np.ndarray, inverse: np.ndarray, rows: int) -> list[np.ndarray]:
    """``phi (Phi^T Phi + lambda I)^-1`` of test features (n_test, d), in float64 blocks of
    exactly ``rows`` rows (the last padded with copies of its first row): BLAS results of a row
    depend on the number of rows in its product, never on the other rows' values."""
    solved = []
    for start in range(0, features.shape[0], rows):
        block = features[start : start + rows].astype(np.float64)
        if block.shape[0] < rows:
            block = np.concatenate([block, np.repeat(block[:1], rows - block.shape[0], 0)])
        solved.append(block @ inverse)
    return solved


def add_scores(
    total: np.ndarray, solved: list[np.ndarray], fit: KernelFit, train: slice, rows: int
) -> None:
    """Add one checkpoint's ``phi K^-1 Phi[train]^T diag(Q[train])`` to ``total`` (n_test,
    n_rows of ``train``), from the test rows ``solve`` gave."""
    phi = np.asarray(fit.features[train], np.float64)
    weights = np.asarray(fit.weights[train])
    n_test = total.shape[0]
    for i, start in enumerate(range(0, n_test, rows)):
        stop = min(start + rows, n_test)
        total[start:stop] += (solved[i] @ phi.T)[: stop - start] * weights


def self_scores(fit: KernelFit, train: slice) -> np.ndarray:
    """``phi_i K^-1 phi_i Q_i`` of the training rows ``train`` (float64)."""
    phi = np.asarray(fit.features[train], np.float64)
    return ((phi @ fit.inverse) * phi).sum(axis=1) * np.asarray(fit.weights[train])


def condition(eigenvalues: np.ndarray) -> float:
    """Largest / smallest of ascending eigenvalues (inf when the smallest is not positive)."""
    low, high = float(eigenvalues[0]), float(eigenvalues[-1])
    return high / low if low > 0 else float("inf")
