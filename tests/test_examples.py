"""Every script in examples/ runs as documented, from a folder outside the repository, and
writes only under the folder it names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(script.parents[1]), MPLBACKEND="Agg")
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    written = [p for p in tmp_path.iterdir()]
    assert all(p.is_dir() for p in written), f"files written into the current folder: {written}"
