"""The framework-neutral description of a model's local prefix, for fast ISM.

A backend reads a model's graph (torch.fx for torch, the layer graph for Keras) into a
``LocalGraph``: the nodes from the input up to the first operations whose output at a position
may depend on every input position (dense, flatten, anything unknown), plus a ``tail`` that runs
the rest of the model from the values of the ``cut`` nodes. Every positional node is a 3-D tensor
(batch, a, b) whose positions lie along ``length_axis`` (1 or 2). What a node does to a window
of positions is given as ``apply``, a framework-native callable; the window arithmetic (which
positions a mutation can change) lives in ``attribution/mutagenesis/fast.py`` and never touches
a framework.

No framework is imported here: this module only describes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Tensor = Any

#: ``input``: the one-hot input.
#: ``window``: a sliding-window op (convolution, pooling, constant padding). Output position o
#: reads input positions ``o * stride - pad_left + t * dilation`` (t < kernel); positions
#: outside the input read ``fill`` (0 for a convolution's zero padding, -inf for max pooling,
#: NaN where ``apply`` leaves them out of an average). ``apply`` runs the op without padding
#: on an input window that already holds it.
#: ``pointwise``: the same op at every position (activations, inference-mode normalisation,
#: dropout at inference, a transpose of the two non-batch axes); ``apply`` maps a window to
#: the same window.
#: ``merge``: an op of several inputs of one length and length axis that is position-wise
#: (sums, products, concatenation of channels); ``apply`` takes the aligned windows.
#: ``crop``: output position o is input position o + ``offset``; ``apply`` is None.
#: ``reduce``: a sum (``how="sum"``) or maximum (``how="max"``) over every position of its
#: input, whose (batch, channels) result ``apply`` turns into the op's output (a mean divides
#: by the length, a keepdim reshapes). Its output is not positional: it is always cut.
#: ``fixed``: a tensor that does not depend on the values of the input (a constant control
#: track made inside the model); ``apply(x)`` computes it from the input batch (for its size).
Kind = Literal["input", "window", "pointwise", "merge", "crop", "reduce", "fixed"]


@dataclass
class LocalNode:
    """One operation of the local prefix."""

    name: str  # for messages: the module / layer name
    kind: Kind
    inputs: tuple[int, ...]  # indices of earlier nodes in ``LocalGraph.nodes``
    length: int  # positions in the output (reduce: in the input)
    length_axis: int  # axis (1 or 2) of the output holding the positions (reduce: the input's)
    apply: Callable[..., Tensor] | None = None
    kernel: int = 1  # window: taps
    dilation: int = 1
    stride: int = 1
    pad_left: int = 0  # window: positions of padding before position 0
    fill: float = 0.0  # window: the value padding positions hold
    offset: int = 0  # crop
    how: str = ""  # reduce: "sum" or "max"; merge: "sum" when it adds its inputs
    channels: int = 1  # output channels (for the cost model)
    macs: float = 0.0  # multiply-adds per output position (for the cost model)
    fresh: bool = False  # ``apply`` returns a new tensor, never its input or a view of it
    in_place: Callable[..., Tensor] | None = None  # ``apply`` that may overwrite its first
    # input and return it (used when nothing else reads that input)
    commutes: bool = False  # merge of two inputs: ``apply(a, b) == apply(b, a)``
    transposed: Callable[[Tensor], Tensor] | None = None  # a linear window node of stride
    # 1: ``transposed(change)`` is the node's output change for an input change over w
    # positions (zero elsewhere), over the w + reach output positions it reaches (a
    # transposed convolution)


@dataclass
class LocalGraph:
    """The local prefix of a model and how to finish a forward pass from it.

    ``nodes[0]`` is the input; nodes are in topological order. ``cut`` lists the nodes whose
    values the rest of the model reads; ``tail(*values)`` takes their full values (batch first,
    in ``cut`` order) and returns the model's raw output. ``tail_macs``: the reader's estimate of
    the tail's multiply-adds per example (dense and convolution layers it can see).
    """

    nodes: list[LocalNode]
    cut: list[int]
    tail: Callable[..., Any]
    notes: list[str] = field(default_factory=list)
    tail_macs: float = 0.0


class _Unread:
    """Stands for one model output while ``unread_outputs`` calls the output function: any
    use of it raises."""

    def _touched(self, *args: Any, **kwargs: Any) -> Any:
        raise _Touched

    __getattr__ = __getitem__ = __iter__ = __len__ = __bool__ = __index__ = _touched
    __float__ = __int__ = __array__ = __call__ = __neg__ = __pos__ = __abs__ = _touched
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _touched
    __truediv__ = __rtruediv__ = __matmul__ = __rmatmul__ = __pow__ = __rpow__ = _touched
    __lt__ = __le__ = __gt__ = __ge__ = _touched


class _Touched(Exception):
    pass


def _holds_unread(value: Any) -> bool:
    if isinstance(value, _Unread):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_unread(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_unread(v) for v in value.values())
    return False


def unread_outputs(
    output_fn: Callable[[Any], Any] | None,
    leaves: list[Any],
    rebuild: Callable[[list[Any]], Any],
) -> set[int]:
    """Which of the model's flat outputs ``leaves`` (rebuilt into the output structure by
    ``rebuild``) ``output_fn`` never reads: it runs as well with a stand-in that raises on any
    use in their place. Fast ISM then skips the layers only they need (a profile head when the
    counts head is attributed). Conservative: nothing is unread if ``output_fn`` fails on the
    real outputs."""
    if output_fn is None or len(leaves) < 2:
        return set()
    try:
        output_fn(rebuild(list(leaves)))
    except Exception:  # noqa: BLE001 - an output_fn these outputs cannot run: keep them all
        return set()
    unread = set()
    for k in range(len(leaves)):
        trial = list(leaves)
        trial[k] = _Unread()
        try:
            result = output_fn(rebuild(trial))
        except Exception:  # noqa: BLE001 - the stand-in was read (or anything else failed)
            continue
        if not _holds_unread(result):  # returned as it is: read
            unread.add(k)
    return unread if len(unread) < len(leaves) else set()


class GraphUnsupported(Exception):
    """The model cannot be split for fast ISM; the message names the layer and the reason."""


class NothingLocal(GraphUnsupported):
    """No fast path by design rather than by an unsupported layer: the first layer reading the
    input already needs every position (nothing to reuse), or the model is of a kind whose
    graph this backend does not read (a Keras model on the torch backend).

    ``fast="auto"`` then takes the exact path without a warning; ``fast=True`` still warns."""
