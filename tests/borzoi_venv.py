"""A cached virtual environment that holds borzoi-pytorch, for tests that run Borzoi.

borzoi-pytorch pins ``transformers>=4.57.6``, which enformer-pytorch (in the dev extra) refuses,
so the two cannot share an environment. This one is built without this interpreter's packages
(``--system-site-packages`` is not used: the test environment's ``transformers`` would otherwise
be seen), under ``~/.cache/seqattrib-tests`` (or ``$SEQATTRIB_TEST_CACHE``), keyed by this
Python, the pinned borzoi-pytorch release, seqattrib's core requirements and
``.ci/constraints.txt`` (read through ``PIP_CONSTRAINT``, so torch resolves to the pinned CPU
build). The slow install happens once per machine. seqattrib itself is not installed there: the
scripts import it from this checkout (``PYTHONPATH``), so the code under test is always the
working tree, and the cache does not go stale when seqattrib changes.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CONSTRAINTS = REPO / ".ci" / "constraints.txt"
CACHE = Path(os.environ.get("SEQATTRIB_TEST_CACHE", Path.home() / ".cache" / "seqattrib-tests"))
BORZOI = "borzoi-pytorch==0.5.1"
#: seqattrib's own requirements (pyproject's ``dependencies``) and torch, the framework it drives.
REQUIREMENTS = (BORZOI, "torch", "numpy>=1.24", "h5py>=3.8", "tqdm>=4.60")


def _key() -> str:
    text = "\n".join([sys.version, *REQUIREMENTS, CONSTRAINTS.read_text()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _registry_reachable() -> str | None:
    """None when pip can fetch borzoi-pytorch's distribution; else pip's last words."""
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", folder, BORZOI],
            capture_output=True,
            text=True,
            timeout=600,
        )
    if out.returncode == 0:
        return None
    return (out.stderr.strip().splitlines() or ["pip download failed"])[-1]


def borzoi_python() -> Path:
    """The cached environment's interpreter, built on first use (one builder per machine).

    Skips the calling test only when the package registry cannot be reached while the
    environment is not built yet; any other install failure fails the test.
    """
    key = _key()
    CACHE.mkdir(parents=True, exist_ok=True)
    env = CACHE / f"borzoi-venv-{key}"
    python = env / "bin" / "python"
    with open(CACHE / f"borzoi-venv-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait for the builder
        if (env / "complete").exists():
            return python
        reason = _registry_reachable()
        if reason is not None:
            pytest.skip(
                f"the package registry is unreachable, {BORZOI} cannot be installed: {reason}"
            )
        shutil.rmtree(env, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        out = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *REQUIREMENTS],
            env=dict(os.environ, PIP_CONSTRAINT=str(CONSTRAINTS)),
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        (env / "complete").touch()
    return python


def run_script(code: str, *, timeout: float = 600) -> Any:
    """Run ``code`` with the Borzoi environment's interpreter, this checkout's seqattrib and the
    test models (``tests/`` is on its path); its last line of stdout, read as JSON."""
    python = borzoi_python()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]), OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run(
            [str(python), "-c", code],
            capture_output=True,
            text=True,
            env=env,
            cwd=folder,
            timeout=timeout,
        )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
