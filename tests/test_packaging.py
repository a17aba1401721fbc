"""The wheel works without a checkout.

- Built here, installed into a fresh virtual environment that sees this interpreter's packages
  (torch, h5py, ...) but holds its own seqattrib: ``seqattrib --help`` and ``seqattrib demo``
  (twice) from a folder outside the repository, so the demo data must come from the package.
- Installed with the README's own install line into an environment WITHOUT this interpreter's
  packages, then the README's demo command: what a new user does first. That environment
  (torch and the rest, a slow install) is cached under ``~/.cache/seqattrib-tests`` (or
  ``$SEQATTRIB_TEST_CACHE``), keyed by the wheel's dependencies and this Python, so the slow
  install happens once per machine; each run then installs the fresh wheel into it. pip reads
  ``.ci/constraints.txt`` through ``PIP_CONSTRAINT`` (the install line itself is unchanged), so
  torch resolves to the CPU build CI pins rather than a multi-GB CUDA build.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CONSTRAINTS = REPO / ".ci" / "constraints.txt"
CACHE = Path(os.environ.get("SEQATTRIB_TEST_CACHE", Path.home() / ".cache" / "seqattrib-tests"))
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(wheels), str(REPO)],
        check=True,
        capture_output=True,
    )
    (built,) = wheels.glob("seqattrib-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("packaging") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env)], check=True)
    subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
        + [str(wheel)],
        check=True,
        capture_output=True,
    )
    return env


def _clean_env(venv: Path) -> dict[str, str]:
    """This process's environment without what points at the checkout; the venv's bin first."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SEQATTRIB_DEMO_DATA")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("VIRTUAL_ENV", None)
    return env


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "seqattrib"), *args],
        cwd=cwd,
        env=_clean_env(venv),
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


def readme_commands() -> tuple[list[str], list[str]]:
    """The README's install line and demo command, as argument lists (first of each)."""
    install: list[str] = []
    demo: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", README.read_text(), flags=re.S | re.M):
        for line in block.splitlines():
            if not re.match(r"(pip install|seqattrib demo)\b", line):
                continue
            words = shlex.split(line, comments=True)
            if not install and words[:2] == ["pip", "install"]:
                if any(w.startswith("seqattrib[") for w in words):
                    install = words
            if not demo and words[:2] == ["seqattrib", "demo"]:
                demo = words
    assert install and demo, 'README.md: no `pip install "seqattrib[...]"` or `seqattrib demo`'
    return install, demo


def test_readme_commands_are_found() -> None:
    install, demo = readme_commands()
    assert install == ["pip", "install", "seqattrib[torch]"]
    assert demo[:2] == ["seqattrib", "demo"]


def _wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
    return sorted(line for line in text.splitlines() if line.startswith("Requires-Dist:"))


def _readme_venv(wheel: Path, install: list[str]) -> Path:
    """A venv without system site packages holding the README's install of this wheel."""
    spec = next(w for w in install if w.startswith("seqattrib["))
    requirement = str(wheel) + spec[len("seqattrib") :]  # "<wheel>[torch]": the README's extras
    pip_args = [w for w in install[2:] if w != spec]
    key = hashlib.sha256(
        "\n".join(
            [sys.version, spec, *pip_args, CONSTRAINTS.read_text(), *_wheel_requirements(wheel)]
        ).encode()
    ).hexdigest()[:16]
    CACHE.mkdir(parents=True, exist_ok=True)
    env = CACHE / f"readme-venv-{key}"
    python = env / "bin" / "python"
    with open(CACHE / f"readme-venv-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per machine; the others wait for it
        if not (env / "complete").exists():
            shutil.rmtree(env, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        else:
            subprocess.run(
                [str(python), "-m", "pip", "uninstall", "-q", "-y", "seqattrib"],
                check=True,
                capture_output=True,
            )
        out = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *pip_args, requirement],
            env=dict(os.environ, PIP_CONSTRAINT=str(CONSTRAINTS)),
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        (env / "complete").touch()
    return env


def test_the_readme_install_line_and_demo_command(wheel: Path, tmp_path: Path) -> None:
    install, demo = readme_commands()
    env = _readme_venv(wheel, install)
    probe = "import importlib.util as u; print(*(u.find_spec(m) is not None for m in %r))"
    modules = ("seqattrib", "torch", "pyBigWig", "matplotlib")
    found = subprocess.run(
        [str(env / "bin" / "python"), "-c", probe % (modules,)],
        cwd=tmp_path,
        env=_clean_env(env),
        capture_output=True,
        text=True,
    )
    has = dict(zip(modules, (word == "True" for word in found.stdout.split()), strict=True))
    assert has["seqattrib"] and has["torch"] and not has["pyBigWig"], found.stdout + found.stderr
    out = subprocess.run(
        demo, cwd=tmp_path, env=_clean_env(env), capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    folder = tmp_path / demo[demo.index("-o") + 1]
    assert (folder / "tracks.h5").exists() and (folder / "GATA_attr.npz").exists()
    assert not list(folder.glob("*.bw"))
    said = (out.stdout + out.stderr).lower()
    assert "bigwig" in said and "skip" in said, said  # it says what it leaves out
    assert (folder / "logo_GATA.png").exists() == has["matplotlib"]
