"""TracIn (Pruthi et al. 2020): which training sequences pushed a prediction up or down.

``score(test, train) = sum_c lr_c <grad loss(test; theta_c), grad loss(train; theta_c)>`` over the
checkpoints ``c`` of a training run. Written once against the backend protocol:

- exact (``layer=None``): per checkpoint, the per-example gradients of the test set are computed
  once (vectorised) and kept on the device; the training set streams past in batches of
  ``batch_size`` and each batch's gradients meet the test gradients in one matrix product.
  Device memory: ``(n_test + batch_size) x n_params`` floats.
- ``proj_dim=d``: gradients are multiplied by one seeded Gaussian matrix (NumPy, shared by the
  backends, applied by the ``Projector`` TRAK uses too); ``fit`` keeps the projected training
  gradients, ``n_checkpoints x n_train x d``.
- ``layer="last"``: the last dense layer's gradient is ``delta (x) a`` (``delta`` = d loss /
  d logits, ``a`` = its inputs), so ``<grad_W 1, grad_W 2> = <delta1, delta2> <a1, a2>``, plus
  ``<delta1, delta2>`` for the bias: ``fit`` keeps ``a`` and ``delta`` per checkpoint. The backend
  gives ``a`` and the logits; ``delta`` is the gradient of the loss written once in ``outputs``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._errors import parameter_error
from .._validation import check_batch_size, check_positive_int, resolve_seed
from ..backends import UnsupportedLayer
from ..engine import SequenceSource
from .checkpoints import Checkpoints, Visit, preserved_state
from .examples import (
    HOST_BLOCK,
    Labels,
    checked_source,
    class_labels,
    label_array,
    n_outputs,
    ranked,
)
from .gradients import (
    GradientPlan,
    Rows,
    check_finite,
    device_batches,
    gradient_batches,
    gradient_plan,
    parameter_backend,
)
from .outputs import LOSSES, Tensor, bound
from .projection import Projector, RandomProjection


@dataclass
class _Fitted:
    plan: GradientPlan
    source: SequenceSource
    labels: Labels
    fingerprints: list[str]
    learning_rates: list[float]
    # layer="last": per checkpoint, (activations with a ones column for the bias, deltas)
    last: list[tuple[np.ndarray, np.ndarray]]
    # proj_dim: per checkpoint, projected training gradients (n_train, d)
    projected: list[np.ndarray]
    self_influence: np.ndarray | None


class TracIn:
    """Data attribution by TracIn: the training sequences behind a model's test predictions.

    Use TracIn to ask which training examples taught the model a prediction (proponents) or
    argued against it (opponents), or to find mislabelled and unusual training examples (high
    self-influence). It needs checkpoints saved during training; unlike feature attribution
    (``saliency``, ``integrated_gradients``) it scores training examples, not input positions.

    Parameters
    ----------
    model : torch.nn.Module or keras.Model
        The architecture; checkpoints are loaded into it one at a time. Its own weights, buffers,
        train/eval mode and device are restored after every call.
    checkpoints : list
        Checkpoints of one training run, visited in turn. Defaults: a file (torch, a
        ``state_dict`` file read with ``torch.load(path, weights_only=True)``; Keras, a weights
        file read with ``model.load_weights``), a dict of the model's full state (a torch
        ``state_dict``, a Keras ``{weight.path: array}`` dict) or a list of arrays in that
        state's order (``model.get_weights()``). A callable ``ckpt(model)`` loads itself and may
        return its learning rate. Two checkpoints that load identical weights are an error.
    loss : {"cross_entropy", "bce", "mse"} or callable
        Per-example training loss on the model's raw outputs (logits). ``"cross_entropy"``:
        integer class labels; ``"bce"``: labels in [0, 1], one per output, mean over outputs;
        ``"mse"``: mean squared error over outputs; a callable ``loss(outputs, y)`` in the model's
        framework must return per-example losses of shape (batch,).
    load_checkpoint : callable or None
        ``load_checkpoint(model, checkpoint) -> learning_rate | None`` (captum's contract).
    learning_rates : float, list of float or None
        ``lr_c`` per checkpoint (or one for all). None: 1.0, or what the loader returns.
    layer : {None, "last"}
        None: gradients of all trainable parameters. ``"last"``: only the final dense layer
        (torch ``nn.Linear`` / Keras ``Dense`` without activation, whose output is the model's
        output), through the outer-product identity: fast, O(m + K) per pair.
    proj_dim : int or None
        Project full gradients to this many dimensions with a seeded Gaussian matrix (scores are
        then unbiased estimates). The matrix (``n_params x proj_dim x 4`` bytes) is held on the
        device when it fits in 256 MiB, else applied chunk by chunk of parameters.
    random_state : int, numpy.random.Generator or None
        Seed of the projection.
    batch_size : int or "auto"
        Examples per device batch of per-example gradients. ``"auto"``: as many as keep one
        batch of flattened gradients within 64 MiB, between 8 and 128 (256 for
        ``layer="last"``, which traces no parameters).
    device : str or None
        Where to compute (default: where the model is).

    Examples
    --------
    >>> tracin = seqattrib.TracIn(model, ["epoch1.pt", "epoch5.pt", "epoch10.pt"])
    >>> tracin.fit(X_train, y_train)
    >>> scores = tracin.scores(X_test, y_test)        # (n_test, n_train)
    >>> idx, s = tracin.top_k(X_test, y_test, k=5)    # strongest proponents of each test example
    >>> suspicious = np.argsort(-tracin.self_influence())[:20]
    """

    def __init__(
        self,
        model: Any,
        checkpoints: Any,
        *,
        loss: str | Callable[..., Any] = "cross_entropy",
        load_checkpoint: Callable[[Any, Any], Any] | None = None,
        learning_rates: float | list[float] | None = None,
        layer: Literal["last"] | None = None,
        proj_dim: int | None = None,
        random_state: int | np.random.Generator | None = 0,
        batch_size: int | Literal["auto"] = "auto",
        device: Any = None,
    ) -> None:
        func = "TracIn"
        self._backend = parameter_backend(model, func)
        if not (isinstance(loss, str) and loss in LOSSES) and (
            isinstance(loss, str) or not callable(loss)
        ):
            raise parameter_error(
                func,
                "loss",
                "'cross_entropy', 'bce', 'mse' or a callable loss(outputs, y) -> (batch,)",
                loss,
            )
        if layer is not None and layer != "last":
            raise parameter_error(func, "layer", "None or 'last'", layer)
        if proj_dim is not None:
            check_positive_int(proj_dim, "proj_dim", func)
            if layer == "last":
                raise parameter_error(
                    func,
                    "proj_dim",
                    "None when layer='last'",
                    proj_dim,
                    "The last-layer identity is already O(m + K) per pair; drop proj_dim.",
                )
        self.model = model
        self.loss = loss
        self._fn = bound(LOSSES[loss], self._backend) if isinstance(loss, str) else loss
        self.layer = layer
        self.proj_dim = None if proj_dim is None else int(proj_dim)
        self.batch_size = batch_size
        self._batch_size = check_batch_size(batch_size, func)  # None: "auto"
        self.device = device
        self._seed = resolve_seed(random_state, func)
        self._checkpoints = Checkpoints(checkpoints, load_checkpoint, learning_rates, func)
        self._fitted: _Fitted | None = None

    # ----------------------------------------------------------------- public API
    def fit(self, X_train: Any, y_train: Any) -> TracIn:
        """Take the training set and visit every checkpoint once.

        Checks the data and every checkpoint (fits the model, distinct content, learning rate).
        With ``layer="last"`` or ``proj_dim`` it also computes what the training examples
        contribute, so later ``scores`` calls only compute test gradients. ``X_train`` is kept by
        reference (numpy array, memmap or h5py dataset) and read in batches.

        Parameters
        ----------
        X_train : array of shape (n_train, length, 4) or (n_train, 4, length)
            One-hot training sequences, in the layout the model takes.
        y_train : array of shape (n_train,) or (n_train, n_outputs)
            Training labels for ``loss``.

        Returns
        -------
        self
        """
        func = "TracIn.fit"
        source = checked_source(X_train, "X_train", func)
        be, model = self._backend, self.model
        plan = self._plan(func)
        fingerprints: list[str] = []
        rates: list[float] = []
        last: list[tuple[np.ndarray, np.ndarray]] = []
        projected: list[np.ndarray] = []
        norms = np.zeros(source.n_sequences, np.float64)
        with preserved_state(be, model, self.device):
            labels = self._labels(y_train, source, "y_train", func)
            project = self._projector(plan)
            for visit in self._checkpoints.visit(be, model, func):
                fingerprints.append(visit.fingerprint)
                rates.append(visit.learning_rate)
                rows = self._rows(func, "X_train", visit)
                if self.layer == "last":
                    a, delta = self._last_layer(source, labels, plan, rows)
                    last.append((a, delta))
                    norms += visit.learning_rate * _row_dot(a, a) * _row_dot(delta, delta)
                elif project is not None:
                    chunks = []
                    for start, stop, grads in self._gradients(source, labels, plan, rows):
                        chunks.append(project(grads))
                        norms[start:stop] += visit.learning_rate * self._squared_norms(grads)
                    projected.append(np.concatenate(chunks))
        computed = self.layer is not None or project is not None
        self._fitted = _Fitted(
            plan=plan,
            source=source,
            labels=labels,
            fingerprints=fingerprints,
            learning_rates=rates,
            last=last,
            projected=projected,
            self_influence=norms.astype(np.float32) if computed else None,
        )
        return self

    def scores(self, X_test: Any, y_test: Any) -> np.ndarray:
        """Influence of every training example on every test example's loss.

        Positive: the training example's gradient steps lowered the test loss (a proponent);
        negative: raised it (an opponent). Every call returns a new array.

        Parameters
        ----------
        X_test : array of shape (n_test, length, 4) or (n_test, 4, length)
            One-hot test sequences, in the layout the model takes.
        y_test : array of shape (n_test,) or (n_test, n_outputs)
            Labels for ``loss`` (e.g. the model's predictions, or the true labels).

        Returns
        -------
        scores : float32 array of shape (n_test, n_train)
        """
        return self._scores(X_test, y_test, "TracIn.scores")

    def _scores(self, X_test: Any, y_test: Any, func: str) -> np.ndarray:
        fitted = self._require_fit(func)
        source = checked_source(X_test, "X_test", func)
        be, model = self._backend, self.model
        n_train = fitted.source.n_sequences
        out = np.zeros((source.n_sequences, n_train), np.float32)
        plan = fitted.plan
        exact = self.layer is None and self.proj_dim is None
        # The exact pass meets every training gradient: their norms come for free.
        norms = np.zeros(n_train, np.float64) if exact and fitted.self_influence is None else None
        with preserved_state(be, model, self.device):
            labels = self._labels(y_test, source, "y_test", func)
            project = self._projector(plan)
            for visit in self._visits(fitted, func):
                lr = np.float32(visit.learning_rate)
                rows = self._rows(func, "X_test", visit)
                if self.layer == "last":
                    a_test, delta_test = self._last_layer(source, labels, plan, rows)
                    a_train, delta_train = fitted.last[visit.index]
                    for start in range(0, n_train, HOST_BLOCK):
                        block = slice(start, start + HOST_BLOCK)
                        out[:, block] += (
                            lr * (delta_test @ delta_train[block].T) * (a_test @ a_train[block].T)
                        )
                elif project is not None:
                    test = np.concatenate(
                        [project(g) for _, _, g in self._gradients(source, labels, plan, rows)]
                    )
                    train = fitted.projected[visit.index]
                    for start in range(0, n_train, HOST_BLOCK):
                        block = slice(start, start + HOST_BLOCK)
                        out[:, block] += lr * (test @ train[block].T)
                else:
                    self._exact(visit, source, labels, fitted, out, norms, func)
        if norms is not None:
            fitted.self_influence = norms.astype(np.float32)
        return out

    def self_influence(self) -> np.ndarray:
        """Each training example's influence on its own loss: ``sum_c lr_c |grad loss|^2``.

        High values flag examples the model finds hard or contradictory: mislabelled, rare or
        unusual sequences. Exact also with ``proj_dim`` (it comes with the training gradients);
        restricted to the last layer with ``layer="last"``. Every call returns a new array.

        Returns
        -------
        self_influence : float32 array of shape (n_train,)
        """
        func = "TracIn.self_influence"
        fitted = self._require_fit(func)
        if fitted.self_influence is None:
            be, model = self._backend, self.model
            norms = np.zeros(fitted.source.n_sequences, np.float64)
            with preserved_state(be, model, self.device):
                for visit in self._visits(fitted, func):
                    rows = self._rows(func, "X_train", visit)
                    train = self._gradients(fitted.source, fitted.labels, fitted.plan, rows)
                    for start, stop, grads in train:
                        norms[start:stop] += visit.learning_rate * self._squared_norms(grads)
            fitted.self_influence = norms.astype(np.float32)
        return fitted.self_influence.copy()

    def top_k(
        self, X_test: Any, y_test: Any, k: int, *, proponents: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` strongest proponents (or opponents) of each test example.

        Parameters
        ----------
        X_test, y_test
            As for ``scores``.
        k : int
            How many training examples per test example (at most ``n_train``).
        proponents : bool
            True: the highest scores, in descending order; False: the opponents, the lowest
            scores in ascending order (most negative first).

        Returns
        -------
        indices : int64 array of shape (n_test, k)
            Rows of ``X_train``; ties keep the lower index first.
        scores : float32 array of shape (n_test, k)
        """
        func = "TracIn.top_k"
        fitted = self._require_fit(func)
        n_train = fitted.source.n_sequences
        return ranked(lambda: self._scores(X_test, y_test, func), n_train, k, proponents, func)

    # ----------------------------------------------------------------- internals
    def _require_fit(self, func: str) -> _Fitted:
        if self._fitted is None:
            raise RuntimeError(f"{func} needs the training set first: call fit(X_train, y_train).")
        return self._fitted

    def _plan(self, func: str) -> GradientPlan:
        """The trainable parameters and the batch size (no parameters with layer="last")."""
        return gradient_plan(
            self._backend,
            self.model,
            self._batch_size,
            func,
            "TracIn",
            traced=self.layer != "last",
        )

    def _projector(self, plan: GradientPlan) -> Projector | None:
        """The projector of the gradients to proj_dim (one Gaussian matrix), or None."""
        if self.proj_dim is None:
            return None
        return Projector(self._backend, RandomProjection(plan.n_params, self.proj_dim, self._seed))

    def _visits(self, fitted: _Fitted, func: str) -> Iterator[Visit]:
        return self._checkpoints.visit(
            self._backend, self.model, func, expected=fitted.fingerprints
        )

    def _labels(self, y: Any, source: SequenceSource, param: str, func: str) -> Labels:
        outputs = n_outputs(self._backend, self.model, source)
        return _check_labels(y, source.n_sequences, self.loss, outputs, param, func)

    def _rows(self, func: str, param: str, visit: Visit) -> Rows:
        return Rows(func, param, visit.index, "loss")

    def _gradients(
        self, source: SequenceSource, labels: Labels, plan: GradientPlan, rows: Rows
    ) -> Iterator[tuple[int, int, Tensor]]:
        """``(start, stop, gradients)``: per-example loss gradients (rows, n_params) on the
        device, batch by batch (a NaN or inf is an error naming its example, ``rows``)."""
        batches = gradient_batches(self._backend, self.model, self._fn, source, labels, plan, rows)
        for start, stop, _, grads in batches:
            yield start, stop, grads

    def _squared_norms(self, grads: Tensor) -> np.ndarray:
        be = self._backend
        return be.to_numpy(be.sum(grads * grads, axis=(1,))).astype(np.float64)

    def _last_layer(
        self, source: SequenceSource, labels: Labels, plan: GradientPlan, rows: Rows
    ) -> tuple[np.ndarray, np.ndarray]:
        """Host arrays: inputs of the last dense layer (plus a ones column for its bias) and
        d loss / d logits, of every example (a NaN or inf is an error naming its example)."""
        be = self._backend
        func = rows.func
        activations, deltas = [], []
        for start, _, x, y in device_batches(be, source, labels, plan.rows):
            try:
                a, logits, bias = be.last_layer(self.model, x)
            except UnsupportedLayer as exc:
                raise parameter_error(
                    func,
                    "layer",
                    "'last' only for a model whose output is the output of its last dense "
                    "layer (torch.nn.Linear, or keras Dense without activation)",
                    f"'last' for a model where {exc}",
                    "Use layer=None (all parameters), with proj_dim=... if they are many.",
                    described=True,
                ) from exc
            check_finite(be.to_numpy(logits), start, rows, "model outputs")
            check_finite(np.asarray(be.to_numpy(self._fn(logits, y))), start, rows, "loss")
            delta = be.to_numpy(be.output_gradients(self._fn, logits, y))
            check_finite(delta, start, rows, "gradients of the loss")
            a = be.to_numpy(a)
            check_finite(a, start, rows, "inputs of the last layer")
            if bias:
                a = np.concatenate([a, np.ones((a.shape[0], 1), a.dtype)], axis=1)
            activations.append(a)
            deltas.append(delta)
        return np.concatenate(activations), np.concatenate(deltas)

    def _exact(
        self,
        visit: Visit,
        source: SequenceSource,
        labels: Labels,
        fitted: _Fitted,
        out: np.ndarray,
        norms: np.ndarray | None,
        func: str,
    ) -> None:
        """One checkpoint's exact contribution: test gradients once, training set streamed.

        Adds ``lr * G_test @ G_train.T`` to ``out`` and, when given, ``lr * |g_train|^2`` to
        ``norms``.
        """
        be = self._backend
        plan = fitted.plan
        tests = self._gradients(source, labels, plan, self._rows(func, "X_test", visit))
        test = be.concat([grads for _, _, grads in tests])
        lr = np.float32(visit.learning_rate)
        train = self._rows(func, "X_train", visit)
        for start, stop, grads in self._gradients(fitted.source, fitted.labels, plan, train):
            out[:, start:stop] += lr * be.to_numpy(be.matmul(test, grads, transpose_b=True))
            if norms is not None:
                norms[start:stop] += visit.learning_rate * self._squared_norms(grads)


def _row_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", a.astype(np.float64), b.astype(np.float64))


def _check_labels(
    y: Any, n: int, loss: str | Callable[..., Any], n_outputs: int, param: str, func: str
) -> Labels:
    """Labels for ``loss``: one per sequence, in range; returns host values and device dtype."""
    values = label_array(y, n, param, func)
    if loss == "cross_entropy":
        if n_outputs < 2:
            raise parameter_error(
                func,
                "loss",
                "'bce' or 'mse' for a model with one output",
                "'cross_entropy'",
                "Cross-entropy needs one output (logit) per class.",
                described=True,
            )
        return class_labels(values, n_outputs, "loss='cross_entropy'", param, func)
    if isinstance(loss, str):
        shapes = {(n, n_outputs)} | ({(n,), (n, 1)} if n_outputs == 1 else set())
        if values.shape not in shapes:
            raise parameter_error(
                func,
                param,
                f"labels of shape {' or '.join(str(s) for s in sorted(shapes))} for loss="
                f"{loss!r} (one per output of the model)",
                values,
            )
        if loss == "bce":
            bad = (values < 0) | (values > 1)
            if bad.any():
                i = int(np.argwhere(bad)[0][0])
                raise parameter_error(
                    func,
                    param,
                    "labels in [0, 1] for loss='bce'",
                    f"the label {values.reshape(n, -1)[i].tolist()!r} for sequence {i}",
                    described=True,
                )
        return Labels(values.astype(np.float32), "float32")
    if values.dtype.kind in "iu":
        return Labels(values.astype(np.int64), "int64")
    return Labels(values.astype(np.float32), "float32")
