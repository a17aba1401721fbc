"""The framework-neutral description of a model's local prefix, for fast ISM.

A backend reads a model's graph (torch.fx for torch, the layer graph for Keras) into a
``LocalGraph``: the nodes from the input up to the first operations whose output at a position
may depend on every input position (dense, flatten, global pooling, anything unknown), plus a
``tail`` that runs the rest of the model from the values of the ``cut`` nodes. Every node is a
3-D tensor (batch, a, b) whose positions lie along ``length_axis`` (1 or 2). What a node does
to one window of positions is given as ``apply``, a framework-native callable; the window
arithmetic (which positions a mutation can change) lives in ``seqattrib._fast_ism`` and never
touches a framework.

No framework is imported here: this module only describes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Tensor = Any

#: ``input``: the one-hot input. ``window``: a sliding-window op (convolution or pooling with
#: implicit zero padding ``pad_left``; ``apply`` runs it with *valid* padding on an input window
#: that already holds the padding). ``pointwise``: the same op at every position (activations,
#: BatchNorm in eval mode, dropout at inference, a transpose of the two non-batch axes); ``apply``
#: maps a window to the same window. ``add``: elementwise sum of inputs of one shape; ``apply``
#: takes the aligned windows. ``crop``: output position o is input position o + ``offset``;
#: ``apply`` is None.
Kind = Literal["input", "window", "pointwise", "add", "crop"]


@dataclass
class LocalNode:
    """One operation of the local prefix."""

    name: str  # for messages: the module / layer name
    kind: Kind
    inputs: tuple[int, ...]  # indices of earlier nodes in ``LocalGraph.nodes``
    length: int  # positions in the output
    length_axis: int  # axis (1 or 2) of the output holding the positions
    apply: Callable[..., Tensor] | None = None
    kernel: int = 1  # window: taps
    dilation: int = 1
    stride: int = 1
    pad_left: int = 0  # window: implicit zero padding before position 0
    offset: int = 0  # crop


@dataclass
class LocalGraph:
    """The local prefix of a model and how to finish a forward pass from it.

    ``nodes[0]`` is the input; nodes are in topological order. ``cut`` lists the nodes whose
    values the rest of the model reads; ``tail(*values)`` takes their full values (batch first,
    in ``cut`` order) and returns the model's raw output.
    """

    nodes: list[LocalNode]
    cut: list[int]
    tail: Callable[..., Any]
    notes: list[str] = field(default_factory=list)


class GraphUnsupported(Exception):
    """The model cannot be split for fast ISM; the message names the layer and the reason."""


class NothingLocal(GraphUnsupported):
    """No fast path by design rather than by an unsupported layer: the first layer reading the
    input already needs every position (nothing to reuse), or the model is of a kind whose
    graph this backend does not read (a Keras model on the torch backend).

    ``fast="auto"`` then takes the exact path without a warning; ``fast=True`` still warns."""
