"""``--head`` on the command line: the grammar gives the same heads as the API, runs equal the
API's, and wrong values are refused on one line in the words of the flag."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FLOAT32, assert_close

import seqattrib as sa
from seqattrib import heads
from seqattrib.cli import build_parser, main
from seqattrib.io import read_tracks

LENGTH = 40


def two_heads():
    """(batch, 4, 40) -> (profile logits (batch, 2, 30), counts (batch, 1)): the factory that
    ``--model test_cli_heads:two_heads`` loads."""
    import torch

    class TwoHeads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(4)
            self.conv = torch.nn.Conv1d(4, 6, 11)
            self.profile = torch.nn.Conv1d(6, 2, 1)
            self.counts = torch.nn.Linear(6, 1)

        def forward(self, x):
            h = torch.relu(self.conv(x)) * 3
            return self.profile(h), self.counts(h.mean(-1))

    return TwoHeads().eval()


@pytest.mark.parametrize(
    ("spec", "head"),
    [
        ("profile", heads.profile()),
        ("profile:chrombpnet", heads.profile(convention="chrombpnet")),
        ("profile:bpnet-lite", heads.profile(convention="bpnet-lite")),
        ("profile:convention=bpnet-lite,output=2", heads.profile(2, convention="bpnet-lite")),
        ("counts", heads.counts()),
        ("counts:0", heads.counts(0)),
        ("logsumexp-counts:1+2", heads.logsumexp_counts((1, 2))),
        ("logsumexp_counts:outputs=acc+bias", heads.logsumexp_counts(("acc", "bias"))),
        (
            "tracks:track=5,bins=440:456,reduce=sum,transform=log1p",
            heads.tracks(5, bins=slice(440, 456), transform="log1p"),
        ),
        (
            "tracks:4+5,bins=1+3+9,reduce=mean,minus=7,output=human",
            heads.tracks([4, 5], bins=[1, 3, 9], reduce="mean", minus=7, output="human"),
        ),
        ("tracks:0,bins=all,track-axis=1", heads.tracks(0, track_axis=1)),
        ("tracks:2,bins=::2,transform=none", heads.tracks(2, bins=slice(None, None, 2))),
    ],
)
@pytest.mark.parametrize("command", ["explain", "ism", "variants"])
def test_head_specs_give_the_heads_of_the_api(command, spec, head):
    argv = [command, "--model", "demo", "--out", "o.h5", "--head", spec]
    if command == "variants":
        argv += ["--genome", "g.fa", "--vcf", "v.vcf", "--length", "100"]
    assert build_parser().parse_args(argv).head == head


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("profil", "must be a head among profile, counts, logsumexp-counts, tracks. Got 'profil'"),
        ("profile:chrombpnet,strand=1", "keys convention, output (each once) after profile:. "
         "Got 'strand=1'"),
        ("profile:bpnet", "convention= must be one of ['chrombpnet', 'bpnet-lite']. Got 'bpnet'"),
        ("counts:1,output=2", "keys output (each once) after counts:. Got 'output=2'"),
        ("logsumexp-counts:1", "outputs= must be two or more outputs. Got (1,)"),
        ("tracks", "must be tracks with a track (track=5 or tracks:5). Got 'tracks'"),
        ("tracks:x", "track= must be an integer. Got 'x'"),
        ("tracks:1,bins=4:a", "bins= must be an integer. Got 'a'"),
        ("tracks:1,bins=1:2:3:4", "bins= must be start:stop or start:stop:step. Got '1:2:3:4'"),
        ("tracks:1,reduce=max", "reduce= must be one of ['sum', 'mean']. Got 'max'"),
        ("tracks:1,transform=log2", "transform= must be one of [None, 'log1p', 'log']. Got 'log2'"),
        ("tracks:1,track_axis=0", "track_axis= must be -1 (or 2) or 1. Got 0"),
    ],
)  # fmt: skip
def test_a_wrong_head_is_refused_in_one_line_naming_the_flag(spec, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(["explain", "--model", "demo", "--fasta", "x.fa", "-o", "o.h5", "--head", spec])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("seqattrib explain: error: argument --head: ")
    assert message in err


@pytest.fixture()
def fasta(tmp_path):
    rng = np.random.default_rng(7)
    seqs = ["".join(rng.choice(list("ACGT"), LENGTH)) for _ in range(3)]
    path = tmp_path / "seqs.fa"
    path.write_text("".join(f">s{i}\n{s}\n" for i, s in enumerate(seqs)))
    return path, seqs


@pytest.mark.parametrize(
    ("spec", "head"),
    [("counts", heads.counts()), ("profile:bpnet-lite", heads.profile(convention="bpnet-lite"))],
)
def test_explain_with_a_head_equals_the_api(fasta, tmp_path, spec, head):
    path, seqs = fasta
    out = tmp_path / "t.h5"
    argv = ["explain", "--model", "test_cli_heads:two_heads", "--fasta", str(path), "--method",
            "ig", "--n-steps", "3", "--head", spec, "--out", str(out), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    X = sa.one_hot(seqs, layout="NCL")
    expected = sa.integrated_gradients(two_heads(), X, output_fn=head, n_steps=3)
    assert_close(read_tracks(out).attributions, expected, FLOAT32)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("counts:0", "error: --head output= must be a counts output of shape (batch,) or (batch, "
         "K). Got output=0, a tensor of shape (2, 2, 30), from a model returning tuple(a tensor "
         "of shape (2, 2, 30), a tensor of shape (2, 1))"),
        ("tracks:0,output=1", "error: --head output= must be an output of shape (batch, bins, "
         "tracks)"),
        ("profile:output=1", "error: --head output= must be the profile logits"),
        (None, "Choose what to explain with --head (e.g. --head counts"),
    ],
)  # fmt: skip
def test_a_head_that_does_not_fit_the_model_is_named_in_flag_words(fasta, tmp_path, spec,
                                                                     message, capsys):  # fmt: skip
    path, _ = fasta
    argv = ["ism", "--model", "test_cli_heads:two_heads", "--fasta", str(path),
            "--out", str(tmp_path / "t.h5"), "--quiet"]  # fmt: skip
    assert main(argv + ([] if spec is None else ["--head", spec])) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
