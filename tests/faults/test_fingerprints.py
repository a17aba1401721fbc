"""Resume, reuse and merge compare the fingerprints of the model, the output function, the rows
of X, the regions and the genome: any difference is refused, naming it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _faults import leftovers, write_partially
from conftest import LENGTH
from models import convnet_weights, random_one_hot, torch_model

import seqattrib as sa
from seqattrib import demo
from seqattrib.cli import main
from seqattrib.io import read_tracks
from seqattrib.io.merge import merge_tracks

N = 30
REFUSED = r"'out' parameter of saliency must be .*Pass overwrite=True"


@pytest.fixture
def models_ab():
    a = torch_model("convnet", convnet_weights(n_outputs=3), "NCL")
    b = torch_model("convnet", convnet_weights(n_outputs=3, seed=1), "NCL")
    return a, b


@pytest.fixture
def X():
    return random_one_hot(N, LENGTH, seed=11, layout="NCL")


def _partial(model, X, path, blocks, **kwargs):
    """A file left by a run stopped after ``blocks`` blocks of 3 sequences."""
    write_partially(sa.saliency, model, X, path, blocks, max_cpu_sequences=3, **kwargs)
    assert read_tracks(path).attrs["n_completed"] == 3 * blocks


def test_a_finished_file_is_not_reused_for_another_model(models_ab, X, tmp_path):
    a, b = models_ab
    path = sa.saliency(a, X, out=tmp_path / "t.h5")
    other = read_tracks(sa.saliency(b, X, out=tmp_path / "b.h5")).attrs
    assert read_tracks(path).attrs["model"] == other["model"]  # the description cannot tell
    with pytest.raises(ValueError, match=REFUSED) as info:
        sa.saliency(b, X, out=path)
    assert "written with another model" in str(info.value)
    np.testing.assert_array_equal(read_tracks(path).attributions, sa.saliency(a, X))


def test_a_partial_file_is_not_resumed_with_another_model(models_ab, X, tmp_path):
    a, b = models_ab
    path = tmp_path / "t.h5"
    _partial(a, X, path, blocks=2)
    with pytest.raises(ValueError, match="written with another model"):
        sa.saliency(b, X, out=path, max_cpu_sequences=3)
    sa.saliency(a, X, out=path, max_cpu_sequences=3)
    np.testing.assert_array_equal(read_tracks(path).attributions, sa.saliency(a, X))
    assert leftovers(tmp_path) == []


def test_another_output_function_is_refused(models_ab, X, tmp_path):
    a, _ = models_ab

    def first(outputs):
        return outputs[:, :2]

    def second(outputs):
        return outputs[:, 1:]

    path = sa.saliency(a, X, out=tmp_path / "t.h5", output_fn=first)
    assert sa.saliency(a, X, out=path, output_fn=first) == path
    with pytest.raises(ValueError, match=r"written with output_fn .*first.* \(now .*second"):
        sa.saliency(a, X, out=path, output_fn=second)
    with pytest.raises(ValueError, match=r"written with output_fn .*first.* \(now None\)"):
        sa.saliency(a, X, out=path)


@pytest.mark.parametrize("finished", [True, False], ids=["finished", "partial"])
def test_changed_rows_of_X_are_refused_naming_them(models_ab, X, tmp_path, finished):
    a, _ = models_ab
    path = tmp_path / "t.h5"
    if finished:
        sa.saliency(a, X, out=path)
    else:
        _partial(a, X, path, blocks=6)  # rows 0..17 written
    changed = X.copy()
    changed[5:16] = random_one_hot(11, LENGTH, seed=12, layout="NCL")
    with pytest.raises(ValueError, match=r"differ from X in rows 5\.\.15 instead"):
        sa.saliency(a, changed, out=path, max_cpu_sequences=3)
    as_int8 = X.astype(np.int8)  # the same values in another dtype are the same X
    sa.saliency(a, as_int8, out=path, max_cpu_sequences=3)


def test_other_regions_are_refused_on_resume(models_ab, X, tmp_path):
    a, _ = models_ab
    start = np.arange(N) * 100
    regions = SimpleNamespace(chrom=["chr1"] * N, start=start, end=start + LENGTH)
    path = tmp_path / "t.h5"
    _partial(a, X, path, blocks=1, regions=regions)
    moved = SimpleNamespace(chrom=["chr1"] * N, start=start.copy(), end=start + LENGTH)
    moved.start[7] += 1
    moved.end[7] += 1
    with pytest.raises(ValueError, match=r"other regions \(row 7: chr1:700-724, now chr1:701"):
        sa.saliency(a, X, out=path, regions=moved)
    with pytest.raises(ValueError, match=r"written with regions \(now none\)"):
        sa.saliency(a, X, out=path)
    sa.saliency(a, X, out=path, regions=regions)
    assert read_tracks(path).regions.start.tolist() == start.tolist()


# --------------------------------------------------------------------------- merge
SALIENCY = ["--method", "saliency", "--batch-size", "1", "--target", "0,2", "--quiet"]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A genome, a regions file and their look-alikes: a genome with other bases at the same
    places, regions moved by 10 bp, and the demo model with other weights."""
    folder = tmp_path_factory.mktemp("job")
    data = demo.load_data()
    chr1 = "".join(data["sequences"][:7])  # 1,400 bp
    (folder / "g.fa").write_text(f">chr1\n{chr1}\n")
    other = chr1[:300] + chr1[300:500][::-1] + chr1[500:]
    (folder / "other.fa").write_text(f">chr1\n{other}\n")
    (folder / "r.bed").write_text("".join(f"chr1\t{200 * i}\t{200 * i + 200}\n" for i in range(6)))
    (folder / "moved.bed").write_text(
        "".join(f"chr1\t{200 * i + 10}\t{200 * i + 210}\n" for i in range(6))
    )
    model = demo.torch_model()
    state = {k: v + 0.01 for k, v in model.state_dict().items()}
    torch.save(state, folder / "other.pt")
    return folder


def _shard(job, out, index, *, genome="g.fa", regions="r.bed", extra=()):
    argv = ["explain", "--model", "seqattrib.demo:torch_model", "--genome", str(job / genome)]
    argv += ["--regions", str(job / regions), "--length", "200", *SALIENCY, *extra]
    assert main([*argv, "--out", str(out), "--shard", f"{index}/3"]) == 0
    return out.with_name(f"{out.stem}.shard-{index}-of-3{out.suffix}")


def test_merge_refuses_shards_of_another_model_genome_regions_or_setting(job, tmp_path):
    good = [_shard(job, tmp_path / "t.h5", i) for i in range(3)]
    single = tmp_path / "single.h5"
    argv = ["explain", "--model", "seqattrib.demo:torch_model", "--genome", str(job / "g.fa")]
    argv += ["--regions", str(job / "r.bed"), "--length", "200", *SALIENCY]
    assert main([*argv, "--out", str(single)]) == 0
    merged = merge_tracks(good, tmp_path / "merged.h5")
    expected = read_tracks(single)
    np.testing.assert_array_equal(read_tracks(merged).attributions, expected.attributions)
    np.testing.assert_array_equal(read_tracks(merged).regions.start, expected.regions.start)
    assert read_tracks(merged).settings == expected.settings
    odd = {
        "model": _shard(job, tmp_path / "m.h5", 1, extra=["--weights", str(job / "other.pt")]),
        "genome": _shard(job, tmp_path / "g.h5", 1, genome="other.fa"),
        "regions": _shard(job, tmp_path / "r.h5", 1, regions="moved.bed"),
        "settings": _shard(job, tmp_path / "s.h5", 1, extra=["--correct-gradient"]),
    }
    for what, shard in odd.items():
        with pytest.raises(ValueError, match=rf"same {what}|same settings"):
            merge_tracks([good[0], shard, good[2]], tmp_path / f"bad-{what}.h5")
        assert not (tmp_path / f"bad-{what}.h5").exists()
    assert leftovers(tmp_path) == []
