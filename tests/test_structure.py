"""The package's import structure, read from its source (nothing is imported but seqattrib).

- A private name (a module or name starting with ``_``, other than dunders) belongs to the
  package that holds it: no module outside that package imports it.
- An import inside a function never closes a circle: the module it imports has no path of
  top-level imports back to the importing module (lazy imports of frameworks and optional
  packages are not seqattrib modules and are not concerned).
- ``backends/`` holds the protocol, the registry and the framework-neutral local graph; all
  else lives in one folder per framework family, with the same file names for the same
  capability.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

import seqattrib

ROOT = Path(seqattrib.__file__).resolve().parent


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Import:
    importer: str
    line: int
    modules: tuple[str, ...]  # the seqattrib modules the statement names (imports)
    private: tuple[tuple[str, str], ...]  # (dotted name, package it is private to)
    in_function: bool
    type_checking: bool


@cache
def modules() -> dict[str, Module]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        found[name] = Module(name, path, is_package)
    return found


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _private_owner(dotted: str) -> str | None:
    """The package a dotted name is private to (None when every part is public): the package
    that holds its first private part."""
    parts = dotted.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if _private(part):
            holder = ".".join(parts[:i])
            return modules()[holder].package if holder in modules() else holder
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(
    node: ast.AST, in_function: bool = False, type_checking: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, in_function, type_checking
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _statements(ast.Module(body=[stmt], type_ignores=[]), in_function, True)
            for stmt in child.orelse:
                yield from _statements(ast.Module(body=[stmt], type_ignores=[]), in_function)
        else:
            inner = in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            yield from _statements(child, inner, type_checking)


@cache
def imports(name: str) -> tuple[Import, ...]:
    module = modules()[name]
    tree = ast.parse(module.path.read_text(encoding="utf-8"), str(module.path))
    found = []
    for stmt, in_function, type_checking in _statements(tree):
        dotted: list[str] = []
        targets: list[str] = []
        if isinstance(stmt, ast.Import):
            dotted = [alias.name for alias in stmt.names]
            targets = list(dotted)
        else:
            if stmt.level:
                base = module.package.split(".")
                base = base[: len(base) - stmt.level + 1]
                source = ".".join(base + ([stmt.module] if stmt.module else []))
            else:
                source = stmt.module or ""
            for alias in stmt.names:
                full = f"{source}.{alias.name}"
                dotted.append(full)
                targets.append(full if full in modules() else source)
        if not any(d.split(".")[0] == "seqattrib" for d in dotted):
            continue
        found.append(
            Import(
                importer=name,
                line=stmt.lineno,
                modules=tuple(dict.fromkeys(t for t in targets if t in modules())),
                private=tuple(
                    (d, owner) for d in dotted if (owner := _private_owner(d)) is not None
                ),
                in_function=in_function,
                type_checking=type_checking,
            )
        )
    return tuple(found)


def _loads(importer: str, target: str) -> list[str]:
    """The modules that importing ``target`` from ``importer`` may run: the target and its
    packages, except the importer and the packages that hold it (imported when it runs)."""
    held = {*_ancestors(importer), importer}
    return [p for p in _ancestors(target) if p not in held] + [target]


@cache
def top_level_graph() -> dict[str, frozenset[str]]:
    return {
        name: frozenset(
            loaded
            for imp in imports(name)
            if not imp.in_function and not imp.type_checking
            for target in imp.modules
            for loaded in _loads(name, target)
        )
        for name in modules()
    }


def _path(start: str, goal: str) -> list[str] | None:
    graph = top_level_graph()
    previous: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        if node == goal:
            path = [node]
            while (step := previous[path[-1]]) is not None:
                path.append(step)
            return path[::-1]
        for nxt in sorted(graph[node]):
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    return None


def test_source_is_read() -> None:
    names = modules()
    assert "seqattrib.backends" in names and "seqattrib.attribution" in names
    assert any(imp.private for imp in imports("seqattrib.backends"))  # _errors, in-package
    assert top_level_graph()["seqattrib"] >= {"seqattrib.backends", "seqattrib.attribution"}


def test_no_private_name_imported_from_another_package() -> None:
    found = [
        f"{imp.importer} (line {imp.line}) imports {dotted}, private to {owner}"
        for name in modules()
        for imp in imports(name)
        for dotted, owner in imp.private
        if not (imp.importer == owner or imp.importer.startswith(owner + "."))
    ]
    assert not found, "\n".join(found)


def test_no_function_level_import_closes_a_circle() -> None:
    found = []
    for name in modules():
        for imp in imports(name):
            if not imp.in_function:
                continue
            for target in imp.modules:
                for loaded in _loads(name, target):
                    path = _path(loaded, name)
                    if path is not None:
                        found.append(
                            f"{name} (line {imp.line}) imports {target} inside a function, "
                            f"and {' -> '.join(path)} imports it back at the top level"
                        )
    assert not found, "\n".join(found)


FRAMEWORKS = ("keras", "tensorflow", "torch")


def test_backends_hold_the_protocol_registry_and_local_graph_and_framework_folders() -> None:
    backends = ROOT / "backends"
    files = {p.name for p in backends.glob("*.py")}
    assert files <= {"__init__.py", "protocol.py", "registry.py", "local_graph.py"}, files
    assert {"__init__.py", "protocol.py", "local_graph.py"} <= files
    folders = {p.name for p in backends.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(FRAMEWORKS)
    for folder in FRAMEWORKS:
        assert (backends / folder / "__init__.py").is_file()
        assert not [p.name for p in (backends / folder).glob("_*.py") if p.name != "__init__.py"]


def test_same_capability_same_file_name() -> None:
    backends = ROOT / "backends"
    for capability in ("core", "windows", "parameters", "rescale"):
        for folder in ("torch", "tensorflow"):
            assert (backends / folder / f"{capability}.py").is_file(), (folder, capability)
    for reader in ("graph", "nodes", "local_ops", "window_ops"):
        for folder in ("torch", "keras"):
            assert (backends / folder / f"{reader}.py").is_file(), (folder, reader)


def test_no_backend_module_outside_backends_imports_a_framework_folder_privately() -> None:
    # what other packages use of a backend comes through backends/__init__ or protocol.py
    found = [
        f"{imp.importer} (line {imp.line}) imports {target}"
        for name in modules()
        if not name.startswith("seqattrib.backends")
        for imp in imports(name)
        for target in imp.modules
        if target.startswith(tuple(f"seqattrib.backends.{f}" for f in FRAMEWORKS))
    ]
    assert not found, "\n".join(found)


def test_every_package_is_listed_for_the_wheel() -> None:
    tomllib = pytest.importorskip("tomllib")
    settings = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(settings["tool"]["setuptools"]["packages"])
    packages = {module.name for module in modules().values() if module.is_package}
    assert packages <= listed, sorted(packages - listed)
