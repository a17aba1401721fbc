from __future__ import annotations

import numpy as np

import seqattrib as sa


def test_project_sums_attributions_on_the_present_base():
    X = sa.one_hot(["ACGTN", "GGCCA"], layout="NCL")
    attr = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    per_base = sa.project(attr, X)
    assert per_base.shape == (2, 3, 5)
    assert per_base[0, 1, 2] == attr[0, 1, 2, 2] and per_base[0, 0, 4] == 0.0
    nlc = sa.project(attr[:, 0].transpose(0, 2, 1), X.transpose(0, 2, 1))
    np.testing.assert_array_equal(nlc, per_base[:, 0])
