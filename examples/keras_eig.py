"""EIG on a Keras 3 model: the embedded demo CNN, hypothetical scores for three outputs.

python examples/keras_eig.py
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

if importlib.util.find_spec("keras") is None:
    sys.exit("This example needs Keras 3 and TensorFlow: pip install 'seqattrib[tensorflow]'")

import seqattrib as sa
from seqattrib import demo

data = demo.load_data()
model = demo.keras_model()  # (batch, 200, 4) -> (batch, 3): GATA, E-box, CTCF
X = sa.one_hot(data["sequences"][-20:])  # (20, 200, 4): the layout Keras models take

hypothetical = sa.expected_integrated_gradients(model, X, target=None, multiply_by_inputs=False)
per_base = sa.project(hypothetical, X)  # (20, 3, 200): contribution of the base present
for k, task in enumerate(demo.TASKS):
    top = per_base[:, k].argmax(axis=1)
    print(f"{task}: top base of the first five sequences at {top[:5].tolist()}")
print("shape", hypothetical.shape, "dtype", hypothetical.dtype, "max", np.abs(hypothetical).max())
