"""Named heads: what to explain of a model whose outputs are not one (batch, K) tensor.

A head is passed as ``output_fn`` to every method (saliency, integrated gradients, expected
integrated gradients, DeepLIFT/DeepSHAP, ISM and variant effects). It maps the model's raw
output, a tensor or a tuple or dict of them, to the (batch, K) values explained, written once
for torch and TensorFlow: it runs on the framework of the tensors the model returns. Equal heads
compare equal, so compiled functions and results files made with one are reused with another.

- :func:`profile`: one scalar per sequence from BPNet/ChromBPNet profile logits, in ChromBPNet's
  or bpnet-lite's convention;
- :func:`counts` and :func:`logsumexp_counts`: the counts output (or the log-sum-exp of
  ChromBPNet's bias and accessibility counts);
- :func:`tracks`: a reduction of Enformer/Borzoi (batch, bins, tracks) coverage: tracks and bins
  summed or averaged, an optional ``log1p``/``log``, and the difference from other tracks;
  :func:`bins_for` maps genome coordinates to bins;
- :func:`stack`: several heads as the K columns of one output, explained from one forward pass
  with ``target=[0, 1, ...]``;
- :func:`from_spec`: a head from text, as the command line's ``--head`` writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._errors import parameter_error
from .base import HeadMismatch, NamedHead
from .profile import CONVENTIONS, Counts, LogSumExpCounts, Profile
from .spec import parse
from .stack import Stack
from .tracks import REDUCTIONS, TRANSFORMS, Tracks, bins_for, canonical_bins, canonical_tracks

__all__ = [
    "HeadMismatch",
    "NamedHead",
    "bins_for",
    "counts",
    "from_spec",
    "logsumexp_counts",
    "profile",
    "stack",
    "tracks",
]


def _output(value: Any, func: str, param: str = "output") -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise parameter_error(
        func, param, "None, a position (int) or a key (str) of the model's outputs", value,
        error=TypeError,
    )  # fmt: skip


def profile(output: int | str | None = 0, *, convention: str = "chrombpnet") -> Profile:
    """One scalar per sequence from the profile logits of a BPNet or ChromBPNet model.

    Use it to explain the shape of the predicted profile (TF-MoDISco on profile
    contributions); :func:`counts` explains the total.

    The logits are flattened per sequence (strands and positions as one axis, as bpnet-lite
    does) and centred: ``l~ = l - mean(l)``. Then

    - ``convention="chrombpnet"`` (ChromBPNet's and BPNet's published contribution scores):
      ``sum_i s_i * l~_i`` with ``s = softmax(l~)`` held constant (no gradient flows through
      the weights). Gradients are the softmax-weighted gradients of the centred logits.
    - ``convention="bpnet-lite"`` (bpnet-lite's ``ProfileWrapper``): ``sum_i (l~ *
      softmax(l~))_i``, where the product is one block that DeepLIFT/DeepSHAP treat as a
      single elementwise nonlinearity (as tangermeme does with bpnet-lite's
      ``_ProfileLogitScaling``). Gradient methods differentiate it through the softmax.

    Both give the same value; their gradients and DeepSHAP scores differ.

    Parameters
    ----------
    output : int, str or None
        The profile output: a position in a tuple or list (0: bpnet-lite and ChromBPNet return
        ``(profile, counts)``), a key of a dict, or None for a model that returns the logits
        alone. The logits are (batch, length), (batch, strands, length) as bpnet-lite returns
        them, or (batch, length, strands) as Keras BPNet models do.
    convention : {"chrombpnet", "bpnet-lite"}
        See above.

    Returns
    -------
    Profile
        A head: (batch, 1) values from the model's raw output.
    """
    func = "seqattrib.heads.profile"
    if convention not in CONVENTIONS:
        raise parameter_error(func, "convention", f"one of {list(CONVENTIONS)}", convention)
    return Profile(_output(output, func), convention)


def counts(output: int | str | None = 1) -> Counts:
    """The counts output of a BPNet or ChromBPNet model, (batch, 1) or (batch,).

    Parameters
    ----------
    output : int, str or None
        The counts output: a position in a tuple or list (1: bpnet-lite and ChromBPNet return
        ``(profile, counts)``), a key of a dict, or None for a model that returns it alone. A
        (batch, K) counts output of K tasks gives K columns, chosen with ``target``.

    Returns
    -------
    Counts
        A head: (batch, K) values from the model's raw output.
    """
    return Counts(_output(output, "seqattrib.heads.counts"))


def logsumexp_counts(outputs: Sequence[int | str] = (1, 2)) -> LogSumExpCounts:
    """``log(exp(a) + exp(b))`` of two (or more) counts outputs, element by element.

    ChromBPNet's bias-factorised model predicts the log counts of the accessibility and of the
    bias model separately and adds the counts: its total log counts are their log-sum-exp. Use
    it for a model that returns the two separately.

    Parameters
    ----------
    outputs : sequence of int or str
        The counts outputs (positions of a tuple or list, or keys of a dict), each of shape
        (batch,) or (batch, K), all of one shape.

    Returns
    -------
    LogSumExpCounts
        A head: values of the shape of each counts output.
    """
    func = "seqattrib.heads.logsumexp_counts"
    if isinstance(outputs, (str, int)) or len(outputs) < 2:
        raise parameter_error(func, "outputs", "two or more outputs", outputs)
    return LogSumExpCounts(tuple(_output(o, func, "outputs") for o in outputs))


def tracks(
    track: int | str | Sequence[int | str],
    *,
    bins: Any = None,
    reduce: str = "sum",
    transform: str | None = None,
    minus: int | str | Sequence[int | str] | None = None,
    output: int | str | None = None,
    track_names: Sequence[str] | None = None,
    track_axis: int = -1,
    strand_pair: Sequence[int] | None = None,
) -> Tracks:
    """One value per sequence from a (batch, bins, tracks) output (Enformer, Borzoi).

    The value is ``transform(reduce(out[:, bins, track]))``: the chosen tracks and bins summed
    (or averaged) together, then transformed. With ``minus``, the same reduction of the
    ``minus`` tracks over the same bins is subtracted: ``transform(on) - transform(off)``, a
    specificity (with ``transform="log1p"``, a log fold change between cell types).

    Parameters
    ----------
    track : int, str or sequence of them
        The track(s): indices, or names with ``track_names``.
    bins : None, slice, int, sequence of int or boolean mask
        The output bins (None: all). Genome coordinates map to bins with :func:`bins_for`.
        Bins outside the output, or a selection of no bin, are refused.
    reduce : {"sum", "mean"}
        How the chosen bins and tracks combine.
    transform : {None, "log1p", "log"}
        Applied after the reduction.
    minus : int, str, sequence of them, or None
        Tracks to subtract (after the same reduction and transform).
    output : int, str or None
        The output to read: a key of a dict (enformer-pytorch returns ``{"human": ...,
        "mouse": ...}``), a position of a tuple, or None for a model returning one tensor.
    track_names : sequence of str, optional
        The names of the model's tracks, in order, for names in ``track`` and ``minus``.
    track_axis : {-1, 1}
        -1 for (batch, bins, tracks) outputs (enformer-pytorch), 1 for (batch, tracks, bins)
        (borzoi-pytorch).
    strand_pair : sequence of int, optional
        For each of the model's tracks, the track of the other strand (itself for an
        unstranded track), as the ``strand_pair`` column of Borzoi's targets file. Used when
        the output of a reverse-complemented window is turned back to the forward strand
        (``variant_effects(strands="both")``): its bins are reversed and its stranded tracks
        swapped.

    Returns
    -------
    Tracks
        A head: (batch, 1) values from the model's raw output.
    """
    func = "seqattrib.heads.tracks"
    if reduce not in REDUCTIONS:
        raise parameter_error(func, "reduce", f"one of {list(REDUCTIONS)}", reduce)
    if transform not in TRANSFORMS:
        raise parameter_error(func, "transform", f"one of {list(TRANSFORMS)}", transform)
    if track_axis not in (-1, 1, 2) or isinstance(track_axis, bool):
        raise parameter_error(func, "track_axis", "-1 (or 2) or 1", track_axis)
    return Tracks(
        canonical_tracks(track, track_names, "track"),
        canonical_bins(bins),
        reduce,
        transform,
        None if minus is None else canonical_tracks(minus, track_names, "minus"),
        _output(output, func),
        -1 if track_axis == 2 else track_axis,
        None if strand_pair is None else canonical_tracks(strand_pair, None, "strand_pair"),
    )


def stack(*heads: Callable[[Any], Any]) -> Stack:
    """Several heads as the columns of one output: K targets from one forward pass.

    ``output_fn=heads.stack(h1, h2)`` with ``target=[0, 1]`` explains both heads from the
    same forward and backward passes; a list ``[h1, h2]`` passed as ``output_fn`` is the
    same. Each head gives its (batch,) or (batch, K_i) values; columns follow in order.

    Parameters
    ----------
    *heads : callable
        Named heads or framework-native functions of the model's raw output.

    Returns
    -------
    Stack
        A head: (batch, sum of K_i) values.
    """
    flat: list[Callable[[Any], Any]] = []
    for head in heads:
        if not callable(head):
            raise parameter_error(
                "seqattrib.heads.stack", "heads", "heads or callables", head, error=TypeError
            )
        flat += list(head.heads) if isinstance(head, Stack) else [head]
    if not flat:
        raise parameter_error("seqattrib.heads.stack", "heads", "at least one head", heads)
    return Stack(tuple(flat))


def from_spec(spec: str) -> NamedHead:
    """A head written as text, as ``seqattrib ... --head`` takes it.

    ``NAME[:VALUE][,KEY=VALUE...]``: ``profile:chrombpnet``, ``profile:bpnet-lite,output=0``,
    ``counts``, ``counts:1``, ``logsumexp-counts:1+2``,
    ``tracks:track=5,bins=440:456,reduce=sum,transform=log1p``, ``tracks:4+5,minus=7,
    output=human``. Lists join with ``+`` (tracks summed together); ``bins`` is ``start:stop``,
    an index list or ``all``; an ``output`` that is not a number is a dict key.

    Parameters
    ----------
    spec : str
        The head as text.

    Returns
    -------
    NamedHead
        The head.
    """
    name, kwargs = parse(spec)
    factories: dict[str, Callable[..., NamedHead]] = {
        "profile": profile,
        "counts": counts,
        "logsumexp_counts": logsumexp_counts,
        "tracks": tracks,
    }
    if name == "tracks" and "track" not in kwargs:
        raise parameter_error(
            "seqattrib.heads.from_spec", "spec", "tracks with a track (track=5 or tracks:5)", spec
        )
    return factories[name](**kwargs)
