"""The command line speaks in its own flags: every error is one line on stderr, in the words of
the options, with a non-zero exit and no traceback; warnings are one line each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from seqattrib import demo
from seqattrib.cli import build_parser, main
from seqattrib.io import read_tracks

MODEL = "demo"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli-messages")
    data = demo.load_data()
    (folder / "seqs.fa").write_text(
        "".join(f">s{i}\n{s}\n" for i, s in enumerate(data["sequences"][:4]))
    )
    (folder / "g.fa").write_text(f">chr1\n{''.join(data['sequences'][:3])}\n")
    (folder / "peaks.bed").write_text("chr1\t100\t300\nchrX\t100\t300\n")
    model = demo.torch_model()
    torch.save(model, folder / "whole.pt")  # a pickled module: refused
    torch.save(model.state_dict(), folder / "state.pt")
    (folder / "pickled_weights.pt").write_bytes((folder / "whole.pt").read_bytes())
    return folder


def _run(argv, capsys, code=1):
    if code == 2:
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
    else:
        assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("seqattrib") and "Traceback" not in err
    return err


def _explain(files, *extra):
    return ["explain", "--model", MODEL, "--fasta", str(files / "seqs.fa"), *extra]


@pytest.mark.parametrize(
    "extra, code, expected",
    [
        (["--batch-size", "abc"], 2, "--batch-size: expected 'auto' or a positive integer"),
        (["--shard", "-1/4"], 2, "--shard: expected i/n with 0 <= i < n"),
        (["--target", "x"], 2, "--target: expected an output index"),
        (["--n-steps", "0"], 2, "--n-steps: expected a positive integer"),
        (["--device", "cuda"], 1, "--device must be a device this machine"),
        (["--target", "7"], 1, "--target must be an output index in [0, 3)"),
    ],
)
def test_bad_values_name_their_flag(files, tmp_path, capsys, extra, code, expected):
    err = _run(_explain(files, "--out", str(tmp_path / "t.h5"), "--quiet", *extra), capsys, code)
    assert expected in err


def test_an_existing_output_asks_for_the_overwrite_flag(files, tmp_path, capsys):
    argv = _explain(files, "--method", "saliency", "--out", str(tmp_path / "t.h5"), "--quiet")
    assert main(argv) == 0
    capsys.readouterr()
    err = _run([*argv, "--target", "1"], capsys)
    assert "--overwrite" in err and "overwrite=True" not in err


def test_missing_sequence_flags_are_named(files, tmp_path, capsys):
    argv = ["explain", "--model", MODEL, "--out", str(tmp_path / "t.h5")]
    err = _run(
        [*argv, "--genome", str(files / "g.fa"), "--regions", str(files / "peaks.bed")], capsys
    )
    assert "--genome, --regions without --length" in err


def test_a_chromosome_missing_from_the_genome_lists_the_genome(files, tmp_path, capsys):
    argv = ["explain", "--model", MODEL, "--genome", str(files / "g.fa"), "--regions"]
    argv += [str(files / "peaks.bed"), "--length", "200", "--method", "saliency"]
    assert main([*argv, "--out", str(tmp_path / "t.h5"), "--quiet"]) == 0
    err = capsys.readouterr().err.strip()
    assert "warning:" in err and "'chrX'" in err and "the genome has chr1" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "model, weights, expected",
    [
        ("whole.pt", None, "--model must be a model file"),
        ("state.pt", None, "a state dict"),
        ("seqattrib.demo:torch_model", "pickled_weights.pt", "--weights must be"),
    ],
)
def test_model_files_that_cannot_be_read_say_why(files, tmp_path, capsys, model, weights, expected):
    spec = str(files / model) if model.endswith(".pt") else model
    argv = ["explain", "--model", spec, "--fasta", str(files / "seqs.fa"), "--out", "x.h5"]
    if weights:
        argv += ["--weights", str(files / weights)]
    err = _run(argv, capsys)
    assert expected in err


def test_torch_export_programs_and_the_demo_by_name(files, tmp_path, capsys):
    # exported in a process of its own, as users do (torch.export reads the legacy TF32 flags,
    # which the test session has set through the new API)
    code = (
        "import torch; from seqattrib import demo; m = demo.torch_model(); "
        "p = torch.export.export(m, (torch.zeros(2, 4, 200),), "
        "dynamic_shapes=({0: torch.export.Dim('batch')},)); "
        f"torch.export.save(p, {str(files / 'model.pt2')!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    outs = []
    for spec in (str(files / "model.pt2"), "demo"):
        out = tmp_path / f"{Path(spec).stem}.h5"
        argv = ["explain", "--model", spec, "--fasta", str(files / "seqs.fa"), "--method"]
        assert main([*argv, "saliency", "--out", str(out), "--quiet"]) == 0
        outs.append(read_tracks(out).attributions)
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-6)


def test_layout_flag_and_the_model_layout_are_independent(files, tmp_path, capsys):
    outs = {}
    for layout in ("NLC", "NCL"):
        out = tmp_path / f"{layout}.h5"
        argv = _explain(files, "--method", "saliency", "--layout", layout, "--quiet")
        assert main([*argv, "--out", str(out)]) == 0
        outs[layout] = read_tracks(out).attributions
    np.testing.assert_allclose(outs["NLC"], outs["NCL"].transpose(0, 2, 1), atol=1e-6)


def test_rows_out_of_range_give_the_range(files, tmp_path, capsys):
    out = tmp_path / "t.h5"
    assert main(_explain(files, "--method", "saliency", "--out", str(out), "--quiet")) == 0
    err = _run(["plot", str(out), "--row", "9", "-o", str(tmp_path / "x.png")], capsys)
    assert "--row must be a completed row of the file (0 to 3)" in err


def test_export_makes_its_folder(files, tmp_path, capsys):
    out = tmp_path / "t.h5"
    argv = _explain(files, "--method", "saliency", "--target", "0,1", "--out", str(out))
    assert main([*argv, "--quiet"]) == 0
    assert main(["export", "modisco", str(out), "-o", str(tmp_path / "new" / "folder")]) == 0
    assert any((tmp_path / "new" / "folder").iterdir())


def test_every_option_has_help_with_its_default():
    parser = build_parser()
    for sub in parser._subparsers._group_actions[0].choices.values():  # noqa: SLF001
        for action in sub._actions:  # noqa: SLF001
            if action.dest in ("help",):
                continue
            assert action.help, f"{sub.prog} {action.option_strings or action.dest}"
            optional = action.option_strings and not action.required
            takes_value = action.nargs != 0
            if optional and takes_value and action.dest not in ("weights", "fasta", "genome"):
                assert "default" in action.help or action.dest in (
                    "regions",
                    "length",
                    "out",
                    "chrom_sizes",
                    "class_names",
                    "start",
                    "end",
                    "region",
                ), f"{sub.prog} {action.option_strings} states no default"


def test_args_files_feed_the_model_other_inputs(files, tmp_path, capsys):
    """A fixed input from a .npy file reaches every row: the demo model scaled by it."""
    np.save(tmp_path / "scale.npy", np.array([2.0, 1.0, 3.0], np.float32))
    fasta = str(files / "seqs.fa")
    argv = ["explain", "--method", "saliency", "--target", "0,2", "--fasta", fasta, "--quiet"]
    scaled = [*argv, "--model", "factory_models:scaled", "--args", str(tmp_path / "scale.npy")]
    assert main([*scaled, "--out", str(tmp_path / "scaled.h5")]) == 0
    assert main([*argv, "--model", "demo", "--out", str(tmp_path / "plain.h5")]) == 0
    got = read_tracks(tmp_path / "scaled.h5").attributions
    plain = read_tracks(tmp_path / "plain.h5").attributions
    expected = plain * np.array([2.0, 3.0])[None, :, None, None]
    np.testing.assert_allclose(got, expected, atol=1e-5 * np.abs(expected).max())
    # the plain demo model takes one input: the error names it, on one line
    assert (
        main(
            [
                *argv,
                "--model",
                "demo",
                "--args",
                str(tmp_path / "scale.npy"),
                "--out",
                str(tmp_path / "x.h5"),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--model must be a model that takes" in err
