"""deep_lift_shap on a BPNet as bpnet-lite builds it (random weights, 2,114 -> 1,000), against
bpnet-lite's own DeepSHAP (tangermeme's ``deep_lift_shap`` with bpnet-lite's nonlinearities
registered) with the same references:

- counts (``CountWrapper``): to 1e-5;
- profile (``ProfileWrapper``, the logits times their softmax under the rescale rule as one
  nonlinearity): to 1e-4. Before the rescale block, ``deep_lift_shap`` refused this model
  (a softmax on the way to its outputs).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from deeplift_models import dinucleotide_references
from helpers import assert_close
from models import random_one_hot

import seqattrib as sa

bpnetlite_bpnet = pytest.importorskip("bpnetlite.bpnet")
bpnetlite_attribute = pytest.importorskip("bpnetlite.attribute")

N_REFERENCES = 5


def _bpnet(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = bpnetlite_bpnet.BPNet(
        n_filters=16, n_layers=4, n_outputs=2, n_control_tracks=0, trimming=557, verbose=False
    )
    with torch.no_grad():  # larger weights than the default initialisation: contrast
        for p in model.parameters():
            p.mul_(2.0)
    return model.eval()


def _inputs(n: int = 3, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    X = random_one_hot(n, 2114, seed=seed, layout="NCL")
    return X, dinucleotide_references(X, N_REFERENCES, 0, "NCL")


def _bpnet_lite(model: torch.nn.Module, X: np.ndarray, refs: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = bpnetlite_attribute.deep_lift_shap(
            model,
            torch.from_numpy(X),
            references=torch.from_numpy(refs),
            device="cpu",
            batch_size=8,
        )
    return out.numpy()


def _ours(model: torch.nn.Module, X: np.ndarray, refs: np.ndarray) -> tuple[np.ndarray, ...]:
    return sa.deep_lift_shap(  # type: ignore[return-value]
        model,
        X,
        target=0,
        baselines=refs,
        n_baselines=N_REFERENCES,
        alphabet_axis=1,
        batch_size=7,
        return_delta=True,
    )


def test_counts_equal_bpnet_lite():
    model = _bpnet()
    X, refs = _inputs()
    counts = bpnetlite_bpnet.CountWrapper(model)
    ours, delta = _ours(counts, X, refs)
    assert_close(ours, _bpnet_lite(counts, X, refs), 1e-5)
    with torch.no_grad():
        f_x = counts(torch.from_numpy(X))[:, 0].numpy()
        f_r = counts(torch.from_numpy(refs.reshape(-1, 4, 2114)))[:, 0].numpy()
    spread = np.abs(f_x - f_r.reshape(len(X), -1).mean(1))
    assert np.all(np.abs(delta) <= 1e-3 * spread + 1e-5)


def test_profile_wrapper_equals_bpnet_lite():
    model = _bpnet()
    X, refs = _inputs()
    profile = bpnetlite_bpnet.ProfileWrapper(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the block's secants sum to the change of the sum
        ours, delta = _ours(profile, X, refs)
    expected = _bpnet_lite(profile, X, refs)
    with torch.no_grad():
        f_x = profile(torch.from_numpy(X))[:, 0].numpy()
        f_r = profile(torch.from_numpy(refs.reshape(-1, 4, 2114)))[:, 0].numpy()
    spread = np.abs(f_x - f_r.reshape(len(X), -1).mean(1))
    assert np.all(np.abs(delta) <= 1e-3 * spread + 1e-5)
    assert np.abs(expected).max() > 1e-3  # the profile head has contributions to compare
    assert_close(ours, expected, 1e-4)
    # the wrapper's module is run as itself again after the call
    assert "forward" not in profile.scaling.__dict__
