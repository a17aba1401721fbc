"""The documentation's code runs as written, and the site builds without a warning.

Conventions for the pages under ``docs/``:

- ```` ```python ```` blocks run, in page order, in one namespace per page; a line
  ``name = ...  # (2, 4, 64)`` also checks the shape of ``name``. A ``SeqAttribWarning`` that a
  block raises must be announced in it by a comment ``# warns: TEXT``, TEXT a part of the
  message, and an announced warning must come;
- ```` ```bash ```` blocks run with ``bash -e`` in the same folder, between them; ``seqattrib``
  and ``python`` there are this checkout's;
- any other code block (```` ```py ````, ```` ```sh ````, ```` ```console ````, ...) is a
  fragment that is shown, not run, on purpose: the line right before its fence says why, as
  ``<!-- fragment: needs a real genome -->`` (an HTML comment: invisible on the site and on
  GitHub). A code block that neither runs nor carries this line is an error;
- output and other text go in ```` ```text ```` blocks; every fence names its language.

Each page runs in a fresh temporary folder holding a copy of the demo files (``data/demo_*``).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import operator
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import seqattrib as sa
from seqattrib import SeqAttribWarning, demo

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUN = ("python", "bash")
TEXT = ("text",)  # output, messages, trees: nothing to run
FRAGMENT = re.compile(r"^\s*<!-- fragment: (\S.*?)\s*-->\s*$")
OPENING = re.compile(r"^(\s*)(`{3,})\s*(\S*)")
SLOW_PAGES = {"getting-started.md", "guide/cli.md"}


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: its language, code, first line (1-based) and fragment reason."""

    lang: str
    code: str
    line: int
    fragment: str | None


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown text, indented ones (in list items) included."""
    lines = text.splitlines()
    found = []
    i = 0
    while i < len(lines):
        opening = OPENING.match(lines[i])
        if not opening:
            i += 1
            continue
        fence = opening.group(2)
        end = next(
            (
                j
                for j in range(i + 1, len(lines))
                if lines[j].strip().startswith(fence) and not lines[j].strip().strip("`")
            ),
            len(lines),
        )
        reason = FRAGMENT.match(lines[i - 1]) if i else None
        code = textwrap.dedent("\n".join(lines[i + 1 : end]) + "\n")
        found.append(Block(opening.group(3), code, i + 1, reason.group(1) if reason else None))
        i = end + 1
    return found


def blocks(page: Path) -> list[Block]:
    """The runnable blocks of a page, in order."""
    return [b for b in fenced_blocks(page.read_text()) if b.lang in RUN]


# _name.md files are sections included in a page, not pages
SOURCES = sorted(
    p
    for p in DOCS.rglob("*.md")
    if "_build" not in p.relative_to(DOCS).parts and not p.name.startswith("_")
)
PAGES = [p.relative_to(DOCS).as_posix() for p in SOURCES if blocks(p)]


def _params() -> list:
    marks = {name: [pytest.mark.slow] if name in SLOW_PAGES else [] for name in PAGES}
    return [pytest.param(name, marks=marks[name], id=name) for name in PAGES]


TORCH_FLAGS = ("backends.cudnn.conv", "backends.cudnn.rnn", "backends.cuda.matmul")


@pytest.fixture(scope="module")
def torch_defaults() -> list[str]:
    """torch's own float32 precision flags, as a user's fresh session has them."""
    code = (
        "import operator, torch\n"
        f"for flag in {TORCH_FLAGS!r}:\n"
        "    print(operator.attrgetter(flag)(torch).fp32_precision)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.fixture
def fresh_torch(torch_defaults: list[str]) -> Iterator[None]:
    """The pages run with torch's default flags, not with those the test suite sets (torch.export
    refuses the mix of the two)."""
    import torch

    settings = [operator.attrgetter(flag)(torch) for flag in TORCH_FLAGS]
    suite = [setting.fp32_precision for setting in settings]
    for setting, value in zip(settings, torch_defaults, strict=True):
        setting.fp32_precision = value
    yield
    for setting, value in zip(settings, suite, strict=True):
        setting.fp32_precision = value


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
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["MPLBACKEND"] = "Agg"
    return env


def _check_shapes(code: str, namespace: dict, where: str) -> None:
    for name, expected in re.findall(r"^(\w+) = .*#\s*(\([\d, ]+\))", code, flags=re.M):
        shape = getattr(namespace.get(name), "shape", None)
        if shape is not None:
            assert tuple(shape) == eval(expected), f"{where}: {name}"  # noqa: S307


def _run_python(code: str, namespace: dict, where: str) -> None:
    """Run a block; the SeqAttribWarnings it raises are exactly those it announces."""
    announced = re.findall(r"#\s*warns:\s*(.+?)\s*$", code, flags=re.M)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SeqAttribWarning)
        exec(compile(code, where, "exec"), namespace)  # noqa: S102
    raised = [str(w.message) for w in caught if issubclass(w.category, SeqAttribWarning)]
    for message in raised:
        assert any(text in message for text in announced), (
            f"{where} raises a warning that it does not announce with '# warns: ...':\n{message}"
        )
    for text in announced:
        assert any(text in message for message in raised), (
            f"{where} announces '# warns: {text}', but no such warning came; it raised {raised}"
        )


@pytest.mark.parametrize("page", _params())
@pytest.mark.usefixtures("fresh_torch")
def test_page_code_runs(page: str, workdir: Path) -> None:
    env = _shell_env(workdir.parent / f"{workdir.name}-bin")
    namespace: dict = {"__name__": "__docs__"}
    for block in blocks(DOCS / page):
        where = f"docs/{page}, line {block.line} ({block.lang})"
        assert block.fragment is None, f"{where}: a {block.lang} block runs: drop the fragment mark"
        if block.lang == "python":
            _run_python(block.code, namespace, where)
            _check_shapes(block.code, namespace, where)
        else:
            result = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", block.code],
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert result.returncode == 0, f"{where} failed:\n{block.code}\n{result.stderr[-3000:]}"


def test_every_code_block_runs_or_is_marked_as_a_fragment() -> None:
    unmarked = []
    for page in SOURCES:
        for block in fenced_blocks(page.read_text()):
            where = f"docs/{page.relative_to(DOCS).as_posix()}:{block.line}"
            if not block.lang:
                unmarked.append(f"{where}: a fence without a language (text, python, bash, ...)")
            elif block.lang in RUN or block.lang in TEXT or block.lang.startswith("{"):
                continue
            elif block.fragment is None:
                unmarked.append(
                    f"{where}: a {block.lang} block that is not run has no "
                    "'<!-- fragment: reason -->' line before its fence"
                )
    assert not unmarked, "\n".join(unmarked)


def test_the_fragment_mark_is_read() -> None:
    text = (
        "a\n<!-- fragment: needs a real genome -->\n```sh\nls\n```\n\n  ```python\n  x = 1\n  ```\n"
    )
    first, second = fenced_blocks(text)
    assert (first.lang, first.fragment, first.code, first.line) == (
        "sh",
        "needs a real genome",
        "ls\n",
        3,
    )
    assert (second.lang, second.fragment, second.code) == ("python", None, "x = 1\n")


def _sentences(text: str, about: tuple[str, ...]) -> list[str]:
    """The sentences (and table cells) of the paragraphs of a text that name one of ``about``."""
    out = []
    for paragraph in re.split(r"\n\s*\n", text):
        flat = " ".join(paragraph.split())
        if not any(word in flat for word in about):
            continue
        out += re.split(r"(?<=[.;])\s+|\s\|\s", flat)
    return out


def _nearest(matches: list[re.Match], anchor: int) -> re.Match | None:
    return min(
        matches, key=lambda m: min(abs(m.start() - anchor), abs(m.end() - anchor)), default=None
    )


def test_eig_defaults_stated_in_the_docs_are_the_functions_defaults() -> None:
    """Where a page or the README states EIG's defaults (baselines x points, rows per sequence),
    the numbers are those of ``expected_integrated_gradients``'s signature."""
    parameters = inspect.signature(sa.expected_integrated_gradients).parameters
    n_baselines = parameters["n_baselines"].default
    n_steps = parameters["n_steps"].default
    points = len(sa.attribution.paths.quadrature(parameters["quadrature"].default, n_steps)[0])
    pair = re.compile(r"(\d+)\s+(?:[\w-]+\s+){0,3}?(?:×|x|and)\s+(\d+)\b")
    rows = re.compile(r"(\d+)(?= rows| for the defaults)")
    stated = []
    for page in [ROOT / "README.md", *SOURCES]:
        for sentence in _sentences(page.read_text(), about=("EIG", "baselines", "expected")):
            anchor = re.search(r"\bdefaults?\b", sentence)
            if not anchor:
                continue
            where = f"{page.relative_to(ROOT)}: {sentence}"
            numbers = _nearest(list(pair.finditer(sentence)), anchor.start())
            if numbers:
                stated.append(where)
                assert (int(numbers[1]), int(numbers[2])) == (n_baselines, points), where
            count = _nearest(list(rows.finditer(sentence)), anchor.start())
            if count:
                assert int(count[1]) == n_baselines * points, where
    assert len(stated) >= 4, stated  # getting-started, methods, the EIG page, performance
    cli = (DOCS / "guide" / "cli.md").read_text()
    assert f"| `--n-baselines` | {n_baselines} (EIG)" in cli
    assert f"| `--n-steps` | {n_steps} (EIG)" in cli


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


def _distributions(requirements: list[str]) -> set[str]:
    """The distributions that installing ``requirements`` brings, dependencies included."""
    seen: set[str] = set()
    todo = list(requirements)
    while todo:
        requirement = todo.pop()
        if "extra ==" in requirement:
            continue
        name = re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            pass
    return seen


def test_page_code_imports_only_what_the_extras_install() -> None:
    """A page's code imports the standard library, seqattrib and what its extras (not ``dev``)
    install; anything else must be said on the page and left to a fragment."""
    meta = importlib.metadata.metadata("seqattrib")
    requirements = [
        r.split(";")[0] + " "
        for r in meta.get_all("Requires-Dist") or []
        if "extra == 'dev'" not in r and 'extra == "dev"' not in r
    ]
    installed = _distributions(requirements)
    owners = importlib.metadata.packages_distributions()
    foreign = []
    for page in SOURCES:
        for block in blocks(page):
            if block.lang != "python":
                continue
            for module in re.findall(r"^\s*(?:from|import)\s+(\w+)", block.code, flags=re.M):
                if module in sys.stdlib_module_names or module == "seqattrib":
                    continue
                names = {d.lower().replace("_", "-") for d in owners.get(module, [module])}
                if not names & installed:
                    foreign.append(
                        f"docs/{page.relative_to(DOCS).as_posix()}:{block.line}: {module}"
                    )
    assert not foreign, foreign


def test_the_cli_page_lists_every_method_of_explain() -> None:
    import argparse

    from seqattrib.cli import subcommands

    parser = subcommands.explain(argparse.ArgumentParser().add_subparsers())
    (method,) = [a for a in parser._actions if "--method" in a.option_strings]
    row = re.search(r"^\| `--method ([^`]+)` \|", (DOCS / "guide" / "cli.md").read_text(), re.M)
    assert row and row[1].split("\\|") == list(method.choices)


def _features(text: str) -> list[str]:
    return re.findall(r"^- \*\*([^*]+)\*\*", text.split("\n## ", 1)[0], flags=re.M)


def test_the_landing_page_and_the_readme_list_the_same_features() -> None:
    readme = _features((ROOT / "README.md").read_text())
    assert "DeepLIFT / DeepSHAP" in readme and "variant effects" in readme
    assert _features((DOCS / "index.md").read_text()) == readme


def test_the_tutorial_logo_shows_a_planted_site() -> None:
    """The row, target and window of the tutorial's logo hold a motif planted for that target."""
    page = (DOCS / "getting-started.md").read_text()
    n_peaks = int(re.search(r"tail -n (\d+) demo_regions\.bed > peaks\.bed", page)[1])
    plot = re.search(r"seqattrib plot tracks\.h5 (.*)", page)[1]
    flags = dict(re.findall(r"--(row|target|start|end) (\d+)", plot))
    names = [
        line.split()[3] for line in (ROOT / "data" / "demo_regions.bed").read_text().splitlines()
    ]
    name = names[-n_peaks:][int(flags["row"])]
    table = [
        line.split("\t") for line in (ROOT / "data" / "demo_motifs.tsv").read_text().splitlines()
    ]
    row = dict(zip(table[0], next(r for r in table[1:] if r[0] == name), strict=True))
    task = demo.TASKS[int(flags["target"])]
    assert row[f"has_{task}"] == "1", f"{name} has no planted {task} site"
    start, end = int(row[f"{task}_start"]), int(row[f"{task}_end"])
    assert int(flags.get("start", 0)) <= start and end <= int(flags.get("end", 10**9))
    assert f"`{name}`" in page and f"bases {start} to {end - 1}" in page
