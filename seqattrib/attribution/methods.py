"""One entry point over every feature-attribution method."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._errors import parameter_error
from .deeplift import deep_lift_shap
from .gradient_methods import expected_integrated_gradients, integrated_gradients, saliency
from .mutagenesis import ism

METHODS: dict[str, Callable[..., Any]] = {
    "saliency": saliency,
    "ig": integrated_gradients,
    "eig": expected_integrated_gradients,
    "ism": ism,
    "deeplift_shap": deep_lift_shap,
}


def explain(model: Any, X: Any, *, method: str = "eig", **kwargs: Any) -> Any:
    """Run one attribution method by name.

    Use this from scripts and pipelines that choose the method at run time; it forwards every
    keyword to ``saliency``, ``integrated_gradients``, ``expected_integrated_gradients``,
    ``ism`` or ``deep_lift_shap``.

    Parameters
    ----------
    model : torch.nn.Module, keras.Model, tf.Module or callable
    X : array of shape (n_sequences, length, 4) or (n_sequences, 4, length)
    method : {"eig", "ig", "saliency", "ism", "deeplift_shap"}
    **kwargs
        The chosen method's keyword arguments; the integration rule, ``method=`` of
        ``integrated_gradients``, is ``quadrature=`` here.

    Returns
    -------
    What the chosen method returns.
    """
    if method not in METHODS:
        raise parameter_error(
            "explain", "method", "one of " + ", ".join(repr(m) for m in METHODS), method
        )
    if "quadrature" in kwargs:
        kwargs["method"] = kwargs.pop("quadrature")
    return METHODS[method](model, X, **kwargs)
