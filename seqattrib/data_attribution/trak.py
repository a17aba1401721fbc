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

- gradients of the output functions (``outputs.margin``, ``signed_logit``, ``prediction``,
  written once) come from the backend's per-example gradients, in batches of exactly
  ``batch_size`` rows (the last one padded with copies of its first row), so an example's
  features never depend on which other examples share its batch; Q comes from the same
  definitions, evaluated on the host in float64 (``outputs.out_to_loss``);
- the projection is drawn with NumPy (Rademacher, one matrix per checkpoint, shared by the
  backends) and applied on the device by the ``Projector`` TracIn uses too;
- the kernel is built and inverted in float64 on the host (``trak_kernel``); test features meet
  it in blocks of ``batch_size`` rows, again so that splitting the targets over calls changes
  nothing. The optional cache file is ``trak_cache``'s.
"""

from __future__ import annotations

import numbers
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._errors import SeqAttribWarning, parameter_error
from .._validation import check_batch_size, check_positive_int, resolve_seed
from ..engine import SequenceSource
from ..engine.outputs import Head
from .checkpoints import Checkpoints, Visit, preserved_state
from .examples import Labels, checked_source, class_labels, label_array, n_outputs, ranked
from .gradients import (
    GradientPlan,
    Rows,
    check_finite,
    gradient_batches,
    gradient_plan,
    parameter_backend,
)
from .outputs import NUMPY, TASKS, bound, out_to_loss
from .projection import Projector, RandomProjection
from .trak_cache import cache_key, cache_path, read_cache, write_cache
from .trak_kernel import CONDITION_WARNING, KernelFit, accumulate, fit_kernel

#: proj_dim=None builds a (n_params x n_params) float64 kernel: refuse more parameters.
_MAX_EXACT_PARAMS = 16384
_PROJECTION_KIND = "rademacher"


@dataclass
class _Fitted:
    plan: GradientPlan
    n_train: int
    n_outputs: int
    fingerprints: list[str]
    checkpoints: list[KernelFit]


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
        ``TracIn``: torch ``state_dict`` files or Keras weights files, dicts of the model's
        full state, lists of arrays in its order (``get_weights()``), callables
        ``ckpt(model)``. Two checkpoints that load identical weights are an error.
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
        self._backend = parameter_backend(model, func)
        if not isinstance(task, str) or task not in TASKS:
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
        self._fn = bound(TASKS[task], self._backend)
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
        path = cache_path(cache, func)
        source = checked_source(X_train, "X_train", func)
        be, model = self._backend, self.model
        plan = gradient_plan(be, model, self._batch_size, func, "TRAK")
        self._check_dimension(plan, source.n_sequences, func)
        with preserved_state(be, model, self.device):
            outputs = n_outputs(be, model, source)
            labels = _check_labels(y_train, source.n_sequences, self.task, outputs, "y_train", func)
            if path is not None and path.exists():
                fingerprints = [v.fingerprint for v in self._checkpoints.visit(be, model, func)]
                key = cache_key(source, labels, self._settings(plan), fingerprints)
                fits = read_cache(path, key, len(fingerprints), func)
                fitted = _Fitted(plan, source.n_sequences, outputs, fingerprints, fits)
            else:
                fitted = self._featurize_training_set(source, labels, plan, outputs, func)
                if path is not None:
                    settings = self._settings(plan)
                    key = cache_key(source, labels, settings, fitted.fingerprints)
                    write_cache(path, key, fitted.fingerprints, fitted.checkpoints)
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

    def _check_dimension(self, plan: GradientPlan, n_train: int, func: str) -> None:
        """Refuse proj_dim=None for many parameters; warn about as many features as examples."""
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
                stacklevel=3,
            )

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
                rows = Rows(func, "X_test", visit.index, "output function")
                batches = self._features(source, labels, fitted.plan, visit, rows)
                features = np.concatenate([phi for _, phi, _ in batches])
                accumulate(total, features, fitted.checkpoints[visit.index], fitted.plan.rows)
        total /= len(fitted.checkpoints)
        return total.astype(np.float32)

    def _featurize_training_set(
        self, source: SequenceSource, labels: Labels, plan: GradientPlan, outputs: int, func: str
    ) -> _Fitted:
        n_train = source.n_sequences
        dim = plan.n_params if self.proj_dim is None else self.proj_dim
        fingerprints: list[str] = []
        checkpoints: list[KernelFit] = []
        for visit in self._checkpoints.visit(self._backend, self.model, func):
            fingerprints.append(visit.fingerprint)
            features = np.empty((n_train, dim), np.float32)
            weights = np.empty(n_train, np.float64)
            start = 0
            rows = Rows(func, "X_train", visit.index, "output function")
            batches = self._features(source, labels, plan, visit, rows, with_outputs=True)
            for stop, phi, out in batches:
                features[start:stop] = phi
                check_finite(out, start, rows, "model outputs")
                targets = labels.targets(NUMPY, labels.values[start:stop])
                weights[start:stop] = out_to_loss(self.task, NUMPY, out, targets)
                check_finite(weights[start:stop], start, rows, "out-to-loss weights")
                start = stop
            checkpoints.append(self._kernel(features, weights, visit.index, func))
        return _Fitted(plan, n_train, outputs, fingerprints, checkpoints)

    def _features(
        self,
        source: SequenceSource,
        labels: Labels,
        plan: GradientPlan,
        visit: Visit,
        rows: Rows,
        with_outputs: bool = False,
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """``(stop, features, outputs)`` per batch: host float32 features (rows, d) and, when
        asked, the model outputs (rows, K) in float64 (else an empty array). Every device batch
        has exactly ``plan.rows`` rows; a NaN or inf gradient is an error naming its example
        (``rows``)."""
        be = self._backend
        projection = None
        if self.proj_dim is not None:
            seed = _checkpoint_seed(self._seed, visit)
            projection = RandomProjection(plan.n_params, self.proj_dim, seed, _PROJECTION_KIND)
        project = Projector(be, projection)
        batches = gradient_batches(be, self.model, self._fn, source, labels, plan, rows, pad=True)
        for start, stop, x, grads in batches:
            features = project(grads)[: stop - start]
            out = np.empty((0, 0))
            if with_outputs:
                out = be.to_numpy(be.forward(self.model, x, Head())).astype(np.float64)
                out = out[: stop - start]
            yield stop, features, out

    def _kernel(
        self, features: np.ndarray, weights: np.ndarray, index: int, func: str
    ) -> KernelFit:
        """``(Phi^T Phi + lambda I)^-1`` in float64, its ridge and condition number."""
        return fit_kernel(features, weights, self.lambda_reg, index, func)

    def _settings(self, plan: GradientPlan) -> dict[str, Any]:
        """What the fitted state depends on besides data and checkpoints (the cache key)."""
        be = self._backend
        return {
            "backend": be.name,
            "task": self.task,
            "proj_dim": self.proj_dim,
            "projection": _PROJECTION_KIND,
            "lambda_reg": self.lambda_reg,
            "seed": self._seed,
            "rows": plan.rows,
            "parameters": [[n, list(s)] for n, s in be.trainable_parameters(self.model)],
        }


def _checkpoint_seed(seed: int, visit: Visit) -> int:
    """The projection seed of a checkpoint: from the seed sequence (seed, checkpoint index)."""
    return int(np.random.SeedSequence([seed, visit.index]).generate_state(1, np.uint64)[0])


def _check_labels(y: Any, n: int, task: str, outputs: int, param: str, func: str) -> Labels:
    """Labels for ``task``: one per sequence, in range; host values and device dtype."""
    values = label_array(y, n, param, func)
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
