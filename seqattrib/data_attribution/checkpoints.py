"""Checkpoints visited one at a time: load into the model, fingerprint, learning rate, release.

Nothing here keeps a live copy of a model: a checkpoint is loaded into the user's model, used,
and overwritten by the next one; the model's own state is saved before the first load and
written back after the last (``preserved_state``). Each loaded state is fingerprinted, which
catches two checkpoints that load identical weights (the aliasing that gave dattri wrong
gradients) and a checkpoint whose content changed between ``fit`` and ``scores``.

The default loader (``load_state``) is written here once: it checks a state dict, weight list or
``{path: array}`` dict against the model's own state entries and assigns it; only reading a
framework's file format is left to the backend (``read_checkpoint``).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import parameter_error
from ..backends import CheckpointMismatch
from ..engine.outputs import model_session
from ..io.fingerprint import fingerprint
from .gradients import ParameterBackend


@contextmanager
def preserved_state(backend: ParameterBackend, model: Any, device: Any) -> Iterator[Any]:
    """A backend session (eval mode, device) that also writes the model's full state back.

    The state (parameters and buffers) is copied to the host before anything is loaded and
    restored in place afterwards, also when an error interrupts the work.
    """
    state = backend.state(model)
    try:
        with model_session(backend, model, device) as resolved:
            yield resolved
    finally:
        backend.set_state(model, state)


@dataclass(frozen=True)
class Visit:
    """One loaded checkpoint: its position, learning rate and state fingerprint."""

    index: int
    learning_rate: float
    fingerprint: str


def load_state(backend: ParameterBackend, model: Any, checkpoint: Any) -> None:
    """The default checkpoint loader: a file in the framework's format (read by the backend), a
    ``{key: array}`` dict of the model's state entries (torch ``state_dict()``, Keras
    ``{weight.path: array}``) or a list of arrays in their order (Keras ``get_weights()``).

    Raises ``CheckpointMismatch`` naming the first entry that does not fit; nothing is assigned
    then.
    """
    held = "it is"
    if isinstance(checkpoint, (str, os.PathLike)):
        checkpoint = backend.read_checkpoint(model, os.fspath(checkpoint))
        if checkpoint is None:  # the format loads itself into the model (Keras load_weights)
            return
        held = "it holds"
    own = backend.state(model)
    backend.set_state(model, _matched(own, checkpoint, held, _list_order(model, own)))


def _list_order(model: Any, own: Mapping[str, np.ndarray]) -> list[str]:
    """The state entries in the order of a list checkpoint (``get_weights()``): a Keras model's
    ``weights`` order, which a Keras model on the torch backend keeps in its state under
    ``_torch_params.<path>`` sorted by name instead; else the state's own order."""
    weights = getattr(model, "weights", None)
    if weights is None or not callable(getattr(model, "get_weights", None)):
        return list(own)
    keys = [f"_torch_params.{getattr(w, 'path', '')}" for w in weights]
    return keys if sorted(keys) == sorted(own) else list(own)


def _matched(
    own: Mapping[str, np.ndarray], checkpoint: Any, held: str, order: list[str]
) -> dict[str, Any]:
    """The checkpoint's value of every state entry of the model (a list checkpoint's arrays
    in ``order``), after checking keys, number and shapes."""
    keys = list(own)
    if isinstance(checkpoint, Mapping):
        for key in keys:
            if key not in checkpoint:
                raise CheckpointMismatch(f"the entry {key!r} of the model is missing from it")
        for key in checkpoint:
            if key not in own:
                raise CheckpointMismatch(f"it has the key {key!r}, which the model lacks")
        values = [checkpoint[key] for key in keys]
    elif isinstance(checkpoint, (list, tuple)):
        keys = order
        values = list(checkpoint)
        if len(values) != len(keys):
            first = keys[len(values)] if len(values) < len(keys) else None
            raise CheckpointMismatch(
                f"it holds {len(values)} arrays but the model has {len(keys)} weights"
                + (f" (the first missing is {first!r})" if first else "")
            )
    else:
        raise CheckpointMismatch(
            f"{held} a {type(checkpoint).__name__}: expected a {{key: array}} dict of the "
            "model's state (a state dict), a list of arrays in its order (get_weights()) or a "
            "weights file path"
        )
    for key, value in zip(keys, values, strict=True):
        shape = tuple(value.shape) if hasattr(value, "shape") else np.shape(value)
        if shape != own[key].shape:
            raise CheckpointMismatch(
                f"{key!r} has shape {shape} in it but {own[key].shape} in the model"
            )
    return dict(zip(keys, values, strict=True))


def _describe(checkpoint: Any) -> str:
    if isinstance(checkpoint, (str, os.PathLike)):
        return repr(os.fspath(checkpoint))
    if isinstance(checkpoint, Mapping):
        return f"a mapping of {len(checkpoint)} entries"
    return f"a {type(checkpoint).__name__}"


def _positive(value: Any) -> bool:
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    number = float(value)
    return bool(np.isfinite(number)) and number > 0


class Checkpoints:
    """The checkpoints of a training run and how to load them.

    Parameters
    ----------
    checkpoints : sequence
        Paths, state dicts / weight lists, or callables ``ckpt(model) -> lr | None``.
    load_checkpoint : callable or None
        ``load_checkpoint(model, checkpoint) -> lr | None`` (captum's contract); None uses the
        backend's loader (or calls a callable checkpoint).
    learning_rates : float, sequence of float or None
        One rate for all checkpoints or one per checkpoint; None: 1.0 unless the loader
        returns a rate.
    func : str
        Name used in error messages.
    """

    def __init__(
        self,
        checkpoints: Any,
        load_checkpoint: Callable[[Any, Any], Any] | None,
        learning_rates: Any,
        func: str,
    ) -> None:
        if isinstance(checkpoints, (str, bytes, os.PathLike, Mapping)) or not isinstance(
            checkpoints, Sequence
        ):
            raise parameter_error(
                func,
                "checkpoints",
                "a list of checkpoints (paths, state dicts or weight lists, or callables)",
                checkpoints,
                "Wrap a single checkpoint in a list: checkpoints=[path].",
                error=TypeError,
            )
        if len(checkpoints) == 0:
            raise parameter_error(
                func,
                "checkpoints",
                "a non-empty list of checkpoints",
                "an empty list",
                "Save the model during training (e.g. once per epoch) and pass those files.",
                described=True,
            )
        if load_checkpoint is not None and not callable(load_checkpoint):
            raise parameter_error(
                func, "load_checkpoint", "None or a callable", load_checkpoint, error=TypeError
            )
        self.items = list(checkpoints)
        self.load_checkpoint = load_checkpoint
        self.learning_rates = self._check_rates(learning_rates, func)

    def __len__(self) -> int:
        return len(self.items)

    def _check_rates(self, rates: Any, func: str) -> list[float] | None:
        if rates is None:
            return None
        n = len(self.items)
        if _positive(rates):
            return [float(rates)] * n
        expected = f"None, a positive number or {n} positive numbers (one per checkpoint)"
        if isinstance(rates, numbers.Real) and not isinstance(rates, bool):
            raise parameter_error(func, "learning_rates", expected, rates)
        if isinstance(rates, (str, bytes)) or not isinstance(rates, (Sequence, np.ndarray)):
            raise parameter_error(func, "learning_rates", expected, rates, error=TypeError)
        values = list(rates)
        if len(values) != n or not all(_positive(v) for v in values):
            raise parameter_error(func, "learning_rates", expected, rates)
        return [float(v) for v in values]

    def _load(
        self, backend: ParameterBackend, model: Any, index: int, checkpoint: Any, func: str
    ) -> Any:
        if self.load_checkpoint is not None:
            return self.load_checkpoint(model, checkpoint)
        if callable(checkpoint) and not isinstance(checkpoint, Mapping):
            return checkpoint(model)
        try:
            return load_state(backend, model, checkpoint)
        except CheckpointMismatch as exc:
            raise parameter_error(
                func,
                "checkpoints",
                "checkpoints that fit the model",
                f"checkpoint {index} ({_describe(checkpoint)}), where {exc}",
                "Check that each checkpoint was saved from this architecture, or pass "
                "load_checkpoint=... to read another format.",
                described=True,
            ) from exc

    def _rate(self, returned: Any, index: int, func: str) -> float:
        given = self.learning_rates[index] if self.learning_rates is not None else None
        if returned is None:
            return given if given is not None else 1.0
        if not _positive(returned):
            raise parameter_error(
                func,
                "load_checkpoint",
                "a loader that returns None or the checkpoint's learning rate (a positive number)",
                f"{returned!r} returned for checkpoint {index}",
                "Return None from the loader and pass learning_rates=..., or return the rate.",
                described=True,
            )
        if given is not None and not np.isclose(float(returned), given, rtol=1e-6, atol=0.0):
            raise parameter_error(
                func,
                "learning_rates",
                "consistent with the rates the checkpoint loader returns",
                f"{given!r} for checkpoint {index}, whose loader returned {float(returned)!r}",
                "Pass learning_rates=None to use the loader's rates.",
                described=True,
            )
        return float(returned)

    def visit(
        self,
        backend: ParameterBackend,
        model: Any,
        func: str,
        expected: Sequence[str] | None = None,
    ) -> Iterator[Visit]:
        """Load each checkpoint into ``model`` in turn and yield what it is.

        ``expected``: fingerprints recorded by ``fit``; a checkpoint that now loads other
        weights is an error. Run inside ``preserved_state``.
        """
        seen: dict[str, int] = {}
        for index, checkpoint in enumerate(self.items):
            returned = self._load(backend, model, index, checkpoint, func)
            digest = fingerprint(backend.state(model))
            if digest in seen:
                raise parameter_error(
                    func,
                    "checkpoints",
                    "checkpoints with different content",
                    f"checkpoints {seen[digest]} and {index}, which load identical weights",
                    "Pass each saved state once; if the loader ignores its argument or every "
                    "entry refers to the same live state dict, save copies "
                    "(copy.deepcopy(model.state_dict()) or a file per epoch).",
                    described=True,
                )
            if expected is not None and expected[index] != digest:
                raise parameter_error(
                    func,
                    "checkpoints",
                    "unchanged since fit()",
                    f"checkpoint {index} ({_describe(checkpoint)}), which now loads other weights",
                    "Call fit() again after changing a checkpoint.",
                    described=True,
                )
            seen[digest] = index
            yield Visit(index, self._rate(returned, index, func), digest)
