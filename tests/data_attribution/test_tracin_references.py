"""TracIn against independent references: captum ``TracInCP`` / ``TracInCPFast`` on torch,
the same weights in Keras (torch vs TensorFlow parity), and BatchNorm checkpoints loaded by
hand."""

from __future__ import annotations

import models
import numpy as np
import pytest
import torch
from captum.influence import TracInCP, TracInCPFast
from helpers import CROSS_FRAMEWORK, FLOAT32, assert_close
from torch.utils.data import TensorDataset
from tracin_models import (
    CE,
    LENGTH,
    bn_weights,
    brute_force_tracin,
    convnet_checkpoints,
    data,
    keras_bn_model,
    keras_bn_weights,
    one_torch_thread,
    torch_bn_model,
    torch_state,
)

import seqattrib as sa


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


CAPTUM = 1e-4  # relative (captum sums in another order)


@pytest.fixture(scope="module")
def weights():
    return convnet_checkpoints(2)


@pytest.fixture(scope="module")
def paths(tmp_path_factory, weights):
    folder = tmp_path_factory.mktemp("checkpoints")
    out = []
    for i, w in enumerate(weights):
        out.append(str(folder / f"epoch{i}.pt"))
        torch.save(torch_state("convnet", w), out[-1])
    return out


@pytest.fixture(scope="module")
def sets():
    return data(17, seed=5), data(5, seed=6)


def _captum_inputs(sets):
    (X, y), (Xt, yt) = sets
    dataset = TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
    return dataset, (torch.from_numpy(Xt), torch.from_numpy(yt))


def test_exact_equals_captum_tracincp(weights, paths, sets):
    model = models.torch_model("convnet", weights[0], "NLC")
    ours = sa.TracIn(model, paths).fit(*sets[0]).scores(*sets[1])
    dataset, test = _captum_inputs(sets)
    captum_model = models.torch_model("convnet", weights[0], "NLC")
    reference = TracInCP(captum_model, dataset, paths, loss_fn=CE, batch_size=6).influence(test)
    assert_close(ours, reference.detach().numpy(), CAPTUM)


def test_last_layer_equals_captum_restricted_to_the_dense_layer(weights, paths, sets):
    model = models.torch_model("convnet", weights[0], "NLC")
    ours = sa.TracIn(model, paths, layer="last").fit(*sets[0]).scores(*sets[1])
    dataset, test = _captum_inputs(sets)
    captum_model = models.torch_model("convnet", weights[0], "NLC")
    restricted = TracInCP(captum_model, dataset, paths, layers=["dense"], loss_fn=CE, batch_size=6)
    assert_close(ours, restricted.influence(test).detach().numpy(), CAPTUM)


def test_last_layer_equals_captum_tracincpfast_without_bias(tmp_path, weights, sets):
    """captum's TracInCPFast leaves out the bias term, so compare on a bias-free dense layer."""

    def bias_free(w):
        model = models.torch_model("convnet", w, "NLC")
        model.dense.register_parameter("bias", None)
        return model

    paths = []
    for i, w in enumerate(weights):
        paths.append(str(tmp_path / f"nobias{i}.pt"))
        torch.save(bias_free(w).state_dict(), paths[-1])
    ours = sa.TracIn(bias_free(weights[0]), paths, layer="last").fit(*sets[0]).scores(*sets[1])
    dataset, test = _captum_inputs(sets)
    sum_loss = torch.nn.CrossEntropyLoss(reduction="sum")
    model = bias_free(weights[0])
    fast = TracInCPFast(model, model.dense, dataset, paths, loss_fn=sum_loss, batch_size=6)
    assert_close(ours, fast.influence(test).detach().numpy(), CAPTUM)


@pytest.fixture(scope="module")
def keras_pair(weights):
    """One Keras model and its checkpoints as weight lists (cached: tracing is slow)."""
    model = models.keras_model("convnet", weights[0], LENGTH, "NLC")
    lists = [models.keras_model("convnet", w, LENGTH, "NLC").get_weights() for w in weights]
    return model, lists


@pytest.mark.parametrize("layer", [None, "last"])
def test_torch_and_keras_agree(weights, keras_pair, sets, layer):
    torch_model = models.torch_model("convnet", weights[0], "NLC")
    states = [torch_state("convnet", w) for w in weights]
    theirs = sa.TracIn(torch_model, states, layer=layer, learning_rates=[1.0, 0.5]).fit(*sets[0])
    keras_model, lists = keras_pair
    ours = sa.TracIn(keras_model, lists, layer=layer, learning_rates=[1.0, 0.5]).fit(*sets[0])
    assert_close(ours.scores(*sets[1]), theirs.scores(*sets[1]), CROSS_FRAMEWORK)
    assert_close(ours.self_influence(), theirs.self_influence(), CROSS_FRAMEWORK)


def test_keras_weight_files_and_dicts(tmp_path, weights, keras_pair, sets):
    keras_model, lists = keras_pair
    files = []
    for i, w in enumerate(weights):
        files.append(str(tmp_path / f"epoch{i}.weights.h5"))
        models.keras_model("convnet", w, LENGTH, "NLC").save_weights(files[-1])
    paths = [v.path for v in keras_model.weights]
    dicts = [dict(zip(paths, values, strict=True)) for values in lists]
    before = keras_model.get_weights()
    reference = sa.TracIn(keras_model, lists).fit(*sets[0]).scores(*sets[1])
    for checkpoints in (files, dicts):
        got = sa.TracIn(keras_model, checkpoints).fit(*sets[0]).scores(*sets[1])
        assert_close(got, reference, FLOAT32)
    for now, then in zip(keras_model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(now, then)


def test_batchnorm_checkpoints_equal_loading_each_by_hand():
    """Checkpoints are loaded with their full state, buffers included, in eval mode: two that
    differ only in BatchNorm running statistics give different scores, each equal to loading
    that checkpoint by hand; the model's own state and train mode come back afterwards."""
    first = torch_bn_model(bn_weights(1)).state_dict()
    second = {k: v.clone() for k, v in first.items()}
    second["bn.running_mean"] += 0.5
    second["bn.running_var"] *= 2.0
    train, test = data(13, seed=7), data(4, seed=8)
    model = torch_bn_model(bn_weights(0)).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    results = []
    for state in (first, second):
        ours = sa.TracIn(model, [state]).fit(*train).scores(*test)
        by_hand = brute_force_tracin(lambda: torch_bn_model(bn_weights(0)), [state], train, test)
        assert_close(ours, by_hand, FLOAT32)
        results.append(ours)
    assert np.abs(results[0] - results[1]).max() > 0.1 * np.abs(results[0]).max()
    both = sa.TracIn(model, [first, second]).fit(*train).scores(*test)
    assert_close(both, results[0] + results[1], FLOAT32)
    assert model.training
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_batchnorm_keras_equals_torch():
    ws = [bn_weights(seed) for seed in (1, 2)]
    train, test = data(13, seed=7), data(4, seed=8)
    torch_scores = sa.TracIn(
        torch_bn_model(bn_weights(0)), [torch_bn_model(w).state_dict() for w in ws]
    ).fit(*train)
    keras_model = keras_bn_model(bn_weights(0))
    keras_scores = sa.TracIn(keras_model, [keras_bn_weights(w) for w in ws]).fit(*train)
    assert_close(keras_scores.scores(*test), torch_scores.scores(*test), CROSS_FRAMEWORK)
    restored = keras_model.get_weights()
    for now, then in zip(restored, keras_bn_weights(bn_weights(0)), strict=True):
        np.testing.assert_array_equal(now, then)
