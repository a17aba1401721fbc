"""Files every HDF5 since 1.10 reads: the format versions a file carries, and files written
and read across h5py builds (HDF5 1.14 and HDF5 2.x) in cached test venvs."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import venv
from pathlib import Path

import h5py
import numpy as np
import pytest
from _faults import REPO, TESTS
from models import convnet_weights, random_one_hot, torch_model

import seqattrib as sa
from seqattrib.io import read_tracks
from seqattrib.io.hdf5 import lookup3
from seqattrib.io.merge import merge_tracks

#: The newest message versions HDF5 1.10 reads (superblock 3 is what SWMR needs).
HDF5_110 = {"superblock": 3, "layout": 4, "datatype": 3, "attribute": 3, "fill value": 3}
_MESSAGES = {0x03: "datatype", 0x05: "fill value", 0x08: "layout", 0x0C: "attribute"}


def format_versions(path: Path) -> dict[str, int]:
    """The highest version of the superblock and of each kind of object header message that a
    file holds, read from its bytes (version 2 object headers: what HDF5 1.10 bounds write)."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89HDF\r\n\x1a\n", "no superblock at the start"
    found = {"superblock": data[8]}

    def messages(start: int, end: int, creation_order: bool) -> None:
        at = start
        while at + 4 <= end:
            kind, size = data[at], struct.unpack_from("<H", data, at + 1)[0]
            body = at + 4 + (2 if creation_order else 0)
            if kind == 0x10:  # continuation: another block of messages
                offset, length = struct.unpack_from("<QQ", data, body)
                assert data[offset : offset + 4] == b"OCHK"
                messages(offset + 4, offset + length - 4, creation_order)
            elif kind in _MESSAGES and size:
                version = data[body] >> 4 if kind == 0x03 else data[body]
                name = _MESSAGES[kind]
                found[name] = max(found.get(name, 0), version)
            at = body + size

    at = data.find(b"OHDR")
    while at >= 0:
        flags = data[at + 5]
        head = at + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 0x03)
        size = int.from_bytes(data[head : head + width], "little")
        end = head + width + size
        checksum = int.from_bytes(data[end : end + 4], "little")
        if data[at + 4] == 2 and checksum == lookup3(data[at:end]):  # a real header
            messages(head + width, end, bool(flags & 0x04))
        at = data.find(b"OHDR", at + 4)
    return found


def _check_readable_by_hdf5_110(path: Path) -> None:
    versions = format_versions(path)
    assert "layout" in versions, versions
    for name, version in versions.items():
        assert version <= HDF5_110[name], f"{path.name}: {name} version {version}"


@pytest.fixture(scope="module")
def model():
    return torch_model("convnet", convnet_weights(n_outputs=3), "NCL")


def test_every_file_written_carries_format_versions_hdf5_110_reads(model, tmp_path):
    X = random_one_hot(9, 24, seed=1, layout="NCL")
    regions = type("R", (), dict(chrom=["c"] * 9, start=np.arange(9), end=np.arange(9) + 24))
    written = sa.integrated_gradients(
        model, X, target=[0, 1], return_delta=True, out=tmp_path / "t.h5", regions=regions
    )
    _check_readable_by_hdf5_110(Path(written))
    with h5py.File(written, "r") as f:  # closed cleanly: no SWMR reader needed
        assert f.attrs["n_completed"] == 9


def test_merged_files_carry_format_versions_hdf5_110_reads(tmp_path):
    from seqattrib import demo
    from seqattrib.cli import main

    data = demo.load_data()
    fasta = tmp_path / "s.fa"
    fasta.write_text("".join(f">s{i}\n{s}\n" for i, s in enumerate(data["sequences"][:4])))
    argv = ["explain", "--model", "seqattrib.demo:torch_model", "--fasta", str(fasta)]
    argv += ["--method", "saliency", "--quiet", "--out", str(tmp_path / "t.h5")]
    for i in range(2):
        assert main([*argv, "--shard", f"{i}/2"]) == 0
    shards = [tmp_path / f"t.shard-{i}-of-2.h5" for i in range(2)]
    _check_readable_by_hdf5_110(merge_tracks(shards, tmp_path / "m.h5"))


# --------------------------------------------------------------------------- h5py builds
#: h5py releases and the HDF5 they bundle: the oldest format family still common on
#: clusters, and the newest (whose "latest" format HDF5 1.14 cannot read).
BUILDS = {"3.14.0": "1.14", "3.16.0": "2.0"}
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "seqattrib-test-venvs"

WRITE = """
import sys
sys.path[:0] = [{repo!r}, {tests!r}]
import h5py, numpy as np, torch, models, seqattrib as sa
torch.set_num_threads(1)
model = models.torch_model("convnet", models.convnet_weights(n_outputs=3), "NCL")
X = models.random_one_hot(9, 24, seed=2, layout="NCL")
sa.saliency(model, X, target=[0, 2], out=sys.argv[1])
print(h5py.version.hdf5_version)
"""
READ = """
import json, sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    done = int(f.attrs["n_completed"])
    print(json.dumps(dict(hdf5=h5py.version.hdf5_version, done=done,
                          values=f["attributions"][:done].astype(float).tolist())))
"""


def _python(version: str) -> str | None:
    """A Python whose h5py is ``version``: this one, or a cached venv built with pip (which
    sees this environment's other packages); None where it cannot be built."""
    if h5py.__version__ == version:
        return sys.executable
    folder = CACHE / f"py{sys.version_info.major}{sys.version_info.minor}-h5py-{version}"
    python = folder / "bin" / "python"
    check = [str(python), "-c", "import h5py; print(h5py.__version__)"]

    def built() -> bool:
        done = subprocess.run(check, capture_output=True, text=True)
        return done.stdout.strip() == version

    if python.exists() and built():
        return str(python)
    try:
        venv.create(folder, system_site_packages=True, with_pip=True, clear=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--no-deps", f"h5py=={version}"],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return str(python) if built() else None


@pytest.mark.slow
def test_files_cross_between_hdf5_114_and_hdf5_2(tmp_path):
    pythons = {version: _python(version) for version in BUILDS}
    missing = [v for v, python in pythons.items() if python is None]
    if missing:
        pytest.skip(f"no test venv with h5py {missing} (pip could not install it here)")
    env = dict(os.environ, PYTHONPATH="")
    for writer, python in pythons.items():
        path = tmp_path / f"written-by-{writer}.h5"
        done = subprocess.run(
            [python, "-c", WRITE.format(repo=str(REPO), tests=str(TESTS)), str(path)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip().splitlines()[-1].startswith(BUILDS[writer])
        _check_readable_by_hdf5_110(path)
        values = None
        for reader, other in pythons.items():
            read = subprocess.run(
                [other, "-c", READ, str(path)], env=env, capture_output=True, text=True
            )
            assert read.returncode == 0, f"HDF5 {BUILDS[reader]} reading: {read.stderr[-1500:]}"
            report = json.loads(read.stdout)
            assert report["done"] == 9
            values = values or report["values"]
            assert report["values"] == values
        np.testing.assert_array_equal(read_tracks(path).attributions, np.array(values))
