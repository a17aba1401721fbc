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
    "memelite": "motifs",
    "numba": "motifs",
}


def install_hint(name: str) -> str:
    """How to install the optional dependency ``name``, e.g. ``pip install 'seqattrib[bigwig]'``."""
    extra = _EXTRAS.get(name, "")
    return f"pip install 'seqattrib[{extra}]'" if extra else f"pip install {name}"


def import_optional(name: str) -> ModuleType:
    """Import ``name`` or raise ImportError saying how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ImportError(f"seqattrib needs {name!r} for this: {install_hint(name)}") from exc


def available(name: str) -> bool:
    """Whether the optional dependency ``name`` can be imported."""
    try:
        import_optional(name)
    except ImportError:
        return False
    return True
