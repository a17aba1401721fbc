"""A Keras model on the torch backend (a ``torch.nn.Module``) keeps its weights in its state
under sorted names, not in ``get_weights()`` order: a list checkpoint (``get_weights()``) must
still load each array into its own weight. Two bias-free layers of the same shape, named so that
the sorted order swaps them, would otherwise be loaded swapped without any error."""

from __future__ import annotations

from helpers import keras_on_torch

CODE = """
import json
import numpy as np
import keras
import torch
torch.set_num_threads(1)
from seqattrib.backends import get_backend
from seqattrib.data_attribution.checkpoints import load_state

def build(seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5, 4))
    h = keras.layers.Dense(20, use_bias=False, name="z_first")(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, keras.layers.Dense(20, use_bias=False, name="a_second")(h))

model = build(0)
assert isinstance(model, torch.nn.Module)
lists = [build(seed).get_weights() for seed in (1, 2)]
load_state(get_backend(model), model, lists[0])
loaded = all(np.array_equal(a, b) for a, b in zip(model.get_weights(), lists[0], strict=True))
rng = np.random.default_rng(0)
X = np.eye(4, dtype=np.float32)[rng.integers(0, 4, (6, 5))]
with torch.no_grad():
    gap = float((model(torch.from_numpy(X)) - build(1)(torch.from_numpy(X))).abs().max())
print(json.dumps({"loaded": loaded, "gap": gap}))
"""


def test_a_weight_list_loads_into_a_keras_model_on_torch_in_its_own_order(tmp_path):
    result = keras_on_torch(CODE, cwd=tmp_path, timeout=300)
    assert result["loaded"]
    assert result["gap"] == 0.0  # the outputs of the model whose weights the list holds
