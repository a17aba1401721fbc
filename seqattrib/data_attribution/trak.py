"""TRAK (Park et al. 2023): which training sequences a prediction depends on, by linearising the
model around each checkpoint.

Per checkpoint ``c`` (weights ``theta_c``) and example ``z``, TRAK takes the gradient of the
model output function ``f`` (the classification margin ``log p_y / (1 - p_y)``, the signed logit
``(2y - 1) z`` of a binary model, or a regression model's prediction), projects it with a seeded
random matrix ``P_c`` to ``phi_c(z) = P_c^T grad f(z; theta_c)`` and scores

    score_c(z, i) = phi_c(z)^T (Phi_c^T Phi_c + lambda_c I)^-1 phi_c(z_i) Q_c(z_i),

where ``Phi_c`` stacks the training features and ``Q`` is the out-to-loss weight ``-dL/df``:
``1 - p_y`` (classification), ``sigmoid(-f)`` (binary), the residual ``y - f`` (regression).
``score(z, i) = mean_c score_c(z, i)``. Written once against the backend protocol:

- gradients come from ``Backend.per_example_gradients`` with the output functions
  ``"trak_margin"``, ``"trak_binary"``, ``"trak_regression"``, in batches of exactly
  ``batch_size`` rows (the last one padded with copies of its first row), so an example's
  features never depend on which other examples share its batch;
- the projection is drawn with NumPy (Rademacher, one matrix per checkpoint, shared by the
  backends) and applied on the device, held there whole when it fits in 256 MiB and otherwise
  regenerated chunk by chunk of parameters for every batch, so memory stays bounded;
- the kernel is built and inverted in float64 on the host; test features meet it in blocks of
  ``batch_size`` rows, again so that splitting the targets over calls changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._errors import SeqAttribWarning, parameter_error
from .._validation import check_batch_size, check_positive_int, resolve_seed
from ..backends import Backend, get_backend
from ..engine import SequenceSource
from ..engine.outputs import Head
from ._common import (
    HOST_BLOCK,
    GradientPlan,
    Labels,
    checked_source,
    class_labels,
    gradient_plan,
    n_outputs,
    ranked,
)
from ._common import label_array as _label_array
from .checkpoints import Checkpoints, Visit, preserved_state
from .projection import BLOCK_ROWS, RandomProjection

Tensor = Any
_TASKS = {
    "classification": "trak_margin",
    "binary": "trak_binary",
    "regression": "trak_regression",
}
#: lambda_reg="auto": this fraction of trace(Phi^T Phi), the sum of the kernel's eigenvalues.
AUTO_RIDGE = 1e-6
#: Condition numbers of Phi^T Phi + lambda I above this get a warning: float32 features resolve
#: the kernel's eigenvalues only down to about 1e-7 of the largest.
CONDITION_WARNING = 1e7
#: Device bytes of a projection matrix held whole; larger ones are applied in chunks of rows.
PROJECTION_BYTES = 256 * 2**20
#: Host bytes of one float64 block of training features (or of test rows times the kernel).
_HOST_BYTES = 64 * 2**20
#: proj_dim=None builds a (n_params x n_params) float64 kernel: refuse more parameters.
_MAX_EXACT_PARAMS = 16384
_PROJECTION_KIND = "rademacher"
_FORMAT = "seqattrib.TRAK/1"
_KEY_PARTS = {
    "checkpoints": "other checkpoints",
    "data": "other training data",
    "settings": "other settings",
}


@dataclass
class _Checkpoint:
    """What one checkpoint contributes: its training features and kernel inverse."""

    features: np.ndarray  # (n_train, d) float32, Phi_c
    inverse: np.ndarray  # (d, d) float64, (Phi_c^T Phi_c + lambda_c I)^-1
    weights: np.ndarray  # (n_train,) float64, Q_c
    lambda_reg: float
    #: an upper bound of the condition number, free to compute (see ``TRAK._kernel``)
    bound: float
    #: largest / smallest eigenvalue of K, computed when the bound exceeds CONDITION_WARNING
    #: (else on demand, from the inverse)
    condition: float | None

    def exact_condition(self) -> float:
        if self.condition is None:
            self.condition = _condition(np.linalg.eigvalsh(self.inverse)[::-1] ** -1.0)
        return self.condition


@dataclass
class _Fitted:
    plan: GradientPlan
    n_train: int
    n_outputs: int
    fingerprints: list[str]
    checkpoints: list[_Checkpoint]


class TRAK:
    """Data attribution by TRAK: the training sequences behind a model's test predictions.

    Use TRAK to ask which training examples a prediction depends on: a positive score means
    that training on the example raised the test example's output function (its margin for
    classification: a proponent), a negative score that it lowered it (an opponent). TRAK
    linearises the model around checkpoints of training, so unlike TracIn it accounts for the
    correlations between training examples through the kernel ``(Phi^T Phi + lambda I)^-1`` and
    predicts what retraining on a subset would do (its scores are tested against retraining in
    ``benchmarks/bench_lds.py``). It needs one or more checkpoints, ideally the final
    weights of independently trained models (several seeds average out the linearisation's
    noise); checkpoints of one run also work.

    score(z, i) = mean_c phi_c(z)^T (Phi_c^T Phi_c + lambda_c I)^-1 phi_c(z_i) Q_c(z_i)

    with ``phi_c`` the projected gradient of the model output function at checkpoint ``c`` and
    ``Q_c`` the out-to-loss weight of training example ``i`` at that checkpoint. Each
    checkpoint's scores are weighted by its own ``Q_c`` and the checkpoints are averaged plainly;
    traker instead averages the unweighted scores and multiplies by the averaged ``Q`` (and
    rescales each checkpoint's kernel inverse by its mean absolute entry). With one checkpoint
    the two agree up to that rescaling.

    Parameters
    ----------
    model : torch.nn.Module or keras.Model
        The architecture; checkpoints are loaded into it one at a time. Its own weights, buffers,
        train/eval mode and device are restored after every call.
    checkpoints : list
        Checkpoints, visited in turn and loaded with their full state in eval mode, as for
        ``TracIn``: torch ``state_dict`` files or dicts; Keras weights files, ``get_weights()``
        lists or ``{weight.path: array}`` dicts; callables ``ckpt(model)``. Two checkpoints that
        load identical weights are an error.
    task : {"classification", "binary", "regression"}
        The model output function and labels. ``"classification"``: logits of K >= 2 classes,
        integer labels, ``f = log p_y / (1 - p_y)``, ``Q = 1 - p_y``. ``"binary"``: one logit,
        labels 0/1, ``f = (2y - 1) logit``, ``Q = sigmoid(-f)``. ``"regression"``: one output,
        real labels, ``f`` = the prediction, ``Q = y - f`` (scores then predict the change of
        the test prediction, and ``y_test`` does not enter them).
    load_checkpoint : callable or None
        ``load_checkpoint(model, checkpoint)`` for other formats (a returned learning rate is
        ignored: TRAK does not use one).
    proj_dim : int or None
        Dimension ``d`` of the features: gradients are multiplied by a seeded Rademacher matrix
        (entries +-1/sqrt(d), drawn with NumPy, one matrix per checkpoint, the same in both
        frameworks). Use ``d`` below the number of training examples, as TRAK was published:
        with ``d >= n_train``, ``Phi^T Phi`` (rank at most ``n_train``) is singular or nearly
        so, only the ridge keeps it invertible, the kernel (nearly) interpolates the training
        set (a training example scored as a target is explained mostly by itself) and the
        scores depend on ``lambda_reg``; a warning says so (traker, with lambda 0, returns
        meaningless scores there without one). ``None``: no projection, exact gradients (``d``
        = the number of trainable parameters, at most 16,384).
    lambda_reg : "auto" or float
        Ridge ``lambda`` added to the kernel. ``"auto"`` (default): ``1e-6 * trace(Phi^T Phi)``
        per checkpoint, a millionth of the sum of the kernel's eigenvalues (so at least a
        millionth of the largest). On one-hot DNA the sum over the 4 bases of every convolution
        offset's weights acts as a second bias (every position holds exactly one base), so the
        gradients of conv nets have exact null directions and ``Phi^T Phi`` is near-singular
        (condition numbers of 1e7 and far beyond); and float32 features resolve its eigenvalues
        only down to about 1e-7 of the largest (rounding of 6e-8 per entry), below which the
        inverse amplifies rounding. The relative ridge keeps the condition number at most
        ``1 + 1e6``, just inside that resolution, damps only directions with less than a
        millionth of the total variance, and, being relative, does not depend on the scale of
        the gradients. A float is an absolute ``lambda`` (0 allowed). A warning gives the
        condition number when it exceeds 1e7.
    random_state : int, numpy.random.Generator or None
        Seed of the projections (checkpoint ``c`` uses the seed sequence ``(seed, c)``).
    batch_size : int or "auto"
        Examples per device batch of per-example gradients. ``"auto"``: as many as keep one
        batch of flattened gradients within 64 MiB, between 8 and 128.
    device : str or None
        Where to compute (default: where the model is).

    Attributes
    ----------
    lambdas_ : float64 array of shape (n_checkpoints,)
        The ridge used per checkpoint (after ``fit``).
    conditions_ : float64 array of shape (n_checkpoints,)
        Condition numbers (largest / smallest eigenvalue) of ``Phi_c^T Phi_c + lambda_c I``
        (after ``fit``; inf where the smallest computed eigenvalue is not positive).

    Examples
    --------
    >>> trak = seqattrib.TRAK(model, ["seed0.pt", "seed1.pt", "seed2.pt"], proj_dim=1024)
    >>> trak.fit(X_train, y_train, cache="trak_features.npz")  # optional file, reused if valid
    >>> scores = trak.scores(X_test, y_test)        # (n_test, n_train)
    >>> idx, s = trak.top_k(X_test, y_test, k=5)    # strongest proponents of each test example
    """

    def __init__(
        self,
        model: Any,
        checkpoints: Any,
        *,
        task: Literal["classification", "binary", "regression"] = "classification",
        load_checkpoint: Callable[[Any, Any], Any] | None = None,
        proj_dim: int | None = 2048,
        lambda_reg: float | Literal["auto"] = "auto",
        random_state: int | np.random.Generator | None = 0,
        batch_size: int | Literal["auto"] = "auto",
        device: Any = None,
    ) -> None:
        func = "TRAK"
        self._backend: Backend = get_backend(model)
        if not isinstance(task, str) or task not in _TASKS:
            raise parameter_error(func, "task", "'classification', 'binary' or 'regression'", task)
        if proj_dim is not None:
            check_positive_int(proj_dim, "proj_dim", func)
        if not (isinstance(lambda_reg, str) and lambda_reg == "auto"):
            if (
                isinstance(lambda_reg, (bool, str))
                or not isinstance(lambda_reg, numbers.Real)
                or not np.isfinite(float(lambda_reg))
                or float(lambda_reg) < 0
            ):
                raise parameter_error(
                    func,
                    "lambda_reg",
                    "'auto' or a finite number >= 0",
                    lambda_reg,
                    "Use lambda_reg='auto' (a ridge relative to the kernel's scale).",
                )
            lambda_reg = float(lambda_reg)
        self.model = model
        self.task = task
        self.proj_dim = None if proj_dim is None else int(proj_dim)
        self.lambda_reg = lambda_reg
        self.batch_size = batch_size
        self._batch_size = check_batch_size(batch_size, func)  # None: "auto"
        self.device = device
        self._seed = resolve_seed(random_state, func)
        self._checkpoints = Checkpoints(checkpoints, load_checkpoint, None, func)
        self._fitted: _Fitted | None = None

    # ----------------------------------------------------------------- public API
    @property
    def lambdas_(self) -> np.ndarray:
        fitted = self._require_fit("TRAK.lambdas_")
        return np.array([c.lambda_reg for c in fitted.checkpoints], np.float64)

    @property
    def conditions_(self) -> np.ndarray:
        fitted = self._require_fit("TRAK.conditions_")
        return np.array([c.exact_condition() for c in fitted.checkpoints], np.float64)

    def fit(
        self, X_train: Any, y_train: Any, *, cache: str | os.PathLike[str] | None = None
    ) -> TRAK:
        """Featurize the training set at every checkpoint and invert each kernel.

        Keeps, per checkpoint, the training features ``(n_train, d)`` float32, the kernel inverse
        ``(d, d)`` float64 and the weights ``Q`` in memory; ``X_train`` itself is not kept.

        Parameters
        ----------
        X_train : array of shape (n_train, length, 4) or (n_train, 4, length)
            One-hot training sequences, in the layout the model takes (numpy array, memmap or
            h5py dataset; read in batches).
        y_train : array of shape (n_train,) or (n_train, 1)
            Labels for ``task``: class indices, 0/1, or real targets.
        cache : path or None
            A file (numpy ``.npz``) for the fitted state, written when it does not exist and
            read instead of featurizing when it does. Its key is a hash of the checkpoints'
            content, the training data and labels, and every setting (task, proj_dim,
            lambda_reg, seed, batch size, parameters, backend): a file written for anything
            else is refused with an error, never reused (with ``random_state=None`` every
            object draws a new seed, so no file is ever reused). Nothing is written anywhere
            else.

        Returns
        -------
        self
        """
        func = "TRAK.fit"
        path = _check_cache(cache, func)
        source = checked_source(X_train, "X_train", func)
        be, model = self._backend, self.model
        plan = gradient_plan(be, model, self._batch_size, func, "TRAK")
        if self.proj_dim is None and plan.n_params > _MAX_EXACT_PARAMS:
            raise parameter_error(
                func,
                "proj_dim",
                f"an integer for a model with more than {_MAX_EXACT_PARAMS} trainable "
                "parameters (proj_dim=None builds an n_params x n_params kernel)",
                f"None for a model with {plan.n_params} parameters",
                "Pass proj_dim=2048 (or another dimension well below the training set size).",
                described=True,
            )
        n_train = source.n_sequences
        dim = plan.n_params if self.proj_dim is None else self.proj_dim
        if dim >= n_train:
            which = f"proj_dim={dim}" if self.proj_dim is not None else f"{dim} parameters"
            warnings.warn(
                f"TRAK.fit: {which} >= {n_train} training examples. With at least as many "
                f"features as training examples, Phi^T Phi (rank at most {n_train}) is singular "
                "or nearly so: only lambda_reg keeps it invertible, the kernel (nearly) "
                "interpolates the training set, so a training example scored as a "
                "target is explained mostly by itself, and the scores depend on lambda_reg "
                "(traker, with lambda 0, returns meaningless scores here without a warning). "
                "Use a proj_dim below the number of training examples, as TRAK was published.",
                SeqAttribWarning,
                stacklevel=2,
            )
        with preserved_state(be, model, self.device):
            outputs = n_outputs(be, model, source)
            labels = _check_labels(y_train, n_train, self.task, outputs, "y_train", func)
            if path is not None and path.exists():
                fitted = self._read(path, source, labels, plan, outputs, func)
            else:
                fitted = self._featurize_training_set(source, labels, plan, outputs, func)
                if path is not None:
                    self._write(path, fitted, self._key(source, labels, plan, fitted))
        for checkpoint, fit in enumerate(fitted.checkpoints):
            if fit.condition is not None and not fit.condition <= CONDITION_WARNING:
                warnings.warn(
                    f"TRAK.fit: the kernel Phi^T Phi + lambda I of checkpoint {checkpoint} has "
                    f"condition number {fit.condition:.3g} (lambda = {fit.lambda_reg:.3g}): "
                    "directions the float32 features barely resolve dominate its inverse, so "
                    "scores are dominated by rounding. Use lambda_reg='auto' or a larger "
                    "lambda_reg.",
                    SeqAttribWarning,
                    stacklevel=2,
                )
        self._fitted = fitted
        return self

    def scores(self, X_test: Any, y_test: Any) -> np.ndarray:
        """TRAK scores of every training example for every test example.

        Positive: training on the example raised the test example's output function (for
        classification its margin: a proponent); negative: lowered it (an opponent). Every call
        returns a new array, and a test example's row does not depend on the other test
        examples of the call (scoring targets in one call or split over several gives the same
        numbers, bit for bit).

        Parameters
        ----------
        X_test : array of shape (n_test, length, 4) or (n_test, 4, length)
            One-hot test sequences, in the layout the model takes.
        y_test : array of shape (n_test,) or (n_test, 1), or None
            Labels for ``task`` (e.g. the model's predictions, or the true labels); None is
            allowed with ``task="regression"``, whose scores do not depend on it.

        Returns
        -------
        scores : float32 array of shape (n_test, n_train)
        """
        return self._scores(X_test, y_test, "TRAK.scores")

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
        func = "TRAK.top_k"
        fitted = self._require_fit(func)
        n_train = fitted.n_train
        return ranked(lambda: self._scores(X_test, y_test, func), n_train, k, proponents, func)

    # ----------------------------------------------------------------- internals
    def _require_fit(self, func: str) -> _Fitted:
        if self._fitted is None:
            raise RuntimeError(f"{func} needs the training set first: call fit(X_train, y_train).")
        return self._fitted

    def _scores(self, X_test: Any, y_test: Any, func: str) -> np.ndarray:
        fitted = self._require_fit(func)
        source = checked_source(X_test, "X_test", func)
        be, model = self._backend, self.model
        n_test = source.n_sequences
        total = np.zeros((n_test, fitted.n_train), np.float64)
        with preserved_state(be, model, self.device):
            if y_test is None and self.task == "regression":
                labels = Labels(np.zeros(n_test, np.float32), "float32")
            else:
                labels = _check_labels(y_test, n_test, self.task, fitted.n_outputs, "y_test", func)
            visits = self._checkpoints.visit(be, model, func, expected=fitted.fingerprints)
            for visit in visits:
                features = np.concatenate(
                    [phi for _, phi, _ in self._features(source, labels, fitted.plan, visit)]
                )
                _accumulate(total, features, fitted.checkpoints[visit.index], fitted.plan.rows)
        total /= len(fitted.checkpoints)
        return total.astype(np.float32)

    def _featurize_training_set(
        self, source: SequenceSource, labels: Labels, plan: GradientPlan, outputs: int, func: str
    ) -> _Fitted:
        n_train = source.n_sequences
        dim = plan.n_params if self.proj_dim is None else self.proj_dim
        fingerprints: list[str] = []
        checkpoints: list[_Checkpoint] = []
        for visit in self._checkpoints.visit(self._backend, self.model, func):
            fingerprints.append(visit.fingerprint)
            features = np.empty((n_train, dim), np.float32)
            weights = np.empty(n_train, np.float64)
            start = 0
            for stop, phi, out in self._features(source, labels, plan, visit, with_outputs=True):
                features[start:stop] = phi
                weights[start:stop] = _out_to_loss(self.task, out, labels.values[start:stop])
                start = stop
            checkpoints.append(self._kernel(features, weights, visit.index, func))
        return _Fitted(plan, n_train, outputs, fingerprints, checkpoints)

    def _features(
        self,
        source: SequenceSource,
        labels: Labels,
        plan: GradientPlan,
        visit: Visit,
        with_outputs: bool = False,
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray | None]]:
        """``(stop, features, outputs)`` per batch: host float32 features (rows, d) and, when
        asked, the model outputs (rows, K). Every device batch has exactly ``plan.rows`` rows."""
        be = self._backend
        project = _Projector(be, plan.n_params, self.proj_dim, _checkpoint_seed(self._seed, visit))
        loss = _TASKS[self.task]
        for start in range(0, source.n_sequences, plan.rows):
            stop = min(start + plan.rows, source.n_sequences)
            x, y = source.read(start, stop), labels.values[start:stop]
            if stop - start < plan.rows:  # pad: the batch shape decides the rounding
                fill = plan.rows - (stop - start)
                x = np.concatenate([x, np.repeat(x[:1], fill, axis=0)])
                y = np.concatenate([y, np.repeat(y[:1], fill, axis=0)])
            x_device = be.asarray(x)
            grads = be.per_example_gradients(
                self.model, x_device, be.asarray(y, labels.dtype), loss, plan.names, Head()
            )
            features = project(grads)[: stop - start]
            out = None
            if with_outputs:
                out = be.to_numpy(be.forward(self.model, x_device, Head()))[: stop - start]
            yield stop, features, out

    def _kernel(
        self, features: np.ndarray, weights: np.ndarray, index: int, func: str
    ) -> _Checkpoint:
        """``(Phi^T Phi + lambda I)^-1`` in float64, its ridge and condition number."""
        dim = features.shape[1]
        gram = np.zeros((dim, dim), np.float64)
        for block in _row_blocks(features.shape[0], dim):
            part = features[block].astype(np.float64)
            gram += part.T @ part
        trace = float(np.trace(gram))
        if self.lambda_reg == "auto":
            lam = AUTO_RIDGE * trace
        else:
            lam = float(self.lambda_reg)
        gram[np.diag_indices(dim)] += lam
        try:
            inverse = np.linalg.inv(gram)
        except np.linalg.LinAlgError as exc:
            raise parameter_error(
                func,
                "lambda_reg",
                "large enough to make every kernel Phi^T Phi + lambda I invertible",
                f"{self.lambda_reg!r}, with which the kernel of checkpoint {index} is singular "
                f"(lambda = {lam:.3g}, trace of Phi^T Phi = {trace:.3g})",
                "Use lambda_reg='auto' or a positive lambda_reg; a zero trace means the model's "
                "output does not depend on its trainable parameters at this checkpoint.",
                described=True,
            ) from exc
        # Two free upper bounds of the condition number: the 1-norm one, and (trace + lambda) /
        # lambda (Phi^T Phi is positive semi-definite); the eigenvalues (0.6 s at d = 2048)
        # only where neither rules a warning out.
        norms = (np.linalg.norm(inverse, 1), np.linalg.norm(inverse, np.inf))
        bound = float(np.linalg.norm(gram, 1) * max(norms))
        if lam > 0:
            bound = min(bound, (trace + lam) / lam)
        condition = None if bound <= CONDITION_WARNING else _condition(np.linalg.eigvalsh(gram))
        return _Checkpoint(features, inverse, weights, lam, bound, condition)

    # ----------------------------------------------------------------- persistence
    def _settings(self, plan: GradientPlan) -> dict[str, Any]:
        be = self._backend
        return {
            "format": _FORMAT,
            "backend": be.name,
            "task": self.task,
            "proj_dim": self.proj_dim,
            "projection": _PROJECTION_KIND,
            "lambda_reg": self.lambda_reg,
            "seed": self._seed,
            "rows": plan.rows,
            "parameters": [[n, list(s)] for n, s in be.trainable_parameters(self.model)],
        }

    def _key(
        self, source: SequenceSource, labels: Labels, plan: GradientPlan, fitted: _Fitted
    ) -> dict[str, str]:
        """Hashes of what the fitted state depends on: checkpoints, data, settings."""
        data = hashlib.blake2b(digest_size=16)
        data.update(f"{source.n_sequences}|{source.row_shape}|{source.alphabet_axis}|".encode())
        for start in range(0, source.n_sequences, HOST_BLOCK):
            data.update(np.ascontiguousarray(source.read(start, start + HOST_BLOCK)).tobytes())
        data.update(f"|{labels.values.dtype.str}|{labels.values.shape}|".encode())
        data.update(np.ascontiguousarray(labels.values).tobytes())
        settings = json.dumps(self._settings(plan), sort_keys=True)
        return {
            "checkpoints": _digest("|".join(fitted.fingerprints)),
            "data": data.hexdigest(),
            "settings": _digest(settings),
        }

    def _write(self, path: Path, fitted: _Fitted, key: dict[str, str]) -> None:
        arrays: dict[str, np.ndarray] = {
            "key": np.array(json.dumps(key, sort_keys=True)),
            "fingerprints": np.array(fitted.fingerprints),
            "lambdas": np.array([c.lambda_reg for c in fitted.checkpoints], np.float64),
            "bounds": np.array([c.bound for c in fitted.checkpoints], np.float64),
            "conditions": np.array(
                [np.nan if c.condition is None else c.condition for c in fitted.checkpoints]
            ),
        }
        for i, c in enumerate(fitted.checkpoints):
            arrays |= {
                f"features{i}": c.features,
                f"inverse{i}": c.inverse,
                f"weights{i}": c.weights,
            }
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        try:
            with open(partial, "wb") as f:
                np.savez(f, allow_pickle=False, **arrays)
            os.replace(partial, path)  # never a half-written file under the user's name
        finally:
            partial.unlink(missing_ok=True)

    def _read(
        self,
        path: Path,
        source: SequenceSource,
        labels: Labels,
        plan: GradientPlan,
        outputs: int,
        func: str,
    ) -> _Fitted:
        """The fitted state of a cache file, after checking its key against this fit's."""
        be, model = self._backend, self.model
        fingerprints = [v.fingerprint for v in self._checkpoints.visit(be, model, func)]
        expected = self._key(source, labels, plan, _Fitted(plan, 0, 0, fingerprints, []))
        expectation = (
            "a file written by TRAK.fit for the same checkpoints, training data and settings, "
            "or a path that does not exist yet"
        )
        fix = "Delete the file or name another path to featurize again."
        try:
            with np.load(path, allow_pickle=False) as stored:
                found = json.loads(str(stored["key"]))
                arrays = {name: stored[name] for name in stored.files if name != "key"}
        except (OSError, ValueError, KeyError) as exc:
            raise parameter_error(
                func,
                "cache",
                expectation,
                f"{os.fspath(path)!r}, which is not such a file ({type(exc).__name__}: {exc})",
                fix,
                described=True,
            ) from exc
        differ = [what for what in _KEY_PARTS if found.get(what) != expected[what]]
        if differ:
            raise parameter_error(
                func,
                "cache",
                expectation,
                f"{os.fspath(path)!r}, which holds features of "
                + " and ".join(_KEY_PARTS[what] for what in differ),
                fix,
                described=True,
            )
        checkpoints = [
            _Checkpoint(
                arrays[f"features{i}"],
                arrays[f"inverse{i}"],
                arrays[f"weights{i}"],
                float(arrays["lambdas"][i]),
                float(arrays["bounds"][i]),
                None if np.isnan(arrays["conditions"][i]) else float(arrays["conditions"][i]),
            )
            for i in range(len(fingerprints))
        ]
        return _Fitted(plan, source.n_sequences, outputs, fingerprints, checkpoints)


class _Projector:
    """Projects a batch of flattened gradients (device, (rows, P)) to host features (rows, d).

    ``proj_dim=None``: no projection. Otherwise the checkpoint's Rademacher matrix is copied to
    the device once when it fits in ``PROJECTION_BYTES`` and applied in chunks of parameters
    (regenerated for every batch, each chunk within that budget) when it does not.
    """

    def __init__(self, backend: Backend, n_params: int, proj_dim: int | None, seed: int) -> None:
        self.backend = backend
        self.projection: RandomProjection | None = None
        self.matrix: Tensor | None = None
        self.chunk = n_params
        if proj_dim is not None:
            self.projection = RandomProjection(n_params, proj_dim, seed, _PROJECTION_KIND)
            fit = PROJECTION_BYTES // (4 * proj_dim) // BLOCK_ROWS * BLOCK_ROWS
            self.chunk = max(fit, BLOCK_ROWS)
            if self.chunk >= n_params:
                self.matrix = backend.asarray(self.projection.matrix())

    def __call__(self, grads: Tensor) -> np.ndarray:
        be = self.backend
        if self.projection is None:
            return be.to_numpy(grads)
        if self.matrix is not None:
            return be.to_numpy(be.matmul(grads, self.matrix))
        total = None
        n_params = self.projection.n_features
        for start in range(0, n_params, self.chunk):
            stop = min(start + self.chunk, n_params)
            columns = be.take(grads, be.asarray(np.arange(start, stop), "int64"), axis=1)
            part = be.matmul(columns, be.asarray(self.projection.rows(start, stop)))
            total = part if total is None else total + part
        return be.to_numpy(total)


def _checkpoint_seed(seed: int, visit: Visit) -> int:
    """The projection seed of a checkpoint: from the seed sequence (seed, checkpoint index)."""
    return int(np.random.SeedSequence([seed, visit.index]).generate_state(1, np.uint64)[0])


def _row_blocks(n_rows: int, dim: int) -> Iterator[slice]:
    """Slices of rows whose float64 copy of ``dim`` columns stays within ``_HOST_BYTES``."""
    step = max(1, _HOST_BYTES // (8 * dim))
    for start in range(0, n_rows, step):
        yield slice(start, min(start + step, n_rows))


def _accumulate(total: np.ndarray, features: np.ndarray, fit: _Checkpoint, rows: int) -> None:
    """Add ``phi (Phi^T Phi + lambda I)^-1 Phi^T diag(Q)`` of one checkpoint to ``total``.

    Test rows go through in blocks of exactly ``rows`` (the last padded): BLAS results of a row
    depend on the number of rows in its product, never on the other rows' values.
    """
    n_test, dim = features.shape
    group = max(rows, _HOST_BYTES // (8 * dim) // rows * rows)  # test rows per pass over Phi
    for first in range(0, n_test, group):
        last = min(first + group, n_test)
        solved = []
        for start in range(first, last, rows):
            block = features[start : min(start + rows, last)].astype(np.float64)
            if block.shape[0] < rows:
                block = np.concatenate([block, np.repeat(block[:1], rows - block.shape[0], 0)])
            solved.append(block @ fit.inverse)
        for train in _row_blocks(fit.features.shape[0], dim):
            phi = fit.features[train].astype(np.float64)
            weights = fit.weights[train]
            for i, start in enumerate(range(first, last, rows)):
                stop = min(start + rows, last)
                total[start:stop, train] += (solved[i] @ phi.T)[: stop - start] * weights


def _out_to_loss(task: str, outputs: np.ndarray | None, y: np.ndarray) -> np.ndarray:
    """Q = -dL/df per example, in float64, from the model outputs (rows, K)."""
    assert outputs is not None
    z = outputs.astype(np.float64)
    if task == "regression":
        return y.reshape(-1).astype(np.float64) - z[:, 0]
    if task == "binary":
        margin = (2 * y.reshape(-1).astype(np.float64) - 1) * z[:, 0]
    else:
        rows = np.arange(len(y))
        others = z.copy()
        others[rows, y] = -np.inf
        top = others.max(axis=1)
        margin = z[rows, y] - (top + np.log(np.exp(others - top[:, None]).sum(axis=1)))
    return np.exp(-np.logaddexp(0.0, margin))  # sigmoid(-margin) = 1 - p


def _condition(eigenvalues: np.ndarray) -> float:
    """Largest / smallest of ascending eigenvalues (inf when the smallest is not positive)."""
    low, high = float(eigenvalues[0]), float(eigenvalues[-1])
    return high / low if low > 0 else float("inf")


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _check_cache(cache: Any, func: str) -> Path | None:
    if cache is None:
        return None
    if not isinstance(cache, (str, os.PathLike)) or not os.fspath(cache):
        raise parameter_error(func, "cache", "None or a file path", cache, error=TypeError)
    path = Path(os.fspath(cache))
    if path.is_dir():
        raise parameter_error(
            func,
            "cache",
            "a file path",
            f"{os.fspath(cache)!r}, which is a directory",
            "Name a file inside it, e.g. 'trak_features.npz'.",
            described=True,
        )
    return path


def _check_labels(y: Any, n: int, task: str, outputs: int, param: str, func: str) -> Labels:
    """Labels for ``task``: one per sequence, in range; host values and device dtype."""
    values = _label_array(y, n, param, func)
    if task == "classification":
        if outputs < 2:
            raise parameter_error(
                func,
                "task",
                "'binary' or 'regression' for a model with one output",
                "'classification'",
                "task='classification' needs one output (logit) per class.",
                described=True,
            )
        return class_labels(values, outputs, "task='classification'", param, func)
    if outputs != 1:
        fix = (
            "Use task='classification' for one logit per class."
            if task == "binary"
            else "Wrap the model so that it returns the one output to attribute."
        )
        raise parameter_error(
            func,
            "task",
            "'classification' for a model with several outputs",
            f"{task!r} for a model with {outputs} outputs",
            fix,
            described=True,
        )
    if values.shape not in {(n,), (n, 1)}:
        raise parameter_error(
            func, param, f"labels of shape ({n},) or ({n}, 1) for task={task!r}", values
        )
    values = values.reshape(n)
    if task == "binary":
        bad = (values != 0) & (values != 1)
        if bad.any():
            i = int(np.argmax(bad))
            raise parameter_error(
                func,
                param,
                "labels 0 or 1 for task='binary'",
                f"the label {values[i].item()!r} for sequence {i}",
                "Threshold soft labels, or use task='regression' for real-valued targets.",
                described=True,
            )
    return Labels(values.astype(np.float32), "float32")
