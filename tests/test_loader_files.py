"""What ``load_model`` (``--model``/``--weights``) makes of the files users hand it: each file that
is not a model is refused in one line that says what the file is and what to pass instead;
weights are applied where they can be and refused where they cannot, never ignored; factories
are found in the current folder as command-line tools do."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import seqattrib
from seqattrib import demo
from seqattrib.cli import main
from seqattrib.io import read_tracks
from seqattrib.loader import load_model

#: A factory module as a user writes it next to their data.
MYMODEL = """
import torch


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv1d(4, 3, 5, padding=2), torch.nn.AdaptiveMaxPool1d(1), torch.nn.Flatten()
    ).eval()
"""

#: Three random sequences of the demo model's length.
SEQUENCES = ["".join(np.random.default_rng(i).choice(list("ACGT"), 200)) for i in range(3)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("loader-files")
    model = demo.torch_model()
    torch.save(model, folder / "whole.pt")  # a pickled module: refused, never unpickled
    torch.save({k: torch.zeros_like(v) for k, v in model.state_dict().items()}, folder / "zero.pt")
    with warnings.catch_warnings():  # TorchScript is deprecated, and users still have it
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(model), folder / "script.pt")
    with open(folder / "pickle.pt2", "wb") as f:
        pickle.dump({"weights": [1.0, 2.0]}, f)
    (folder / "model.keras").write_text("not a zip archive\n")
    (folder / "notes.pt").write_text("a text file, saved under a model's name\n")
    (folder / "empty.pt").write_bytes(b"")
    (folder / "script.pt2").write_bytes((folder / "script.pt").read_bytes())
    (folder / "seqs.fa").write_text("".join(f">s{i}\n{s}\n" for i, s in enumerate(SEQUENCES)))
    return folder


def _one_line(error: pytest.ExceptionInfo, param: str) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    assert message.startswith(f"The {param!r} parameter of load_model must be "), message
    return message


@pytest.mark.parametrize(
    "name, what",
    [
        ("pickle.pt2", "it is not a torch.export program: it is a Python pickle (not a zip"),
        ("script.pt2", "it is not a torch.export program: it is a TorchScript archive"),
        ("model.keras", "it is not a .keras zip archive: it is a text file"),
        ("notes.pt", "it is a text file"),
        ("empty.pt", "it is an empty file"),
    ],
)
def test_a_file_that_is_not_a_model_is_said_for_what_it_is(files, name, what):
    with pytest.raises(ValueError) as error:
        load_model(files / name)
    message = _one_line(error, "spec")
    assert what in message and "pickled Python object" not in message
    assert "torch.export.save" in message and "torch.jit.save" in message


def test_the_command_line_says_it_in_one_line(files, capsys):
    argv = ["explain", "--model", str(files / "pickle.pt2"), "--fasta", str(files / "seqs.fa")]
    assert main([*argv, "--out", str(files / "never.h5")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("seqattrib explain: error: --model must be ")
    assert "not a torch.export program: it is a Python pickle" in err


@pytest.mark.parametrize("as_weights", [False, True])
def test_a_pickled_model_is_refused_with_what_to_do_instead(files, as_weights):
    with pytest.raises(ValueError) as error:
        if as_weights:
            load_model("demo", weights=files / "whole.pt")
        else:
            load_model(files / "whole.pt")
    message = _one_line(error, "weights" if as_weights else "spec")
    assert "pickled Python object" in message
    assert "torch.save(model.state_dict(), path)" in message
    assert "weights_only" not in message and "trust" not in message
    # nothing chained: a traceback does not print torch's advice to unpickle it after all
    assert error.value.__cause__ is None and error.value.__suppress_context__


def test_a_pickled_checkpoint_is_refused_without_torch_advice(files):
    X = seqattrib.one_hot(SEQUENCES[:2], layout="NCL")
    tracin = seqattrib.TracIn(demo.torch_model(), [files / "whole.pt"], loss="mse")
    with pytest.raises(ValueError) as error:
        tracin.fit(X, np.zeros((2, 3), dtype=np.float32))
    message = str(error.value)
    assert "\n" not in message and "weights_only" not in message and "trust" not in message
    assert "torch.save(model.state_dict(), path)" in message


def test_weights_given_to_the_demo_are_applied(files):
    model = load_model("demo", weights=files / "zero.pt")
    assert all(not v.any() for v in model.state_dict().values())
    assert any(v.any() for v in load_model("demo").state_dict().values())


@pytest.mark.parametrize("spec", ["demo", "seqattrib.demo:torch_model"])
def test_a_missing_weights_file_is_refused(spec, tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load_model(spec, weights=tmp_path / "x.pt")
    message = _one_line(error, "weights")
    assert "an existing weights file" in message and "x.pt" in message


def test_the_command_line_refuses_a_missing_weights_file(files, tmp_path, capsys):
    argv = ["explain", "--model", "demo", "--weights", str(tmp_path / "x.pt"), "--fasta"]
    assert main([*argv, str(files / "seqs.fa"), "--out", str(tmp_path / "t.h5")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("seqattrib explain: error: --weights must be an existing weights file")
    assert not (tmp_path / "t.h5").exists()


@pytest.mark.parametrize(
    "spec, weights, what",
    [
        ("demo", "notes.pt", "it is a text file, not a torch.save state dict"),
        ("demo", "script.pt", "it is a TorchScript archive, not a torch.save state dict"),
        ("script.pt", "zero.pt", "used with a pkg.module:factory or demo model"),
    ],
)
def test_weights_that_cannot_apply_are_refused(files, spec, weights, what):
    spec_path = files / spec if spec.endswith(".pt") else spec
    with pytest.raises(ValueError) as error:
        load_model(spec_path, weights=files / weights)
    assert what in _one_line(error, "weights")


def _script() -> str:
    script = Path(sys.executable).with_name("seqattrib")
    assert script.exists(), "the seqattrib console script is installed with the package"
    return str(script)


def test_a_factory_in_the_current_folder_is_found_by_the_console_script(files, tmp_path):
    (tmp_path / "mymodel.py").write_text(MYMODEL)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [_script(), "explain", "--model", "mymodel:build", "--fasta", str(files / "seqs.fa")]
    argv += ["--method", "saliency", "--out", "t.h5", "--quiet"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        import mymodel
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mymodel", None)
    X = seqattrib.one_hot(SEQUENCES, layout="NCL")
    expected = seqattrib.saliency(mymodel.build(), X)
    np.testing.assert_allclose(read_tracks(tmp_path / "t.h5").attributions, expected, atol=1e-6)


def test_a_factory_that_cannot_be_imported_says_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(ImportError) as error:
        load_model("no_such_model_module:build")
    message = _one_line(error, "spec")
    assert "no module no_such_model_module" in message and str(tmp_path) in message
    assert "PYTHONPATH" in message


def test_a_factory_whose_own_import_fails_names_the_missing_module(tmp_path, monkeypatch):
    (tmp_path / "needs_more.py").write_text("import not_installed_dependency\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    with pytest.raises(ImportError) as error:
        load_model("needs_more:build")
    message = _one_line(error, "spec")
    assert "importing needs_more failed" in message and "not_installed_dependency" in message
    sys.modules.pop("needs_more", None)
