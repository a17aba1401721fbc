"""The one tolerance rule of the test suite: max|a - d| <= tol * max(1, max|d|)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: float32 on CPU, torch vs TensorFlow, closed forms.
FLOAT32 = 1e-5
CROSS_FRAMEWORK = 1e-4
CLOSED_FORM = 1e-6


def assert_close(actual: np.ndarray, desired: np.ndarray, tol: float) -> None:
    actual, desired = np.asarray(actual), np.asarray(desired)
    assert actual.shape == desired.shape, f"shape {actual.shape} != {desired.shape}"
    scale = max(1.0, float(np.max(np.abs(desired)))) if desired.size else 1.0
    err = float(np.max(np.abs(actual.astype(np.float64) - desired))) if desired.size else 0.0
    assert err <= tol * scale, f"max abs error {err:.3g} > {tol:g} * {scale:.3g}"


def keras_on_torch(code: str, cwd: str | Path | None = None, timeout: float = 600) -> Any:
    """Run ``code`` in a fresh interpreter with Keras on the torch backend (it cannot share a
    process with Keras on TensorFlow); its last line of stdout, read as JSON."""
    env = dict(os.environ, KERAS_BACKEND="torch", OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd,
        timeout=timeout,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
