"""torch never runs more threads than the CPUs the process may use (affinity, cgroup quota)."""

from __future__ import annotations

import models
import pytest
import torch

import seqattrib as sa
from seqattrib._threads import affinity_cpus, available_cpus
from seqattrib.backends.torch import core as torch_core


@pytest.mark.parametrize(
    ("files", "cap"),
    [
        ({"cpu.max": "150000 100000\n"}, 2),  # cgroup v2, 1.5 CPUs: rounded up
        ({"cpu.max": "50000 100000\n"}, 1),
        ({"cpu.max": "max 100000\n"}, None),  # no quota
        ({"cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # v1
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),
    ],
)
def test_available_cpus_is_the_affinity_capped_by_the_quota(tmp_path, files, cap):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    affinity = affinity_cpus()
    assert available_cpus(tmp_path) == (affinity if cap is None else min(affinity, cap))


def test_torch_runs_with_at_most_one_thread_per_available_cpu(monkeypatch):
    """torch set to 2 threads where the process may use 1 CPU: the call runs with 1 thread,
    says so, and gives the user's setting back."""
    seen = []

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = models.torch_model("convnet", models.convnet_weights(), "NLC")

        def forward(self, x):
            seen.append(torch.get_num_threads())
            return self.inner(x)

    monkeypatch.setattr(torch_core, "available_cpus", lambda: 1)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.warns(sa.SeqAttribWarning, match=r"torch is set to 2 threads .* 1 CPUs"):
            sa.saliency(Counting(), models.random_one_hot(3, 12), batch_size=2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {1}


def test_tensorflow_under_a_cpu_quota_says_how_to_set_its_threads(monkeypatch):
    """TensorFlow's pools cannot be resized once it runs: with its default thread count and a
    quota below the CPUs it sees, a call says which setting to make."""
    tf = pytest.importorskip("tensorflow")
    from seqattrib.backends.tensorflow import core as tensorflow_core

    if affinity_cpus() < 2:
        pytest.skip("needs two CPUs to simulate a quota of one")
    monkeypatch.setattr(tensorflow_core, "available_cpus", lambda: 1)
    monkeypatch.setattr(tf.config.threading, "get_intra_op_parallelism_threads", lambda: 0)
    model = models.keras_model("convnet", models.convnet_weights(), 12, "NLC")
    with pytest.warns(sa.SeqAttribWarning, match=r"set_intra_op_parallelism_threads\(1\)"):
        sa.saliency(model, models.random_one_hot(3, 12), batch_size=2)
