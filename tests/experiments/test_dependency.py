"""Dependency maps against brute-force double mutants (a float64 model as judge) and the
contract: batch size, subsets, windows, shards, K targets, and resumable, fingerprinted files."""

from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest
import torch
from helpers import FLOAT32, assert_close
from models import basset_weights, keras_model, random_one_hot, torch_model

from seqattrib import SeqAttribWarning
from seqattrib.experiments.dependency import dependency_map

EYE = np.eye(4)


def _predict64(model64, nlc):
    """Outputs of the float64 torch model on (n, L, 4) sequences."""
    with torch.no_grad():
        x = torch.from_numpy(np.ascontiguousarray(nlc.transpose(0, 2, 1), dtype=np.float64))
        return model64(x).numpy()


def _all_single_mutants(seq):
    """The 4 L sequences with base b at position p, (p, b)-major: (4 L, L, 4)."""
    length = len(seq)
    mutants = np.repeat(seq[None], 4 * length, axis=0).reshape(length, 4, length, 4)
    for p in range(length):
        mutants[p, :, p, :] = EYE
    return mutants.reshape(4 * length, length, 4)


def brute_force(model64, nlc, targets):
    """(n, K, L, 4, L, 4): (f(x^ia,jb) - f(x^ia)) - (f(x^jb) - f(x)), every mutant predicted
    on its own row; 0 at reference bases and where i == j."""
    n, length, _ = nlc.shape
    out = np.zeros((n, len(targets), length, 4, length, 4))
    for s in range(n):
        seq = nlc[s]
        is_reference = ((seq.sum(-1) == 1)[:, None] & (seq == 1)).reshape(-1)
        reference = _predict64(model64, seq[None])[0, targets]
        singles = _predict64(model64, _all_single_mutants(seq))[:, targets] - reference
        for i in range(length):
            for a in range(4):
                if is_reference[4 * i + a]:
                    continue
                mutant = seq.copy()
                mutant[i] = EYE[a]
                doubles = _predict64(model64, _all_single_mutants(mutant))[:, targets]
                on_mutant = doubles - _predict64(model64, mutant[None])[0, targets]
                change = np.where(is_reference[:, None], 0.0, on_mutant - singles)
                change = change.reshape(length, 4, -1)
                change[i] = 0.0
                out[s, :, i, a] = change.transpose(2, 0, 1)
    return out


def _models(framework, length, layout, seed=0):
    weights = basset_weights(length, filters=8, seed=seed)
    model64 = torch_model("basset", weights, "NCL").double()
    if framework == "torch":
        return torch_model("basset", weights, layout), model64
    return keras_model("basset", weights, length, layout), model64


def _with_n(X, layout, sequence, position):
    X = X.copy()
    if layout == "NLC":
        X[sequence, position] = 0
    else:
        X[sequence, :, position] = 0
    return X


@pytest.fixture(scope="module")
def judged():
    """Two sequences (one with an N at position 7) of length 100 and their brute-force
    double-mutant effects under the float64 model, targets 0 and 2."""
    length = 100
    nlc = _with_n(random_one_hot(2, length, seed=41), "NLC", 1, 7)
    _, model64 = _models("torch", length, "NCL")
    return nlc, brute_force(model64, nlc, [0, 2])


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize(("framework", "layout"), [("torch", "NCL"), ("tensorflow", "NLC")])
def test_dependency_map_equals_brute_force_double_mutants(framework, layout, fast, judged):
    nlc, expected = judged
    length = nlc.shape[1]
    model, _ = _models(framework, length, layout)
    X = nlc if layout == "NLC" else np.ascontiguousarray(nlc.transpose(0, 2, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeqAttribWarning)  # the fast path is taken
        dependency, effects = dependency_map(
            model, X, target=[0, 2], return_effects=True, fast=fast
        )
    assert dependency.shape == (2, 2, length, length) and dependency.dtype == np.float32
    assert effects.shape == (2, 2, length, 4, length, 4) and effects.dtype == np.float32
    assert np.abs(expected).max() > 1e-2, "the judge's model has interactions to find"
    assert_close(effects, expected, FLOAT32)
    assert_close(dependency, np.abs(expected).max(axis=(3, 5)), FLOAT32)
    assert np.abs(effects[1, :, 7]).max(axis=(0, 2, 3)).min() > 0, "all 4 bases at an N"


@pytest.fixture(scope="module")
def small():
    """A basset-like torch model (its dense layer mixes all positions) and 3 sequences."""
    length = 30
    model, model64 = _models("torch", length, "NCL", seed=1)
    return model, model64, random_one_hot(3, length, seed=42, layout="NCL")


def test_l2_summary_is_the_norm_over_the_substitutions_of_each_pair(small):
    model, model64, X = small
    dependency = dependency_map(model, X, target=1, summary="l2", positions=(4, 16))
    assert dependency.shape == (3, 12, 12)
    full = brute_force(model64, X.transpose(0, 2, 1), [1])[:, 0, 4:16, :, 4:16]
    assert_close(dependency, np.sqrt(np.square(full).sum(axis=(2, 4))), FLOAT32)


@pytest.mark.parametrize("fast", [False, True])
def test_results_do_not_depend_on_batch_size_subset_window_or_shard(small, fast):
    model, _, X = small
    kwargs = dict(target=2, return_effects=True, positions=(3, 15), fast=fast)
    dependency, effects = dependency_map(model, X, batch_size=300, **kwargs)
    for batch_size in (1, 7, 10**6):
        other = dependency_map(model, X, batch_size=batch_size, **kwargs)
        assert_close(other[0], dependency, FLOAT32)
        assert_close(other[1], effects, FLOAT32)
    subset = dependency_map(model, X[[2, 0]], batch_size=13, **kwargs)
    assert_close(subset[1], effects[[2, 0]], FLOAT32)
    window = dependency_map(model, X, target=2, positions=(5, 9), return_effects=True, fast=fast)
    assert_close(window[1], effects[:, 2:6, :, 2:6], FLOAT32)
    assert_close(window[0], dependency[:, 2:6, 2:6], FLOAT32)
    shard = dependency_map(model, X, shard=(1, 2), batch_size=13, **kwargs)
    assert_close(shard[1], effects[1:], FLOAT32)  # shard 1 of 2 holds rows 1 and 2


def test_k_targets_in_one_call_equal_k_calls(small):
    model, _, X = small
    both = dependency_map(model, X, target=[2, 0], positions=(6, 14), summary="l2")
    for k, target in enumerate((2, 0)):
        one = dependency_map(model, X, target=target, positions=(6, 14), summary="l2")
        assert_close(both[:, k], one, FLOAT32)


def test_out_file_resumes_and_refuses_another_model(small, tmp_path):
    model, _, X = small
    kwargs = dict(target=[0, 1], positions=(2, 12), return_effects=True, max_cpu_sequences=1)
    expected = dependency_map(model, X, **kwargs)
    path = tmp_path / "dependency.h5"
    rows_seen = []
    forward = model.forward

    def failing(x):
        rows_seen.append(len(x))
        if sum(rows_seen) > 2 + 465 + 100:  # the probe, the first sequence and some more
            raise RuntimeError("interrupted")
        return forward(x)

    model.forward = failing
    try:
        with pytest.raises(RuntimeError, match="interrupted"):
            dependency_map(model, X, out=path, batch_size=50, **kwargs)
    finally:
        del model.forward
    with h5py.File(path, "r") as f:
        assert int(f.attrs["n_completed"]) == 1
    rows_seen.clear()
    model.forward = lambda x: rows_seen.append(len(x)) or forward(x)
    try:
        assert dependency_map(model, X, out=path, batch_size=50, **kwargs) == str(path)
    finally:
        del model.forward
    assert 2 * 465 <= sum(rows_seen) < 3 * 465, "the first sequence is not computed again"
    with h5py.File(path, "r") as f:
        assert int(f.attrs["n_completed"]) == 3
        assert_close(f["dependency"][:], expected[0], FLOAT32)
        assert_close(f["effects"][:], expected[1], FLOAT32)
    other, _ = _models("torch", 30, "NCL", seed=2)
    with pytest.raises(ValueError, match=r"'out'.*another model"):
        dependency_map(other, X, out=path, **kwargs)


def test_bad_parameters_are_refused(small):
    model, _, X = small
    with pytest.raises(ValueError, match=r"'summary'.*'max_abs' or 'l2'"):
        dependency_map(model, X, summary="max")
    with pytest.raises(ValueError, match=r"'positions'"):
        dependency_map(model, X, positions=(10, 40))
    with pytest.raises(TypeError, match=r"'return_effects'"):
        dependency_map(model, X, return_effects=1)


def test_finished_maps_waiting_on_the_device_are_bounded(small, monkeypatch):
    import seqattrib.experiments.dependency as dependency

    model, _, X = small
    expected = dependency_map(model, X, target=[0, 1], positions=(2, 12))
    seen = []
    run_job = dependency.run_job

    def spy(method, model, source, options):
        seen.append(options.max_cpu_sequences)
        return run_job(method, model, source, options)

    monkeypatch.setattr(dependency, "run_job", spy)
    table = 4 * 2 * (4 * 10) ** 2  # a (4P, 4P) float32 table per target, P = 10, K = 2
    monkeypatch.setattr(dependency, "DEVICE_BLOCK_BYTES", 2 * table + 1)
    got = dependency_map(model, X, target=[0, 1], positions=(2, 12))
    assert seen == [2]
    assert_close(got, expected, FLOAT32)


def test_shard_files_merge_into_the_full_run(small, tmp_path):
    from seqattrib.io import merge_tracks

    model, _, X = small
    kwargs = dict(target=[0, 1], positions=(3, 11), return_effects=True, batch_size=40)
    expected = dependency_map(model, X, **kwargs)
    shards = [
        dependency_map(model, X, shard=(i, 2), out=tmp_path / f"part{i}.h5", **kwargs)
        for i in (1, 0)
    ]
    merged = merge_tracks(shards, tmp_path / "merged.h5")
    with h5py.File(merged, "r") as f:
        assert int(f.attrs["n_completed"]) == 3
        assert_close(f["dependency"][:], expected[0], FLOAT32)
        assert_close(f["effects"][:], expected[1], FLOAT32)
