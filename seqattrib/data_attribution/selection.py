"""What the loss of data attribution sees: the labels it compares the outputs with
(``check_labels``) and the parameters it is differentiated by (``select_parameters``).

Labels are checked block by block of rows, never as one full-size temporary: a memory-mapped
(n, K) array of counts larger than memory stays on disk, and the methods read its rows batch by
batch (``Labels.values[start:stop]``, cast to ``Labels.dtype``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .._errors import parameter_error
from .examples import Labels
from .outputs import LOSSES, SINGLE_OUTPUT

#: Label entries per host block of the checks (32 MiB of float64).
_BLOCK_ENTRIES = 1 << 22


# ----------------------------------------------------------------- labels
def check_labels(
    y: Any,
    n: int,
    loss: str | Callable[..., Any],
    n_outputs: int,
    param: str,
    func: str,
    *,
    output_function: bool = False,
) -> Labels:
    """Check the labels of ``n`` sequences for ``loss``, reading them block by block of rows.

    ===============  ===========================  =============================================
    loss             shape                        values
    ===============  ===========================  =============================================
    cross_entropy    (n,)                         integer class indices in [0, n_outputs)
    bce              (n, K); (n,) when K = 1      in [0, 1]; 0 or 1 for TRAK's output function
    mse              (n, K); (n,) when K = 1      finite
    poisson          (n, K); (n,) when K = 1      finite counts >= 0 (need not be integers)
    multinomial      (n, K), K >= 2               finite counts >= 0 (need not be integers)
    a callable       n rows                       numeric, finite
    ===============  ===========================  =============================================

    K is ``n_outputs``, the outputs the loss sees (after ``output_fn`` and ``target``).

    Parameters
    ----------
    y : array-like, numpy.memmap or h5py.Dataset
        The labels; arrays, memory maps and datasets are kept by reference, not copied.
    n : int
        Number of sequences.
    loss : str or callable
        A key of ``outputs.LOSSES``, or the user's loss (its labels are only checked to be
        numeric and finite, one row per sequence).
    n_outputs : int
        Outputs the loss sees.
    param, func : str
        The parameter (``"y_train"``, ``"y_test"``) and the public function named in errors.
    output_function : bool
        True when the labels enter TRAK's model output function of ``loss``
        (``outputs.OUTPUT_FUNCTIONS``) rather than the loss: ``"bce"`` then takes 0/1 labels,
        and ``"bce"``, ``"mse"`` and ``"poisson"`` read one output (``n_outputs`` must be 1).

    Returns
    -------
    Labels
        ``values`` the labels as given (an array or the memory map itself), ``dtype`` the dtype
        of their device copy ("int64" for class indices, else "float32"), ``depth``
        ``n_outputs`` for class indices (taken as one-hot rows), else None.
    """
    if isinstance(loss, str) and loss not in LOSSES:
        raise parameter_error(func, "loss", f"one of {sorted(LOSSES)} or a callable", loss)
    values = _label_values(y, param, func)
    if values.ndim == 0 or len(values) != n:
        raise parameter_error(
            func,
            param,
            f"one label per sequence ({n} of them)",
            f"{0 if values.ndim == 0 else len(values)} labels",
            "Pass the labels of the same sequences, in the same order.",
            described=True,
        )
    if values.dtype.kind not in "biuf":
        raise parameter_error(
            func, param, "numeric labels", f"dtype {values.dtype}", error=TypeError, described=True
        )
    if not isinstance(loss, str):
        _check_blocks(values, param, func)
        return Labels(values, "int64" if values.dtype.kind in "iu" else "float32")
    _check_outputs(loss, n_outputs, output_function, func)
    if loss == "cross_entropy":
        if values.dtype.kind not in "iu" or values.ndim != 1:
            raise parameter_error(
                func,
                param,
                "integer class labels of shape (n,) for loss='cross_entropy'",
                values,
                "Pass class indices (not one-hot rows or floats), e.g. y.argmax(1).astype(int).",
            )
        _check_blocks(values, param, func, (0, n_outputs - 1), f"class labels in [0, {n_outputs})")
        return Labels(values, "int64", n_outputs)
    shapes = {(n, n_outputs)} | ({(n,), (n, 1)} if n_outputs == 1 else set())
    if values.shape not in shapes:
        raise parameter_error(
            func,
            param,
            f"labels of shape {' or '.join(str(s) for s in sorted(shapes))} for loss={loss!r} "
            "(one per output the loss sees)",
            values,
            "Select the outputs with target= and pass their labels in the same order.",
        )
    if loss == "bce" and output_function:
        _check_blocks(values, param, func, (0, 1), "labels 0 or 1 for loss='bce'", binary=True)
    elif loss == "bce":
        _check_blocks(values, param, func, (0, 1), "labels in [0, 1] for loss='bce'")
    elif loss in ("poisson", "multinomial"):
        _check_blocks(values, param, func, (0, np.inf), f"counts >= 0 for loss={loss!r}")
    else:
        _check_blocks(values, param, func)
    return Labels(values, "float32")


def _label_values(y: Any, param: str, func: str) -> Any:
    """``y`` as an array: numpy arrays (memory maps too) and h5py datasets as they are."""
    h5py = sys.modules.get("h5py")
    if isinstance(y, np.ndarray) or (h5py is not None and isinstance(y, h5py.Dataset)):
        return y
    try:
        return np.asarray(y)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise parameter_error(func, param, "an array", type(y).__name__, error=TypeError) from exc


def _check_outputs(loss: str, n_outputs: int, output_function: bool, func: str) -> None:
    """The number of outputs ``loss`` (or TRAK's output function of it) can see."""
    if loss in ("cross_entropy", "multinomial") and n_outputs < 2:
        what = "class" if loss == "cross_entropy" else "position of the profile"
        raise parameter_error(
            func,
            "loss",
            "'bce', 'mse' or 'poisson' for one output",
            f"{loss!r} for one output",
            f"loss={loss!r} needs one output (logit) per {what}: keep several with target=, "
            "or all with target=None.",
            described=True,
        )
    if output_function and loss in SINGLE_OUTPUT and n_outputs != 1:
        raise parameter_error(
            func,
            "target",
            f"one output for loss={loss!r} (TRAK's output function of it reads one output)",
            f"{n_outputs} outputs",
            "Select the output with target=k, one TRAK per output.",
            described=True,
        )


def _blocks(values: Any) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, rows as a host array) of ``values``, a bounded number of entries at a time."""
    n = len(values)
    width = int(np.prod(values.shape[1:], dtype=np.int64)) if values.ndim > 1 else 1
    rows = max(1, _BLOCK_ENTRIES // max(1, width))
    for start in range(0, n, rows):
        yield start, np.asarray(values[start : start + rows])


def _check_blocks(
    values: Any,
    param: str,
    func: str,
    bounds: tuple[float, float] | None = None,
    expected: str = "",
    binary: bool = False,
) -> None:
    """Every label finite, within ``bounds`` (and 0 or 1 when ``binary``), block by block; the
    error names the first bad label, its sequence and (for rows) its output."""
    for start, block in _blocks(values):
        bad = ~np.isfinite(block) if block.dtype.kind == "f" else np.zeros(block.shape, bool)
        what = "finite"
        if not bad.any() and bounds is not None:
            bad = (block < bounds[0]) | (block > bounds[1])
            if binary:
                bad |= (block != 0) & (block != 1)
            what = expected
        if bad.any():
            where = np.argwhere(bad)[0]
            i = start + int(where[0])
            value = block[tuple(where)].item()
            at = f" at output {int(where[1])}" if block.ndim == 2 and block.shape[1] > 1 else ""
            raise parameter_error(
                func,
                param,
                what,
                f"the label {value!r}{at} for sequence {i}",
                described=True,
            )


# ----------------------------------------------------------------- parameters
def select_parameters(backend: Any, model: Any, parameters: Any, func: str) -> list[str]:
    """The trainable parameters data attribution differentiates by.

    Parameters
    ----------
    backend : ParameterGradients
        The model's backend.
    model : model
        A torch module or Keras model (call outside the backend's ``session``).
    parameters : None, "last", list of str or callable
        None: every trainable parameter. ``"last"``: those of the last module or layer that has
        trainable parameters (registration order of a torch module, layer order of a Keras
        model); a model with several heads has one of them last, so name the layers instead.
        A list of names: each is a parameter's name as ``backend.trainable_parameters`` gives
        it (torch ``"fc.weight"``, Keras ``"dense_1/kernel"``) or the name of a module or
        layer, selecting all its parameters (torch ``"fc"`` or ``"body.3"``, Keras
        ``"dense_1"``; a Keras model on the torch backend also takes its Keras names). A
        callable: called with each parameter's name, true to select it.
    func : str
        The public function named in errors.

    Returns
    -------
    list of str
        The selected names, in the order of ``backend.trainable_parameters`` (the order of the
        flattened gradients).
    """
    names = [name for name, _ in backend.trainable_parameters(model)]
    if not names:
        raise parameter_error(
            func,
            "model",
            "a model with trainable parameters",
            "a model with none",
            "Unfreeze the layers to attribute (requires_grad=True / trainable=True).",
            described=True,
        )
    if parameters is None:
        return names
    aliases = _aliases(model, names)
    if isinstance(parameters, str):
        if parameters != "last":
            raise parameter_error(
                func,
                "parameters",
                "None, 'last', a list of parameter or layer names, or a callable name -> bool",
                parameters,
                f"For one name, pass a list: parameters=[{parameters!r}].",
            )
        last = _layer(_in_model_order(model, names)[-1])
        return [name for name in names if _layer(name) == last]
    if callable(parameters):
        chosen = [name for name in names if bool(parameters(name))]
        if not chosen:
            raise parameter_error(
                func,
                "parameters",
                "a callable that selects at least one trainable parameter",
                "one that selects none",
                f"It is called with each name, e.g. {names[0]!r}.",
                described=True,
            )
        return chosen
    if isinstance(parameters, np.ndarray) or not isinstance(parameters, (list, tuple)):
        raise parameter_error(
            func,
            "parameters",
            "None, 'last', a list of parameter or layer names, or a callable name -> bool",
            parameters,
            error=TypeError,
        )
    if not parameters:
        raise parameter_error(
            func, "parameters", "a non-empty list of names", parameters, "Pass None for all."
        )
    chosen_set: set[str] = set()
    for item in parameters:
        if not isinstance(item, str):
            raise parameter_error(
                func, "parameters", "a list of names (str)", parameters, error=TypeError
            )
        matches = [name for name in names if any(_within(item, a) for a in aliases[name])]
        if not matches:
            layers = list(
                dict.fromkeys(
                    _layer(aliases[name][-1]) or aliases[name][-1]
                    for name in _in_model_order(model, names)
                )
            )
            shown = [repr(layer) for layer in layers]
            if len(shown) > 6:
                shown = [*shown[:3], "...", *shown[-2:]]
            raise parameter_error(
                func,
                "parameters",
                "names of trainable parameters or of the layers that hold them",
                f"{item!r}, which names none",
                f"Its layers with trainable parameters: {', '.join(shown)}.",
                described=True,
            )
        chosen_set.update(matches)
    return [name for name in names if name in chosen_set]


def _layer(name: str) -> str:
    """The module or layer of a parameter name: what precedes its last '.' or '/'."""
    return name[: max(name.rfind("."), name.rfind("/"), 0)]


def _within(item: str, name: str) -> bool:
    """Whether ``item`` names the parameter ``name`` or a module or layer holding it."""
    return name == item or name.startswith((item + ".", item + "/"))


def _keras_paths(model: Any) -> dict[str, str] | None:
    """torch name -> Keras path of each trainable weight, in the Keras model's layer order,
    for a Keras model on the torch backend (its torch names follow another order); else
    None."""
    keras = sys.modules.get("keras")
    if keras is None or not isinstance(model, keras.Layer):
        return None
    named = getattr(model, "named_parameters", None)
    if named is None:
        return None
    by_id = {id(p): name for name, p in named()}
    return {by_id[id(v.value)]: v.path for v in model.trainable_weights if id(v.value) in by_id}


def _in_model_order(model: Any, names: list[str]) -> list[str]:
    """``names`` in the model's order (a Keras model on torch lists its weights otherwise)."""
    paths = _keras_paths(model)
    if paths is None:
        return names
    return [name for name in paths if name in set(names)] or names


def _aliases(model: Any, names: list[str]) -> dict[str, tuple[str, ...]]:
    """The names each parameter answers to: its own, and its Keras path on torch."""
    paths = _keras_paths(model) or {}
    return {name: (name, paths[name]) if name in paths else (name,) for name in names}
