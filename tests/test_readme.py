"""The README's runnable examples (```python blocks) run as written and give the shapes their
comments promise; ```py blocks need user files (a genome, a model) and are not run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_both_examples():
    assert len(BLOCKS) >= 2
    assert any("torch" in b for b in BLOCKS) and any("keras" in b for b in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index):
    namespace: dict = {}
    exec(compile(BLOCKS[index], f"README block {index}", "exec"), namespace)  # noqa: S102
    for name, value in namespace.items():
        shape = getattr(value, "shape", None)
        comment = re.search(rf"^{name}\b.*#\s*(\([\d, ]+\))", BLOCKS[index], flags=re.M)
        if shape is not None and comment and not name.startswith("_"):
            assert tuple(shape) == eval(comment.group(1)), name  # noqa: S307
