"""The Poisson and multinomial losses, TRAK's weights Q of every loss, output columns (target=)
and the checks of labels, against references written by hand here: torch.distributions, torch
and TensorFlow losses, bpnet-lite's MNLL formula and torch autograd."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import tensorflow as tf
import torch
from helpers import CLOSED_FORM, FLOAT32, assert_close

import seqattrib as sa
from seqattrib.data_attribution import outputs, selection
from seqattrib.data_attribution.outputs import NUMPY, bound, check_target, out_to_loss

B, K = 6, 5


@pytest.fixture(scope="module")
def backends() -> dict[str, object]:
    return {
        "torch": sa.get_backend(torch.nn.Linear(2, 2)),
        "tensorflow": sa.get_backend(tf.keras.layers.Dense(2)),
    }


def logits_and_counts(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Logits (log-rates) of order 1 and integer counts up to 9, float32."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1.0, (B, K)).astype(np.float32)
    y = rng.integers(0, 10, (B, K)).astype(np.float32)
    return z, y


# --------------------------------------------------------------------------- references
def torch_mse(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((z - y) ** 2).mean(1)


def torch_poisson(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """-log Poisson(y; exp(z)) without log y!, mean over outputs."""
    log_prob = torch.distributions.Poisson(torch.exp(z)).log_prob(y)
    return -(log_prob + torch.lgamma(y + 1)).mean(1)


def torch_multinomial(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """-log Multinomial(y; n, softmax(z)) without its constant log n! - sum log y_k!."""
    log_prob = torch.stack(
        [
            torch.distributions.Multinomial(int(y[i].sum()), logits=z[i]).log_prob(y[i])
            for i in range(len(z))
        ]
    )
    constant = torch.lgamma(y.sum(1) + 1) - torch.lgamma(y + 1).sum(1)
    return -(log_prob - constant)


def bpnet_mnll(logps: torch.Tensor, true_counts: torch.Tensor) -> torch.Tensor:
    """bpnet-lite's ``MNLLLoss`` (``bpnetlite.losses``), as it is written there."""
    log_fact_sum = torch.lgamma(torch.sum(true_counts, dim=-1) + 1)
    log_prod_fact = torch.sum(torch.lgamma(true_counts + 1), dim=-1)
    log_prod_exp = torch.sum(true_counts * logps, dim=-1)
    return -log_fact_sum + log_prod_fact - log_prod_exp


def reference_loss(name: str, z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Loss values (B,) and d loss / d z (B, K) of torch's references, in float64."""
    zt = torch.tensor(z, dtype=torch.float64, requires_grad=True)
    yt = torch.tensor(y, dtype=torch.float64)
    references = {"mse": torch_mse, "poisson": torch_poisson, "multinomial": torch_multinomial}
    loss = references[name](zt, yt)
    (grad,) = torch.autograd.grad(loss.sum(), zt)
    return loss.detach().numpy(), grad.numpy()


# --------------------------------------------------------------------------- the new losses
@pytest.mark.parametrize("name", ["poisson", "multinomial"])
@pytest.mark.parametrize("where", ["torch", "tensorflow", "numpy"])
def test_losses_and_their_gradients_equal_the_likelihoods(backends, name, where):
    z, y = logits_and_counts()
    expected, expected_grad = reference_loss(name, z, y)
    definition = outputs.LOSSES[name]
    if where == "numpy":
        assert_close(definition(NUMPY, z.astype(np.float64), y), expected, CLOSED_FORM)
        return
    backend = backends[where]
    fn = bound(definition, backend)
    value = backend.to_numpy(fn(backend.asarray(z), backend.asarray(y)))
    assert_close(value, expected, FLOAT32)
    grad = backend.output_gradients(fn, backend.asarray(z), backend.asarray(y))
    assert_close(backend.to_numpy(grad), expected_grad, FLOAT32)


def test_losses_equal_the_frameworks_own():
    z, y = logits_and_counts(1)
    zt, yt = torch.from_numpy(z), torch.from_numpy(y)
    torch_loss = torch.nn.functional.poisson_nll_loss(
        zt, yt, log_input=True, full=False, reduction="none"
    ).mean(1)
    tf_loss = tf.reduce_mean(tf.nn.log_poisson_loss(y, z, compute_full_loss=False), axis=1)
    keras_loss = tf.keras.losses.Poisson(reduction=None)(y, np.exp(z.astype(np.float64)))
    ours = outputs.poisson(NUMPY, z.astype(np.float64), y)
    assert_close(ours, torch_loss.numpy(), FLOAT32)
    assert_close(ours, tf_loss.numpy(), FLOAT32)
    assert_close(ours, np.asarray(keras_loss), FLOAT32)  # keras takes rates, with eps in log
    logps = torch.log_softmax(zt.double(), dim=1)
    constant = torch.lgamma(yt.double().sum(1) + 1) - torch.lgamma(yt.double() + 1).sum(1)
    mnll = (bpnet_mnll(logps, yt.double()) + constant).numpy()
    assert_close(outputs.multinomial(NUMPY, z.astype(np.float64), y), mnll, CLOSED_FORM)


def test_multinomial_gradient_is_total_times_softmax_minus_counts(backends):
    """Counts do not sum to one: the gradient is n softmax(z) - y (a fused softmax
    cross-entropy kernel returns softmax(z) - y)."""
    z, y = logits_and_counts(2)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    expected = y.sum(1, keepdims=True) * p - y
    for backend in backends.values():
        fn = bound(outputs.multinomial, backend)
        grad = backend.output_gradients(fn, backend.asarray(z), backend.asarray(y))
        assert_close(backend.to_numpy(grad), expected, FLOAT32)


@pytest.mark.parametrize("name", ["mse", "poisson", "multinomial"])
def test_one_bound_function_serves_models_with_other_output_counts(backends, name):
    """TensorFlow traces the function once more for another K, then for any K: the losses
    must not need K to be known while it traces."""
    backend = backends["tensorflow"]
    fn = bound(outputs.LOSSES[name], backend)
    for k in (5, 3, 4, 2):
        z, y = logits_and_counts(k)
        z, y = z[:, :k], y[:, :k]
        grad = backend.output_gradients(fn, backend.asarray(z), backend.asarray(y))
        assert_close(backend.to_numpy(grad), reference_loss(name, z, y)[1], FLOAT32)


# --------------------------------------------------------------------------- TRAK's Q
def reference_output(name: str, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """TRAK's output function f of each loss, written by hand: (B,)."""
    if name == "cross_entropy":
        hot = torch.nn.functional.one_hot(y.long(), z.shape[1]).bool()
        return z[hot] - torch.logsumexp(z.masked_fill(hot, -torch.inf), 1)
    if name == "bce":
        return (2 * y - 1) * z[:, 0]
    if name in ("mse", "poisson"):
        return z[:, 0]
    return (y * torch.log_softmax(z, 1)).sum(1)


def reference_training_loss(name: str, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The loss whose -dL/df TRAK weighs by (mse: (f - y)^2 / 2, TRAK's convention): (B,)."""
    if name == "cross_entropy":
        return torch.nn.functional.cross_entropy(z, y.long(), reduction="none")
    if name == "bce":
        return torch.nn.functional.binary_cross_entropy_with_logits(z[:, 0], y, reduction="none")
    if name == "mse":
        return (z[:, 0] - y) ** 2 / 2
    if name == "poisson":
        return torch_poisson(z, y[:, None])
    return torch_multinomial(z, y)


def q_labels(name: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """Labels as the user gives them, targets as the definitions take them, outputs."""
    if name == "cross_entropy":
        y = rng.integers(0, K, B)
        return y, np.eye(K)[y], K
    if name == "multinomial":
        y = rng.integers(0, 10, (B, K)).astype(np.float64)
        return y, y, K
    y = {
        "bce": rng.integers(0, 2, B).astype(np.float64),
        "mse": rng.normal(0, 2, B),
        "poisson": rng.integers(0, 10, B).astype(np.float64),
    }[name]
    return y, y, 1


@pytest.mark.parametrize("name", sorted(outputs.OUTPUT_FUNCTIONS))
def test_out_to_loss_is_minus_the_loss_derivative_in_f(name):
    """dL/dz = -Q df/dz for every example, with L and f written by hand (torch autograd):
    L depends on the outputs only through f, and Q = -dL/df."""
    rng = np.random.default_rng(3)
    y, t, n_outputs = q_labels(name, rng)
    z = rng.normal(0, 1.5, (B, n_outputs))
    q = out_to_loss(name, NUMPY, z, t)
    zt = torch.tensor(z, requires_grad=True)
    yt = torch.tensor(y, dtype=torch.float64)
    (df,) = torch.autograd.grad(reference_output(name, zt, yt).sum(), zt)
    (dl,) = torch.autograd.grad(reference_training_loss(name, zt, yt).sum(), zt)
    assert_close(-q[:, None] * df.numpy(), dl.numpy(), CLOSED_FORM)
    assert_close(outputs.OUTPUT_FUNCTIONS[name](NUMPY, z, t), reference_output(name, zt, yt)
                 .detach().numpy(), CLOSED_FORM)  # fmt: skip


def test_task_names_map_to_losses():
    assert outputs.TASK_LOSSES == {
        "classification": "cross_entropy",
        "binary": "bce",
        "regression": "mse",
    }
    z = np.random.default_rng(4).normal(size=(B, K))
    t = np.eye(K)[np.arange(B) % K]
    for task, loss in outputs.TASK_LOSSES.items():
        zk = z if loss == "cross_entropy" else z[:, :1]
        tk = t if loss == "cross_entropy" else t[:, 0]
        assert_close(out_to_loss(task, NUMPY, zk, tk), out_to_loss(loss, NUMPY, zk, tk), 0)


# --------------------------------------------------------------------------- target=
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_bound_columns_select_the_outputs_the_loss_sees(backends, framework):
    backend = backends[framework]
    z, y = logits_and_counts(5)
    columns = (3, 0, 4)
    fn = bound(outputs.multinomial, backend, [3, 0, 4])
    assert fn is bound(outputs.multinomial, backend, columns)
    assert fn != bound(outputs.multinomial, backend)
    counts = y[:, list(columns)]
    expected, expected_grad = reference_loss("multinomial", z[:, list(columns)], counts)
    value = backend.to_numpy(fn(backend.asarray(z), backend.asarray(counts)))
    assert_close(value, expected, FLOAT32)
    grad = backend.to_numpy(
        backend.output_gradients(fn, backend.asarray(z), backend.asarray(counts))
    )
    full = np.zeros((B, K))
    full[:, list(columns)] = expected_grad
    assert_close(grad, full, FLOAT32)  # the other outputs do not enter the loss
    q = out_to_loss("poisson", NUMPY, z.astype(np.float64), y[:, 2], columns=[2])
    assert_close(q, y[:, 2] - np.exp(z[:, 2].astype(np.float64)), CLOSED_FORM)


def test_check_target():
    assert check_target(None, 4, "TRAK") is None
    assert check_target(2, 4, "TRAK") == (2,)
    assert check_target(np.int64(1), 4, "TRAK") == (1,)
    assert check_target([3, -4], 4, "TRAK") == (3, 0)
    for bad, error in [(4, ValueError), ([0, 0], ValueError), ([], ValueError), ("0", TypeError),
                       (1.0, TypeError), (True, TypeError), ([0, 1.5], TypeError)]:  # fmt: skip
        with pytest.raises(error, match=r"^The 'target' parameter of TRAK must be [^\n]*$"):
            check_target(bad, 4, "TRAK")


# --------------------------------------------------------------------------- labels
def labels_for(loss: str, n: int, k: int) -> np.ndarray:
    rng = np.random.default_rng(6)
    if loss == "cross_entropy":
        return rng.integers(0, k, n)
    if loss == "bce":
        return rng.integers(0, 2, (n, k)).astype(np.float32)
    if loss == "mse":
        return rng.normal(size=(n, k))
    return rng.integers(0, 30, (n, k)).astype(np.float32)


@pytest.mark.parametrize("loss", sorted(outputs.LOSSES))
def test_valid_labels_are_kept_by_reference(loss):
    y = labels_for(loss, 9, 3)
    labels = selection.check_labels(y, 9, loss, 3, "y_train", "TracIn.fit")
    assert labels.values is y
    assert labels.dtype == ("int64" if loss == "cross_entropy" else "float32")
    assert labels.depth == (3 if loss == "cross_entropy" else None)
    if loss != "cross_entropy" and loss != "multinomial":
        one = selection.check_labels(y[:, 0], 9, loss, 1, "y_test", "TRAK.scores")
        assert one.values.shape == (9,)


BAD_LABELS = [
    ("poisson", np.array([[1.0, -1.0], [0.0, 2.0]]), "counts >= 0 for loss='poisson'. Got the "
     "label -1.0 at output 1 for sequence 0"),
    ("multinomial", np.array([[1.0, 2.0], [np.nan, 2.0]]), "finite. Got the label nan at "
     "output 0 for sequence 1"),
    ("multinomial", np.array([[1.0, 2.0], [np.inf, 2.0]]), "finite"),
    ("multinomial", np.ones((2, 3)), r"shape \(2, 2\) for loss='multinomial'"),
    ("poisson", np.ones(2), r"shape \(2, 2\) for loss='poisson'"),
    ("cross_entropy", np.array([0.0, 1.0]), "integer class labels"),
    ("cross_entropy", np.array([0, 2]), r"class labels in \[0, 2\). Got the label 2 for "
     "sequence 1"),
    ("bce", np.array([[0.0, 1.5], [0.0, 1.0]]), r"labels in \[0, 1\] for loss='bce'"),
    ("mse", np.array([[0.0, 1.0], [0.0, np.nan]]), "finite"),
    ("mse", np.ones((3, 2)), r"one label per sequence \(2 of them\)"),
    ("mse", np.array([["a", "b"], ["c", "d"]]), "numeric labels"),
]  # fmt: skip


@pytest.mark.parametrize(("loss", "y", "message"), BAD_LABELS)
def test_bad_labels_get_one_line_errors_naming_the_parameter(loss, y, message):
    with pytest.raises((ValueError, TypeError)) as info:
        selection.check_labels(y, 2, loss, 2, "y_train", "TracIn.fit")
    text = str(info.value)
    assert "\n" not in text and text.startswith("The 'y_train' parameter of TracIn.fit must be ")
    assert info.match(message)


def test_labels_for_trak_output_functions():
    soft = np.array([0.0, 0.3])
    assert selection.check_labels(soft, 2, "bce", 1, "y_train", "TRAK.fit").values is soft
    with pytest.raises(ValueError, match=r"^The 'y_train' .* labels 0 or 1 for loss='bce'"):
        selection.check_labels(soft, 2, "bce", 1, "y_train", "TRAK.fit", output_function=True)
    counts = np.ones((2, 3))
    with pytest.raises(ValueError, match=r"^The 'target' parameter .* one output for loss="):
        selection.check_labels(counts, 2, "poisson", 3, "y_train", "TRAK.fit", output_function=True)
    labels = selection.check_labels(
        counts, 2, "multinomial", 3, "y_train", "TRAK.fit", output_function=True
    )
    assert labels.values is counts
    with pytest.raises(ValueError, match=r"^The 'loss' parameter .* needs one output \(logit\)"):
        selection.check_labels(np.ones((2, 1)), 2, "multinomial", 1, "y_train", "TracIn.fit")


@pytest.mark.parametrize("loss", ["poisson", "multinomial", "mse", "cross_entropy"])
def test_labels_on_disk_are_checked_block_by_block(tmp_path, monkeypatch, loss):
    """A memory map is read in blocks of rows, never into one full-size temporary (the memory
    the check allocates stays far below one byte per label), and kept; a bad label in a late
    block is found and named."""
    entries = 10**6
    shape = (entries,) if loss == "cross_entropy" else (entries // 4, 4)
    dtype = np.int32 if loss == "cross_entropy" else np.float32
    path = tmp_path / "y.npy"
    disk = np.lib.format.open_memmap(path, "w+", dtype, shape)
    disk[:] = labels_for(loss, shape[0], 4).reshape(shape)
    disk.flush()
    monkeypatch.setattr(selection, "_BLOCK_ENTRIES", 1 << 12)
    tracemalloc.start()
    try:
        labels = selection.check_labels(disk, shape[0], loss, 4, "y_train", "TRAK.fit")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert labels.values is disk
    assert peak < entries // 8
    bad_row = shape[0] - 13
    disk[bad_row] = np.nan if loss == "mse" else -1
    with pytest.raises(ValueError, match=f"for sequence {bad_row} instead"):
        selection.check_labels(disk, shape[0], loss, 4, "y_train", "TRAK.fit")
