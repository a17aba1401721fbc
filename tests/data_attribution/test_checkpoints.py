"""The default checkpoint loader is written once: the same checkpoint forms load into torch and
Keras models alike, and a checkpoint that does not fit gets the same message in both."""

from __future__ import annotations

import models
import numpy as np
import pytest
from tracin_models import LENGTH, convnet_checkpoints

import seqattrib as sa
from seqattrib.backends import CheckpointMismatch
from seqattrib.data_attribution.checkpoints import load_state

FRAMEWORKS = ["torch", "tensorflow"]


def build(framework: str, weights: dict[str, np.ndarray]) -> object:
    if framework == "torch":
        return models.torch_model("convnet", weights, "NLC")
    return models.keras_model("convnet", weights, LENGTH, "NLC")


@pytest.fixture(scope="module")
def weights() -> list[dict[str, np.ndarray]]:
    return convnet_checkpoints(2)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("form", ["dict", "list", "file"])
def test_every_form_loads_the_checkpoints_state(tmp_path, weights, framework, form):
    source, model = build(framework, weights[1]), build(framework, weights[0])
    backend = sa.get_backend(model)
    # the source's values under the model's keys (Keras names the layers of each model anew)
    state = dict(zip(backend.state(model), backend.state(source).values(), strict=True))
    if form == "dict":
        checkpoint = state
    elif form == "list":
        checkpoint = list(state.values())
    elif framework == "torch":
        import torch

        checkpoint = tmp_path / "state.pt"
        torch.save(source.state_dict(), checkpoint)
    else:
        checkpoint = tmp_path / "state.weights.h5"
        source.save_weights(checkpoint)
    load_state(backend, model, checkpoint)
    for key, value in backend.state(model).items():
        np.testing.assert_array_equal(value, state[key])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_checkpoint_that_does_not_fit_gets_one_message(weights, framework):
    model = build(framework, weights[0])
    backend = sa.get_backend(model)
    state = backend.state(model)
    first, *_ = state
    cases = [
        ({k: v for k, v in state.items() if k != first}, f"the entry '{first}' of the model is"),
        ({**state, "extra": np.zeros(1)}, "it has the key 'extra', which the model lacks"),
        (list(state.values())[:2], f"it holds 2 arrays but the model has {len(state)} weights"),
        ({**state, first: state[first][:1]}, f"'{first}' has shape"),
        (3.0, "it is a float: expected"),
    ]
    for checkpoint, message in cases:
        with pytest.raises(CheckpointMismatch, match=message):
            load_state(backend, model, checkpoint)
    for key, value in backend.state(model).items():  # nothing was assigned
        np.testing.assert_array_equal(value, state[key])
