"""TracIn: exact scores equal a brute-force per-example autograd loop; modes, losses, learning
rates, batching, layouts, state restoration and fresh (never aliased) results."""

from __future__ import annotations

import models
import numpy as np
import pytest
import torch
from helpers import FLOAT32, assert_close
from tracin_models import (
    CE,
    brute_force_tracin,
    convnet_checkpoints,
    data,
    one_torch_thread,
    per_example_gradients,
    torch_state,
)

import seqattrib as sa
from seqattrib.data_attribution import projection
from seqattrib.data_attribution.outputs import bound, cross_entropy
from seqattrib.engine.outputs import Head


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def weights():
    return convnet_checkpoints(3)


@pytest.fixture(scope="module")
def states(weights):
    return [torch_state("convnet", w) for w in weights]


@pytest.fixture(scope="module")
def train_set():
    return data(23, seed=1)


@pytest.fixture(scope="module")
def test_set():
    return data(6, seed=2)


def make(weights, layout="NLC"):
    return models.torch_model("convnet", weights[0], layout)


def test_exact_equals_brute_force(weights, states, train_set, test_set):
    tracin = sa.TracIn(make(weights), states, learning_rates=[0.5, 0.25, 0.1]).fit(*train_set)
    ours = tracin.scores(*test_set)
    reference = brute_force_tracin(
        lambda: make(weights), states, train_set, test_set, learning_rates=[0.5, 0.25, 0.1]
    )
    assert ours.dtype == np.float32 and ours.shape == (6, 23)
    assert_close(ours, reference, FLOAT32)


def test_self_influence_is_the_diagonal(weights, states, train_set):
    for kwargs in ({}, {"layer": "last"}):
        tracin = sa.TracIn(make(weights), states, **kwargs).fit(*train_set)
        own = tracin.self_influence()
        assert own.dtype == np.float32 and own.shape == (23,)
        assert_close(own, np.diag(tracin.scores(*train_set)), FLOAT32)
        assert (own > 0).all()


def test_self_influence_before_and_after_scores_agree(weights, states, train_set, test_set):
    first = sa.TracIn(make(weights), states).fit(*train_set)
    early = first.self_influence()  # computed on its own pass
    second = sa.TracIn(make(weights), states).fit(*train_set)
    second.scores(*test_set)  # computed on the way
    assert_close(second.self_influence(), early, FLOAT32)


def test_last_layer_equals_exact_restricted_to_the_last_layer(weights, states, train_set, test_set):
    ours = sa.TracIn(make(weights), states, layer="last").fit(*train_set).scores(*test_set)
    reference = brute_force_tracin(
        lambda: make(weights),
        states,
        train_set,
        test_set,
        params=lambda m: [m.dense.weight, m.dense.bias],
    )
    assert_close(ours, reference, FLOAT32)


@pytest.mark.parametrize("batch_size", [1, 7, 1000])
@pytest.mark.parametrize("layer", [None, "last"])
def test_batch_size_does_not_matter(weights, states, train_set, test_set, batch_size, layer):
    base = sa.TracIn(make(weights), states, layer=layer).fit(*train_set).scores(*test_set)
    other = sa.TracIn(make(weights), states, layer=layer, batch_size=batch_size)
    assert_close(other.fit(*train_set).scores(*test_set), base, FLOAT32)


def test_layouts_agree(weights, states, train_set, test_set):
    nlc = sa.TracIn(make(weights), states).fit(*train_set).scores(*test_set)
    ncl_states = [torch_state("convnet", w, "NCL") for w in weights]
    ncl_model = make(weights, "NCL")
    as_ncl = [(np.ascontiguousarray(X.transpose(0, 2, 1)), y) for X, y in (train_set, test_set)]
    ncl = sa.TracIn(ncl_model, ncl_states).fit(*as_ncl[0]).scores(*as_ncl[1])
    assert_close(ncl, nlc, FLOAT32)


def test_scores_are_additive_over_checkpoints_and_scale_with_rates(
    weights, states, train_set, test_set
):
    parts = [sa.TracIn(make(weights), [s]).fit(*train_set).scores(*test_set) for s in states]
    rates = [2.0, 0.5, 0.1]
    both = sa.TracIn(make(weights), states, learning_rates=rates).fit(*train_set)
    assert_close(
        both.scores(*test_set), sum(r * p for r, p in zip(rates, parts, strict=True)), FLOAT32
    )


def test_loader_may_return_the_learning_rate(weights, states, train_set, test_set):
    rates = {id(s): r for s, r in zip(states, [0.3, 0.2, 0.1], strict=True)}

    def load(model, state):  # captum's contract
        model.load_state_dict(state)
        return rates[id(state)]

    ours = sa.TracIn(make(weights), states, load_checkpoint=load).fit(*train_set)
    given = sa.TracIn(make(weights), states, learning_rates=[0.3, 0.2, 0.1]).fit(*train_set)
    assert_close(ours.scores(*test_set), given.scores(*test_set), FLOAT32)


def test_files_and_callable_checkpoints(tmp_path, weights, states, train_set, test_set):
    paths = []
    for i, state in enumerate(states):
        paths.append(tmp_path / f"epoch{i}.pt")
        torch.save(state, paths[-1])
    from_dicts = sa.TracIn(make(weights), states).fit(*train_set).scores(*test_set)
    from_files = sa.TracIn(make(weights), [str(p) for p in paths]).fit(*train_set)
    assert_close(from_files.scores(*test_set), from_dicts, FLOAT32)
    callables = [lambda m, s=s: m.load_state_dict(s) and None for s in states]
    from_callables = sa.TracIn(make(weights), callables).fit(*train_set)
    assert_close(from_callables.scores(*test_set), from_dicts, FLOAT32)


@pytest.mark.parametrize(
    "loss, reference_loss, labels",
    [
        (
            "bce",
            lambda out, y: torch.nn.functional.binary_cross_entropy_with_logits(
                out, y, reduction="none"
            ).mean(1),
            lambda rng, n: (rng.random((n, 3)) < 0.5).astype(np.float32),
        ),
        (
            "mse",
            lambda out, y: ((out - y) ** 2).mean(1),
            lambda rng, n: rng.standard_normal((n, 3)).astype(np.float32),
        ),
    ],
)
def test_bce_and_mse(weights, states, loss, reference_loss, labels):
    rng = np.random.default_rng(0)
    train = (data(11, seed=3)[0], labels(rng, 11))
    test = (data(4, seed=4)[0], labels(rng, 4))
    ours = sa.TracIn(make(weights), states[:2], loss=loss).fit(*train).scores(*test)
    reference = brute_force_tracin(
        lambda: make(weights), states[:2], train, test, loss_fn=reference_loss
    )
    assert_close(ours, reference, FLOAT32)


def test_callable_loss_equals_the_named_one(weights, states, train_set, test_set):
    named = sa.TracIn(make(weights), states).fit(*train_set).scores(*test_set)
    custom = sa.TracIn(make(weights), states, loss=lambda out, y: CE(out, y))
    assert_close(custom.fit(*train_set).scores(*test_set), named, FLOAT32)


def test_projection_is_seeded_and_close_to_exact(weights, states, train_set, test_set):
    exact = sa.TracIn(make(weights), states).fit(*train_set)
    projected = sa.TracIn(make(weights), states, proj_dim=4096, random_state=3)
    projected.fit(*train_set)
    again = sa.TracIn(make(weights), states, proj_dim=4096, random_state=3).fit(*train_set)
    other = sa.TracIn(make(weights), states, proj_dim=4096, random_state=4).fit(*train_set)
    p, e = projected.scores(*test_set), exact.scores(*test_set)
    np.testing.assert_array_equal(again.scores(*test_set), p)
    assert not np.array_equal(other.scores(*test_set), p)
    # Johnson-Lindenstrauss: relative error ~ sqrt(2 / d) of |g1| |g2|
    assert np.corrcoef(p.ravel(), e.ravel())[0, 1] > 0.99
    # self-influence stays exact (it comes with the training gradients)
    assert_close(projected.self_influence(), exact.self_influence(), FLOAT32)


def test_chunked_projection_equals_the_whole_matrix(train_set, test_set, monkeypatch):
    """TracIn shares TRAK's projector: a matrix over PROJECTION_BYTES goes chunk by chunk."""
    wide = [models.convnet_weights(n_outputs=3, filters=40, seed=s) for s in (1, 2)]
    model = models.torch_model("convnet", wide[0], "NLC")
    big = [torch_state("convnet", w) for w in wide]
    whole = sa.TracIn(model, big, proj_dim=16).fit(*train_set).scores(*test_set)
    assert sum(p.numel() for p in model.parameters()) > projection.BLOCK_ROWS  # several chunks
    monkeypatch.setattr(projection, "PROJECTION_BYTES", 1)  # one BLOCK_ROWS chunk at a time
    chunked = sa.TracIn(model, big, proj_dim=16).fit(*train_set).scores(*test_set)
    assert_close(chunked, whole, FLOAT32)


def test_top_k_proponents_and_opponents(weights, states, train_set, test_set):
    tracin = sa.TracIn(make(weights), states).fit(*train_set)
    scores = tracin.scores(*test_set)
    idx, top = tracin.top_k(*test_set, 4)
    assert idx.dtype == np.int64 and idx.shape == (6, 4) and top.dtype == np.float32
    np.testing.assert_array_equal(idx, np.argsort(-scores, axis=1, kind="stable")[:, :4])
    np.testing.assert_array_equal(top, np.take_along_axis(scores, idx, axis=1))
    idx, low = tracin.top_k(*test_set, 4, proponents=False)
    np.testing.assert_array_equal(idx, np.argsort(scores, axis=1, kind="stable")[:, :4])
    assert (np.diff(low, axis=1) >= 0).all() and (np.diff(top, axis=1) <= 0).all()


def test_model_state_is_restored(weights, states, train_set, test_set):
    model = make(weights)
    model.train()
    model.conv1.weight.requires_grad_(False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = {n: p for n, p in model.named_parameters()}
    for kwargs in ({}, {"layer": "last"}, {"proj_dim": 16}):
        tracin = sa.TracIn(model, states, **kwargs).fit(*train_set)
        tracin.scores(*test_set)
        tracin.self_influence()
    assert model.training and all(m.training for m in model.modules())
    assert not model.conv1.weight.requires_grad and model.dense.weight.requires_grad
    assert all(p is params[n] for n, p in model.named_parameters())  # restored in place
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_frozen_parameters_are_left_out(weights, states, train_set, test_set):
    model = make(weights)
    for p in (model.conv1.weight, model.conv1.bias):
        p.requires_grad_(False)
    ours = sa.TracIn(model, states).fit(*train_set).scores(*test_set)
    reference = brute_force_tracin(
        lambda: make(weights),
        states,
        train_set,
        test_set,
        params=lambda m: [p for n, p in m.named_parameters() if not n.startswith("conv1")],
    )
    assert_close(ours, reference, FLOAT32)


def test_fresh_arrays_and_no_state_shared_between_objects(weights, states, train_set, test_set):
    a = sa.TracIn(make(weights), states).fit(*train_set)
    other_weights = convnet_checkpoints(5)[3:]
    b_model = models.torch_model("convnet", other_weights[0], "NLC")
    b = sa.TracIn(b_model, [torch_state("convnet", w) for w in other_weights])
    b.fit(*train_set)
    first = a.scores(*test_set)
    kept = first.copy()
    first[:] = np.nan  # a caller mutating a result changes nothing inside
    second = a.scores(*test_set)
    assert second is not first and not np.shares_memory(first, second)
    np.testing.assert_array_equal(second, kept)
    from_b = b.scores(*test_set)
    assert not np.shares_memory(from_b, second) and not np.allclose(from_b, second)
    np.testing.assert_array_equal(a.scores(*test_set), kept)
    own = a.self_influence()
    own[:] = -1
    assert (a.self_influence() > 0).all()
    assert not np.allclose(b.self_influence(), a.self_influence())


def test_per_example_gradients_primitive_matches_autograd(weights, states, train_set):
    model = make(weights)
    backend = sa.get_backend(model)
    names = [n for n, _ in backend.trainable_parameters(model)]
    X, y = train_set
    targets = torch.from_numpy(np.eye(3, dtype=np.float32)[y])  # class labels as one-hot rows
    grads = backend.per_example_gradients(
        model, torch.from_numpy(X), targets, bound(cross_entropy, backend), names, Head()
    )
    # Each parameter comes flattened in the Keras layout: the convolutions' (out, in, width)
    # and the dense layer's (out, in) weights with their axes reversed, biases as they are.
    columns, offset = [], 0
    for p in model.parameters():
        columns.append(offset + np.arange(p.numel()).reshape(p.shape).T.ravel())
        offset += p.numel()
    reference = per_example_gradients(model, X, y)[:, np.concatenate(columns)]
    assert_close(grads.numpy(), reference, FLOAT32)
