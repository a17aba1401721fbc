"""Test set-up: torch is imported before TensorFlow (they can crash otherwise), TF32 is off,
and the toy models of ``models.py`` are shared as fixtures."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# FASTA indexes and other reusable files go to a folder of this test run, not the user's cache
os.environ.setdefault("SEQATTRIB_CACHE", tempfile.mkdtemp(prefix="seqattrib-tests-"))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

# float32 everywhere (the per-backend API; mixing it with the legacy allow_tf32 flags raises)
for _setting in (torch.backends.cudnn.conv, torch.backends.cudnn.rnn, torch.backends.cuda.matmul):
    _setting.fp32_precision = "ieee"
# The toy models are tiny: one thread per framework is as fast, and steady on a busy machine.
torch.set_num_threads(1)

try:  # every CI and dev install has TensorFlow; a GPU box with torch alone runs test_gpu.py
    import tensorflow as tf  # noqa: E402
except ImportError:  # pragma: no cover
    tf = None
if tf is not None:
    tf.config.experimental.enable_tensor_float_32_execution(False)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.get_logger().setLevel("ERROR")

import models  # noqa: E402

LENGTH = 24


@pytest.fixture(scope="session")
def conv_weights() -> dict[str, np.ndarray]:
    return models.convnet_weights(n_outputs=3)


@pytest.fixture(scope="session")
def linear_weights() -> dict[str, np.ndarray]:
    return models.linear_weights(LENGTH, n_outputs=3)


_KERAS_CACHE: dict[tuple[str, str], object] = {}


def make_model(framework: str, kind: str, weights: dict[str, np.ndarray], layout: str) -> object:
    """A toy model; Keras models are cached per (kind, layout) to keep tracing costs down."""
    if framework == "torch":
        return models.torch_model(kind, weights, layout)
    key = (kind, layout, id(weights))
    if key not in _KERAS_CACHE:
        _KERAS_CACHE[key] = models.keras_model(kind, weights, LENGTH, layout)
    return _KERAS_CACHE[key]
