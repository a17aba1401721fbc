"""The documentation's code runs as written, and the site builds without a warning.

Conventions for the pages under ``docs/``:

- ```` ```python ```` blocks run, in page order, in one namespace per page; a line
  ``name = ...  # (2, 4, 64)`` also checks the shape of ``name``;
- ```` ```bash ```` blocks run with ``bash -e`` in the same folder, between them; ``seqattrib``
  and ``python`` there are this checkout's;
- ```` ```py ````, ```` ```sh ```` and ```` ```console ```` blocks are shown, not run: they need
  what a test machine lacks (a real genome, a GPU, a cluster, user checkpoints).

Each page runs in a fresh temporary folder holding a copy of the demo files (``data/demo_*``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", flags=re.S | re.M)
RUN = ("python", "bash")
SLOW_PAGES = {"getting-started.md", "guide/cli.md"}


def blocks(page: Path) -> list[tuple[str, str]]:
    """(language, code) of the runnable blocks of a page, in order."""
    return [(lang, code) for lang, code in FENCE.findall(page.read_text()) if lang in RUN]


SOURCES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)
PAGES = [p.relative_to(DOCS).as_posix() for p in SOURCES if blocks(p)]


def _params() -> list:
    marks = {name: [pytest.mark.slow] if name in SLOW_PAGES else [] for name in PAGES}
    return [pytest.param(name, marks=marks[name], id=name) for name in PAGES]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for demo_file in (ROOT / "data").glob("demo*"):
        shutil.copy(demo_file, tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _shell_env(bin_dir: Path) -> dict[str, str]:
    """PATH with ``seqattrib`` and ``python`` of this interpreter and checkout first."""
    bin_dir.mkdir()
    for name, command in (("python", ""), ("seqattrib", " -m seqattrib")):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}"{command} "$@"\n')
        script.chmod(0o755)
    env = dict(os.environ)
    for key in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "RANK", "WORLD_SIZE"):
        env.pop(key, None)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["SEQATTRIB_DEMO_DATA"] = str(ROOT / "data")
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["MPLBACKEND"] = "Agg"
    return env


def _check_shapes(code: str, namespace: dict, where: str) -> None:
    for name, expected in re.findall(r"^(\w+) = .*#\s*(\([\d, ]+\))", code, flags=re.M):
        shape = getattr(namespace.get(name), "shape", None)
        if shape is not None:
            assert tuple(shape) == eval(expected), f"{where}: {name}"  # noqa: S307


@pytest.mark.parametrize("page", _params())
def test_page_code_runs(page: str, workdir: Path) -> None:
    env = _shell_env(workdir.parent / f"{workdir.name}-bin")
    namespace: dict = {"__name__": "__docs__"}
    for index, (lang, code) in enumerate(blocks(DOCS / page)):
        where = f"docs/{page}, {lang} block {index}"
        if lang == "python":
            exec(compile(code, where, "exec"), namespace)  # noqa: S102
            _check_shapes(code, namespace, where)
        else:
            result = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", code],
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert result.returncode == 0, f"{where} failed:\n{code}\n{result.stderr[-3000:]}"


def test_every_page_is_in_a_toctree() -> None:
    index = (DOCS / "index.md").read_text()
    listed = set(re.findall(r"^([\w/-]+)$", index, flags=re.M))
    pages = {p.relative_to(DOCS).with_suffix("").as_posix() for p in SOURCES}
    assert pages - {"index"} <= listed, sorted(pages - {"index"} - listed)


@pytest.mark.slow
def test_docs_build_without_warnings(tmp_path: Path) -> None:
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    pytest.importorskip("furo")
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
        + [str(DOCS), str(tmp_path / "html")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
