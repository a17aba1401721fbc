"""Models from files: the one place besides the backends that imports a framework.

``load_model`` takes what the command line takes (``--model``): a TorchScript file, a ``.keras``
or ``.h5`` Keras file, a TensorFlow SavedModel folder, or ``pkg.module:factory``. The demo's
model definitions live here too.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

from ._errors import parameter_error

#: The demo CNN: 200 bp in, 3 logits (GATA, Ebox, CTCF) out.
DEMO_LENGTH, DEMO_FILTERS, DEMO_WIDTH, DEMO_OUTPUTS = 200, 32, 15, 3


def load_model(
    spec: str | os.PathLike[str], *, weights: str | os.PathLike[str] | None = None
) -> Any:
    """A model from a file, a SavedModel folder, a factory, or the packaged demo.

    Parameters
    ----------
    spec : str or path
        - a ``torch.export`` program (``.pt2``; export it with a dynamic batch dimension), or a
          TorchScript file (``.pt``, ``.ts``);
        - a Keras file (``.keras``, ``.h5``) or a TensorFlow SavedModel folder;
        - ``pkg.module:factory``, a function that returns a model (with ``weights``: a torch
          state dict or Keras weights file loaded into it);
        - ``demo`` or ``demo-keras``: the packaged demo model (torch or Keras).

        Files that would run code when read (a whole module saved with ``torch.save(model)``)
        are refused: only weights and programs are read.
    weights : str or path, optional
        With a factory only: a torch state dict (read with ``weights_only=True``) or a Keras
        weights file.

    Returns
    -------
    torch.nn.Module, keras.Model or tf.Module
    """
    text = os.fspath(spec)
    if text in DEMO_MODELS and not Path(text).exists():
        return DEMO_MODELS[text]()
    path = Path(text)
    if ":" in text and not path.exists():
        return _from_factory(text, weights)
    if weights:
        raise parameter_error(
            "load_model",
            "weights",
            "used with a pkg.module:factory model",
            os.fspath(weights),
            "A model file already holds its weights.",
        )
    if not path.exists():
        raise parameter_error(
            "load_model",
            "spec",
            "an existing file or folder, pkg.module:factory, 'demo' or 'demo-keras'",
            text,
            error=FileNotFoundError,
        )
    if path.is_dir():
        return _saved_model(path)
    if path.suffix in (".keras", ".h5"):
        import keras

        return keras.models.load_model(path)
    return _torch_file(path)


def model_framework(model: Any) -> str:
    """``"torch"`` or ``"tensorflow"``: the backend that runs ``model``."""
    from .backends import get_backend

    if "tensorflow" not in sys.modules and "torch" not in sys.modules:  # pragma: no cover
        return "torch"
    return get_backend(model).name


def _torch_file(path: Path) -> Any:
    """A ``torch.export`` program or TorchScript file; a clear refusal for anything else."""
    import warnings

    import torch

    if path.suffix == ".pt2":
        try:
            return torch.export.load(str(path)).module()
        except (RuntimeError, ValueError, KeyError) as exc:
            raise _not_a_model(path, "it is not a torch.export program") from exc
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.load(str(path), map_location="cpu").eval()
    except RuntimeError:
        pass
    try:
        content = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - pickle errors of many kinds: the file runs code
        raise _not_a_model(
            path,
            "it is a pickled Python object (torch.save(model)), which only runs code to load",
        ) from exc
    kind = "a state dict (weights only)" if isinstance(content, dict) else "no model"
    raise _not_a_model(path, f"it holds {kind}")


def _not_a_model(path: Path, why: str) -> Exception:
    return parameter_error(
        "load_model",
        "spec",
        "a model file (torch.export .pt2, TorchScript, .keras, SavedModel) or pkg.module:factory",
        f"{os.fspath(path)!r}, but {why}",
        "Save the model with torch.export.save (dynamic batch dimension) or as TorchScript; or "
        "pass the function that builds it as pkg.module:factory with its state dict as weights.",
        described=True,
    )


def _from_factory(spec: str, weights: str | os.PathLike[str] | None) -> Any:
    module_name, _, factory_name = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as exc:
        raise parameter_error(
            "load_model", "spec", "pkg.module:factory naming an importable callable", spec
        ) from exc
    model = factory()
    if weights:
        try:
            _load_weights(model, weights)
        except Exception as exc:  # noqa: BLE001 - any reading or fitting failure, told once
            raise parameter_error(
                "load_model",
                "weights",
                f"a weights file that fits {spec}",
                f"{os.fspath(weights)!r} ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})",
                "Pass a torch state dict (torch.save(model.state_dict(), path)) or Keras weights "
                "(model.save_weights(path)) saved from this architecture.",
                described=True,
            ) from exc
    return model


def _load_weights(model: Any, weights: str | os.PathLike[str]) -> None:
    if model_framework(model) == "torch":
        import torch

        model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    else:
        model.load_weights(os.fspath(weights))


def _saved_model(path: Path) -> Any:
    if not (path / "saved_model.pb").exists():
        raise parameter_error("load_model", "spec", "a SavedModel folder", os.fspath(path))
    import tensorflow as tf

    loaded = tf.saved_model.load(str(path))
    serve = getattr(loaded, "serve", None)  # keras Model.export()
    if serve is None and not callable(loaded):
        raise parameter_error(
            "load_model",
            "spec",
            "a SavedModel with a serve endpoint or __call__",
            os.fspath(path),
            "Export Keras models with model.export(path).",
        )

    class SavedModelEndpoint(tf.Module):
        """A SavedModel's endpoint that keeps the loaded object (and its variables) alive."""

        def __init__(self) -> None:
            super().__init__()
            self.loaded, self.endpoint = loaded, serve if serve is not None else loaded

        def __call__(self, x: Any) -> Any:
            return self.endpoint(x)

    return SavedModelEndpoint()


def demo_torch_model(weights: str | os.PathLike[str] | None = None) -> Any:
    """The demo CNN in torch: (batch, 4, 200) -> (batch, 3) logits; loads ``weights`` if given
    (default: the trained demo weights; ``weights=""`` for an untrained model)."""
    import torch

    model = torch.nn.Sequential(
        torch.nn.Conv1d(4, DEMO_FILTERS, DEMO_WIDTH, padding=DEMO_WIDTH // 2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveMaxPool1d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(DEMO_FILTERS, DEMO_OUTPUTS),
    )
    if weights is None:
        from .demo import data_dir

        weights = data_dir() / "demo_model.pt"
    if weights != "":
        model.load_state_dict(torch.load(weights, weights_only=True))
    return model.eval()


def demo_keras_model(weights: str | os.PathLike[str] | None = None) -> Any:
    """The same CNN in Keras 3: (batch, 200, 4) -> (batch, 3) logits (default: the trained demo
    model; ``weights=""`` for an untrained one)."""
    import keras

    if weights is None:
        from .demo import data_dir

        weights = data_dir() / "demo_model.keras"
    if weights != "":
        return keras.models.load_model(weights)
    return keras.Sequential(
        [
            keras.Input((DEMO_LENGTH, 4)),
            keras.layers.Conv1D(DEMO_FILTERS, DEMO_WIDTH, padding="same", activation="relu"),
            keras.layers.GlobalMaxPooling1D(),
            keras.layers.Dense(DEMO_OUTPUTS),
        ]
    )


#: ``load_model`` names of the packaged demo model.
DEMO_MODELS = {"demo": demo_torch_model, "demo-keras": demo_keras_model}
