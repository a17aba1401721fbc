"""One name per idea: the old names still work for one release, warn once, and give exactly
what the new names give; the method registry drives the command line; ``alphabet_axis`` means
the same thing in every function."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import LENGTH, make_model
from models import random_one_hot

import seqattrib as sa
import seqattrib.io
import seqattrib.plot
from seqattrib import _errors, demo
from seqattrib._errors import SeqAttribDeprecationWarning
from seqattrib.attribution.methods import METHODS, Method
from seqattrib.cli import main
from seqattrib.io import read_tracks

MODEL = "seqattrib.demo:torch_model"
AXIS_DOC = "alphabet_axis : {None, -1, -2} or the same axis as a positive index"


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """Each test starts as a new process would: no old name warned about yet."""
    monkeypatch.setattr(_errors, "_WARNED", set())


@pytest.fixture
def model(conv_weights):
    return make_model("torch", "convnet", conv_weights, "NCL")


@pytest.fixture
def X():
    return random_one_hot(3, LENGTH, seed=3, layout="NCL")


@pytest.fixture(scope="module")
def fasta(tmp_path_factory):
    data = demo.load_data()
    path = tmp_path_factory.mktemp("names") / "seqs.fa"
    path.write_text("".join(f">s{i}\n{s}\n" for i, s in enumerate(data["sequences"][:3])))
    return path


def _deprecations(record: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in record if issubclass(w.category, SeqAttribDeprecationWarning)]


# --------------------------------------------------------------------------- API keywords
QUADRATURE_CALLS = {
    "integrated_gradients": lambda m, X, **kw: sa.integrated_gradients(m, X, n_steps=3, **kw),
    "expected_integrated_gradients": lambda m, X, **kw: sa.expected_integrated_gradients(
        m, X, n_baselines=2, n_steps=3, **kw
    ),
    "quadrature": lambda m, X, **kw: sa.quadrature(n_steps=3, **kw),
}
#: A rule that is not the function's default, so an ignored keyword would show.
NOT_DEFAULT = {
    "integrated_gradients": "gausslegendre",
    "expected_integrated_gradients": "riemann_trapezoid",
    "quadrature": "gausslegendre",
}
NEW_NAME = {"quadrature": "name"}


@pytest.mark.parametrize("func", sorted(QUADRATURE_CALLS))
def test_old_quadrature_keyword_works_warns_once_and_gives_the_same(model, X, func):
    call, rule = QUADRATURE_CALLS[func], NOT_DEFAULT[func]
    new = NEW_NAME.get(func, "quadrature")
    expected = call(model, X, **{new: rule})
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        old = call(model, X, method=rule)
        again = call(model, X, method=rule)
    (warned,) = _deprecations(record)  # once: the second use is silent
    assert issubclass(warned.category, FutureWarning)  # shown to end users by default
    assert issubclass(warned.category, sa.SeqAttribWarning)
    assert f"{new}=" in str(warned.message) and f"method= of {func}()" in str(warned.message)
    assert Path(warned.filename) == Path(__file__)  # points at the caller's line
    for result in (old, again):
        for got, want in zip(result, expected, strict=True):
            np.testing.assert_array_equal(got, want)
    default = call(model, X) if func != "quadrature" else sa.quadrature("riemann_trapezoid", 3)
    assert not all(np.array_equal(d, e) for d, e in zip(default, expected, strict=True))


@pytest.mark.parametrize("func", sorted(QUADRATURE_CALLS))
def test_old_and_new_quadrature_keyword_together_is_an_error(model, X, func):
    new = NEW_NAME.get(func, "quadrature")
    with pytest.raises(TypeError, match=rf"'method' parameter of {func} .*{new}="):
        QUADRATURE_CALLS[func](model, X, method="gausslegendre", **{new: "gausslegendre"})


def test_explain_takes_quadrature_like_the_methods(model, X):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = sa.explain(model, X, method="ig", n_steps=3, quadrature="gausslegendre")
    assert not _deprecations(record)
    want = sa.integrated_gradients(model, X, n_steps=3, quadrature="gausslegendre")
    np.testing.assert_array_equal(got, want)


def test_the_methods_own_warnings_still_point_at_the_callers_line(model, X):
    """The layer that accepts the old names adds a call; a method's warnings still name the
    caller's file."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        sa.expected_integrated_gradients(
            model, X, n_baselines=2, n_steps=2, tolerance=1e-9, max_baselines=4
        )
    (warned,) = [w for w in record if "did not reach tolerance" in str(w.message)]
    assert Path(warned.filename) == Path(__file__)


def _read_all(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


PLOTS = {
    "plot_logo": lambda scores, **kw: sa.plot.plot_logo(scores, **kw),
    "plot_ism": lambda scores, **kw: sa.plot.plot_ism(scores, **kw),
    "plot_variant": lambda scores, **kw: sa.plot.plot_variant(scores, scores[::-1], **kw),
}


@pytest.mark.parametrize("func", sorted(PLOTS))
def test_plot_path_keyword_is_out(func, tmp_path):
    pytest.importorskip("matplotlib")
    scores = np.random.default_rng(0).normal(size=(LENGTH, 4))
    PLOTS[func](scores, out=tmp_path / "new.png")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        PLOTS[func](scores, path=tmp_path / "old.png")
        PLOTS[func](scores, path=tmp_path / "again.png")
    (warned,) = _deprecations(record)
    assert f"path= of {func}() is renamed out=" in str(warned.message)
    images = _read_all(tmp_path)
    assert images["old.png"] == images["new.png"] == images["again.png"]
    with pytest.raises(TypeError, match="'path'"):
        PLOTS[func](scores, path=tmp_path / "a.png", out=tmp_path / "b.png")


def test_export_outdir_keyword_is_out(model, X, tmp_path):
    scores = sa.saliency(model, X, target=[0, 1])
    sa.io.export_modisco(scores, tmp_path / "new", sequences=X)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        sa.io.export_modisco(scores, outdir=tmp_path / "old", sequences=X)
        sa.io.export_modisco(scores, outdir=tmp_path / "again", sequences=X)
    (warned,) = _deprecations(record)
    assert "outdir= of export_modisco() is renamed out=" in str(warned.message)
    assert (
        _read_all(tmp_path / "old") == _read_all(tmp_path / "new") == _read_all(tmp_path / "again")
    )
    with pytest.raises(TypeError, match="'outdir'"):
        sa.io.export_modisco(scores, outdir=tmp_path / "a", out=tmp_path / "b", sequences=X)


def _regions():
    return sa.io.Regions(
        chrom=np.array(["chr1", "chr1"]),
        start=np.array([0, 30]),
        end=np.array([20, 50]),
        name=np.array(["a", "b"]),
        index=np.arange(2),
    )


WRITERS = {
    "write_bed": lambda **kw: sa.io.write_bed(regions=_regions(), **kw),
    "write_bigwig": lambda **kw: sa.io.write_bigwig(
        scores=np.linspace(-1, 1, 40, dtype=np.float32).reshape(2, 20),
        regions=_regions(),
        chrom_sizes={"chr1": 60},
        **kw,
    ),
}


@pytest.mark.parametrize("func", sorted(WRITERS))
def test_writer_path_keyword_is_out(func, tmp_path):
    if func == "write_bigwig":
        pytest.importorskip("pyBigWig")
    WRITERS[func](out=tmp_path / "new")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        WRITERS[func](path=tmp_path / "old")
        WRITERS[func](path=tmp_path / "again")
    (warned,) = _deprecations(record)
    assert f"path= of {func}() is renamed out=" in str(warned.message)
    files = _read_all(tmp_path)
    assert files["old"] == files["new"] == files["again"]
    with pytest.raises(TypeError, match="'path'"):
        WRITERS[func](path=tmp_path / "a", out=tmp_path / "b")


# --------------------------------------------------------------------------- command line
def _explain(fasta: Path, out: Path, *rule: str) -> list[str]:
    return [
        "explain",
        "--model",
        MODEL,
        "--fasta",
        str(fasta),
        "--method",
        "ig",
        "--n-steps",
        "2",
        *rule,
        "--out",
        str(out),
        "--quiet",
    ]


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if ": warning: " in line]


def test_integration_flag_is_quadrature(fasta, tmp_path, capsys):
    assert main(_explain(fasta, tmp_path / "new.h5", "--quadrature", "gausslegendre")) == 0
    assert _warnings(capsys.readouterr().err) == []
    assert main(_explain(fasta, tmp_path / "old.h5", "--integration", "gausslegendre")) == 0
    (line,) = _warnings(capsys.readouterr().err)
    assert line.startswith("seqattrib explain: warning: --integration") and "--quadrature" in line
    assert main(_explain(fasta, tmp_path / "again.h5", "--integration", "gausslegendre")) == 0
    assert _warnings(capsys.readouterr().err) == []
    new, old, again = (read_tracks(tmp_path / f"{n}.h5") for n in ("new", "old", "again"))
    assert new.settings["quadrature"] == old.settings["quadrature"] == "gausslegendre"
    np.testing.assert_array_equal(old.attributions, new.attributions)
    np.testing.assert_array_equal(again.attributions, new.attributions)


@pytest.fixture(scope="module")
def tracks(tmp_path_factory, conv_weights):
    """A hypothetical-score tracks file and its two shard files."""
    folder = tmp_path_factory.mktemp("tracks")
    model = make_model("torch", "convnet", conv_weights, "NCL")
    X = random_one_hot(4, LENGTH, seed=5, layout="NCL")
    sa.saliency(model, X, target=[0, 1], out=folder / "t.h5")
    for i in range(2):
        sa.saliency(model, X, target=[0, 1], shard=(i, 2), out=folder / f"t.shard-{i}-of-2.h5")
    return folder


COMMANDS = {
    "export": (["export", "modisco", "{t}/t.h5"], "--outdir", "folder"),
    "plot": (["plot", "{t}/t.h5", "--row", "1"], "--output", "image.png"),
    "merge": (["merge", "{t}/t.shard-0-of-2.h5", "{t}/t.shard-1-of-2.h5"], "--output", "m.h5"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_old_output_flags_are_out(command, tracks, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    argv, old_flag, name = COMMANDS[command]
    argv = [a.format(t=tracks) for a in argv]
    written = {}
    for run, flag in (("new", "--out"), ("short", "-o"), ("old", old_flag), ("again", old_flag)):
        (tmp_path / run).mkdir()
        assert main([*argv, flag, str(tmp_path / run / name)]) == 0
        warned = _warnings(capsys.readouterr().err)
        if run == "old":
            (line,) = warned
            assert line.startswith(f"seqattrib {command}: warning: {old_flag} of")
            assert line.endswith("Use --out instead.")
        else:
            assert warned == []
        path = tmp_path / run / name
        written[run] = _read_all(path) if path.is_dir() else path.read_bytes()
    if command == "merge":  # a file of its own: compare what it holds
        merged = [read_tracks(tmp_path / run / name) for run in written]
        for m in merged:
            np.testing.assert_array_equal(m.attributions, read_tracks(tracks / "t.h5").attributions)
    else:
        assert written["old"] == written["new"] == written["short"] == written["again"]


def test_demo_outdir_flag_is_out(tmp_path, capsys):
    argv = ["demo", "--n-sequences", "4", "--quiet", "--outdir", str(tmp_path / "d")]
    assert main(argv) == 0
    (line,) = _warnings(capsys.readouterr().err)
    assert line.startswith("seqattrib demo: warning: --outdir") and "--out" in line
    assert (tmp_path / "d" / "tracks.h5").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "modisco", "t.h5", "-o", "a", "--outdir", "b"],
        ["plot", "t.h5", "--output", "a.png", "--out", "b.png"],
        [
            "explain",
            "--model",
            MODEL,
            "--quadrature",
            "gausslegendre",
            "--integration",
            "gausslegendre",
        ],
    ],
)
def test_old_and_new_flag_together_is_an_error(argv, capsys):
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "given twice" in err and "old name" in err


# --------------------------------------------------------------------------- the registry
def test_a_registered_method_reaches_the_command_line(monkeypatch, fasta, tmp_path, capsys):
    received: dict = {}

    def fake(model, X, *, n_steps=7, quadrature="riemann_left", random_state=0, **shared):
        received.update(n_steps=n_steps, quadrature=quadrature, random_state=random_state)
        received.update(shared)
        return shared["out"]

    monkeypatch.setitem(METHODS, "fake", Method("fake", fake, "a method made up for a test"))
    with pytest.raises(SystemExit):
        main(["explain", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "{saliency,ig,eig,deeplift_shap,fake}" in text
    assert "fake, a method made up for a test" in text
    assert "ig, eig, fake: points (gausslegendre) or intervals" in text
    assert "(default: 25 for ig, 3 for eig, 7 for fake)" in text
    out = tmp_path / "fake.h5"
    flags = ["--n-steps", "5", "--quadrature", "gausslegendre", "--random-state", "3"]
    argv = ["explain", "--model", MODEL, "--fasta", str(fasta), "--method", "fake", *flags]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert (received["n_steps"], received["quadrature"], received["random_state"]) == (
        5,
        "gausslegendre",
        3,
    )
    assert received["out"] == str(out) and received["target"] == 0
    assert not {"n_baselines", "baselines", "correct_gradient", "multiply_by_inputs"} & set(
        received
    )
    assert main([*argv, "--n-baselines", "3", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "seqattrib explain: error: --n-baselines must be used with --method eig or "
        "deeplift_shap. Got '--method fake' instead."
    )
    with pytest.raises(SystemExit):
        main(["variants", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "{saliency,ig,eig,deeplift_shap,ism,fake}" in text
    assert "--attributions ig, eig, fake: points" in text


def test_saliency_keeps_its_gradients_under_hypothetical(fasta, tmp_path, capsys):
    """--hypothetical is what saliency stores anyway: accepted, nothing changes; a flag of a
    keyword saliency lacks is refused, naming the methods that take it."""
    base = ["explain", "--model", MODEL, "--fasta", str(fasta), "--method", "saliency", "--quiet"]
    assert main([*base, "--out", str(tmp_path / "a.h5")]) == 0
    assert main([*base, "--hypothetical", "--out", str(tmp_path / "b.h5")]) == 0
    a, b = (read_tracks(tmp_path / f"{n}.h5") for n in "ab")
    assert a.settings["multiply_by_inputs"] is False and b.settings["multiply_by_inputs"] is False
    np.testing.assert_array_equal(a.attributions, b.attributions)
    capsys.readouterr()
    assert main([*base, "--n-steps", "5", "--out", str(tmp_path / "c.h5")]) == 1
    assert "--n-steps must be used with --method ig or eig" in capsys.readouterr().err


def test_variants_route_the_registry_options():
    from seqattrib.cli import build_parser
    from seqattrib.cli.commands import _attribution_options

    base = ["variants", "--model", MODEL, "--genome", "g.fa", "--table", "t.tsv"]
    base += ["--length", "100", "--out", "e.tsv", "--n-steps", "4", "--n-baselines", "3"]
    expected = {
        "saliency": {},  # its scores are always plain gradients
        "ism": {},
        "ig": {"n_steps": 4, "random_state": 0},
        "eig": {"n_steps": 4, "n_baselines": 3, "random_state": 0},
        "deeplift_shap": {"n_baselines": 3, "random_state": 0},
    }
    for method, options in expected.items():
        args = build_parser().parse_args([*base, "--attributions", method])
        assert _attribution_options(args) == options


# --------------------------------------------------------------------------- alphabet_axis
def _public_functions() -> dict[str, object]:
    found = {}
    for module in (sa, sa.io, sa.plot):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not isinstance(obj, type):
                found[name] = obj
    return found


def _logo_boxes(ax) -> list[tuple[float, ...]]:
    return [tuple(p.get_path().get_extents().bounds) for p in ax.patches]


def test_every_function_taking_alphabet_axis_says_the_same():
    taking = {
        name: f
        for name, f in _public_functions().items()
        if "alphabet_axis" in inspect.signature(f).parameters
    }
    assert set(taking) == set(AXIS_CALLS)
    for name, f in taking.items():
        assert AXIS_DOC in (f.__doc__ or ""), name


AXIS_CALLS = {
    "saliency": lambda m, X, **kw: sa.saliency(m, X, **kw),
    "integrated_gradients": lambda m, X, **kw: sa.integrated_gradients(m, X, n_steps=2, **kw),
    "expected_integrated_gradients": lambda m, X, **kw: sa.expected_integrated_gradients(
        m, X, n_baselines=2, n_steps=2, **kw
    ),
    "deep_lift_shap": lambda m, X, **kw: sa.deep_lift_shap(m, X, n_baselines=2, **kw),
    "ism": lambda m, X, **kw: sa.ism(m, X, target=[0, 1], **kw),
    "dependency_map": lambda m, X, **kw: sa.dependency_map(
        m, X, target=[0, 1], positions=(2, 8), return_effects=True, **kw
    ),
    "marginalize": lambda m, X, **kw: sa.marginalize(m, X, "ACG", target=[0, 1], **kw),
    "space": lambda m, X, **kw: sa.space(m, X, ["AC", "GT"], distances=[0, 2], **kw),
    "ablate": lambda m, X, **kw: sa.ablate(m, X, start=2, end=8, n_shuffles=2, **kw),
    "tile_shuffle": lambda m, X, **kw: sa.tile_shuffle(m, X, window=6, n_shuffles=2, **kw),
    "project": lambda m, X, **kw: sa.project(np.tile(X[:, None], (1, 2, 1, 1)) * 0.5, X, **kw),
    "ism_to_hypothetical": lambda m, X, **kw: sa.ism_to_hypothetical(
        sa.ism(m, X, target=[0, 1]), **kw
    ),
    "decode": lambda m, X, **kw: sa.decode(X, **kw),
    "plot_logo": lambda m, X, **kw: _logo_boxes(sa.plot.plot_logo(X[0] - 0.3, **kw)),
    "plot_ism": lambda m, X, **kw: sa.plot.plot_ism(X[0] - 0.3, **kw).images[0].get_array(),
    "plot_variant": lambda m, X, **kw: [
        _logo_boxes(ax) for ax in sa.plot.plot_variant(X[0], X[1], **kw).axes
    ],
    "plot_seqlet": lambda m, X, **kw: [
        _logo_boxes(ax)
        for ax in sa.plot.plot_seqlet(X[0] - 0.3, np.full((4, 4), 0.25), start=2, end=6, **kw).axes
    ],
}


@pytest.mark.parametrize("name", sorted(AXIS_CALLS))
def test_alphabet_axis_minus_two_and_its_positive_index_agree(model, X, name):
    """X of shape (N, 4, L): -2 and 1 name its alphabet; the scores of ism_to_hypothetical
    are (N, K, 4, L): -2 and 2; one sequence's (4, L) scores (the plots): -2 and 0."""
    if name.startswith("plot"):
        pytest.importorskip("matplotlib")
    ndim = {"ism_to_hypothetical": 4}.get(name, 2 if name.startswith("plot") else 3)
    call = AXIS_CALLS[name]
    inferred = call(model, X)
    for axis in (-2, ndim - 2):
        got = call(model, X, alphabet_axis=axis)
        if name == "decode":
            assert got == inferred
        else:
            np.testing.assert_equal(got, inferred)
    with pytest.raises(ValueError, match="'alphabet_axis'"):
        call(model, X, alphabet_axis=ndim - 3 if ndim > 2 else -3)


def test_decode_of_one_sequence_takes_its_own_axes():
    X = sa.one_hot(["ACGTTGCAAC"], layout="NCL")[0]  # (4, 10)
    assert sa.decode(X, alphabet_axis=0) == sa.decode(X, alphabet_axis=-2) == ["ACGTTGCAAC"]
    assert sa.decode(X.T, alphabet_axis=1) == sa.decode(X.T, alphabet_axis=-1) == ["ACGTTGCAAC"]
