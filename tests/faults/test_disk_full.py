"""A full disk (or an I/O error) while writing tracks, merging shards or exporting: a clear
one-line error, a file that claims only complete rows, no temporary file left, no crash, and a
rerun that resumes once space returns.

Two ways in: a real full disk (a small tmpfs, where this process may mount one) and injected
``ENOSPC``/``EIO`` failures of h5py and zip writes (everywhere).
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import zipfile

import h5py
import numpy as np
import pytest
from _faults import TESTS, leftovers, tmpfs_mounts, worker_env
from models import convnet_weights, random_one_hot, torch_model

import seqattrib as sa
from seqattrib import demo
from seqattrib.cli import main
from seqattrib.io import export_bigwig, export_modisco, read_tracks
from seqattrib.io.merge import merge_tracks

N, LENGTH = 400, 200
KWARGS = dict(target=1, batch_size=16, max_cpu_sequences=16)
NO_SPACE = "No space left on device"

WRITER = """
import json, sys
sys.path.insert(0, {tests!r})
import torch, models, seqattrib as sa
from seqattrib.io import read_tracks
torch.set_num_threads(1)
model = models.torch_model("convnet", models.convnet_weights(n_outputs=3), "NCL")
X = models.random_one_hot({n}, {length}, seed=21, layout="NCL")
try:
    sa.saliency(model, X, out={path!r}, **{kwargs!r})
    error = None
except OSError as exc:
    error = f"{{type(exc).__name__}}: {{exc}}"
done = read_tracks({path!r}).attrs["n_completed"]  # the same process reads the file
print(json.dumps(dict(error=error, done=done)))
"""


@pytest.fixture
def tmpfs(tmp_path):
    with tmpfs_mounts(tmp_path) as mount:
        yield mount


@pytest.fixture(scope="module")
def model():
    return torch_model("convnet", convnet_weights(n_outputs=3), "NCL")


@pytest.fixture(scope="module")
def X():
    return random_one_hot(N, LENGTH, seed=21, layout="NCL")


@pytest.fixture(scope="module")
def reference(model, X):
    return sa.saliency(model, X, **KWARGS)


def _one_line(message: str) -> str:
    assert "\n" not in message.strip(), message
    return message


def test_explain_on_a_full_disk_then_resume(tmpfs, model, X, reference):
    fs = tmpfs("400k")
    path = fs.path / "t.h5"
    code = WRITER.format(tests=str(TESTS), n=N, length=LENGTH, path=str(path), kwargs=KWARGS)
    done = subprocess.run(
        [sys.executable, "-c", code], env=worker_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]  # no crash, also when reading after it
    report = json.loads(done.stdout.strip().splitlines()[-1])
    error = _one_line(report["error"])
    assert error.startswith("OSError: The 'out' parameter of saliency"), error
    assert NO_SPACE in error and "rerun the same command to resume" in error
    assert 0 < report["done"] < N
    partial = read_tracks(path)
    np.testing.assert_array_equal(partial.attributions, reference[: report["done"]])
    assert leftovers(fs.path) == []
    fs.resize("4m")
    sa.saliency(model, X, out=path, **KWARGS)
    np.testing.assert_array_equal(read_tracks(path).attributions, reference)
    assert leftovers(fs.path) == []


def test_a_disk_full_before_the_file_exists_leaves_nothing(tmpfs, model, X, reference):
    fs = tmpfs("1m")
    ballast = fs.fill(leave=4096)
    path = fs.path / "t.h5"
    with pytest.raises(OSError, match=rf"'out' parameter of saliency.*{NO_SPACE}") as info:
        sa.saliency(model, X, out=path, **KWARGS)
    _one_line(str(info.value))
    assert sorted(p.name for p in fs.path.iterdir()) == [ballast.name]
    ballast.unlink()
    fs.resize("4m")
    sa.saliency(model, X, out=path, **KWARGS)
    np.testing.assert_array_equal(read_tracks(path).attributions, reference)


class _Failing:
    """Make the ``n``-th call of ``cls.name`` (and every later one) raise ``error``."""

    def __init__(self, monkeypatch, cls, name, n, error):
        original = getattr(cls, name)
        self.calls = 0

        def failing(*args, **kwargs):
            self.calls += 1
            if self.calls >= n:
                raise error
            return original(*args, **kwargs)

        monkeypatch.setattr(cls, name, failing)


H5_ERRORS = {
    "ENOSPC": RuntimeError(
        "Unable to synchronously flush file (file write failed: time = now, filename = 't.h5', "
        "file descriptor = 3, errno = 28, error message = 'No space left on device', buf = 0x1, "
        "total write size = 51159, bytes this sub-write = 51159, offset = 614400)"
    ),
    "EIO": OSError(errno.EIO, "Input/output error"),
}


@pytest.mark.parametrize("kind", sorted(H5_ERRORS))
def test_injected_write_failures_keep_complete_rows_and_resume(
    monkeypatch, tmp_path, model, X, reference, kind
):
    path = tmp_path / "t.h5"
    with monkeypatch.context() as patch:
        _Failing(patch, h5py.File, "flush", 9, H5_ERRORS[kind])
        with pytest.raises(OSError, match=r"'out' parameter of saliency") as info:
            sa.saliency(model, X, out=path, **KWARGS)
    message = _one_line(str(info.value))
    assert (NO_SPACE if kind == "ENOSPC" else "Input/output error") in message
    assert info.value.errno == (errno.ENOSPC if kind == "ENOSPC" else errno.EIO)
    partial = read_tracks(path)
    assert partial.attrs["n_completed"] == 64  # 4 commits of 16 rows (2 flushes each)
    np.testing.assert_array_equal(partial.attributions, reference[:64])
    assert leftovers(tmp_path) == []  # the lock went with the failed run
    sa.saliency(model, X, out=path, **KWARGS)
    np.testing.assert_array_equal(read_tracks(path).attributions, reference)
    assert leftovers(tmp_path) == []


# --------------------------------------------------------------------------- merge
@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    data = demo.load_data()
    fasta = folder / "seqs.fa"
    fasta.write_text("".join(f">s{i}\n{s}\n" for i, s in enumerate(data["sequences"][:30])))
    argv = ["explain", "--model", "seqattrib.demo:torch_model", "--fasta", str(fasta)]
    argv += ["--method", "saliency", "--batch-size", "1", "--quiet"]
    for i in range(2):
        assert main([*argv, "--out", str(folder / "t.h5"), "--shard", f"{i}/2"]) == 0
    paths = [folder / f"t.shard-{i}-of-2.h5" for i in range(2)]
    return paths, read_tracks(merge_tracks(paths, folder / "merged.h5"))


def test_merge_on_a_full_disk_then_again(tmpfs, shards):
    paths, expected = shards
    fs = tmpfs("48k")
    out = fs.path / "merged.h5"
    with pytest.raises(OSError, match=rf"'out' parameter of merge_tracks.*{NO_SPACE}") as info:
        merge_tracks(paths, out)
    _one_line(str(info.value))
    assert list(fs.path.iterdir()) == []
    fs.resize("4m")
    merged = read_tracks(merge_tracks(paths, out))
    np.testing.assert_array_equal(merged.attributions, expected.attributions)
    assert leftovers(fs.path) == []


def test_injected_merge_failure_leaves_no_partial_file(monkeypatch, tmp_path, shards):
    paths, expected = shards
    out = tmp_path / "merged.h5"
    with monkeypatch.context() as patch:
        failing = OSError(errno.ENOSPC, "No space left on device")
        _Failing(patch, h5py.Dataset, "__setitem__", 3, failing)
        with pytest.raises(OSError, match=NO_SPACE):
            merge_tracks(paths, out)
    assert list(tmp_path.iterdir()) == []
    np.testing.assert_array_equal(
        read_tracks(merge_tracks(paths, out)).attributions, expected.attributions
    )  # noqa: E501


# --------------------------------------------------------------------------- export
@pytest.fixture(scope="module")
def hypothetical(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export")
    model = torch_model("convnet", convnet_weights(n_outputs=3), "NLC")
    X = random_one_hot(300, LENGTH, seed=22)
    start = np.arange(300) * LENGTH
    regions = type("R", (), dict(chrom=["chr1"] * 300, start=start, end=start + LENGTH))
    path = sa.integrated_gradients(
        model, X, target=[0, 1], multiply_by_inputs=False, n_steps=2, out=folder / "t.h5",
        regions=regions,
    )  # fmt: skip
    sizes = folder / "sizes"
    sizes.write_text(f"chr1\t{300 * LENGTH}\n")
    return path, sizes


def test_modisco_export_on_a_full_disk_then_again(tmpfs, hypothetical):
    path, _ = hypothetical
    fs = tmpfs("200k")
    with pytest.raises(OSError, match=rf"'out' parameter of export_modisco.*{NO_SPACE}") as e:
        export_modisco(path, fs.path)
    _one_line(str(e.value))
    assert leftovers(fs.path) == []
    fs.resize("8m")
    files = export_modisco(path, fs.path, overwrite=True)
    assert np.load(files[1])["arr_0"].shape == (300, 4, LENGTH)
    assert leftovers(fs.path) == []


def test_injected_export_failure_leaves_no_partial_file(monkeypatch, tmp_path, hypothetical):
    path, _ = hypothetical
    with monkeypatch.context() as patch:
        failing = OSError(errno.ENOSPC, "No space left on device")
        _Failing(patch, zipfile._ZipWriteFile, "write", 2, failing)
        with pytest.raises(OSError, match=NO_SPACE):
            export_modisco(path, tmp_path)
    assert leftovers(tmp_path) == [] and list(tmp_path.iterdir()) == []


BIGWIG = """
import sys
from seqattrib.io import export_bigwig
try:
    export_bigwig({path!r}, {outdir!r}, {sizes!r})
except OSError as exc:
    print(exc)
"""


def test_bigwig_export_on_a_full_disk_is_refused_not_stuck(tmpfs, hypothetical):
    pytest.importorskip("pyBigWig")
    path, sizes = hypothetical
    fs = tmpfs("64k")
    code = BIGWIG.format(path=str(path), outdir=str(fs.path), sizes=str(sizes))
    done = subprocess.run(  # libBigWig retries forever on a full disk: never let it start
        [sys.executable, "-c", code], env=worker_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    message = _one_line(done.stdout)
    assert "'out' parameter of write_bigwig must be a file on a disk with room" in message
    assert list(fs.path.iterdir()) == []
    fs.resize("8m")
    assert len(export_bigwig(path, fs.path, sizes)) == 2
