"""The wheel works without a checkout: built here, installed into a fresh virtual environment,
then ``seqattrib --help`` and ``seqattrib demo`` (twice) from a folder outside the repository.

The environment sees this interpreter's packages (torch, h5py, ...) but holds its own copy of
seqattrib, from the wheel, so the demo data must come from the installed package.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("packaging")
    wheels = root / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(wheels), str(REPO)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("seqattrib-*.whl")
    env = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env)], check=True)
    python = env / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    return env


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SEQATTRIB_DEMO_DATA")}
    return subprocess.run(
        [str(venv / "bin" / "seqattrib"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_the_installed_package_is_the_wheel(venv: Path, tmp_path: Path) -> None:
    code = "import seqattrib, seqattrib.demo as d; print(seqattrib.__file__); print(d.data_dir())"
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, capture_output=True, text=True
    )
    package, data = out.stdout.split()
    assert str(venv) in package and str(REPO) not in package
    assert str(venv) in data


def test_help_and_the_demo_twice_from_any_folder(venv: Path, tmp_path: Path) -> None:
    out = _run(venv, "--help", cwd=tmp_path)
    assert out.returncode == 0 and "demo" in out.stdout
    for _ in range(2):
        out = _run(venv, "demo", "-o", "demo", "--n-sequences", "8", "--quiet", cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "planted motif" in out.stdout
    assert (tmp_path / "demo" / "tracks.h5").exists()
