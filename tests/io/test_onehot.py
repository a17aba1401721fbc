from __future__ import annotations

import numpy as np
import pytest

import seqattrib as sa


def test_one_hot_layouts_and_n():
    X = sa.one_hot(["ACGTN", "acgtn"])
    expected = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]])
    assert X.shape == (2, 5, 4) and X.dtype == np.float32
    np.testing.assert_array_equal(X[0], expected)
    np.testing.assert_array_equal(X[1], expected)
    ncl = sa.one_hot("ACGTN", layout="NCL", dtype=np.int8)
    assert ncl.shape == (1, 4, 5) and ncl.dtype == np.int8
    np.testing.assert_array_equal(ncl[0], expected.T)


def test_decode_round_trip_both_layouts():
    seqs = ["ACGTNNACGT", "TTTTGGGGCC"]
    assert sa.decode(sa.one_hot(seqs)) == seqs
    assert sa.decode(sa.one_hot(seqs, layout="NCL")) == seqs
    soft = np.full((1, 3, 4), 0.25)
    assert sa.decode(soft) == ["NNN"]


def test_one_hot_errors():
    with pytest.raises(ValueError, match="layout"):
        sa.one_hot("ACGT", layout="LC")
    with pytest.raises(ValueError, match="non-empty"):
        sa.one_hot([])
    with pytest.raises(TypeError, match="strings"):
        sa.one_hot(["ACGT", 5])


@pytest.mark.parametrize("dtype", ["int4", "U1", object, "complex64"])
def test_one_hot_refuses_a_dtype_that_is_no_real_number(dtype):
    with pytest.raises(TypeError, match=r"'dtype' parameter of one_hot must be a real numeric"):
        sa.one_hot("ACGT", dtype=dtype)
