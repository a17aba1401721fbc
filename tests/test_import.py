"""``import seqattrib`` imports numpy only (frameworks load when their models arrive)."""

from __future__ import annotations

import subprocess
import sys


def test_import_pulls_in_no_framework():
    code = (
        "import sys, seqattrib\n"
        "heavy = [m for m in ('torch', 'tensorflow', 'keras', 'h5py', 'matplotlib', 'captum')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import seqattrib imported {out.stdout.strip()}"


def test_public_names():
    import seqattrib

    for name in (
        "saliency",
        "integrated_gradients",
        "expected_integrated_gradients",
        "one_hot",
        "decode",
        "project",
        "SeqAttribWarning",
        "TracIn",
        "TRAK",
        "__version__",
    ):
        assert hasattr(seqattrib, name)
