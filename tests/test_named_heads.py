"""Named heads of BPNet/ChromBPNet models (profile in two conventions, counts, log-sum-exp of
counts), several heads from one pass, and the errors of heads that do not fit a model: against
bpnet-lite's own wrappers and hand-written stop-gradient forms, in torch and TensorFlow."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import CLOSED_FORM, assert_close
from test_heads_reductions import torch_model as coverage_model

import seqattrib as sa
from seqattrib import heads
from seqattrib.io.fingerprint import function_identity

INPUT, OUTPUT = 2114, 1000  # bpnet-lite's BPNet: 2,114 bp in, 1,000 positions out
SHORT = 40


def _sequences(n: int, length: int, layout: str) -> np.ndarray:
    rng = np.random.default_rng(n + length)
    return sa.one_hot(["".join(rng.choice(list("ACGT"), length)) for _ in range(n)], layout=layout)


def _relative(actual: np.ndarray, desired: np.ndarray) -> None:
    """``assert_close`` at 1e-6 of the largest value (bpnet-lite's gradients are small)."""
    scale = float(np.abs(desired).max())
    assert scale > 0
    assert_close(actual / scale, desired / scale, CLOSED_FORM)


def bpnet_lite():
    """bpnet-lite's BPNet, 8 filters, 2 dilated layers, two strands, random weights scaled up
    so that the profile logits spread over several units (a softmax far from uniform)."""
    import torch
    from bpnetlite.bpnet import BPNet

    torch.manual_seed(0)
    model = BPNet(n_filters=8, n_layers=2, n_outputs=2, n_control_tracks=0, trimming=557,
                  verbose=False)  # fmt: skip
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4)
    return model.eval()


def torch_chrombpnet_like():
    """(batch, 4, 40) -> (profile (batch, 30), counts (batch, 1), bias counts (batch, 1)): one
    strand of profile logits, and the two counts a bias-factorised model adds."""
    import torch

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(1)
            self.conv = torch.nn.Conv1d(4, 6, 11)
            self.profile = torch.nn.Conv1d(6, 1, 1)
            self.counts = torch.nn.Linear(6, 2)

        def forward(self, x):
            h = torch.relu(self.conv(x)) * 3
            counts = self.counts(h.mean(-1))
            return self.profile(h)[:, 0], counts[:, :1], counts[:, 1:]

    return Model().eval()


_KERAS: list = []


def keras_bpnet_like(fresh: bool = False):
    """Keras (TensorFlow): (batch, 40, 4) -> (profile (batch, 30, 2), counts (batch, 1)), the
    layout of Keras BPNet models (strands last); one shared model unless ``fresh``."""
    if not _KERAS or fresh:
        import keras

        keras.utils.set_random_seed(2)
        inputs = keras.Input((SHORT, 4))
        h = keras.layers.Conv1D(6, 11, activation="relu")(inputs)
        profile = keras.layers.Conv1D(2, 1, kernel_initializer=keras.initializers.RandomNormal(
            stddev=3.0))(h)  # fmt: skip
        counts = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(h))
        _KERAS.insert(0, keras.Model(inputs, [profile, counts]))
    return _KERAS[0]


def torch_stop_gradient_profile(out):
    """ChromBPNet's weighted sum of mean-normalised logits, as its code writes it (torch)."""
    import torch

    logits = out[0].reshape(len(out[0]), -1)
    centred = logits - logits.mean(-1, keepdim=True)
    return (torch.softmax(centred.detach(), -1) * centred).sum(-1, keepdim=True)


def tf_stop_gradient_profile(out):
    """The same in TensorFlow (ChromBPNet's get_weightedsum_meannormed_logits)."""
    import tensorflow as tf

    logits = tf.reshape(out[0], (tf.shape(out[0])[0], -1))
    centred = logits - tf.reduce_mean(logits, axis=1)[:, None]
    return tf.reduce_sum(tf.nn.softmax(tf.stop_gradient(centred), axis=1) * centred, axis=1)


# --------------------------------------------------------------------------- bpnet-lite
def test_the_bpnet_lite_convention_equals_bpnet_lites_profile_wrapper():
    import torch
    from bpnetlite.bpnet import CountWrapper, ProfileWrapper

    model = bpnet_lite()
    X = _sequences(3, INPUT, "NCL")
    head = heads.profile(convention="bpnet-lite")
    with torch.no_grad():
        raw = model(torch.from_numpy(X))
        assert raw[0].shape == (3, 2, OUTPUT)
        _relative(head(raw).numpy(), ProfileWrapper(model)(torch.from_numpy(X)).numpy())
    _relative(
        sa.saliency(model, X, output_fn=head, batch_size=3),
        sa.saliency(ProfileWrapper(model), X, batch_size=3),
    )
    _relative(
        sa.saliency(model, X, output_fn=heads.counts(), batch_size=3),
        sa.saliency(CountWrapper(model), X, batch_size=3),
    )


def test_the_two_conventions_share_the_value_not_the_gradient():
    import torch

    model = bpnet_lite()
    X = _sequences(2, INPUT, "NCL")
    with torch.no_grad():
        raw = model(torch.from_numpy(X))
    chrombpnet, lite = heads.profile(), heads.profile(convention="bpnet-lite")
    _relative(chrombpnet(raw).numpy(), lite(raw).numpy())
    a = sa.saliency(model, X, output_fn=chrombpnet, batch_size=2)
    b = sa.saliency(model, X, output_fn=lite, batch_size=2)
    assert np.abs(a - b).max() > 0.1 * np.abs(b).max()


# --------------------------------------------------------------------------- chrombpnet
@pytest.mark.parametrize("model_name", ["bpnet_lite", "chrombpnet_like", "keras"])
def test_the_chrombpnet_convention_equals_its_stop_gradient_form(model_name):
    if model_name == "keras":
        model, hand = keras_bpnet_like(), tf_stop_gradient_profile
        X = _sequences(3, SHORT, "NLC")
    else:
        model = bpnet_lite() if model_name == "bpnet_lite" else torch_chrombpnet_like()
        hand = torch_stop_gradient_profile
        X = _sequences(3, INPUT if model_name == "bpnet_lite" else SHORT, "NCL")
    head = heads.profile(convention="chrombpnet")
    for method, kwargs in ((sa.saliency, {}), (sa.integrated_gradients, {"n_steps": 3})):
        _relative(
            method(model, X, output_fn=head, batch_size=3, **kwargs),
            method(model, X, output_fn=hand, batch_size=3, **kwargs),
        )


def test_logsumexp_counts_is_the_total_of_the_two_counts():
    import torch

    model = torch_chrombpnet_like()
    X = _sequences(3, SHORT, "NCL")

    def hand(out):
        return torch.log(torch.exp(out[1]) + torch.exp(out[2]))

    with torch.no_grad():
        raw = model(torch.from_numpy(X))
    head = heads.logsumexp_counts(outputs=(1, 2))
    assert_close(head(raw).numpy(), hand(raw).numpy(), CLOSED_FORM)
    _relative(
        sa.saliency(model, X, output_fn=head, batch_size=3),
        sa.saliency(model, X, output_fn=hand, batch_size=3),
    )


# --------------------------------------------------------------------------- one pass
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_profile_and_counts_from_one_pass_equal_two_calls(framework):
    if framework == "torch":
        model, X = torch_chrombpnet_like(), _sequences(3, SHORT, "NCL")
    else:
        model, X = keras_bpnet_like(), _sequences(3, SHORT, "NLC")
    both = heads.stack(heads.profile(), heads.counts())
    together = sa.integrated_gradients(model, X, output_fn=both, target=[0, 1], n_steps=3)
    assert together.shape == (3, 2, *X.shape[1:])
    for k, head in enumerate((heads.profile(), heads.counts())):
        alone = sa.integrated_gradients(model, X, output_fn=head, n_steps=3)
        assert_close(together[:, k], alone, CLOSED_FORM)


METHODS = {
    "saliency": lambda m, X, fn: sa.saliency(m, X, output_fn=fn, target=[0, 1], batch_size=8),
    "ig": lambda m, X, fn: sa.integrated_gradients(
        m, X, output_fn=fn, target=[0, 1], batch_size=8, n_steps=3
    ),
    "eig": lambda m, X, fn: sa.expected_integrated_gradients(
        m, X, output_fn=fn, target=[0, 1], batch_size=8, n_baselines=3, n_steps=2
    ),
    "deep_lift_shap": lambda m, X, fn: sa.deep_lift_shap(
        m, X, output_fn=fn, target=[0, 1], batch_size=8, n_baselines=3
    ),
    "ism": lambda m, X, fn: sa.ism(m, X, output_fn=fn, target=[0, 1], batch_size=8),
    "ism_exact": lambda m, X, fn: sa.ism(
        m, X, output_fn=fn, target=[0, 1], batch_size=8, fast=False
    ),
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_takes_heads_as_their_hand_written_output_fn(method):
    import torch

    def hand(out):
        return torch.cat([torch_stop_gradient_profile(out[:2]), out[1]], dim=1)

    model, X = torch_chrombpnet_like(), _sequences(3, SHORT, "NCL")
    with warnings.catch_warnings():  # DeepSHAP's gap of softmax weights that move (expected)
        warnings.filterwarnings("ignore", "deep_lift_shap: the contributions", sa.SeqAttribWarning)
        named = METHODS[method](model, X, [heads.profile(), heads.counts()])
        written = METHODS[method](model, X, hand)
    assert named.shape == (3, 2, 4, SHORT)
    assert np.abs(written[:, 1]).max() > 0
    _relative(named, written)


def test_equal_heads_are_equal_and_different_heads_are_not():
    assert heads.profile() == heads.profile(0, convention="chrombpnet")
    assert hash(heads.tracks([1, 2], bins=slice(3, 5))) == hash(
        heads.tracks([1, 2], bins=slice(3, 5))
    )
    assert heads.tracks(1, bins=np.array([0, 1, 1], bool)) == heads.tracks(
        1, bins=[False, True, True]
    )
    assert heads.stack(heads.profile(), heads.counts()) == heads.stack(
        heads.stack(heads.profile()), heads.counts()
    )
    different = [
        heads.profile(),
        heads.profile(convention="bpnet-lite"),
        heads.counts(),
        heads.counts(2),
        heads.tracks(1),
        heads.tracks(1, reduce="mean"),
        heads.tracks(1, bins=[1, 2]),
        heads.stack(heads.profile(), heads.counts()),
        heads.stack(heads.counts(), heads.profile()),
    ]
    assert len(set(different)) == len(different)
    # results files tell them apart too
    assert len({function_identity(h) for h in different}) == len(different)


# --------------------------------------------------------------------------- errors
def _torch_single_output():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv1d(4, 3, 5), torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten()
    ).eval()


ERRORS = [
    ("single", heads.profile(), r"'output' parameter of seqattrib\.heads\.profile .*None for a "
     r"model that returns one tensor\. Got 0 for a model returning a tensor of shape \(2, 3\)"),
    ("chrombpnet", heads.profile(output=1), r"'output' parameter of seqattrib\.heads\.profile "
     r"must be the profile logits.* tensor of shape \(2, 1\)"),
    ("coverage", heads.counts(output=None), r"'output' parameter of seqattrib\.heads\.counts "
     r"must be a counts output of shape \(batch,\) or \(batch, K\)\. Got output=None, a "
     r"tensor of shape \(2, 8, 5\)"),
    ("chrombpnet", heads.counts(output=3), r"'output' .*a position 0\.\.2 .*Got 3 for a model "
     r"returning tuple\(a tensor of shape \(2, 30\)"),
    ("coverage", heads.tracks(0, bins=slice(5, 12)), r"'bins' parameter of seqattrib\.heads"
     r"\.tracks must be bins within the model's 8 output bins .*\(2, 8, 5\)"),
    ("coverage", heads.tracks(0, bins=[2, 8]), r"'bins' .*bin indices 0\.\.7 .*Got 8 from .*"
     r"\(2, 8, 5\)"),
    ("coverage", heads.tracks(5), r"'track' parameter .*track indices 0\.\.4 \(the model has 5 "
     r"tracks\)\. Got 5 from a model returning a tensor of shape \(2, 8, 5\)"),
    ("coverage", heads.tracks(0, minus=[1, -6]), r"'minus' .*Got -6 from .*\(2, 8, 5\)"),
    ("coverage", heads.tracks(0, bins=np.zeros(8, bool)), r"'bins' .*at least one bin\. Got a "
     r"mask with no bin set, which selects none of the 8 bins of a model returning a tensor "
     r"of shape \(2, 8, 5\)"),
    ("coverage", heads.tracks(0, bins=slice(6, 2)), r"'bins' .*at least one bin\. Got "
     r"slice\(6, 2, None\)"),
    ("coverage", heads.tracks(0, bins=np.ones(9, bool)), r"'bins' .*mask of the model's 8 "
     r"output bins\. Got a mask of 9 bins"),
    ("dict", heads.tracks(0, output="rat"), r"'output' .*keys \['human', 'mouse'\] .*Got "
     r"'rat' for a model returning \{'human': a tensor of shape \(2, 8, 5\)"),
    ("dict", heads.tracks(0), r"'output' .*the output to use when the model returns several"),
    ("single", heads.tracks(0), r"'output' parameter of seqattrib\.heads\.tracks must be an "
     r"output of shape \(batch, bins, tracks\).*shape \(2, 3\)"),
]  # fmt: skip


@pytest.mark.parametrize(("model_name", "head", "match"), ERRORS)
def test_a_head_that_does_not_fit_the_model_names_its_parameter_and_the_outputs(
    model_name, head, match
):
    model = {
        "single": _torch_single_output,
        "chrombpnet": torch_chrombpnet_like,
        "coverage": lambda: coverage_model("plain"),
        "dict": lambda: coverage_model("dict"),
    }[model_name]()
    X = _sequences(3, 32 if model_name in ("coverage", "dict") else SHORT, "NCL")
    with pytest.raises(ValueError, match=match) as info:
        sa.saliency(model, X, output_fn=head, batch_size=3)
    assert "\n" not in str(info.value)
    assert "raised" not in str(info.value)  # the head's own message, not a wrapped one


@pytest.mark.parametrize("method", ["ig", "ism"])
def test_a_head_that_does_not_fit_a_keras_model_is_named_the_same(method):
    X = _sequences(2, SHORT, "NLC")
    run = {
        "ig": lambda h: sa.integrated_gradients(keras_bpnet_like(), X, output_fn=h, n_steps=2),
        "ism": lambda h: sa.ism(keras_bpnet_like(), X, output_fn=h, fast=False),
    }[method]
    with pytest.raises(ValueError, match=r"^The 'output' parameter of seqattrib\.heads\.counts "
                       r"must be a counts output .*shape \(2, 30, 2\)"):  # fmt: skip
        run(heads.counts(output=0))


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: heads.profile(convention="bpnet"), ValueError, r"'convention' .*'chrombpnet'"),
        (lambda: heads.profile(output=1.5), TypeError, r"'output' .*None, a position"),
        (lambda: heads.logsumexp_counts(outputs=(1,)), ValueError, r"'outputs' .*two or more"),
        (lambda: heads.tracks(0, reduce="max"), ValueError, r"'reduce' .*\['sum', 'mean'\]"),
        (lambda: heads.tracks(0, transform="log2"), ValueError, r"'transform' .*'log1p'"),
        (lambda: heads.tracks(0, track_axis=0), ValueError, r"'track_axis'"),
        (lambda: heads.tracks(0, bins=[1.5, 3]), TypeError, r"'bins' .*a boolean mask"),
        (
            lambda: heads.tracks(0, bins=(440, 456)),
            TypeError,
            r"'bins' .*a slice for a range of bins, or a list of bin indices\. Got \(440, 456\) "
            r"instead\. Pass slice\(440, 456\) for a range, or \[440, 456\] for these bins",
        ),
        (lambda: heads.tracks(0, bins=slice(0, 4, 0)), ValueError, r"'bins' .*slice of ints"),
        (lambda: heads.tracks([]), ValueError, r"'track' .*non-empty list"),
        (lambda: heads.tracks("DNASE:K562"), TypeError, r"'track' .*with track_names= given"),
        (
            lambda: heads.tracks("DNASE:k562", track_names=["DNASE:K562", "CAGE:K562"]),
            ValueError,
            r"'track' .*among the 2 track_names\. Got 'DNASE:k562' instead\. Names that "
            r"contain it: \['DNASE:K562'\]",
        ),
        (lambda: heads.stack(), ValueError, r"'heads' .*at least one head"),
        (lambda: heads.stack(heads.counts(), 3), TypeError, r"'heads' .*heads or callables"),
        (lambda: heads.bins_for(0, 10, window_start=0), ValueError, r"'window_length'"),
        (
            lambda: heads.bins_for(0, 10, window_start=0, model="enformer", bin_size=128),
            ValueError,
            r"'model' .*None when window_length",
        ),
        (
            lambda: heads.bins_for(0, 10, window_start=0, window_length=100, bin_size=32,
                                   n_bins=4),
            ValueError,
            r"'n_bins' .*fit centred",
        ),
    ],
)  # fmt: skip
def test_bad_head_settings_are_refused_in_one_line(build, error, match):
    with pytest.raises(error, match=match) as info:
        build()
    assert "\n" not in str(info.value)


def test_an_output_fn_that_is_not_a_head_or_callable_is_refused():
    with pytest.raises(TypeError, match=r"'output_fn' .*a named head .*or a list of them"):
        sa.saliency(_torch_single_output(), _sequences(2, SHORT, "NCL"), output_fn="counts")


def test_an_equal_head_reuses_the_compiled_tensorflow_functions(monkeypatch):
    """TensorFlow traces a head once per compiled function; a new but equal head finds the
    functions compiled for the first (no new trace), a different one compiles its own."""
    from seqattrib.heads.profile import Profile

    calls = []
    original = Profile.__call__
    monkeypatch.setattr(
        Profile, "__call__", lambda self, raw: calls.append(1) or original(self, raw)
    )
    model, X = keras_bpnet_like(fresh=True), _sequences(2, SHORT, "NLC")
    first = sa.saliency(model, X, output_fn=heads.profile(), batch_size=2)
    traced = len(calls)
    assert traced > 0
    again = sa.saliency(model, X, output_fn=heads.profile(0, convention="chrombpnet"), batch_size=2)
    assert len(calls) == traced
    np.testing.assert_array_equal(again, first)
    sa.saliency(model, X, output_fn=heads.profile(convention="bpnet-lite"), batch_size=2)
    assert len(calls) > traced
