"""The README's runnable examples (```python blocks) run as written and give the shapes their
comments promise; every other code block is marked as a fragment with its reason, as on the
documentation pages (``tests/test_docs.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_docs import TEXT, fenced_blocks

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


def test_every_other_code_block_is_marked_as_a_fragment():
    unmarked = [
        f"README.md:{b.line}: {b.lang or 'a fence without a language'}"
        for b in fenced_blocks(README.read_text())
        if b.lang != "python" and b.lang not in TEXT and b.fragment is None
    ]
    assert not unmarked, unmarked
