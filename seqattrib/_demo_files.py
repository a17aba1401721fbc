"""Where the demo files are: a folder given, ``$SEQATTRIB_DEMO_DATA``, the files installed with
the package (``seqattrib.demo_data``), or ``data/`` of a checkout (``seqattrib.demo`` and the
model loader both read them)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from ._errors import parameter_error


def data_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The demo data folder: ``path``, ``$SEQATTRIB_DEMO_DATA``, the data installed with the
    package, or ``data/`` of a checkout."""
    candidates: list[Any] = [path]
    if path is None:  # a folder given is the only one looked at
        candidates += [os.environ.get("SEQATTRIB_DEMO_DATA"), _installed()]
        candidates.append(Path(__file__).resolve().parents[1] / "data")
    for candidate in candidates:
        if candidate is not None and (Path(candidate) / "demo_sequences.fa").exists():
            return Path(candidate)
    raise parameter_error(
        "demo",
        "data",
        "a folder with the demo files (demo_sequences.fa, demo_model.pt, ...)",
        str(path) if path else "none installed with the package",
        "Reinstall seqattrib, or pass the folder of the demo files.",
        described=True,
    )


def _installed() -> Path | None:
    """The demo files installed with the package (``seqattrib.demo_data``), if any."""
    try:
        spec = importlib.util.find_spec("seqattrib.demo_data")
    except ModuleNotFoundError:  # a checkout on sys.path: the files are in data/
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))
