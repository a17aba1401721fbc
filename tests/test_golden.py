"""The package reproduces its recorded results (``tests/golden/record.py``).

Bit for bit in the environment that recorded them; to float32 rounding (1e-5 of the largest
value) under another CPU or library build, where the frameworks may round differently, and for
the arrays whose arithmetic was reworked on purpose since (``record.ROUNDING_ONLY``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import FLOAT32, assert_close

sys.path.insert(0, str(Path(__file__).parent / "golden"))

import record  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(record.PATH) as stored:
        return {key: stored[key] for key in stored.files}


@pytest.fixture(scope="module")
def computed() -> dict[str, np.ndarray]:
    return record.compute()


def test_every_golden_array_is_reproduced(
    golden: dict[str, np.ndarray], computed: dict[str, np.ndarray]
) -> None:
    recorded_here = str(golden.pop("environment")) == record.environment()
    assert sorted(computed) == sorted(golden)
    for key, expected in golden.items():
        if recorded_here and key not in record.ROUNDING_ONLY:
            assert np.array_equal(computed[key], expected), f"{key} differs from the golden array"
        else:
            assert_close(computed[key], expected, FLOAT32)
