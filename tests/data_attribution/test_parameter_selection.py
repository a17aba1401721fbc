"""parameters= of data attribution: which trainable parameters each choice selects (torch,
Keras on TensorFlow, Keras on torch), and that gradients restricted to them equal those of the
same model with every other parameter frozen."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch
from helpers import FLOAT32, assert_close, keras_on_torch

import seqattrib as sa
from seqattrib.data_attribution import outputs
from seqattrib.data_attribution.selection import select_parameters
from seqattrib.engine.outputs import Head

LENGTH, HIDDEN, K, ROWS = 6, 5, 3, 4


def weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "w1": rng.standard_normal((4 * LENGTH, HIDDEN)).astype(np.float32) / 3,
        "b1": rng.standard_normal(HIDDEN).astype(np.float32) / 3,
        "w2": rng.standard_normal((HIDDEN, K)).astype(np.float32),
        "b2": rng.standard_normal(K).astype(np.float32),
    }


def torch_model(frozen: tuple[str, ...] = ()) -> torch.nn.Module:
    w = weights()
    model = torch.nn.Sequential()
    model.add_module("flatten", torch.nn.Flatten())
    model.add_module("hidden", torch.nn.Linear(4 * LENGTH, HIDDEN))
    model.add_module("relu", torch.nn.ReLU())
    model.add_module("head", torch.nn.Linear(HIDDEN, K))
    with torch.no_grad():
        for layer, i in ((model.hidden, "1"), (model.head, "2")):
            layer.weight.copy_(torch.from_numpy(w[f"w{i}"].T.copy()))
            layer.bias.copy_(torch.from_numpy(w[f"b{i}"]))
    for name, p in model.named_parameters():
        p.requires_grad_(name not in frozen)
    return model.eval()


def keras_model(frozen: tuple[str, ...] = ()) -> keras.Model:
    w = weights()
    inputs = keras.Input((LENGTH, 4))
    hidden = keras.layers.Dense(HIDDEN, activation="relu", name="hidden")
    head = keras.layers.Dense(K, name="head")
    model = keras.Model(inputs, head(hidden(keras.layers.Flatten()(inputs))))
    hidden.set_weights([w["w1"], w["b1"]])
    head.set_weights([w["w2"], w["b2"]])
    for layer in (hidden, head):
        layer.trainable = layer.name not in frozen
    return model


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = np.eye(4, dtype=np.float32)[rng.integers(0, 4, (ROWS, LENGTH))]
    return x, np.eye(K, dtype=np.float32)[rng.integers(0, K, ROWS)]


def gradients(model, names: list[str]) -> np.ndarray:
    backend = sa.get_backend(model)
    x, t = data()
    fn = outputs.bound(outputs.cross_entropy, backend)
    grads = backend.per_example_gradients(
        model, backend.asarray(x), backend.asarray(t), fn, names, Head()
    )
    return backend.to_numpy(grads)


BUILD = {"torch": torch_model, "keras": keras_model}
NAMES = {
    "torch": ["hidden.weight", "hidden.bias", "head.weight", "head.bias"],
    "keras": ["hidden/kernel", "hidden/bias", "head/kernel", "head/bias"],
}


@pytest.mark.parametrize("framework", ["torch", "keras"])
def test_each_choice_selects_its_parameters(framework):
    model = BUILD[framework]()
    backend = sa.get_backend(model)
    names = NAMES[framework]
    w1, b1, w2, b2 = names

    def select(parameters):
        return select_parameters(backend, model, parameters, "TRAK")

    assert select(None) == names
    assert select("last") == [w2, b2]
    assert select(["head"]) == [w2, b2]
    assert select([b2, w1]) == [w1, b2]  # in the order of the flattened gradients
    assert select(("hidden", b2)) == [w1, b1, b2]
    assert select(lambda name: "bias" in name) == [b1, b2]


@pytest.mark.parametrize("framework", ["torch", "keras"])
@pytest.mark.parametrize(("parameters", "frozen"), [("last", "hidden"), (["hidden"], "head")])
def test_selected_gradients_equal_those_of_the_model_with_the_rest_frozen(
    framework, parameters, frozen
):
    model = BUILD[framework]()
    selected = select_parameters(sa.get_backend(model), model, parameters, "TRAK")
    frozen_names = tuple(n for n in NAMES[framework] if n not in selected)
    frozen_model = BUILD[framework](
        frozen_names if framework == "torch" else (frozen,)  # a Keras layer freezes whole
    )
    trainable = [n for n, _ in sa.get_backend(frozen_model).trainable_parameters(frozen_model)]
    assert trainable == selected
    ours = gradients(model, selected)
    assert_close(ours, gradients(frozen_model, trainable), FLOAT32)
    all_columns = gradients(model, NAMES[framework])
    assert ours.shape[1] < all_columns.shape[1]


BAD = [
    ("first", ValueError, r"None, 'last', a list .* For one name, pass a list: "
     r"parameters=\['first'\]\."),
    (["nothing"], ValueError, r"names of trainable parameters or of the layers that hold them\. "
     r"Got 'nothing', which names none instead\. Its layers with trainable parameters: "
     r"'hidden', 'head'\."),
    ([], ValueError, "a non-empty list of names"),
    (lambda name: False, ValueError, "a callable that selects at least one"),
    ([0], TypeError, r"a list of names \(str\)"),
    (3, TypeError, "None, 'last', a list"),
]  # fmt: skip


@pytest.mark.parametrize("framework", ["torch", "keras"])
@pytest.mark.parametrize(("parameters", "error", "message"), BAD)
def test_bad_choices_get_one_line_errors(framework, parameters, error, message):
    model = BUILD[framework]()
    with pytest.raises(error) as info:
        select_parameters(sa.get_backend(model), model, parameters, "TRAK")
    text = str(info.value)
    assert "\n" not in text and text.startswith("The 'parameters' parameter of TRAK must be ")
    assert info.match(message)


def test_a_model_without_trainable_parameters_is_refused():
    model = torch_model(tuple(NAMES["torch"]))
    with pytest.raises(ValueError, match="^The 'model' parameter of TRAK must be a model with "):
        select_parameters(sa.get_backend(model), model, None, "TRAK")


KERAS_ON_TORCH = """
import json
import keras
import torch
torch.set_num_threads(1)
import seqattrib as sa
from seqattrib.data_attribution.selection import select_parameters

inputs = keras.Input((6, 4))
h = keras.layers.Conv1D(3, 3, name="z_conv")(inputs)
h = keras.layers.Flatten()(h)
h = keras.layers.Dense(5, name="m_hidden")(h)
model = keras.Model(inputs, keras.layers.Dense(2, name="a_out")(h))
backend = sa.get_backend(model)
names = [n for n, _ in backend.trainable_parameters(model)]
select = lambda parameters: select_parameters(backend, model, parameters, "TRAK")
try:
    select(["nothing"])
except ValueError as exc:
    error = str(exc)
print(json.dumps({"names": names, "last": select("last"), "by_keras_name": select(["z_conv"]),
                  "by_keras_path": select(["m_hidden/bias"]), "error": error}))
"""


@pytest.mark.slow
def test_keras_on_torch_takes_keras_names_in_layer_order():
    """A Keras model on torch lists its torch names in another order than its layers: 'last'
    is its last layer all the same, and its Keras names select too."""
    found = keras_on_torch(KERAS_ON_TORCH)
    prefix = "_torch_params."
    assert sorted(found["names"]) == sorted(
        prefix + f"{layer}/{w}" for layer in ("z_conv", "m_hidden", "a_out") for w in "kernel bias"
        .split()
    )  # fmt: skip
    assert sorted(found["last"]) == [prefix + "a_out/bias", prefix + "a_out/kernel"]
    assert sorted(found["by_keras_name"]) == [prefix + "z_conv/bias", prefix + "z_conv/kernel"]
    assert found["by_keras_path"] == [prefix + "m_hidden/bias"]
    assert "layers with trainable parameters: 'z_conv', 'm_hidden', 'a_out'." in found["error"]
