"""``torch.export`` programs as users save them: one exported at a fixed batch size (the default
of ``torch.export.export``) runs any number of sequences and gives the eager model's
attributions; a fixed sequence length is refused in one line that names ``dynamic_shapes``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import CLOSED_FORM, assert_close

import seqattrib
from seqattrib.cli import main
from seqattrib.io import read_tracks
from seqattrib.loader import load_model

LENGTH = 20

#: A conv net whose Flatten bakes the batch size into a program exported without dynamic shapes.
MODEL_SOURCE = f"""
import torch


def build():
    return torch.nn.Sequential(
        torch.nn.Conv1d(4, 6, 5, padding=2),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(6 * {LENGTH}, 3),
    ).eval()
"""

#: Exported in a process of its own, as users do (torch.export reads the legacy TF32 flags,
#: which the test session has set through the new API).
EXPORT = """
import torch
import tiny_model

torch.manual_seed(0)
model = tiny_model.build()
torch.save(model.state_dict(), "state.pt")
example = (torch.zeros(2, 4, {length}),)
torch.export.save(torch.export.export(model, example), "fixed.pt2")
batch = torch.export.Dim("batch")
program = torch.export.export(model, example, dynamic_shapes=({{0: batch}},))
torch.export.save(program, "dynamic.pt2")
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("exported")
    (folder / "tiny_model.py").write_text(MODEL_SOURCE)
    code = EXPORT.format(length=LENGTH)
    subprocess.run([sys.executable, "-c", code], cwd=folder, check=True, capture_output=True)
    spec = importlib.util.spec_from_file_location("tiny_model", folder / "tiny_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    eager = module.build()
    eager.load_state_dict(torch.load(folder / "state.pt", weights_only=True))
    return folder, eager


def _sequences(n: int, length: int = LENGTH) -> np.ndarray:
    rng = np.random.default_rng(1)
    return seqattrib.one_hot(
        ["".join(rng.choice(list("ACGT"), length)) for _ in range(n)], layout="NCL"
    )


@pytest.mark.parametrize("batch_size", ["auto", 1, 3, 64])
def test_a_program_of_fixed_batch_gives_the_eager_saliency(exported, batch_size):
    folder, eager = exported
    X = _sequences(5)
    program = load_model(folder / "fixed.pt2")
    got = seqattrib.saliency(program, X, target=[0, 1, 2], batch_size=batch_size)
    assert_close(got, seqattrib.saliency(eager, X, target=[0, 1, 2]), CLOSED_FORM)


def test_a_program_of_fixed_batch_gives_the_eager_outputs_and_ism(exported):
    folder, eager = exported
    X = _sequences(5)
    program = load_model(folder / "fixed.pt2")
    with torch.no_grad():
        outputs = program(torch.from_numpy(X)).numpy()
        assert_close(outputs, eager(torch.from_numpy(X)).numpy(), CLOSED_FORM)
    assert_close(seqattrib.ism(program, X, target=1), seqattrib.ism(eager, X, target=1), 1e-5)


def test_a_program_with_a_dynamic_batch_still_works(exported):
    folder, eager = exported
    X = _sequences(5)
    got = seqattrib.saliency(load_model(folder / "dynamic.pt2"), X, target=[0, 2])
    assert_close(got, seqattrib.saliency(eager, X, target=[0, 2]), CLOSED_FORM)


@pytest.mark.parametrize("name", ["fixed.pt2", "dynamic.pt2"])
def test_another_length_is_refused_naming_dynamic_shapes(exported, name):
    folder, _ = exported
    with pytest.raises(ValueError) as error:
        seqattrib.saliency(load_model(folder / name), _sequences(3, LENGTH + 4))
    message = str(error.value)
    assert "\n" not in message
    assert f"(batch, 4, {LENGTH})" in message and "(batch, 4, 24)" in message
    assert message.count("dynamic_shapes=") == 1  # said once, not wrapped in a layout guess
    assert "failed on both" not in message


def test_the_command_line_runs_a_program_of_fixed_batch(exported, tmp_path, capsys):
    folder, eager = exported
    X = _sequences(5)
    fasta = tmp_path / "seqs.fa"
    fasta.write_text("".join(f">s{i}\n{s}\n" for i, s in enumerate(seqattrib.decode(X))))
    out = tmp_path / "t.h5"
    argv = ["explain", "--model", str(folder / "fixed.pt2"), "--fasta", str(fasta)]
    assert main([*argv, "--method", "saliency", "--out", str(out), "--quiet"]) == 0, (
        capsys.readouterr().err
    )
    assert_close(read_tracks(out).attributions, seqattrib.saliency(eager, X), CLOSED_FORM)
