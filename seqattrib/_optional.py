"""Import optional dependencies with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

_EXTRAS = {
    "torch": "torch",
    "captum": "torch",
    "tensorflow": "tensorflow",
    "keras": "tensorflow",
    "h5py": "",
    "matplotlib": "plot",
    "pyBigWig": "bigwig",
    "pyfaidx": "genome",
    "pysam": "variants",
    "pyarrow": "parquet",
    "pyarrow.csv": "parquet",
    "pyarrow.parquet": "parquet",
    "pandas": "",
}


def import_optional(name: str) -> ModuleType:
    """Import ``name`` or raise ImportError saying how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        extra = _EXTRAS.get(name, "")
        hint = f"pip install 'seqattrib[{extra}]'" if extra else f"pip install {name}"
        raise ImportError(f"seqattrib needs {name!r} for this: {hint}") from exc
