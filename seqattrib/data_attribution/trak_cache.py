"""TRAK's optional cache file: the fitted state of ``TRAK.fit(..., cache=path)`` as a numpy
``.npz``, keyed by hashes of everything it depends on.

The key hashes the checkpoints' content (their fingerprints), the training data and labels,
and every setting; a file written for anything else is refused with an error, never reused. A
file is written under a temporary name and renamed, so a path never holds half a file. Nothing
is written anywhere the user did not name.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import parameter_error
from ..engine import SequenceSource
from .examples import HOST_BLOCK, Labels
from .trak_kernel import KernelFit

FORMAT = "seqattrib.TRAK/1"
_KEY_PARTS = {
    "checkpoints": "other checkpoints",
    "data": "other training data",
    "settings": "other settings",
}


def cache_path(cache: Any, func: str) -> Path | None:
    """The checked ``cache`` argument: None or a path that is not a directory."""
    if cache is None:
        return None
    if not isinstance(cache, (str, os.PathLike)) or not os.fspath(cache):
        raise parameter_error(func, "cache", "None or a file path", cache, error=TypeError)
    path = Path(os.fspath(cache))
    if path.is_dir():
        raise parameter_error(
            func,
            "cache",
            "a file path",
            f"{os.fspath(cache)!r}, which is a directory",
            "Name a file inside it, e.g. 'trak_features.npz'.",
            described=True,
        )
    return path


def cache_key(
    source: SequenceSource, labels: Labels, settings: dict[str, Any], fingerprints: list[str]
) -> dict[str, str]:
    """Hashes of what the fitted state depends on: checkpoints, data (sequences and labels),
    settings (JSON-serialisable values)."""
    data = hashlib.blake2b(digest_size=16)
    data.update(f"{source.n_sequences}|{source.row_shape}|{source.alphabet_axis}|".encode())
    for start in range(0, source.n_sequences, HOST_BLOCK):
        data.update(np.ascontiguousarray(source.read(start, start + HOST_BLOCK)).tobytes())
    data.update(f"|{labels.values.dtype.str}|{labels.values.shape}|".encode())
    data.update(np.ascontiguousarray(labels.values).tobytes())
    return {
        "checkpoints": _digest("|".join(fingerprints)),
        "data": data.hexdigest(),
        "settings": _digest(json.dumps({"format": FORMAT, **settings}, sort_keys=True)),
    }


def write_cache(
    path: Path, key: dict[str, str], fingerprints: list[str], fits: list[KernelFit]
) -> None:
    """Write the fitted state of every checkpoint under ``key`` (atomically)."""
    arrays: dict[str, np.ndarray] = {
        "key": np.array(json.dumps(key, sort_keys=True)),
        "fingerprints": np.array(fingerprints),
        "lambdas": np.array([c.lambda_reg for c in fits], np.float64),
        "bounds": np.array([c.bound for c in fits], np.float64),
        "conditions": np.array([np.nan if c.condition is None else c.condition for c in fits]),
    }
    for i, c in enumerate(fits):
        arrays |= {f"features{i}": c.features, f"inverse{i}": c.inverse, f"weights{i}": c.weights}
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as f:
            np.savez(f, allow_pickle=False, **arrays)
        os.replace(partial, path)  # never a half-written file under the user's name
    finally:
        partial.unlink(missing_ok=True)


def read_cache(path: Path, key: dict[str, str], n_checkpoints: int, func: str) -> list[KernelFit]:
    """The fitted state of the ``n_checkpoints`` checkpoints stored at ``path``, after checking
    that the file's key is ``key``; an error names what differs."""
    expectation = (
        "a file written by TRAK.fit for the same checkpoints, training data and settings, "
        "or a path that does not exist yet"
    )
    fix = "Delete the file or name another path to featurize again."
    try:
        with np.load(path, allow_pickle=False) as stored:
            found = json.loads(str(stored["key"]))
            arrays = {name: stored[name] for name in stored.files if name != "key"}
    except (OSError, ValueError, KeyError) as exc:
        raise parameter_error(
            func,
            "cache",
            expectation,
            f"{os.fspath(path)!r}, which is not such a file ({type(exc).__name__}: {exc})",
            fix,
            described=True,
        ) from exc
    differ = [what for what in _KEY_PARTS if found.get(what) != key[what]]
    if differ:
        raise parameter_error(
            func,
            "cache",
            expectation,
            f"{os.fspath(path)!r}, which holds features of "
            + " and ".join(_KEY_PARTS[what] for what in differ),
            fix,
            described=True,
        )
    return [
        KernelFit(
            arrays[f"features{i}"],
            arrays[f"inverse{i}"],
            arrays[f"weights{i}"],
            float(arrays["lambdas"][i]),
            float(arrays["bounds"][i]),
            None if np.isnan(arrays["conditions"][i]) else float(arrays["conditions"][i]),
        )
        for i in range(n_checkpoints)
    ]


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
