"""Long inputs: Enformer's 196,608 bp on the CPU, with host memory bounded by the sizes.

The model is a few-channel conv net whose stem downsamples 128x to 1,536 bins, as Enformer's
does (``transformer_models.LongInputNet``). Each measurement runs in a fresh Linux process that
reads its own peak resident memory over the run (``VmHWM`` of ``/proc/self/status``, reset
through ``/proc/self/clear_refs`` just before: unlike ``getrusage``'s lifetime maximum, the
making of X and the warm-up do not hide the run's peak), after a warm-up on a short input (lazy
imports, kernels, the HDF5 library), with X already in memory.

The bound, in bytes, with S = 16 L (one sequence as float32), R = K S (its tracks for K
targets), A the measured peak of one bare forward and backward pass of the model at batch 1:

    A                                (the model's activations at batch 1)
    + c (1 + B) S                    (an input chunk of c sequences and their B baselines)
    + 4 h R                          (a host block of h sequences: on the device, its copy on
                                      the host, the tracks writer's pending rows, one chunk
                                      being compressed)
    + 32 MiB                         (allocator arenas, the HDF5 chunk cache and metadata)

with c and h from ``seqattrib.engine.blocks`` for ``max_cpu_sequences``. Attributions stream
to the tracks file: memory does not grow with the number of sequences.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformer_models as tm
from helpers import FLOAT32, assert_close
from models import random_one_hot

import seqattrib as sa
from seqattrib.engine import blocks

REPO = Path(__file__).resolve().parents[1]
L = tm.LONG_LENGTH
MiB = 2**20
K = 2  # targets

SCRIPT = r"""
import json, sys
import numpy as np, torch
import seqattrib as sa, transformer_models as tm

torch.set_num_threads(1)
mode, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
L = tm.LONG_LENGTH
model = tm.long_input_net(0)
f = tm.central_bins(L // tm.LONG_POOL, 16)
rng = np.random.default_rng(0)
X = np.ascontiguousarray(np.eye(4, dtype=np.float32)[rng.integers(0, 4, (n, L))].transpose(0, 2, 1))
short = X[:1, :, :4096]
sa.saliency(model, short, output_fn=f, batch_size=1, out=out + ".warm1.h5")
sa.expected_integrated_gradients(model, short, output_fn=f, baselines="random", n_baselines=2,
                                 n_steps=1, batch_size=1, out=out + ".warm2.h5")
def status(field):
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(field + ":"))
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # the high-water mark restarts from here: X's making and the warm-up are out
before = status("VmRSS")
run = dict(target=[0, 1], output_fn=f, batch_size=1, max_cpu_sequences=2, out=out)
if mode == "bare":
    x = torch.from_numpy(X[:1]).requires_grad_(True)
    f(model(x))[:, 0].sum().backward()
elif mode == "saliency":
    sa.saliency(model, X, **run)
else:
    sa.expected_integrated_gradients(model, X, baselines="random", n_baselines=4, n_steps=1, **run)
after = status("VmHWM")
print(json.dumps({"peak_bytes": (after - before) * 1024}))
"""


def _peak(mode: str, n: int, folder: Path) -> int:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests")])
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(n), str(folder / f"{mode}-{n}.h5")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return int(json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes"])


def _bound(activations: int, rows_per_sequence: int, n_baselines: int) -> int:
    S = 16 * L
    R = K * S
    c = blocks.input_chunk(2, rows_per_sequence, S)
    h = blocks.host_block(2, R)
    return activations + c * (1 + n_baselines) * S + 4 * h * R + 32 * MiB


@pytest.fixture(scope="module")
def activations(tmp_path_factory: pytest.TempPathFactory) -> int:
    return _peak("bare", 1, tmp_path_factory.mktemp("bare"))


@pytest.mark.slow
def test_saliency_at_196608_bp_streams_within_the_bound(activations: int, tmp_path: Path) -> None:
    few, many = _peak("saliency", 2, tmp_path), _peak("saliency", 16, tmp_path)
    bound = _bound(activations, 1, 0)
    assert few <= bound and many <= bound, (few / MiB, many / MiB, bound / MiB)
    # a copy of every sequence's tracks would add 14 R; streaming adds nothing per sequence
    assert many - few < 7 * K * 16 * L, (few / MiB, many / MiB)
    with __import__("h5py").File(tmp_path / "saliency-16.h5") as f:
        assert f["attributions"].shape == (16, K, 4, L)
        assert f.attrs["n_completed"] == 16


@pytest.mark.slow
def test_eig_at_196608_bp_stays_within_the_bound(activations: int, tmp_path: Path) -> None:
    peak = _peak("eig", 4, tmp_path)
    bound = _bound(activations, 4, 4)
    assert peak <= bound, (peak / MiB, bound / MiB)


def test_an_input_chunk_of_long_sequences_is_bounded_in_bytes(monkeypatch) -> None:
    """EIG prepares a chunk of sequences (and their baselines) at a time: at 196,608 bp and 4
    rows per sequence, 64 MiB of rows is 5 sequences, not all of X."""
    from seqattrib.attribution import gradient_kernel

    sizes: list[int] = []
    prepare = gradient_kernel.GradientKernel.prepare

    def spy(self, x, first):
        sizes.append(len(x))
        return prepare(self, x, first)

    monkeypatch.setattr(gradient_kernel.GradientKernel, "prepare", spy)
    model = tm.long_input_net(0)
    X = random_one_hot(6, L, seed=2, layout="NCL")
    f = tm.central_bins(L // tm.LONG_POOL, 16)
    sa.expected_integrated_gradients(
        model, X, output_fn=f, baselines="random", n_baselines=4, n_steps=1, batch_size=4
    )
    assert max(sizes) == blocks.INPUT_BYTES // (4 * 16 * L) == 5 and sum(sizes) == 6


def test_the_probe_starts_long_inputs_at_one_row_on_a_cpu() -> None:
    from seqattrib.engine import batching

    assert batching.first_size(False, 16 * L) == 1
    assert batching.first_size(False, 16 * 524_288) == 1
    assert batching.first_size(False, 16 * 2_114) == batching.CPU_START == 16
    assert batching.first_size(True, 16 * L) == batching.ACCELERATOR_START


# ------------------------------------------------------------------------ out of memory
#: What torch raises when an allocation fails: on a GPU, and on the host (a plain RuntimeError).
_OUT_OF_MEMORY = {
    "device": lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"),
    "host": lambda: RuntimeError(
        "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 21474836480 bytes. Error code 12 (Cannot allocate memory)"
    ),
}


class _RefusesLargeBatches(torch.nn.Module):
    """A model that raises torch's out-of-memory error above 2 rows, as a device would."""

    def __init__(self, where: str = "device") -> None:
        super().__init__()
        self.inner = tm.long_input_net(0, channels=3)
        self.sizes: list[int] = []
        self.error = _OUT_OF_MEMORY[where]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.sizes.append(len(x))
        if len(x) > 2:
            raise self.error()
        return self.inner(x)


@pytest.mark.filterwarnings("ignore:fast ISM is not available")  # its reader ran out too
@pytest.mark.parametrize("method", ["saliency", "integrated_gradients", "ism", "deep_lift_shap"])
@pytest.mark.parametrize("where", list(_OUT_OF_MEMORY))
def test_the_probe_backs_off_when_the_device_runs_out_of_memory(method: str, where: str) -> None:
    from seqattrib.engine import batching

    batching.clear_cache()
    model = _RefusesLargeBatches(where)
    X = random_one_hot(3, 4096, seed=3, layout="NCL")
    f = tm.central_bins(4096 // tm.LONG_POOL, 8)
    kwargs = {
        "saliency": {},
        "integrated_gradients": {"n_steps": 3},
        "ism": {"positions": (2040, 2046)},
        "deep_lift_shap": {"n_baselines": 3},
    }[method]
    run = getattr(sa, method)
    probed = run(model, X, target=[0, 1], output_fn=f, batch_size="auto", **kwargs)
    assert max(model.sizes) > 2  # it was asked for more than fits, and backed off
    one = run(model, X, target=[0, 1], output_fn=f, batch_size=1, **kwargs)
    assert_close(probed, one, FLOAT32)


# ------------------------------------------------------------------- activation checkpointing
@pytest.mark.parametrize("method", ["saliency", "integrated_gradients"])
def test_a_models_own_activation_checkpointing_gives_the_same_attributions(method: str) -> None:
    X = random_one_hot(2, 8192, seed=4, layout="NCL")
    f = tm.central_bins(8192 // tm.LONG_POOL, 16)
    run = getattr(sa, method)
    plain = run(tm.long_input_net(0), X, target=[0, 1], output_fn=f, batch_size=2)
    checkpointed = tm.long_input_net(0, checkpointing=True)
    assert_close(run(checkpointed, X, target=[0, 1], output_fn=f, batch_size=2), plain, FLOAT32)
    assert np.abs(plain).max() > 0


@pytest.mark.filterwarnings("ignore:torch.utils.checkpoint")
def test_enformers_own_checkpointing_gives_the_same_attributions() -> None:
    X = random_one_hot(2, tm.ENFORMER_LENGTH, seed=4)
    f = tm.central_bins(tm.ENFORMER_BINS, 4, head="human")
    plain = sa.integrated_gradients(tm.enformer_small(0), X, output_fn=f, n_steps=4)
    checkpointed = tm.enformer_small(0, checkpointing=True)
    assert_close(sa.integrated_gradients(checkpointed, X, output_fn=f, n_steps=4), plain, FLOAT32)
