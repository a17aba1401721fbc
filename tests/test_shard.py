"""Sharded runs: 3 subprocess shards merged equal one process bit for bit; bad sets refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from seqattrib import demo
from seqattrib.cli import main
from seqattrib.io import read_tracks
from seqattrib.io.merge import merge_tracks
from seqattrib.shards import resolve_shard, shard_path

N = 10
#: EIG with 3 baselines x 5 points: 15 rows per sequence. With --batch-size 15 every batch is
#: one whole sequence in every process, so shards compute exactly what one process computes.
EIG = [
    "--method",
    "eig",
    "--n-baselines",
    "3",
    "--n-steps",
    "4",
    "--quadrature",
    "riemann_trapezoid",
    "--batch-size",
    "15",
    "--target",
    "0,2",
    "--quiet",
]


def _env():
    env = dict(os.environ)
    for key in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "RANK", "WORLD_SIZE"):
        env.pop(key, None)
    return env


@pytest.fixture(scope="module")
def fasta(tmp_path_factory):
    data = demo.load_data()
    path = tmp_path_factory.mktemp("shard") / "seqs.fa"
    path.write_text(
        "".join(
            f">{n}\n{s}\n" for n, s in zip(data["names"][:N], data["sequences"][:N], strict=True)
        )
    )
    return path


_STALL_AFTER_FIRST_BLOCK = """
import runpy, time
from seqattrib.io import tracks
write = tracks.TrackWriter.write
def write_then_stall(self, start, block):
    write(self, start, block)
    time.sleep(600)
tracks.TrackWriter.write = write_then_stall
runpy.run_module("seqattrib", run_name="__main__", alter_sys=True)
"""


def _explain(fasta, out, extra=(), background=False, stall=False):
    argv = [
        sys.executable,
        "-m",
        "seqattrib",
        "explain",
        "--model",
        "seqattrib.demo:torch_model",
        "--fasta",
        str(fasta),
        *EIG,
        "--out",
        str(out),
        *extra,
    ]
    if stall:  # stops after its first written block, so that it is killed mid-run
        argv[1:3] = ["-c", _STALL_AFTER_FIRST_BLOCK]
    if background:
        return subprocess.Popen(argv, env=_env(), stderr=subprocess.PIPE)
    result = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


@pytest.fixture(scope="module")
def single(fasta, tmp_path_factory):
    out = tmp_path_factory.mktemp("single") / "single.h5"
    assert (
        main(
            [
                "explain",
                "--model",
                "seqattrib.demo:torch_model",
                "--fasta",
                str(fasta),
                *EIG,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return read_tracks(out)


@pytest.fixture(scope="module")
def shards(fasta, tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    procs = [
        _explain(fasta, folder / "t.h5", ["--shard", f"{i}/3"], background=True) for i in range(3)
    ]
    for proc in procs:
        assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()[-2000:]
    return [folder / f"t.shard-{i}-of-3.h5" for i in range(3)]


def test_three_shards_merge_to_the_single_process_output_bit_for_bit(shards, single, tmp_path):
    assert [read_tracks(p).attrs["n_completed"] for p in shards] == [3, 3, 4]
    merged = read_tracks(merge_tracks(list(reversed(shards)), tmp_path / "merged.h5"))
    np.testing.assert_array_equal(merged.attributions, single.attributions)
    np.testing.assert_array_equal(merged.sequences, single.sequences)
    assert merged.settings == single.settings
    assert merged.attrs["n_completed"] == N


def test_missing_duplicated_or_mismatched_shards_are_refused(shards, fasta, tmp_path):
    with pytest.raises(ValueError, match=r"no file for shard\(s\) \[1\]"):
        merge_tracks([shards[0], shards[2]], tmp_path / "m.h5")
    with pytest.raises(ValueError, match=r"shard 0 more than once"):
        merge_tracks([shards[0], shards[0], shards[1], shards[2]], tmp_path / "m.h5")
    other = tmp_path / "other.h5"
    _explain(fasta, other, ["--shard", "1/3", "--n-steps", "5"])
    with pytest.raises(ValueError, match=r"same settings.*n_steps"):
        merge_tracks([shards[0], tmp_path / "other.shard-1-of-3.h5", shards[2]], tmp_path / "m.h5")
    plain = tmp_path / "plain.h5"
    assert (
        main(
            [
                "explain",
                "--model",
                "seqattrib.demo:torch_model",
                "--fasta",
                str(fasta),
                "--method",
                "saliency",
                "--out",
                str(plain),
                "--quiet",
            ]
        )
        == 0
    )
    with pytest.raises(ValueError, match=r"not a shard"):
        merge_tracks([plain], tmp_path / "m.h5")
    (tmp_path / "exists.h5").write_text("")
    with pytest.raises(FileExistsError):
        merge_tracks(shards, tmp_path / "exists.h5")


def test_incomplete_shard_is_refused_and_a_killed_shard_resumes(fasta, single, tmp_path):
    out = tmp_path / "k.h5"
    shard = tmp_path / "k.shard-2-of-3.h5"
    extra = ["--shard", "2/3", "--max-cpu-sequences", "1"]
    proc = _explain(fasta, out, extra, background=True, stall=True)
    deadline = time.time() + 300
    done = 0
    while proc.poll() is None and time.time() < deadline and done < 1:
        time.sleep(0.01)
        try:
            with h5py.File(shard, "r", libver="latest", swmr=True) as f:
                done = int(f.attrs["n_completed"])
        except (OSError, KeyError):
            pass
    assert proc.poll() is None, "the shard ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 1 <= read_tracks(shard).attrs["n_completed"] < 4
    with pytest.raises(ValueError, match=r"complete shards.*resumes"):
        merge_tracks([shard], tmp_path / "m.h5")
    _explain(fasta, out, ["--shard", "2/3", "--max-cpu-sequences", "1"])
    resumed = read_tracks(shard)
    np.testing.assert_array_equal(resumed.attributions, single.attributions[6:])


def test_launch_runs_one_worker_per_device_then_merges(fasta, single, tmp_path):
    out = tmp_path / "launched.h5"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "seqattrib",
            "launch",
            "--devices",
            "cpu,cpu",
            "explain",
            "--model",
            "seqattrib.demo:torch_model",
            "--fasta",
            str(fasta),
            *EIG,
            "--out",
            str(out),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    np.testing.assert_array_equal(read_tracks(out).attributions, single.attributions)


def test_shard_from_the_scheduler_environment():
    assert resolve_shard("2/5", {}) == (2, 5)
    assert resolve_shard(None, {}) is None
    slurm = {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1"}
    assert resolve_shard(None, slurm) == (3, 4)
    assert resolve_shard(None, {"RANK": "1", "WORLD_SIZE": "2"}) == (1, 2)
    assert resolve_shard(None, {"RANK": "0", "WORLD_SIZE": "1"}) is None
    with pytest.raises(ValueError, match=r"'--shard'"):
        resolve_shard("3/3", {})
    assert shard_path("out/t.h5", 1, 3) == "out/t.shard-1-of-3.h5"
    assert shard_path("out/part-{shard}.h5", 1, 3) == "out/part-1.h5"
