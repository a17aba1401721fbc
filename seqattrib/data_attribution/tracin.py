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

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._errors import parameter_error
from .._validation import check_batch_size, check_positive_int, resolve_seed
from ..backends import UnsupportedLayer
from ..engine import SequenceSource
from ..engine.outputs import Head
from ..io.features import StoreFile, open_store, store_path
from ..io.fingerprint import function_identity
from .checkpoints import Checkpoints, Visit, preserved_state
from .examples import (
    HOST_BLOCK,
    Labels,
    checked_source,
    n_outputs,
)
from .featurize import StoreJob, check_ids, checked_span, fill_store, model_identity
from .gradients import (
    GradientPlan,
    Rows,
    check_finite,
    device_batches,
    gradient_batches,
    gradient_plan,
    parameter_backend,
)
from .outputs import LOSSES, Tensor, bound, check_target
from .projection import PROJECTION_BYTES, PROJECTION_KINDS, Projector, make_projection
from .scoring import (
    DEFAULT_GROUP,
    best_scores,
    fixed_rows,
    score_matrix,
    test_groups,
    train_blocks,
)
from .selection import check_labels


@dataclass
class _Fitted:
    plan: GradientPlan
    n_train: int
    # the training set, read again by exact scores (None when the features are in a store)
    source: SequenceSource | None
    labels: Labels | None
    fingerprints: list[str]
    learning_rates: list[float]
    # layer="last": per checkpoint, (activations with a ones column for the bias, deltas)
    last: list[tuple[np.ndarray, np.ndarray]]
    # proj_dim: per checkpoint, projected training gradients (n_train, d)
    projected: list[np.ndarray]
    self_influence: np.ndarray | None
    ids: list[str] | None = None
    store: str | None = None
    shard: bool = False


#: Test rows per product with training gradients (every product has exactly this many rows).
TEST_ROWS = 16


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
        target: int | Sequence[int] | None = None,
        output_fn: Callable[[Any], Any] | None = None,
        parameters: Any = None,
        load_checkpoint: Callable[[Any, Any], Any] | None = None,
        learning_rates: float | list[float] | None = None,
        layer: Literal["last"] | None = None,
        proj_dim: int | None = None,
        projection: str = "auto",
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
                "one of " + ", ".join(map(repr, LOSSES)) + " or a callable "
                "loss(outputs, y) -> (batch,)",
                loss,
            )
        if layer is not None and layer != "last":
            raise parameter_error(func, "layer", "None or 'last'", layer)
        if output_fn is not None and not callable(output_fn):
            raise parameter_error(func, "output_fn", "None or a callable", output_fn)
        if not isinstance(projection, str) or projection not in PROJECTION_KINDS:
            raise parameter_error(
                func, "projection", "one of " + ", ".join(map(repr, PROJECTION_KINDS)), projection
            )
        if target is not None and not isinstance(loss, str):
            raise parameter_error(
                func,
                "target",
                "None with a callable loss",
                target,
                "Select the outputs inside the loss, or with output_fn.",
            )
        if layer == "last" and (
            target is not None or output_fn is not None or parameters is not None
        ):
            raise parameter_error(
                func,
                "layer",
                "None when target, output_fn or parameters is given",
                "'last'",
                "layer='last' takes the model's own output and its last dense layer; pass "
                "parameters='last' instead (the same parameters, through their gradients).",
            )
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
        self.target = target
        self.output_fn = output_fn
        self.parameters = parameters
        self._head = Head(output_fn, func="TracIn")
        self._columns: tuple[int, ...] | None = None
        self._n_outputs = 0
        self._fn = bound(LOSSES[loss], self._backend) if isinstance(loss, str) else loss
        self.layer = layer
        self.proj_dim = None if proj_dim is None else int(proj_dim)
        self.projection = projection
        self.batch_size = batch_size
        self._batch_size = check_batch_size(batch_size, func)  # None: "auto"
        self.device = device
        self._seed = resolve_seed(random_state, func)
        self._checkpoints = Checkpoints(checkpoints, load_checkpoint, learning_rates, func)
        self._fitted: _Fitted | None = None

    # ----------------------------------------------------------------- public API
    @property
    def train_ids_(self) -> list[str] | None:
        """The training ids given to ``fit`` (kept in the store), or None."""
        fitted = self._require_fit("TracIn.train_ids_")
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
    ) -> TracIn:
        """Take the training set and visit every checkpoint once.

        Checks the data and every checkpoint (fits the model, distinct content, learning rate).
        With ``layer="last"`` or ``proj_dim`` it also computes what the training examples
        contribute, so later ``scores`` calls only compute test gradients. Otherwise ``X_train``
        is kept by reference (numpy array, memmap, h5py dataset or
        ``seqattrib.io.GenomeWindows``) and read in batches.

        Parameters
        ----------
        X_train : array of shape (n_train, length, 4) or (n_train, 4, length)
            One-hot training sequences, in the layout the model takes.
        y_train : array of shape (n_train,) or (n_train, n_outputs)
            Training labels for ``loss``.
        store : path or None
            With ``proj_dim``: an HDF5 features store for the projected training gradients and
            self-influence terms, written block by block, fingerprinted, locked and resumable,
            as for ``TRAK.fit`` (nothing of size ``n_train x proj_dim`` is held in memory).
        shard : (index, count) or None
            Featurize one shard of the training set into ``store``; join the shards with
            ``seqattrib.io.merge``, then use ``TracIn.from_store``.
        ids : sequence of str or None
            A name per training sequence, kept in the store.
        verbose : bool
            A progress bar (on stderr) while featurizing into a store.

        Returns
        -------
        self
        """
        func = "TracIn.fit"
        path = store_path(store, func)
        if path is not None and self.proj_dim is None:
            raise parameter_error(
                func,
                "proj_dim",
                "an integer when store= is given (a store holds projected gradients)",
                None,
                "Pass proj_dim=2048 (or another dimension) to TracIn, or drop store=.",
            )
        # with a store, the rows featurized are checked as they are fingerprinted
        source = checked_source(X_train, "X_train", func, scan=path is None)
        span = checked_span(shard, path, source.n_sequences, func)
        names = check_ids(ids, source.n_sequences, func)
        be, model = self._backend, self.model
        plan = self._plan(func)
        model_id = self._model_identity(plan)
        fingerprints: list[str] = []
        rates: list[float] = []
        last: list[tuple[np.ndarray, np.ndarray]] = []
        projected: list[np.ndarray] = []
        norms = np.zeros(source.n_sequences, np.float64)
        with preserved_state(be, model, self.device):
            labels = self._labels(y_train, source, "y_train", func)
            project = self._projector(plan)
            if path is not None and project is not None:
                self._fitted = self._fit_store(
                    path, source, labels, plan, model_id, span, names, verbose
                )
                return self
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
                        chunks.append(project(grads)[: stop - start])
                        terms = self._squared_norms(grads)[: stop - start]
                        norms[start:stop] += visit.learning_rate * terms
                    projected.append(np.concatenate(chunks))
        computed = self.layer is not None or project is not None
        self._fitted = _Fitted(
            plan=plan,
            n_train=source.n_sequences,
            source=source,
            labels=labels,
            fingerprints=fingerprints,
            learning_rates=rates,
            last=last,
            projected=projected,
            self_influence=norms.astype(np.float32) if computed else None,
            ids=names,
        )
        return self

    @classmethod
    def from_store(
        cls,
        store: str | os.PathLike[str],
        model: Any,
        checkpoints: Any,
        *,
        loss: str | Callable[..., Any] | None = None,
        output_fn: Callable[[Any], Any] | None = None,
        load_checkpoint: Callable[[Any, Any], Any] | None = None,
        learning_rates: float | list[float] | None = None,
        device: Any = None,
    ) -> TracIn:
        """A fitted TracIn from a finished features store, without the training set.

        The settings (loss, target, parameters, proj_dim, seed, batch size and, unless given,
        the learning rates) are the store's; the model and the checkpoints must be those it was
        written with (checked: anything else is refused in one line).

        Parameters
        ----------
        store : path
            A store written by ``fit(..., store=)`` with ``proj_dim`` (or merged from shards).
        model, checkpoints, load_checkpoint, learning_rates, device
            As for ``TracIn``.
        loss : callable or None
            The loss function, when the store was written with a callable loss (a named loss is
            read from the store).
        output_fn : callable or None
            The ``output_fn`` the store was written with, if any.

        Returns
        -------
        TracIn
        """
        func = "TracIn.from_store"
        path = store_path(store, func) or ""
        with open_store(path, func) as f:
            settings = f.json("settings")
            method = str(f.attrs["method"])
            span = f.json("span")
            done = f.n_completed == f.n_checkpoints * f.n_rows
        if method != "TracIn" or span["shard"] is not None or not done:
            raise parameter_error(
                func,
                "store",
                "a finished TracIn store of the whole training set (merge shards first)",
                f"{path!r}, a {method} store"
                + ("" if span["shard"] is None else " of one shard")
                + ("" if done else ", not finished"),
                "Run TracIn.fit(..., store=) to the end, or merge its shards first.",
                described=True,
            )
        stored_loss = settings["loss"]
        if loss is None:
            if str(stored_loss).startswith("callable:"):
                raise parameter_error(
                    func,
                    "loss",
                    "the callable loss the store was written with",
                    None,
                    "Pass loss=<the same function>.",
                )
            loss = stored_loss
        tracin = cls(
            model,
            checkpoints,
            loss=loss,
            target=settings["target"],
            output_fn=output_fn,
            parameters=settings["parameters"],
            load_checkpoint=load_checkpoint,
            learning_rates=settings["learning_rates"] if learning_rates is None else learning_rates,
            proj_dim=settings["proj_dim"],
            projection=settings["projection"],
            random_state=settings["seed"],
            batch_size=settings["rows"],
            device=device,
        )
        tracin._n_outputs = int(settings["outputs"])
        if isinstance(tracin.loss, str):
            tracin._columns = check_target(settings["target"], tracin._n_outputs, func)
            tracin._fn = bound(LOSSES[tracin.loss], tracin._backend, tracin._columns)
        be = tracin._backend
        plan = tracin._plan(func)
        model_id = tracin._model_identity(plan)
        with preserved_state(be, model, device):
            visits = list(tracin._checkpoints.visit(be, model, func))
            with open_store(path, func) as f:
                differs = []
                if str(f.attrs["model"]) != model_id:
                    differs.append("another model (architecture or traced parameters)")
                if f.json("checkpoints") != [v.fingerprint for v in visits]:
                    differs.append("other checkpoints")
                if f.json("settings") != tracin._store_settings(plan, visits):
                    differs.append("other settings (loss or learning rates)")
                if differs:
                    raise parameter_error(
                        func,
                        "store",
                        "a store written with this model, these checkpoints and settings",
                        f"{path!r}, which holds features of " + " and ".join(differs),
                        "Pass what the store was fitted with.",
                        described=True,
                    )
                tracin._fitted = _stored(f, plan, visits)
        return tracin

    def scores(
        self,
        X_test: Any,
        y_test: Any,
        *,
        out: str | os.PathLike[str] | None = None,
        overwrite: bool = False,
        max_cpu_sequences: int = DEFAULT_GROUP,
    ) -> Any:
        """Influence of every training example on every test example's loss.

        Positive: the training example's gradient steps lowered the test loss (a proponent);
        negative: raised it (an opponent). Every call returns a new array.

        Parameters
        ----------
        X_test : array of shape (n_test, length, 4) or (n_test, 4, length)
            One-hot test sequences, in the layout the model takes.
        y_test : array of shape (n_test,) or (n_test, n_outputs)
            Labels for ``loss`` (e.g. the model's predictions, or the true labels).
        out : path or None
            Stream the matrix to this HDF5 file (dataset ``scores``) instead of returning it.
        overwrite : bool
            Replace an existing ``out``.
        max_cpu_sequences : int
            Test examples scored together.

        Returns
        -------
        scores : float32 array of shape (n_test, n_train), or the path of ``out``
        """
        func = "TracIn.scores"
        fitted = self._require_fit(func)
        options = {"out": out, "overwrite": overwrite, "max_cpu_sequences": max_cpu_sequences}
        attrs = {"method": "TracIn", "store": fitted.store or ""}
        return score_matrix(
            self._score_groups, X_test, y_test, fitted.n_train, options, attrs, func
        )

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
        if fitted.store is not None:
            norms = np.zeros(fitted.n_train, np.float64)
            with open_store(fitted.store, func) as store:
                for c in range(store.n_checkpoints):
                    stored = store.quantity("self_influence", c)
                    for train in train_blocks(fitted.n_train, HOST_BLOCK):
                        norms[train] += stored[train]
            return norms.astype(np.float32)
        if fitted.self_influence is None:
            be, model = self._backend, self.model
            norms = np.zeros(fitted.n_train, np.float64)
            with preserved_state(be, model, self.device):
                for visit in self._visits(fitted, func):
                    rows = self._rows(func, "X_train", visit)
                    source, labels = _training_set(fitted)
                    for start, stop, grads in self._gradients(source, labels, fitted.plan, rows):
                        terms = self._squared_norms(grads)[: stop - start]
                        norms[start:stop] += visit.learning_rate * terms
            fitted.self_influence = norms.astype(np.float32)
        return fitted.self_influence.copy()

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

        With ``proj_dim`` or ``layer="last"``, computed block by block of training examples
        with a partial selection (the full matrix is never built); exact gradients hold one
        group of test rows' scores, ``max_cpu_sequences x n_train``, at a time.

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
            Test examples scored together.

        Returns
        -------
        indices : int64 array of shape (n_test, k)
            Rows of ``X_train``; ties keep the lower index first.
        scores : float32 array of shape (n_test, k)
        """
        func = "TracIn.top_k"
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

    # ----------------------------------------------------------------- internals
    def _require_fit(self, func: str) -> _Fitted:
        if self._fitted is None:
            raise RuntimeError(f"{func} needs the training set first: call fit(X_train, y_train).")
        if self._fitted.store is not None and self._fitted.shard:
            raise parameter_error(
                func,
                "store",
                "a store of the whole training set",
                f"the shard store {self._fitted.store!r}",
                "Merge the shards with seqattrib.io.merge (seqattrib merge), then use "
                "TracIn.from_store on the merged store.",
                error=RuntimeError,
                described=True,
            )
        return self._fitted

    @contextmanager
    def _training_features(self, fitted: _Fitted, func: str) -> Iterator[list[Any]]:
        """Per checkpoint, the projected training gradients: in memory or rows of the store."""
        if fitted.store is None:
            yield fitted.projected
            return
        with open_store(fitted.store, func) as store:
            yield [store.features(c) for c in range(store.n_checkpoints)]

    def _score_groups(
        self, source: SequenceSource, y_test: Any, group: int, func: str
    ) -> Iterator[tuple[slice, Callable[[slice], np.ndarray], Iterator[slice]]]:
        """Per group of test rows: the rows, the function that scores them against a block of
        training rows, and the blocks. Checkpoints are visited once per group."""
        fitted = self._require_fit(func)
        be, model = self._backend, self.model
        n_train, plan = fitted.n_train, fitted.plan
        exact = self.layer is None and self.proj_dim is None
        # The exact pass meets every training gradient: their norms come for free.
        norms = np.zeros(n_train, np.float64) if exact and fitted.self_influence is None else None
        with (
            preserved_state(be, model, self.device),
            self._training_features(fitted, func) as train,
        ):
            labels = self._labels(y_test, source, "y_test", func)
            project = self._projector(plan)
            for rows in test_groups(source.n_sequences, group):
                part = source.rows(rows.start, rows.stop)
                part_labels = Labels(labels.values[rows], labels.dtype, labels.depth)
                n = rows.stop - rows.start
                terms: list[tuple[np.float32, Any, Any]] = []
                dense = np.zeros((n, n_train), np.float32) if exact else None
                for visit in self._visits(fitted, func):
                    lr = np.float32(visit.learning_rate)
                    check = self._rows(func, "X_test", visit)
                    if self.layer == "last":
                        a_test, delta_test = self._last_layer(part, part_labels, plan, check)
                        terms.append((lr, (a_test, delta_test), fitted.last[visit.index]))
                    elif project is not None:
                        gradients = self._gradients(part, part_labels, plan, check)
                        test = np.concatenate([project(g)[: b - a] for a, b, g in gradients])
                        terms.append((lr, test, train[visit.index]))
                    elif dense is not None:
                        self._exact(visit, part, part_labels, fitted, dense, norms, func)
                if norms is not None:
                    fitted.self_influence = norms.astype(np.float32)
                    norms = None
                block = functools.partial(_block_scores, self.layer, terms, dense, n, TEST_ROWS)
                yield rows, block, train_blocks(n_train, HOST_BLOCK)

    def _fit_store(
        self,
        path: str,
        source: SequenceSource,
        labels: Labels,
        plan: GradientPlan,
        model_id: str,
        span: Any,
        ids: list[str] | None,
        verbose: bool,
    ) -> _Fitted:
        func = "TracIn.fit"
        be = self._backend
        visits = list(self._checkpoints.visit(be, self.model, func))
        fingerprints = [v.fingerprint for v in visits]
        job = StoreJob(
            "TracIn",
            model_id,
            self._store_settings(plan, visits),
            int(self.proj_dim or 0),
            ("self_influence",),
            False,
        )
        project = self._projector(plan)
        assert project is not None  # fit refuses a store without proj_dim

        def featurize(visit: Visit, part: SequenceSource, part_labels: Labels) -> Iterator[Any]:
            rows = self._rows(func, "X_train", visit)
            for start, stop, grads in self._gradients(part, part_labels, plan, rows):
                terms = visit.learning_rate * self._squared_norms(grads)[: stop - start]
                yield start, stop, project(grads)[: stop - start], {"self_influence": terms}

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
            None,
            verbose,
            func,
        )
        fitted = _Fitted(
            plan=plan,
            n_train=source.n_sequences,
            source=None,
            labels=None,
            fingerprints=fingerprints,
            learning_rates=[v.learning_rate for v in visits],
            last=[],
            projected=[],
            self_influence=None,
            ids=ids,
            store=path,
            shard=span is not None,
        )
        return fitted

    def _model_identity(self, plan: GradientPlan) -> str:
        """The model a store's features belong to (read outside a session, which freezes the
        parameters)."""
        return model_identity(self._backend, self.model, plan, self.output_fn)

    def _store_settings(self, plan: GradientPlan, visits: list[Visit]) -> dict[str, Any]:
        """What a store's features depend on besides the model, checkpoints and data."""
        loss = (
            self.loss if isinstance(self.loss, str) else f"callable:{function_identity(self.loss)}"
        )
        kind = self._projection_kind(plan)
        matrix = make_projection(plan.n_params, int(self.proj_dim or 1), 0, kind).describe()
        return {
            "backend": self._backend.name,
            "loss": loss,
            "target": None if self._columns is None else list(self._columns),
            "outputs": self._n_outputs,
            "proj_dim": self.proj_dim,
            "projection": self.projection,
            "projection_matrix": matrix,
            "seed": self._seed,
            "rows": plan.rows,
            "parameters": plan.names,
            "learning_rates": [v.learning_rate for v in visits],
        }

    def _plan(self, func: str) -> GradientPlan:
        """The trainable parameters and the batch size (no parameters with layer="last")."""
        return gradient_plan(
            self._backend,
            self.model,
            self._batch_size,
            func,
            "TracIn",
            traced=self.layer != "last",
            parameters=self.parameters,
        )

    def _projection_kind(self, plan: GradientPlan) -> str:
        """``projection``, where "auto" is a dense Gaussian matrix while it fits on the device
        (else sparse)."""
        dense = plan.n_params * int(self.proj_dim or 0) * 4 <= PROJECTION_BYTES
        return "gaussian" if self.projection == "auto" and dense else self.projection

    def _projector(self, plan: GradientPlan) -> Projector | None:
        """The projector of the gradients to proj_dim (one matrix for every checkpoint), or
        None."""
        if self.proj_dim is None:
            return None
        kind = self._projection_kind(plan)
        return Projector(
            self._backend, make_projection(plan.n_params, self.proj_dim, self._seed, kind)
        )

    def _visits(self, fitted: _Fitted, func: str) -> Iterator[Visit]:
        return self._checkpoints.visit(
            self._backend, self.model, func, expected=fitted.fingerprints
        )

    def _labels(self, y: Any, source: SequenceSource, param: str, func: str) -> Labels:
        """Labels for ``loss`` (binding it to the columns ``target`` selects)."""
        outputs = n_outputs(self._backend, self.model, source, self._head)
        self._n_outputs = outputs
        if isinstance(self.loss, str):
            self._columns = check_target(self.target, outputs, func)
            self._fn = bound(LOSSES[self.loss], self._backend, self._columns)
        selected = outputs if self._columns is None else len(self._columns)
        return check_labels(y, source.n_sequences, self.loss, selected, param, func)

    def _rows(self, func: str, param: str, visit: Visit) -> Rows:
        return Rows(func, param, visit.index, "loss")

    def _gradients(
        self, source: SequenceSource, labels: Labels, plan: GradientPlan, rows: Rows
    ) -> Iterator[tuple[int, int, Tensor]]:
        """``(start, stop, gradients)``: per-example loss gradients (rows, n_params) on the
        device, batch by batch, every batch of exactly ``plan.rows`` rows (the last padded with
        copies of its first example: rows past ``stop - start``), so that an example's results
        never depend on the others of its batch (a NaN or inf is an error naming its example,
        ``rows``)."""
        batches = gradient_batches(
            self._backend,
            self.model,
            self._fn,
            source,
            labels,
            plan,
            rows,
            pad=True,
            head=self._head,
        )
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
        check = self._rows(func, "X_test", visit)
        tests = list(self._gradients(source, labels, plan, check))
        lr = np.float32(visit.learning_rate)
        train = self._rows(func, "X_train", visit)
        train_source, train_labels = _training_set(fitted)
        for start, stop, grads in self._gradients(train_source, train_labels, plan, train):
            for first, last, test in tests:
                product = be.to_numpy(be.matmul(test, grads, transpose_b=True))
                out[first:last, start:stop] += lr * product[: last - first, : stop - start]
            if norms is not None:
                terms = self._squared_norms(grads)[: stop - start]
                norms[start:stop] += visit.learning_rate * terms


def _block_scores(
    layer: str | None,
    terms: list[tuple[np.float32, Any, Any]],
    dense: np.ndarray | None,
    n: int,
    rows: int,
    train: slice,
) -> np.ndarray:
    """Scores (n, rows of ``train``) float32 of a group of test rows: the sum over checkpoints
    of ``lr`` times the inner products of test and training gradients (projected, or by the
    last-layer identity), or the columns of the group's exact scores."""
    if dense is not None:
        return dense[:, train]
    out = np.zeros((n, train.stop - train.start), np.float32)
    for lr, test, training in terms:
        if layer == "last":
            (a_test, delta_test), (a_train, delta_train) = test, training
            deltas = functools.partial(_times, delta_train[train].T)
            inputs = functools.partial(_times, a_train[train].T)
            out += lr * fixed_rows(deltas, delta_test, rows) * fixed_rows(inputs, a_test, rows)
        else:
            other = functools.partial(_times, np.asarray(training[train]).T)
            out += lr * fixed_rows(other, test, rows)
    return out


def _times(matrix: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return np.asarray(rows @ matrix)


def _training_set(fitted: _Fitted) -> tuple[SequenceSource, Labels]:
    """The training set of a fit that keeps it (every fit but one read from a store)."""
    if fitted.source is None or fitted.labels is None:
        raise RuntimeError("TracIn: a fit from a store holds no training sequences")
    return fitted.source, fitted.labels


def _stored(store: StoreFile, plan: GradientPlan, visits: list[Visit]) -> _Fitted:
    """The fitted state of a finished store (read on demand when scoring)."""
    return _Fitted(
        plan=plan,
        n_train=store.n_rows,
        source=None,
        labels=None,
        fingerprints=[v.fingerprint for v in visits],
        learning_rates=[v.learning_rate for v in visits],
        last=[],
        projected=[],
        self_influence=None,
        ids=store.ids(),
        store=store.path,
    )


def _row_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", a.astype(np.float64), b.astype(np.float64))
