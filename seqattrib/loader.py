"""Models from files: the one place besides the backends that imports a framework.

``load_model`` takes what the command line takes (``--model``): a TorchScript file, a ``.keras``
or ``.h5`` Keras file, a TensorFlow SavedModel folder, or ``pkg.module:factory``. The demo's
model definitions live here too.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._demo_files import data_dir
from ._errors import InputShapeRefused, parameter_error

#: The demo CNN: 200 bp in, 3 logits (GATA, Ebox, CTCF) out.
DEMO_LENGTH, DEMO_FILTERS, DEMO_WIDTH, DEMO_OUTPUTS = 200, 32, 15, 3


def load_model(
    spec: str | os.PathLike[str], *, weights: str | os.PathLike[str] | None = None
) -> Any:
    """A model from a file, a SavedModel folder, a factory, or the packaged demo.

    Parameters
    ----------
    spec : str or path
        - a ``torch.export`` program (``.pt2``, saved with ``torch.export.save``) or a
          TorchScript file (``.pt``, ``.ts``, saved with ``torch.jit.save``);
        - a Keras file (``.keras``, ``.h5``) or a TensorFlow SavedModel folder;
        - ``pkg.module:factory``, a function that returns a model; a module that is not
          installed is also looked for in the current folder;
        - ``demo`` or ``demo-keras``: the packaged demo model (torch or Keras).

        Files that would run code when read (a whole module saved with ``torch.save(model)``)
        are refused: only weights and programs are read. A ``torch.export`` program exported
        with a fixed batch size (``torch.export.export`` without ``dynamic_shapes``) runs any
        number of sequences in chunks of that size (the last one padded with zeros, its padding
        rows dropped), which gives the same outputs and gradients row by row; its sequence
        length is fixed unless it was exported with ``dynamic_shapes`` for that axis too.
    weights : str or path, optional
        Weights loaded into the model that ``spec`` builds: a factory's or the demo's (whose
        trained weights they replace). A torch state dict (``torch.save(model.state_dict(),
        path)``, read with ``weights_only=True``) or a Keras weights file
        (``model.save_weights(path)``). A model file already holds its weights: ``weights`` with
        one is refused.

    Returns
    -------
    torch.nn.Module, keras.Model or tf.Module
    """
    text = os.fspath(spec)
    path = Path(text)
    if weights is not None:
        _check_weights_file(weights)
    if text in DEMO_MODELS and not path.exists():
        if weights is None:
            return DEMO_MODELS[text]()
        return _with_weights(DEMO_MODELS[text](""), weights, text)
    if ":" in text and not path.exists():
        model = _factory(text)()
        return model if weights is None else _with_weights(model, weights, text)
    if not path.exists():
        raise parameter_error(
            "load_model",
            "spec",
            "an existing file or folder, pkg.module:factory, 'demo' or 'demo-keras'",
            text,
            error=FileNotFoundError,
        )
    if weights is not None:
        raise parameter_error(
            "load_model",
            "weights",
            "used with a pkg.module:factory or demo model (a model file holds its weights)",
            os.fspath(weights),
            "Drop weights, or pass the function that builds the model as pkg.module:factory "
            "with these weights.",
        )
    if path.is_dir():
        return _saved_model(path)
    return _model_file(path)


def model_framework(model: Any) -> str:
    """``"torch"`` or ``"tensorflow"``: the backend that runs ``model``."""
    from .backends import get_backend

    if "tensorflow" not in sys.modules and "torch" not in sys.modules:  # pragma: no cover
        return "torch"
    return get_backend(model).name


# --------------------------------------------------------------------------- what a file is
#: What each kind of file is, in messages.
_KINDS = {
    "export": "a torch.export program",
    "torchscript": "a TorchScript archive",
    "keras": "a Keras archive",
    "torch.save": "a torch.save file (pickled)",
    "zip": "a zip archive of no model format",
    "hdf5": "an HDF5 file",
    "pickle": "a Python pickle (not a zip archive)",
    "text": "a text file",
    "empty": "an empty file",
    "unknown": "a file of unknown format",
}
_SAVE_A_MODEL = (
    "Save the model with torch.export.save or torch.jit.save (or Keras model.save('m.keras')); or "
    "save its weights with torch.save(model.state_dict(), path) and pass the function that "
    "builds it as pkg.module:factory with that file as weights."
)


def _file_kind(path: Path) -> str:
    """Which of ``_KINDS`` the file at ``path`` is, from its content (never by unpickling)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = {name.split("/", 1)[-1] for name in archive.namelist()}
            names |= set(archive.namelist())
        if "archive_format" in names or any(n.startswith("models/") for n in names):
            return "export"
        if "constants.pkl" in names or any(n.startswith("code/") for n in names):
            return "torchscript"
        if "config.json" in names and any(n.endswith(".weights.h5") for n in names):
            return "keras"
        return "torch.save" if "data.pkl" in names else "zip"
    if head.startswith(b"\x89HDF\r\n\x1a\n"):
        return "hdf5"
    if not head:
        return "empty"
    if len(head) > 1 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:  # a character cut at the end of the head is still text
        if exc.reason != "unexpected end of data" or len(head) < 4096:
            return "unknown"
    return "text" if b"\0" not in head else "unknown"


def _model_file(path: Path) -> Any:
    """The model in a file, read by what the file holds; a one-line refusal for anything else."""
    kind = _file_kind(path)
    suffix = path.suffix.lower()
    if suffix == ".pt2" and kind != "export":
        raise _not_a_model(path, f"it is not a torch.export program: it is {_KINDS[kind]}")
    if suffix == ".keras" and kind != "keras":
        raise _not_a_model(path, f"it is not a .keras zip archive: it is {_KINDS[kind]}")
    if suffix in (".h5", ".hdf5") and kind != "hdf5":
        raise _not_a_model(path, f"it is not an HDF5 Keras file: it is {_KINDS[kind]}")
    if kind == "export":
        return _exported_program(path)
    if kind == "torchscript":
        import warnings

        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.load(str(path), map_location="cpu").eval()
    if kind in ("keras", "hdf5"):
        if suffix not in (".keras", ".h5", ".hdf5"):
            raise _not_a_model(
                path, f"it is {_KINDS[kind]}, which Keras reads under a .keras or .h5 name only"
            )
        import keras

        return keras.models.load_model(path)
    if kind in ("torch.save", "pickle"):
        held = _torch_weights(path, lambda why: _not_a_model(path, why))
        what = "a state dict (weights only)" if isinstance(held, dict) else "no model"
        raise _not_a_model(path, f"it is {_KINDS[kind]} that holds {what}")
    raise _not_a_model(path, f"it is {_KINDS[kind]}")


def _not_a_model(path: Path, why: str) -> Exception:
    return parameter_error(
        "load_model",
        "spec",
        "a model file (torch.export .pt2, TorchScript, .keras, SavedModel) or pkg.module:factory",
        f"{os.fspath(path)!r}, but {why}",
        _SAVE_A_MODEL,
        described=True,
    )


def _torch_weights(path: Path, refuse: Callable[[str], Exception]) -> Any:
    """What a torch.save file holds, read with ``weights_only=True``; a whole pickled module (or
    any object that only runs code to load) is refused through ``refuse``, in one line."""
    import pickle

    import torch

    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, KeyError, AttributeError):
        pass
    raise refuse(
        "it is a pickled Python object (such as torch.save(model)), which only runs code to load"
    ) from None


# --------------------------------------------------------------------------- torch.export
def _exported_program(path: Path) -> Any:
    """A ``torch.export`` program as a module; one exported at a fixed batch size runs any
    batch in chunks of that size."""
    import torch

    program = torch.export.load(str(path))
    user_inputs = set(program.graph_signature.user_inputs)
    shapes = [
        tuple(d if isinstance(d, int) else None for d in node.meta["val"].shape)
        for node in program.graph.nodes
        if node.op == "placeholder" and node.name in user_inputs
    ]
    return _fixed_shape_program()(program.module(), shapes, os.fspath(path))


@functools.cache
def _fixed_shape_program() -> Any:
    """The module class of loaded programs (defined once torch is imported)."""
    import torch

    class LoadedProgram(torch.nn.Module):
        """A ``torch.export`` program that refuses sequence lengths it was not exported for and
        runs a fixed batch size in chunks (zero-padded, padding rows dropped)."""

        def __init__(self, program: Any, shapes: list[tuple[int | None, ...]], name: str) -> None:
            super().__init__()
            self.program, self.shapes, self.name = program, shapes, name
            self.batch = shapes[0][0] if shapes and shapes[0] else None

        def forward(self, x: Any, *extras: Any) -> Any:
            if isinstance(x, torch.fx.Proxy):  # traced by torch.fx: the program's own graph
                return self.program(x, *extras)
            fixed = self.shapes[0][1:] if self.shapes else ()
            if len(fixed) == x.dim() - 1 and any(
                d is not None and d != n for d, n in zip(fixed, x.shape[1:], strict=True)
            ):
                wanted = ", ".join("*" if d is None else str(d) for d in fixed)
                given = ", ".join(map(str, x.shape[1:]))
                raise InputShapeRefused(
                    f"{self.name} was exported for inputs of shape (batch, {wanted}) and cannot "
                    f"take (batch, {given}): export it with dynamic_shapes= naming the axes "
                    "that vary (the batch and the sequence length)"
                )
            n = x.shape[0]
            if self.batch is None or n == self.batch:
                return self.program(x, *extras)
            rows = [i for i, e in enumerate(extras, 1) if _batched(e, self.shapes, i, n)]
            outputs = []
            for start in range(0, n, self.batch):
                stop = min(start + self.batch, n)
                inputs = [_padded(x[start:stop], self.batch)]
                inputs += [
                    _padded(e[start:stop], self.batch) if i in rows else e
                    for i, e in enumerate(extras, 1)
                ]
                outputs.append(_first_rows(self.program(*inputs), stop - start))
            return _joined(outputs)

    return LoadedProgram


def _batched(extra: Any, shapes: list[tuple[int | None, ...]], index: int, n: int) -> bool:
    """Whether an extra input has one row per sequence (split with the sequences)."""
    exported = shapes[index] if index < len(shapes) else ()
    return bool(exported) and exported[0] == shapes[0][0] and getattr(extra, "shape", (0,))[0] == n


def _padded(rows: Any, batch: int) -> Any:
    import torch

    missing = batch - rows.shape[0]
    if not missing:
        return rows
    return torch.cat([rows, rows.new_zeros((missing, *rows.shape[1:]))])


def _first_rows(output: Any, n: int) -> Any:
    """The first ``n`` rows of every tensor of an output (a tensor, tuple, list or dict)."""
    if isinstance(output, dict):
        return {key: _first_rows(value, n) for key, value in output.items()}
    if isinstance(output, (tuple, list)):
        return type(output)(_first_rows(value, n) for value in output)
    return output[:n]


def _joined(outputs: list[Any]) -> Any:
    """Chunks of outputs joined along the batch axis, in the outputs' own structure."""
    import torch

    first = outputs[0]
    if isinstance(first, dict):
        return {key: _joined([o[key] for o in outputs]) for key in first}
    if isinstance(first, (tuple, list)):
        return type(first)(_joined(list(parts)) for parts in zip(*outputs, strict=True))
    return torch.cat(outputs)


# --------------------------------------------------------------------------- factories, weights
def _factory(spec: str) -> Any:
    """The callable that ``pkg.module:factory`` names, importing ``pkg.module`` from the Python
    path or else from the current folder (as command-line tools that take such names do)."""
    module_name, _, factory_name = spec.partition(":")
    try:
        module = _import(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise _import_error(spec, f"importing {module_name} failed ({exc})") from None
        raise _import_error(
            spec,
            f"no module {module_name} on the Python path or in the current folder {os.getcwd()}",
            f"Run from the folder that holds {top.replace('.', '/')}.py (or the package "
            f"{top}/), or add that folder to PYTHONPATH.",
        ) from None
    except Exception as exc:  # noqa: BLE001 - the module's own error while it is imported
        raise _import_error(
            spec, f"importing {module_name} failed ({type(exc).__name__}: {_first_line(exc)})"
        ) from exc
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        names = sorted(n for n in vars(module) if callable(vars(module)[n]) and n[0] != "_")
        raise _import_error(
            spec,
            f"{module_name} ({module.__file__}) has no function {factory_name!r}",
            f"Name one of its functions: {', '.join(names[:8]) or 'none defined'}.",
        )
    return factory


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        if exc.name != module_name.split(".")[0] or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        return importlib.import_module(module_name)


def _import_error(spec: str, why: str, fix: str = "") -> Exception:
    return parameter_error(
        "load_model",
        "spec",
        "pkg.module:factory naming an importable function that builds the model",
        f"{spec!r}, but {why}",
        fix,
        error=ImportError,
        described=True,
    )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


def _check_weights_file(weights: str | os.PathLike[str]) -> None:
    if not Path(weights).is_file():
        raise parameter_error(
            "load_model",
            "weights",
            "an existing weights file",
            os.fspath(weights),
            "Pass the file saved with torch.save(model.state_dict(), path) or "
            "model.save_weights(path).",
            error=FileNotFoundError,
        )


def _with_weights(model: Any, weights: str | os.PathLike[str], spec: str) -> Any:
    """``model`` with ``weights`` loaded; a one-line refusal of files that do not fit it."""
    path = Path(weights)
    kind = _file_kind(path)
    if model_framework(model) == "torch":
        if kind not in ("torch.save", "pickle"):
            raise _bad_weights(spec, path, f"it is {_KINDS[kind]}, not a torch.save state dict")
        state = _torch_weights(path, lambda why: _bad_weights(spec, path, why))
        if not isinstance(state, dict):
            raise _bad_weights(spec, path, f"it holds a {type(state).__name__}, not a dict")
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            raise _bad_weights(spec, path, _first_line(exc)) from None
        return model
    try:
        model.load_weights(os.fspath(path))
    except Exception as exc:  # noqa: BLE001 - Keras raises many kinds, told once
        raise _bad_weights(
            spec, path, f"it is {_KINDS[kind]} ({type(exc).__name__}: {_first_line(exc)})"
        ) from None
    return model


def _bad_weights(spec: str, path: Path, why: str) -> Exception:
    return parameter_error(
        "load_model",
        "weights",
        f"weights that fit {spec}",
        f"{os.fspath(path)!r}, but {why}",
        "Pass a torch state dict (torch.save(model.state_dict(), path)) or Keras weights "
        "(model.save_weights(path)) saved from this architecture.",
        described=True,
    )


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
        weights = data_dir() / "demo_model.pt"
    if weights != "":
        model.load_state_dict(torch.load(weights, weights_only=True))
    return model.eval()


def demo_keras_model(weights: str | os.PathLike[str] | None = None) -> Any:
    """The same CNN in Keras 3: (batch, 200, 4) -> (batch, 3) logits (default: the trained demo
    model; ``weights=""`` for an untrained one)."""
    import keras

    if weights is None:
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
