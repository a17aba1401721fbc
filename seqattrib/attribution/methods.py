"""One entry point over every feature-attribution method, and the registry behind it.

``METHODS`` is the one table of attribution methods: ``explain(method=...)``, the effects
table's ``attributions=`` and the command line (its method choices, which flags reach which
method, and their help) all read it. Adding a method is one ``Method`` entry.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._errors import parameter_error
from .deeplift import deep_lift_shap
from .gradient_methods import expected_integrated_gradients, integrated_gradients, saliency
from .mutagenesis import ism
from .options import SHARED_KEYWORDS


@dataclass(frozen=True)
class Method:
    """One attribution method of the registry.

    Attributes
    ----------
    name : str
        What ``explain(method=...)``, ``seqattrib explain --method`` and
        ``variant_effects(attributions=...)`` call it.
    function : callable
        ``function(model, X, **keywords)``: the public function that runs it.
    summary : str
        One line for the command line's help.
    command : str
        The subcommand that runs it (``"explain"``, or its own, such as ``"ism"``).
    keep_default : tuple of str
        Keywords the command line leaves at the function's default whatever its flags say
        (saliency always stores plain gradients: hypothetical scores).
    """

    name: str
    function: Callable[..., Any]
    summary: str
    command: str = "explain"
    keep_default: tuple[str, ...] = ()

    def __call__(self, model: Any, X: Any, **kwargs: Any) -> Any:
        return self.function(model, X, **kwargs)

    @property
    def options(self) -> dict[str, Any]:
        """The method's own keywords (not ``model``, ``X`` nor the keywords every method
        shares) and their defaults, read from the function's signature."""
        parameters = inspect.signature(self.function).parameters.values()
        return {
            p.name: p.default
            for p in parameters
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in SHARED_KEYWORDS
        }


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "saliency",
            saliency,
            "gradients of the output (one backward pass per sequence)",
            keep_default=("multiply_by_inputs",),
        ),
        Method("ig", integrated_gradients, "integrated gradients from one baseline"),
        Method(
            "eig",
            expected_integrated_gradients,
            "expected integrated gradients over shuffled baselines",
        ),
        Method("deeplift_shap", deep_lift_shap, "DeepLIFT averaged over references (DeepSHAP)"),
        Method("ism", ism, "saturation mutagenesis", command="ism"),
    )
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
        The chosen method's keyword arguments (the quadrature rule of ig and eig is
        ``quadrature=``).

    Returns
    -------
    What the chosen method returns.
    """
    if method not in METHODS:
        raise parameter_error(
            "explain", "method", "one of " + ", ".join(repr(m) for m in METHODS), method
        )
    return METHODS[method](model, X, **kwargs)
