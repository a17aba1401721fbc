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

import functools
import numbers
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._errors import SeqAttribWarning, parameter_error
from .._validation import check_batch_size, check_positive_int, resolve_seed
from ..engine import SequenceSource
from ..engine.outputs import Head
from ..io.features import StoreFile, StoreWriter, open_store, register_kernel_step, store_path
from .checkpoints import Checkpoints, Visit, preserved_state
from .examples import Labels, checked_source, n_outputs
from .featurize import StoreJob, check_ids, checked_span, fill_store, model_identity
from .gradients import (
    GradientPlan,
    Rows,
    check_finite,
    gradient_batches,
    gradient_plan,
    parameter_backend,
)
from .outputs import NUMPY, OUTPUT_FUNCTIONS, TASK_LOSSES, bound, check_target, out_to_loss
from .projection import PROJECTION_KINDS, Projector, make_projection
from .scoring import DEFAULT_GROUP, best_scores, score_matrix, test_groups, train_blocks
from .selection import check_labels
from .trak_cache import cache_key, cache_path, read_cache, write_cache
from .trak_kernel import (
    CONDITION_WARNING,
    KernelFit,
    add_scores,
    block_rows,
    condition,
    fit_kernel,
    self_scores,
    solve,
)

#: proj_dim=None builds a (n_params x n_params) float64 kernel: refuse more parameters.
_MAX_EXACT_PARAMS = 16384
#: Losses whose output function does not read the labels: y_test may be None.
_LABEL_FREE = frozenset({"mse", "poisson"})


@dataclass
class _Fitted:
    plan: GradientPlan
    n_train: int
    n_outputs: int
    fingerprints: list[str]
    #: per checkpoint: the fitted kernel in memory; empty when the features are in ``store``
    checkpoints: list[KernelFit]
    #: per checkpoint: (lambda, bound, condition or None)
    summaries: list[tuple[float, float, float | None]]
    store: str | None = None
    ids: list[str] | None = None


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
        task: Literal["classification", "binary", "regression"] | None = None,
        loss: str | None = None,
        target: int | Sequence[int] | None = None,
        output_fn: Callable[[Any], Any] | None = None,
        parameters: Any = None,
        load_checkpoint: Callable[[Any, Any], Any] | None = None,
        proj_dim: int | None = 2048,
        projection: str = "auto",
        lambda_reg: float | Literal["auto"] = "auto",
        random_state: int | np.random.Generator | None = 0,
        batch_size: int | Literal["auto"] = "auto",
        device: Any = None,
    ) -> None:
        func = "TRAK"
        self._backend = parameter_backend(model, func)
        self.loss = _resolve_loss(task, loss, func)
        if proj_dim is not None:
            check_positive_int(proj_dim, "proj_dim", func)
        if not isinstance(projection, str) or projection not in PROJECTION_KINDS:
            raise parameter_error(
                func, "projection", "one of " + ", ".join(map(repr, PROJECTION_KINDS)), projection
            )
        if output_fn is not None and not callable(output_fn):
            raise parameter_error(func, "output_fn", "None or a callable", output_fn)
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
        self.target = target
        self.output_fn = output_fn
        self.parameters = parameters
        self._head = Head(output_fn, func="TRAK")
        self._columns: tuple[int, ...] | None = None
        self._fn = bound(OUTPUT_FUNCTIONS[self.loss], self._backend)
        self.proj_dim = None if proj_dim is None else int(proj_dim)
        self.projection = projection
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
        return np.array([lam for lam, _, _ in fitted.summaries], np.float64)

    @property
    def conditions_(self) -> np.ndarray:
        func = "TRAK.conditions_"
        fitted = self._require_fit(func)
        if fitted.store is None:
            return np.array([c.exact_condition() for c in fitted.checkpoints], np.float64)
        out = []
        with open_store(fitted.store, func) as store:
            for c, (_, _, known) in enumerate(fitted.summaries):
                inverse = store.file["kernel_inverse"][c]
                out.append(known if known is not None else _inverse_condition(inverse))
        return np.array(out, np.float64)

    @property
    def train_ids_(self) -> list[str] | None:
        """The training ids given to ``fit`` (kept in the store), or None."""
        fitted = self._require_fit("TRAK.train_ids_")
        return None if fitted.ids is None else list(fitted.ids)

    def fit(
        self,
        X_train: Any,
        y_train: Any,
        *,
        store: str | os.PathLike[str] | None = None,
        shard: tuple[int, int] | None = None,
        ids: Any = None,
        verbose: bool = False,
        cache: str | os.PathLike[str] | None = None,
    ) -> TRAK:
        """Featurize the training set at every checkpoint and invert each kernel.

        Without ``store``, keeps per checkpoint the training features ``(n_train, d)`` float32,
        the kernel inverse ``(d, d)`` float64 and the weights ``Q`` in memory. With ``store``,
        the features go to an HDF5 file block by block as they are computed and nothing of size
        ``n_train x d`` is held in memory: the kernel is accumulated by streaming the file, and
        ``top_k``, ``scores`` and ``self_influence`` read it block by block. ``X_train`` itself
        is never kept.

        Parameters
        ----------
        X_train : array of shape (n_train, length, 4) or (n_train, 4, length)
            One-hot training sequences, in the layout the model takes: a numpy array, an
            ``np.memmap``, an h5py dataset or ``seqattrib.io.GenomeWindows`` (a genome and
            regions), read block by block.
        y_train : array of shape (n_train,) or (n_train, 1)
            Labels for ``task``: class indices, 0/1, or real targets (an array or memmap).
        store : path or None
            An HDF5 features store. It records fingerprints of the model, the checkpoints, the
            training sequences and labels, and every setting; one process writes it at a time
            (a second one is refused, naming the first). A run that is killed resumes where it
            stopped when called again with the same arguments (at most one block of rows is
            computed again, and the result is the same, bit for bit); a finished store of the
            same job makes ``fit`` read it instead of computing anything; a store of anything
            else is refused in one line naming what differs, and left as it is.
        shard : (index, count) or None
            Featurize only shard ``index`` of ``count`` contiguous blocks of the training set
            into ``store`` (one store per shard, e.g. ``train.shard-0.h5``). Shards are joined
            by ``seqattrib.io.merge`` (``seqattrib merge``), which also computes the kernel; the
            merged store is the same, bit for bit, as one run's. A shard's store cannot score.
        ids : sequence of str or None
            A name per training sequence (FASTA names, regions), kept in the store and reported
            by the command line's top-k tables.
        verbose : bool
            A progress bar (on stderr) while featurizing.
        cache : path or None
            Without ``store``: a file (numpy ``.npz``) for the fitted state, written when it does
            not exist and read instead of featurizing when it does. Its key is a hash of the
            checkpoints' content, the training data and labels, and every setting: a file
            written for anything else is refused with an error, never reused (with
            ``random_state=None`` every object draws a new seed, so no file is ever reused).

        Returns
        -------
        self
        """
        func = "TRAK.fit"
        path = store_path(store, func)
        if path is not None and cache is not None:
            raise parameter_error(
                func,
                "cache",
                "None when store= is given",
                cache,
                "The store holds the fitted state: drop cache=.",
            )
        cached = cache_path(cache, func)
        # with a store, the rows featurized are checked as they are fingerprinted
        source = checked_source(X_train, "X_train", func, scan=path is None)
        span = checked_span(shard, path, source.n_sequences, func)
        names = check_ids(ids, source.n_sequences, func)
        be, model = self._backend, self.model
        plan = self._plan(func)
        self._check_dimension(plan, source.n_sequences, func)
        model_id = self._model_identity(plan)  # outside the session, which freezes parameters
        with preserved_state(be, model, self.device):
            outputs = n_outputs(be, model, source, self._head)
            self._select(outputs, func)
            labels = self._labels(y_train, source.n_sequences, outputs, "y_train", func)
            if path is not None:
                fitted = self._fit_store(
                    path, source, labels, plan, (model_id, outputs), span, names, verbose
                )
            elif cached is not None and cached.exists():
                fingerprints = [v.fingerprint for v in self._checkpoints.visit(be, model, func)]
                key = cache_key(source, labels, self._settings(plan), fingerprints)
                fits = read_cache(cached, key, len(fingerprints), func)
                fitted = _in_memory(plan, source.n_sequences, outputs, fingerprints, fits, names)
            else:
                fitted = self._featurize_training_set(source, labels, plan, outputs, func)
                fitted.ids = names
                if cached is not None:
                    settings = self._settings(plan)
                    key = cache_key(source, labels, settings, fitted.fingerprints)
                    write_cache(cached, key, fitted.fingerprints, fitted.checkpoints)
        for checkpoint, (lam, _, cond) in enumerate(fitted.summaries):
            if cond is not None and not cond <= CONDITION_WARNING:
                warnings.warn(
                    f"TRAK.fit: the kernel Phi^T Phi + lambda I of checkpoint {checkpoint} has "
                    f"condition number {cond:.3g} (lambda = {lam:.3g}): "
                    "directions the float32 features barely resolve dominate its inverse, so "
                    "scores are dominated by rounding. Use lambda_reg='auto' or a larger "
                    "lambda_reg.",
                    SeqAttribWarning,
                    stacklevel=2,
                )
        self._fitted = fitted
        return self

    @classmethod
    def from_store(
        cls,
        store: str | os.PathLike[str],
        model: Any,
        checkpoints: Any,
        *,
        output_fn: Callable[[Any], Any] | None = None,
        load_checkpoint: Callable[[Any, Any], Any] | None = None,
        device: Any = None,
    ) -> TRAK:
        """A fitted TRAK from a finished features store, without the training set.

        The settings (task, proj_dim, lambda_reg, seed, batch size) are the store's; the model
        and the checkpoints must be those it was written with (their fingerprints are checked:
        anything else is refused in one line).

        Parameters
        ----------
        store : path
            A store written by ``fit(..., store=)`` (or merged from shards).
        model, checkpoints, load_checkpoint, device
            As for ``TRAK``.
        output_fn : callable or None
            The ``output_fn`` the store was written with, if any.

        Returns
        -------
        TRAK
        """
        func = "TRAK.from_store"
        path = store_path(store, func) or ""
        with open_store(path, func) as f:
            settings = f.json("settings")
        trak = cls(
            model,
            checkpoints,
            loss=settings["loss"],
            target=settings["target"],
            output_fn=output_fn,
            parameters=settings["parameters"],
            load_checkpoint=load_checkpoint,
            proj_dim=settings["proj_dim"],
            projection=settings["projection"],
            lambda_reg=settings["lambda_reg"],
            random_state=settings["seed"],
            batch_size=settings["rows"],
            device=device,
        )
        trak._select(int(settings["outputs"]), func)
        plan = trak._plan(func)
        be = trak._backend
        model_id = trak._model_identity(plan)
        with preserved_state(be, model, device):
            fingerprints = [v.fingerprint for v in trak._checkpoints.visit(be, model, func)]
            with open_store(path, func) as f:
                trak._check_store(f, model_id, fingerprints, func)
        finish_store(path, func)
        with open_store(path, func) as f:
            trak._fitted = _stored(f, plan, fingerprints)
        return trak

    def scores(
        self,
        X_test: Any,
        y_test: Any,
        *,
        out: str | os.PathLike[str] | None = None,
        overwrite: bool = False,
        max_cpu_sequences: int = DEFAULT_GROUP,
    ) -> Any:
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
        out : path or None
            Stream the matrix to this HDF5 file (dataset ``scores``) instead of returning it:
            for matrices too large for memory. Written under a temporary name and renamed when
            complete.
        overwrite : bool
            Replace an existing ``out``.
        max_cpu_sequences : int
            Test examples scored together (host memory: about ``max_cpu_sequences x 64 MiB /
            (8 d)`` float64 scores at a time, besides the returned matrix).

        Returns
        -------
        scores : float32 array of shape (n_test, n_train), or the path of ``out``
        """
        func = "TRAK.scores"
        fitted = self._require_fit(func)
        options = {"out": out, "overwrite": overwrite, "max_cpu_sequences": max_cpu_sequences}
        attrs = {"method": "TRAK", "store": fitted.store or ""}
        return score_matrix(
            self._score_groups, X_test, y_test, fitted.n_train, options, attrs, func
        )

    def top_k(
        self,
        X_test: Any,
        y_test: Any,
        k: int,
        *,
        proponents: bool = True,
        max_cpu_sequences: int = DEFAULT_GROUP,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` strongest proponents (or opponents) of each test example.

        Computed block by block of training examples with a partial selection: the full
        (n_test, n_train) matrix is never built, so this scales to training sets of millions
        of sequences (the same ranking as sorting the rows of ``scores``).

        Parameters
        ----------
        X_test, y_test
            As for ``scores``.
        k : int
            How many training examples per test example (at most ``n_train``).
        proponents : bool
            True: the highest scores, in descending order; False: the opponents, the lowest
            scores in ascending order (most negative first).
        max_cpu_sequences : int
            Test examples scored together, as for ``scores``.

        Returns
        -------
        indices : int64 array of shape (n_test, k)
            Rows of ``X_train``; ties keep the lower index first.
        scores : float32 array of shape (n_test, k)
        """
        func = "TRAK.top_k"
        fitted = self._require_fit(func)
        return best_scores(
            self._score_groups,
            X_test,
            y_test,
            fitted.n_train,
            k,
            proponents,
            max_cpu_sequences,
            func,
        )

    def self_influence(self) -> np.ndarray:
        """Each training example's score for itself: ``mean_c phi_c(i)^T (Phi_c^T Phi_c +
        lambda_c I)^-1 phi_c(i) Q_c(i)``, computed block by block from the fitted features.

        High values flag examples the kernel explains mostly by themselves: unusual or
        mislabelled sequences. Every call returns a new array.

        Returns
        -------
        self_influence : float32 array of shape (n_train,)
        """
        func = "TRAK.self_influence"
        fitted = self._require_fit(func)
        out = np.empty(fitted.n_train, np.float32)
        with self._kernels(fitted, func) as fits:
            dim = fits[0].inverse.shape[0]
            for train in train_blocks(fitted.n_train, block_rows(dim)):
                total = np.zeros(train.stop - train.start, np.float64)
                for fit in fits:
                    total += self_scores(fit, train)
                out[train] = total / len(fits)
        return out

    # ----------------------------------------------------------------- internals
    def _require_fit(self, func: str) -> _Fitted:
        if self._fitted is None:
            raise RuntimeError(f"{func} needs the training set first: call fit(X_train, y_train).")
        if self._fitted.store is not None and not self._fitted.summaries:
            raise parameter_error(
                func,
                "store",
                "a store of the whole training set",
                f"the shard store {self._fitted.store!r}",
                "Merge the shards with seqattrib.io.merge (seqattrib merge), then use "
                "TRAK.from_store on the merged store.",
                error=RuntimeError,
                described=True,
            )
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

    @contextmanager
    def _kernels(self, fitted: _Fitted, func: str) -> Iterator[list[KernelFit]]:
        """Each checkpoint's kernel fit: in memory, or read from the store on demand."""
        if fitted.store is None:
            yield fitted.checkpoints
            return
        with open_store(fitted.store, func) as store:
            fits = []
            for c, (lam, bound_, cond) in enumerate(fitted.summaries):
                inverse = np.asarray(store.file["kernel_inverse"][c])
                fits.append(
                    KernelFit(
                        store.features(c), inverse, store.quantity("weights", c), lam, bound_, cond
                    )
                )
            yield fits

    def _score_groups(
        self, source: SequenceSource, y_test: Any, group: int, func: str
    ) -> Iterator[tuple[slice, Callable[[slice], np.ndarray], Iterator[slice]]]:
        """Per group of test rows: the rows, the function that scores them against a block of
        training rows, and the blocks. Checkpoints are visited once per group."""
        fitted = self._require_fit(func)
        be, model = self._backend, self.model
        n_test = source.n_sequences
        rows_per_batch = fitted.plan.rows
        with preserved_state(be, model, self.device), self._kernels(fitted, func) as fits:
            if y_test is None and self.loss in _LABEL_FREE:
                labels = Labels(np.zeros(n_test, np.float32), "float32")
            else:
                labels = self._labels(y_test, n_test, fitted.n_outputs, "y_test", func)
            dim = fits[0].inverse.shape[0]
            for rows in test_groups(n_test, group):
                part = source.rows(rows.start, rows.stop)
                part_labels = Labels(labels.values[rows], labels.dtype, labels.depth)
                solved = []
                visits = self._checkpoints.visit(be, model, func, expected=fitted.fingerprints)
                for visit in visits:
                    check = Rows(func, "X_test", visit.index, "output function")
                    batches = self._features(part, part_labels, fitted.plan, visit, check)
                    features = np.concatenate([phi for _, phi, _ in batches])
                    solved.append(solve(features, fits[visit.index].inverse, rows_per_batch))
                block = functools.partial(
                    _block_scores, fits, solved, rows.stop - rows.start, rows_per_batch
                )
                yield rows, block, train_blocks(fitted.n_train, block_rows(dim))

    def _fit_store(
        self,
        path: str,
        source: SequenceSource,
        labels: Labels,
        plan: GradientPlan,
        model: tuple[str, int],
        span: Any,
        ids: list[str] | None,
        verbose: bool,
    ) -> _Fitted:
        """Fill (or reuse) the store; ``model``: the model's identity and number of outputs."""
        func = "TRAK.fit"
        model_id, outputs = model
        be = self._backend
        fingerprints = [v.fingerprint for v in self._checkpoints.visit(be, self.model, func)]
        dim = plan.n_params if self.proj_dim is None else self.proj_dim
        settings = {**self._settings(plan), "outputs": outputs}
        job = StoreJob("TRAK", model_id, settings, dim, ("weights",), True)

        def featurize(visit: Visit, part: SequenceSource, part_labels: Labels) -> Iterator[Any]:
            for start, stop, features, weights in self._training_batches(
                part, part_labels, plan, visit, func
            ):
                yield start, stop, features, {"weights": weights}

        def kernel(store: StoreFile) -> list[KernelFit]:
            return [
                self._kernel(store.features(c), store.quantity("weights", c), c, func)
                for c in range(len(fingerprints))
            ]

        fill_store(
            path,
            job,
            source,
            labels,
            ids,
            span,
            fingerprints,
            lambda: self._checkpoints.visit(be, self.model, func, expected=fingerprints),
            featurize,
            kernel,
            verbose,
            func,
        )
        if span is not None:  # a shard: nothing to score until merged
            return _Fitted(plan, source.n_sequences, outputs, fingerprints, [], [], path, ids)
        with open_store(path, func) as f:
            return _stored(f, plan, fingerprints, outputs)

    def _check_store(
        self, store: StoreFile, model_id: str, fingerprints: list[str], func: str
    ) -> None:
        """Refuse a store of another model or other checkpoints (``from_store``)."""
        differs = []
        if str(store.attrs["model"]) != model_id:
            differs.append("another model (architecture or traced parameters)")
        if store.json("checkpoints") != fingerprints:
            differs.append("other checkpoints")
        if differs:
            raise parameter_error(
                func,
                "store",
                "a store written with this model and these checkpoints",
                f"{store.path!r}, which holds features of " + " and ".join(differs),
                "Pass the model and checkpoints the store was fitted with.",
                described=True,
            )

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
            for start, stop, phi, w in self._training_batches(source, labels, plan, visit, func):
                features[start:stop] = phi
                weights[start:stop] = w
            checkpoints.append(self._kernel(features, weights, visit.index, func))
        return _in_memory(plan, n_train, outputs, fingerprints, checkpoints, None)

    def _training_batches(
        self, source: SequenceSource, labels: Labels, plan: GradientPlan, visit: Visit, func: str
    ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """``(start, stop, features, weights)`` of the training rows, batch by batch: features
        (rows, d) float32 and the out-to-loss weights ``Q`` (rows,) float64, checked finite."""
        rows = Rows(func, "X_train", visit.index, "output function")
        start = 0
        for stop, phi, out in self._features(source, labels, plan, visit, rows, with_outputs=True):
            check_finite(out, start, rows, "model outputs")
            values = np.asarray(labels.values[start:stop], labels.dtype)
            targets = labels.targets(NUMPY, values)
            weights = np.asarray(
                out_to_loss(self.loss, NUMPY, out, targets, self._columns), np.float64
            )
            check_finite(weights, start, rows, "out-to-loss weights")
            yield start, stop, phi, weights
            start = stop

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
            projection = make_projection(plan.n_params, self.proj_dim, seed, self.projection)
        project = Projector(be, projection)
        batches = gradient_batches(
            be, self.model, self._fn, source, labels, plan, rows, pad=True, head=self._head
        )
        for start, stop, x, grads in batches:
            features = project(grads)[: stop - start]
            out = np.empty((0, 0))
            if with_outputs:
                out = be.to_numpy(be.forward(self.model, x, self._head)).astype(np.float64)
                out = out[: stop - start]
            yield stop, features, out

    def _kernel(self, features: Any, weights: Any, index: int, func: str) -> KernelFit:
        """``(Phi^T Phi + lambda I)^-1`` in float64, its ridge and condition number."""
        return fit_kernel(features, weights, self.lambda_reg, index, func)

    def _settings(self, plan: GradientPlan) -> dict[str, Any]:
        """What the fitted state depends on besides data and checkpoints (the cache key)."""
        be = self._backend
        matrix = None
        if self.proj_dim is not None:
            matrix = make_projection(plan.n_params, self.proj_dim, 0, self.projection).describe()
        return {
            "backend": be.name,
            "loss": self.loss,
            "target": None if self._columns is None else list(self._columns),
            "proj_dim": self.proj_dim,
            "projection": self.projection,
            "projection_matrix": matrix,
            "lambda_reg": self.lambda_reg,
            "seed": self._seed,
            "rows": plan.rows,
            "parameters": plan.names,
        }

    def _plan(self, func: str) -> GradientPlan:
        """The parameters traced (``parameters``) and the batch size."""
        be, model = self._backend, self.model
        return gradient_plan(be, model, self._batch_size, func, "TRAK", parameters=self.parameters)

    def _select(self, outputs: int, func: str) -> None:
        """Check ``target`` against the model's ``outputs`` (after ``output_fn``) and bind the
        output function to the columns it selects."""
        self._columns = check_target(self.target, outputs, func)
        self._fn = bound(OUTPUT_FUNCTIONS[self.loss], self._backend, self._columns)

    def _labels(self, y: Any, n: int, outputs: int, param: str, func: str) -> Labels:
        """Labels for the output function of ``loss``, one row per sequence."""
        selected = outputs if self._columns is None else len(self._columns)
        return check_labels(y, n, self.loss, selected, param, func, output_function=True)

    def _model_identity(self, plan: GradientPlan) -> str:
        """The model a store's features belong to (read outside a session, which freezes the
        parameters)."""
        return model_identity(self._backend, self.model, plan, self.output_fn)


def _in_memory(
    plan: GradientPlan,
    n_train: int,
    outputs: int,
    fingerprints: list[str],
    fits: list[KernelFit],
    ids: list[str] | None,
) -> _Fitted:
    summaries = [(fit.lambda_reg, fit.bound, fit.condition) for fit in fits]
    return _Fitted(plan, n_train, outputs, fingerprints, fits, summaries, None, ids)


def finish_store(path: str, func: str = "finish_store") -> None:
    """Do the kernel step of a TRAK store that holds every row of its training set but not yet
    its kernel (a merge of shards): ``Phi^T Phi`` streamed from the store, its ridge and
    inverse, per checkpoint. Anything else is refused in one line; a finished store is left
    as it is."""
    with open_store(path, func) as f:
        method = str(f.attrs["method"])
        whole = f.json("span")["shard"] is None
    if method != "TRAK" or not whole:
        raise parameter_error(
            func,
            "store",
            "a TRAK store of the whole training set (merge its shards first)",
            f"{path!r}, a {method} store" + ("" if whole else " of one shard"),
            "Merge the shards with seqattrib.io.merge (seqattrib merge).",
            described=True,
        )
    writer = StoreWriter.for_kernel(path, func)
    if writer is None:
        return
    try:
        lambda_reg = writer.identity.settings["lambda_reg"]
        store = writer.reader()
        fits = [
            fit_kernel(store.features(c), store.quantity("weights", c), lambda_reg, c, func)
            for c in range(store.n_checkpoints)
        ]
        writer.write_kernel(fits)
    finally:
        writer.close()


def _stored(
    store: StoreFile, plan: GradientPlan, fingerprints: list[str], outputs: int | None = None
) -> _Fitted:
    """The fitted state of a finished store (read on demand when scoring)."""
    attrs = store.attrs
    summaries = [
        (float(lam), float(b), None if np.isnan(c) else float(c))
        for lam, b, c in zip(attrs["lambdas"], attrs["bounds"], attrs["conditions"], strict=True)
    ]
    n_outputs = int(store.json("settings").get("outputs", 0)) if outputs is None else outputs
    return _Fitted(
        plan, store.n_rows, n_outputs, fingerprints, [], summaries, store.path, store.ids()
    )


def _block_scores(
    fits: list[KernelFit], solved: list[list[np.ndarray]], n: int, rows: int, train: slice
) -> np.ndarray:
    """Scores (n, rows of ``train``) float32 of ``n`` solved test rows: the mean over
    checkpoints of ``phi K^-1 Phi^T diag(Q)``."""
    total = np.zeros((n, train.stop - train.start), np.float64)
    for fit, part_solved in zip(fits, solved, strict=True):
        add_scores(total, part_solved, fit, train, rows)
    total /= len(fits)
    return total.astype(np.float32)


def _inverse_condition(inverse: np.ndarray) -> float:
    """The condition number of a kernel from its inverse."""
    return condition(np.linalg.eigvalsh(inverse)[::-1] ** -1.0)


def _resolve_loss(task: Any, loss: Any, func: str) -> str:
    """The loss name of ``loss=`` or the earlier ``task=`` spelling (not both, unless they
    agree); "cross_entropy" when neither is given."""
    if task is not None and (not isinstance(task, str) or task not in TASK_LOSSES):
        raise parameter_error(func, "task", "'classification', 'binary' or 'regression'", task)
    if loss is not None and (not isinstance(loss, str) or loss not in OUTPUT_FUNCTIONS):
        raise parameter_error(
            func, "loss", "one of " + ", ".join(map(repr, OUTPUT_FUNCTIONS)), loss
        )
    if task is not None and loss is not None and TASK_LOSSES[task] != loss:
        raise parameter_error(
            func,
            "task",
            f"consistent with loss={loss!r}",
            f"{task!r}, which means loss={TASK_LOSSES[task]!r}",
            "Pass loss= alone.",
            described=True,
        )
    if loss is not None:
        return str(loss)
    return TASK_LOSSES[task] if task is not None else "cross_entropy"


def _checkpoint_seed(seed: int, visit: Visit) -> int:
    """The projection seed of a checkpoint: from the seed sequence (seed, checkpoint index)."""
    return int(np.random.SeedSequence([seed, visit.index]).generate_state(1, np.uint64)[0])


register_kernel_step("TRAK", finish_store)
