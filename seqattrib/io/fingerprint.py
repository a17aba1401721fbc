"""Fingerprints that tie a results file to the model, the function and the inputs behind it.

Everything here is hashing with the standard library over NumPy arrays and Python objects: no
framework is imported. A caller that holds a model passes its backend's ``state`` (host
copies of every parameter and buffer) to :func:`model_fingerprint`.

- :func:`fingerprint`: one digest of a model state (names, dtypes, shapes and values).
- :func:`function_identity`: module, qualified name and a digest of the code and constants of
  an output function.
- :func:`row_hashes`: one digest per row of X, over the float32 values the model sees.
- :func:`regions_fingerprint` and :func:`file_fingerprint`: the regions of a job and the
  content of a genome or FASTA file.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

#: Bytes of one row digest (blake2b).
ROW_HASH_BYTES = 16
_SIMPLE = (bool, int, float, complex, str, bytes, type(None))


def _digest() -> Any:
    return hashlib.blake2b(digest_size=16)


def fingerprint(state: Mapping[str, np.ndarray]) -> str:
    """A digest of a model state: names, dtypes, shapes and bytes of every entry."""
    digest = _digest()
    for key in sorted(state):
        value = np.ascontiguousarray(state[key])
        digest.update(f"{key}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def _value_text(value: Any) -> str | None:
    """A stable text for a constant that decides what a function computes, None if opaque."""
    if isinstance(value, _SIMPLE):
        return repr(value)
    if isinstance(value, (tuple, list, frozenset)):
        parts = [_value_text(v) for v in value]
        return None if None in parts else f"{type(value).__name__}({','.join(map(str, parts))})"
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        return f"array:{fingerprint({'': array})}"
    if isinstance(value, np.generic):
        return repr(value.item())
    return None


def _update_code(digest: Any, code: types.CodeType) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _update_code(digest, const)
        else:
            digest.update(repr(const).encode())


def _update_function(digest: Any, fn: types.FunctionType) -> None:
    """Code, nested code, defaults, closure values and the simple globals the code reads."""
    _update_code(digest, fn.__code__)
    context: list[tuple[str, Any]] = [("defaults", fn.__defaults__)]
    context += sorted((fn.__kwdefaults__ or {}).items())
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        try:
            context.append((name, cell.cell_contents))
        except ValueError:  # an empty cell
            context.append((name, None))
    context += [
        (name, fn.__globals__[name]) for name in fn.__code__.co_names if name in fn.__globals__
    ]
    for name, value in context:
        text = _value_text(value)
        if text is not None:
            digest.update(f"|{name}={text}".encode())


def function_identity(fn: Callable[..., Any] | None) -> str | None:
    """``module.qualname@digest`` of a callable, or None for no function.

    The digest covers the bytecode and constants (nested functions included), default values,
    the values of closure variables and of the simple module globals the code reads (numbers,
    strings, tuples of them, NumPy arrays). A ``functools.partial`` adds its arguments, a
    bound method the type it is bound to, and a callable object its class's ``__call__`` and
    its simple attributes (weights held by a callable object, such as a module's, are not
    covered).
    """
    if fn is None:
        return None
    digest = _digest()
    target: Any = fn
    extra = ""
    if isinstance(fn, functools.partial):
        inner = function_identity(fn.func)
        arguments = [_value_text(a) for a in fn.args]
        arguments += [f"{k}={_value_text(v)}" for k, v in sorted(fn.keywords.items())]
        digest.update(f"{inner}|{arguments}".encode())
        return f"functools.partial({inner})@{digest.hexdigest()}"
    if isinstance(fn, types.MethodType):
        extra = f"|bound to {type(fn.__self__).__module__}.{type(fn.__self__).__qualname__}"
        target = fn.__func__
    if not isinstance(target, types.FunctionType):
        call = inspect.getattr_static(type(target), "__call__", None)
        name = f"{type(target).__module__}.{type(target).__qualname__}"
        if isinstance(call, types.FunctionType):
            _update_function(digest, call)
            for key, value in sorted(getattr(target, "__dict__", {}).items()):
                text = _value_text(value)
                if text is not None:
                    digest.update(f"|{key}={text}".encode())
            return f"{name}@{digest.hexdigest()}"
        return name  # a builtin or compiled callable: its name is all there is
    _update_function(digest, target)
    digest.update(extra.encode())
    return f"{target.__module__}.{target.__qualname__}@{digest.hexdigest()}"


def _referents(obj: Any) -> list[Any]:
    """Objects a plain callable computes with: bound instance, closure, partial arguments and
    instance attributes (one level)."""
    found: list[Any] = []
    if isinstance(obj, functools.partial):
        found += [obj.func, *obj.args, *obj.keywords.values()]
    if isinstance(obj, types.MethodType):
        found.append(obj.__self__)
        obj = obj.__func__
    if isinstance(obj, types.FunctionType):
        for cell in obj.__closure__ or ():
            try:
                found.append(cell.cell_contents)
            except ValueError:
                pass
        found += list(obj.__defaults__ or ())
    elif not isinstance(obj, type):
        found += list(getattr(obj, "__dict__", {}).values())
    return found


def model_fingerprint(model: Any, get_state: Callable[[Any], Mapping[str, np.ndarray]]) -> str:
    """A digest of every parameter and buffer of ``model`` (values, dtypes and shapes).

    ``get_state`` is the backend's ``state``: host copies of the model's full state. A list or
    tuple of models (an ensemble) is fingerprinted member by member, in order. A plain callable
    (``backend=`` given) has no state of its own; its digest is its :func:`function_identity`
    together with the state of every model it is bound to, closes over or holds as an
    attribute (one level deep).
    """
    if isinstance(model, (list, tuple)):  # an ensemble: its members, in order
        members = _digest()
        for member in model:
            members.update(model_fingerprint(member, get_state).encode())
        return members.hexdigest()
    try:
        return fingerprint(get_state(model))
    except (AttributeError, TypeError, RuntimeError, ValueError):
        pass
    digest = _digest()
    digest.update(f"callable {function_identity(model)}".encode())
    for obj in _referents(model):
        if isinstance(obj, (*_SIMPLE, types.FunctionType)):
            continue
        try:
            digest.update(fingerprint(get_state(obj)).encode())
        except (AttributeError, TypeError, RuntimeError, ValueError):
            continue
    return digest.hexdigest()


def row_hashes(rows: np.ndarray) -> np.ndarray:
    """One digest per row, over its float32 values: an array of shape (n_rows, 16), uint8.

    Rows given as int8 0/1 and as float32 0/1 hash the same (the values the model sees).
    """
    values = np.ascontiguousarray(rows, dtype=np.float32)
    out = np.empty((len(values), ROW_HASH_BYTES), dtype=np.uint8)
    for i, row in enumerate(values):
        out[i] = np.frombuffer(
            hashlib.blake2b(row.data, digest_size=ROW_HASH_BYTES).digest(), np.uint8
        )
    return out


def regions_fingerprint(chrom: Sequence[str] | np.ndarray, start: Any, end: Any) -> str:
    """A digest of genome regions, row by row: chromosome names, starts and ends."""
    digest = _digest()
    digest.update("\0".join(str(c) for c in chrom).encode())
    digest.update(np.ascontiguousarray(start, dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(end, dtype="<i8").tobytes())
    return digest.hexdigest()


#: Bytes (or characters) of one block of a file or sequence, hashed on its own.
_BLOCK = 2**24


def _block_digests(read: Callable[[int], bytes], size: int) -> list[bytes]:
    """The digests of blocks ``read(offset)`` of ``_BLOCK`` bytes from 0 to ``size``, on up to 8
    threads (hashlib releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    def digest(offset: int) -> bytes:
        return _digest_of(read(offset))

    workers = max(1, min(8, os.cpu_count() or 1, -(-size // _BLOCK)))
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(digest, range(0, size, _BLOCK)))


def file_fingerprint(path: str | os.PathLike[str]) -> str:
    """A digest of a file's bytes (a genome or FASTA file).

    The file is hashed in blocks of 16 MiB on up to 8 threads (hashlib releases the GIL), then
    the block digests are hashed: a few seconds for a 3 GB genome on one core, less on several.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        blocks = _block_digests(lambda offset: os.pread(fd, _BLOCK, offset), size)
    finally:
        os.close(fd)
    top = _digest()
    top.update(size.to_bytes(8, "little"))
    for part in blocks:
        top.update(part)
    return str(top.hexdigest())


def sequences_fingerprint(genome: Mapping[Any, Any]) -> str:
    """A digest of a genome given as a dict of name to sequence (str or bytes): its names,
    lengths and bases (case included), chromosomes in name order, each sequence hashed once in
    blocks as ``file_fingerprint`` hashes a file."""

    def reader(sequence: Any) -> Callable[[int], bytes]:
        def read(offset: int) -> bytes:
            part = sequence[offset : offset + _BLOCK]
            if isinstance(part, (bytes, bytearray, memoryview)):
                return bytes(part)
            return str(part).encode("utf-8", "surrogatepass")

        return read

    top = _digest()
    for name in sorted(genome, key=str):
        sequence = genome[name]
        top.update(json.dumps([str(name), len(sequence)]).encode("utf-8", "surrogatepass"))
        for part in _block_digests(reader(sequence), len(sequence)):
            top.update(part)
    return str(top.hexdigest())


def _digest_of(data: bytes) -> bytes:
    return bytes(hashlib.blake2b(data, digest_size=16).digest())
