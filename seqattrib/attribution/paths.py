"""Integration rules for the path integral of integrated gradients.

Every rule gives points ``alphas`` in [0, 1] and weights summing to exactly 1.
"""

from __future__ import annotations

import numpy as np

from .._errors import deprecated_alias, parameter_error

#: The quadrature rules, by the name ``quadrature=`` takes.
QUADRATURES = (
    "riemann_trapezoid",
    "riemann_left",
    "riemann_right",
    "riemann_middle",
    "gausslegendre",
)


@deprecated_alias(method="name")
def quadrature(name: str, n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Points and weights of a quadrature rule on [0, 1].

    Parameters
    ----------
    name : str
        The rule, as the methods' ``quadrature=`` takes it:
        ``"riemann_trapezoid"`` (``n_steps + 1`` points 0, 1/n, ..., 1 with weights 1/(2n), 1/n,
        ..., 1/(2n), the rule CREsted uses), ``"riemann_left"``, ``"riemann_right"``,
        ``"riemann_middle"`` (``n_steps`` points, weights 1/n) or ``"gausslegendre"``.
    n_steps : int
        Number of intervals (trapezoid) or points (the others).

    Returns
    -------
    alphas, weights : float64 arrays of shape (n_points,)
    """
    if name not in QUADRATURES:
        raise parameter_error(
            "quadrature", "quadrature", "one of " + ", ".join(repr(m) for m in QUADRATURES), name
        )
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
        raise parameter_error("quadrature", "n_steps", "a positive integer", n_steps)
    n = int(n_steps)
    if name == "riemann_trapezoid":
        alphas = np.linspace(0.0, 1.0, n + 1)
        weights = np.full(n + 1, 1.0 / n)
        weights[[0, -1]] = 0.5 / n
        return alphas, weights
    if name == "gausslegendre":
        nodes, weights = np.polynomial.legendre.leggauss(n)
        return 0.5 * (nodes + 1.0), 0.5 * weights
    offset = {"riemann_left": 0.0, "riemann_right": 1.0, "riemann_middle": 0.5}[name]
    return (np.arange(n) + offset) / n, np.full(n, 1.0 / n)
