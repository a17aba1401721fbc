"""PyTorch backend (also Keras 3 models on the torch backend, which are torch modules)."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import numpy as np
import torch

from ..._errors import SeqAttribWarning, parameter_error
from ..._threads import available_cpus
from ..._validation import check_device
from ..protocol import Head, TransferStats
from . import head_ops as ops_of_heads
from .gradients import target_gradients
from .memory import out_of_memory
from .parameters import TorchParameterGradients
from .rescale import TorchRescaleGradients
from .windows import TorchWindowedForward

_DTYPES = {"float32": torch.float32, "int64": torch.int64, "int32": torch.int32}


@contextmanager
def _full_float32() -> Iterator[None]:
    """TF32 off inside a call (restored after): cuDNN's default TF32 convolutions keep 10
    mantissa bits, which moved EIG of the CREsted-like benchmark model by 1e-2 of its largest
    value on an H200; attributions are computed in full float32 instead.

    torch 2.9+ has per-backend ``fp32_precision`` settings, and reading the legacy
    ``allow_tf32`` flags after a mix of the two APIs raises; so the new API is used where it
    exists (conv, RNN and matmul set to "ieee"), the legacy flags elsewhere.
    """
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    settings: list[Any] = [getattr(cudnn, "conv", None), getattr(cudnn, "rnn", None), matmul]
    if all(hasattr(s, "fp32_precision") for s in settings):
        saved = [s.fp32_precision for s in settings]
        for setting in settings:
            setting.fp32_precision = "ieee"
        try:
            yield
        finally:
            for setting, value in zip(settings, saved, strict=True):
                setting.fp32_precision = value
        return
    flags = cudnn.allow_tf32, matmul.allow_tf32
    cudnn.allow_tf32 = matmul.allow_tf32 = False
    try:
        yield
    finally:
        cudnn.allow_tf32, matmul.allow_tf32 = flags


class _Adapted(torch.nn.Module):
    """A model fed in its own layout and dtype (see ``TorchBackend.adapt``)."""

    def __init__(self, model: Any, transpose_input: bool, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.model, self.transpose_input, self.input_dtype = model, transpose_input, dtype

    def forward(self, x: torch.Tensor, *extras: torch.Tensor) -> Any:
        if self.transpose_input:
            x = x.transpose(1, 2)
        if self.input_dtype is not None:
            x = x.to(self.input_dtype)
            extras = tuple(e.to(self.input_dtype) if e.is_floating_point() else e for e in extras)
        return self.model(x, *extras)


class _Ensemble(torch.nn.Module):
    """The mean output of several models (see ``TorchBackend.ensemble``)."""

    def __init__(self, models: Sequence[Any], head: Head) -> None:
        super().__init__()
        self.members = torch.nn.ModuleList(models)
        self.head = head

    def forward(self, x: torch.Tensor, *extras: torch.Tensor) -> torch.Tensor:
        outputs = [self.head(member(x, *extras)).float() for member in self.members]
        return torch.stack(outputs).mean(dim=0)


def _device(device: Any) -> torch.device:
    """``device`` as a torch device this build and machine have."""
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise parameter_error(
            "the call", "device", "a torch device such as 'cpu', 'cuda' or 'cuda:1'", device
        ) from exc
    check_device(target, "the call")
    available = {
        "cuda": torch.cuda.is_available(),
        "mps": torch.backends.mps.is_available(),
    }
    if not available.get(target.type, True):
        raise parameter_error(
            "the call",
            "device",
            "a device this machine and torch build have",
            device,
            f"torch {torch.__version__} sees no {target.type} device here; use device='cpu'.",
        )
    return target


@contextmanager
def _threads_within_cpus(device: torch.device) -> Iterator[None]:
    """On a CPU, at most one torch thread per CPU this process may use, inside a call (the
    user's setting is restored after): more threads than CPUs spin and wait for each other,
    and torch counts the machine's cores, not a container's or a scheduler's share of them."""
    threads, cpus = torch.get_num_threads(), available_cpus()
    if device.type != "cpu" or threads <= cpus:
        yield
        return
    warnings.warn(
        f"torch is set to {threads} threads but this process may use {cpus} CPUs (its CPU "
        f"affinity or cgroup quota); seqattrib runs torch with {cpus} threads during its calls. "
        f"Set OMP_NUM_THREADS={cpus} or call torch.set_num_threads({cpus}) to silence this.",
        SeqAttribWarning,
        stacklevel=4,
    )
    torch.set_num_threads(cpus)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _eval(model: torch.nn.Module) -> None:
    """Eval mode; a ``torch.export`` program has none to set (it runs as it was exported)."""
    try:
        model.eval()
    except NotImplementedError:
        pass


class TorchBackend(TorchWindowedForward, TorchParameterGradients, TorchRescaleGradients):
    """Primitives for ``torch.nn.Module`` models (core, windowed forward, parameter
    gradients, rescale gradients)."""

    name = "torch"
    head_ops = ops_of_heads

    def __init__(self) -> None:
        self.transfers = TransferStats()
        self.device = torch.device("cpu")
        self._adapters: weakref.WeakKeyDictionary[Any, dict[Any, _Adapted]] = (
            weakref.WeakKeyDictionary()
        )

    def ensemble(self, models: Sequence[Any], head: Head) -> Any:
        return _Ensemble(models, head)

    def adapt(self, model: Any, transpose_input: bool) -> Any:
        params = model.parameters() if isinstance(model, torch.nn.Module) else []
        dtype = next((p.dtype for p in params if p.is_floating_point()), torch.float32)
        cast = None if dtype == torch.float32 else dtype
        if not transpose_input and cast is None:
            return model
        try:
            per_model = self._adapters.setdefault(model, {})
        except TypeError:  # not weak-referenceable
            per_model = {}
        key = (transpose_input, cast)
        if key not in per_model:
            per_model[key] = _Adapted(model, transpose_input, cast)
        return per_model[key]

    # ----------------------------------------------------------------- model state
    def full_float32(self) -> AbstractContextManager[None]:
        return _full_float32()

    @contextmanager
    def session(self, model: Any, device: Any) -> Iterator[torch.device]:
        if not isinstance(model, torch.nn.Module):  # a plain callable: nothing to restore
            previous, self.device = self.device, _device(device or "cpu")
            try:
                with _threads_within_cpus(self.device):
                    yield self.device
            finally:
                self.device = previous
            return
        params = list(model.parameters())
        tensors = params + list(model.buffers())
        if any(t.device.type == "meta" for t in tensors):
            raise parameter_error(
                "the call",
                "model",
                "a model whose weights hold values",
                "a model with weights on the meta device (shapes without values)",
                "Load its weights first: model.to_empty(device='cpu'), then load_state_dict.",
                described=True,
            )
        home = tensors[0].device if tensors else torch.device("cpu")
        target = _device(device) if device is not None else home
        modes = [(m, m.training) for m in model.modules()]
        grad_flags = [(p, p.requires_grad) for p in params]
        moved = device is not None and any(t.device != target for t in tensors)
        previous = self.device
        try:
            if moved:
                model.to(target)
            _eval(model)
            for p in params:
                p.requires_grad_(False)
            self.device = target
            with _threads_within_cpus(target):
                yield target
        finally:
            self.device = previous
            for p, flag in grad_flags:
                p.requires_grad_(flag)
            for m, mode in modes:
                m.training = mode
            if moved:
                model.to(home)

    def describe(self, model: Any) -> str:
        params = model.parameters() if isinstance(model, torch.nn.Module) else []
        n = sum(p.numel() for p in params)
        return f"{type(model).__module__}.{type(model).__name__} (torch, {n} parameters)"

    def state(self, model: Any) -> dict[str, np.ndarray]:
        return {
            key: value.detach().to("cpu").numpy().copy()
            for key, value in model.state_dict(keep_vars=True).items()
        }

    # ----------------------------------------------------------------- arrays
    def asarray(self, array: np.ndarray, dtype: str = "float32") -> torch.Tensor:
        array = np.ascontiguousarray(array)
        self.transfers.to_device += array.nbytes
        t = torch.from_numpy(array)
        if self.device.type == "cuda":
            # From pinned memory the copy is queued behind the device's work instead of
            # waiting for it: the host prepares the next batch while the GPU runs this one.
            t = t.pin_memory().to(self.device, non_blocking=True)
        else:
            t = t.to(self.device)
        return t.to(_DTYPES[dtype])

    def to_numpy(self, tensor: torch.Tensor) -> np.ndarray:
        out = tensor.detach().to("cpu").numpy()
        self.transfers.to_host += out.nbytes
        return out

    def take(self, tensor: torch.Tensor, indices: torch.Tensor, axis: int = 0) -> torch.Tensor:
        return tensor.index_select(axis, indices)

    def one_hot(self, indices: torch.Tensor, depth: int) -> torch.Tensor:
        return torch.nn.functional.one_hot(indices, depth).to(torch.float32)

    def log(self, tensor: torch.Tensor) -> torch.Tensor:
        return torch.log(tensor)

    def concat(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        return tensors[0] if len(tensors) == 1 else torch.cat(list(tensors), dim=0)

    def reshape(self, tensor: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        return tensor.reshape(tuple(shape))

    def mean(self, tensor: torch.Tensor, axis: int, keepdims: bool = True) -> torch.Tensor:
        return tensor.mean(dim=axis, keepdim=keepdims)

    def segment_sum(
        self, values: torch.Tensor, segment_ids: torch.Tensor, n_segments: int
    ) -> torch.Tensor:
        out = values.new_zeros((n_segments, *values.shape[1:]))
        return out.index_add_(0, segment_ids, values)

    def on_accelerator(self) -> bool:
        return self.device.type != "cpu"

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # ----------------------------------------------------------------- model calls
    def forward(
        self, model: Any, x: torch.Tensor, head: Head, extras: Sequence[torch.Tensor] = ()
    ) -> torch.Tensor:
        with out_of_memory(), torch.inference_mode():
            return head(model(x, *extras)).float()

    def outputs(self, raw: Any, head: Head) -> torch.Tensor:
        return head(raw).float()

    def input_gradients(
        self,
        model: Any,
        x: torch.Tensor,
        targets: Sequence[int],
        head: Head,
        vectorised: bool,
        extras: Sequence[torch.Tensor] = (),
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.detach().requires_grad_(True)
        with out_of_memory(), torch.enable_grad():
            selected = head(model(x, *extras))[:, list(targets)]
            grads = target_gradients(selected, x, vectorised)
        return selected.detach().float(), grads
