"""Reductions of (batch, bins, tracks) outputs (Enformer/Borzoi-like): every ``heads.tracks``
equals the same reduction written by hand in torch and in TensorFlow, for the head's values,
saliency and integrated gradients; genome coordinates map to the bins that cover them."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import CLOSED_FORM, assert_close

import seqattrib as sa
from seqattrib import heads

LENGTH, BIN, TRACKS = 32, 4, 5  # 8 output bins of 4 bp, 5 tracks
NAMES = ["CAGE:HepG2", "DNASE:K562", "CHIP:CTCF:K562", "DNASE:HepG2", "CAGE:K562"]
MASK = np.array([0, 1, 1, 0, 0, 0, 1, 0], bool)


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "kernel": (rng.standard_normal((3, 4, TRACKS)) / 3).astype(np.float32),  # (width, in, out)
        "bias": (rng.standard_normal(TRACKS) / 3).astype(np.float32),
    }


def torch_model(kind: str):
    """(batch, 4, L) -> softplus coverage (batch, bins, tracks); ``kind`` "dict" returns
    {"human": coverage, "mouse": 2 * coverage}, "tracks_first" (batch, tracks, bins)."""
    import torch

    w = _weights()

    class Coverage(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv1d(4, TRACKS, 3, padding=1)
            with torch.no_grad():
                self.conv.weight.copy_(torch.from_numpy(w["kernel"].transpose(2, 1, 0).copy()))
                self.conv.bias.copy_(torch.from_numpy(w["bias"]))

        def forward(self, x):
            h = torch.nn.functional.avg_pool1d(torch.nn.functional.softplus(self.conv(x)), BIN)
            if kind == "tracks_first":
                return h
            out = h.transpose(1, 2)
            return {"human": out, "mouse": 2 * out} if kind == "dict" else out

    return Coverage().eval()


_KERAS: dict[str, object] = {}


def keras_model(kind: str):
    """The same model in Keras 3 (TensorFlow), (batch, L, 4) inputs."""
    if kind not in _KERAS:
        import keras

        w = _weights()
        inputs = keras.Input((LENGTH, 4))
        conv = keras.layers.Conv1D(TRACKS, 3, padding="same", activation="softplus")
        h = keras.layers.AveragePooling1D(BIN)(conv(inputs))
        if kind == "tracks_first":
            out = keras.layers.Permute((2, 1))(h)
        elif kind == "dict":
            out = {"human": h, "mouse": keras.layers.Rescaling(2.0)(h)}
        else:
            out = h
        model = keras.Model(inputs, out)
        conv.set_weights([w["kernel"], w["bias"]])
        _KERAS[kind] = model
    return _KERAS[kind]


def _torch_cases():
    import torch

    return {
        "sum-slice": lambda o: o[:, 2:6, 2].sum(1, keepdim=True),
        "mean-mask-log1p": lambda o: torch.log1p(o[:, MASK][:, :, [0, 3]].mean((1, 2)))[:, None],
        "index-log-minus": lambda o: (
            torch.log(o[:, [0, 7, 3], 1].sum(1))
            - torch.log(o[:, [0, 7, 3]][:, :, [2, 4]].sum((1, 2)))
        )[:, None],
        "names-all-bins": lambda o: o[:, :, [1, 4]].sum((1, 2))[:, None],
        "one-bin-last-track": lambda o: o[:, 4, -1][:, None],
        "dict-step": lambda o: o["mouse"][:, ::2, 0].sum(1, keepdim=True),
        "tracks-first": lambda o: o[:, [1, 2], 1:3].sum((1, 2))[:, None],
    }


def _tf_cases():
    import tensorflow as tf

    def pick(o, bins, tracks):
        return tf.gather(tf.gather(o, bins, axis=1), tracks, axis=2)

    return {
        "sum-slice": lambda o: tf.reduce_sum(o[:, 2:6, 2], 1, keepdims=True),
        "mean-mask-log1p": lambda o: tf.math.log1p(
            tf.reduce_mean(pick(o, np.flatnonzero(MASK), [0, 3]), (1, 2))
        )[:, None],
        "index-log-minus": lambda o: (
            tf.math.log(tf.reduce_sum(pick(o, [0, 7, 3], [1]), (1, 2)))
            - tf.math.log(tf.reduce_sum(pick(o, [0, 7, 3], [2, 4]), (1, 2)))
        )[:, None],
        "names-all-bins": lambda o: tf.reduce_sum(tf.gather(o, [1, 4], axis=2), (1, 2))[:, None],
        "one-bin-last-track": lambda o: o[:, 4, -1][:, None],
        "dict-step": lambda o: tf.reduce_sum(o["mouse"][:, ::2, 0], 1, keepdims=True),
        "tracks-first": lambda o: tf.reduce_sum(o[:, 1:3, 1:3], (1, 2))[:, None],
    }


HEADS = {
    "sum-slice": ("plain", heads.tracks(2, bins=slice(2, 6))),
    "mean-mask-log1p": (
        "plain",
        heads.tracks([0, 3], bins=MASK, reduce="mean", transform="log1p"),
    ),
    "index-log-minus": ("plain", heads.tracks(1, bins=[0, 7, 3], transform="log", minus=[2, 4])),
    "names-all-bins": ("plain", heads.tracks(["DNASE:K562", "CAGE:K562"], track_names=NAMES)),
    "one-bin-last-track": ("plain", heads.tracks(-1, bins=4)),
    "dict-step": ("dict", heads.tracks(0, bins=slice(None, None, 2), output="mouse")),
    "tracks-first": ("tracks_first", heads.tracks([1, 2], bins=slice(1, 3), track_axis=1)),
}


def _numpy(t) -> np.ndarray:
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
@pytest.mark.parametrize("case", sorted(HEADS))
def test_a_reduction_equals_the_hand_written_output_fn(framework, case):
    kind, head = HEADS[case]
    if framework == "torch":
        import torch

        model, hand = torch_model(kind), _torch_cases()[case]
        X = sa.one_hot(_sequences(), layout="NCL")
        with torch.no_grad():
            raw = model(torch.from_numpy(X))
    else:
        model, hand = keras_model(kind), _tf_cases()[case]
        X = sa.one_hot(_sequences(), layout="NLC")
        raw = model(X)
    assert_close(_numpy(head(raw)), _numpy(hand(raw)), CLOSED_FORM)
    for method, kwargs in ((sa.saliency, {}), (sa.integrated_gradients, {"n_steps": 4})):
        named = method(model, X, output_fn=head, batch_size=4, **kwargs)
        written = method(model, X, output_fn=hand, batch_size=4, **kwargs)
        assert np.abs(written).max() > 0
        assert_close(named, written, CLOSED_FORM)


def _sequences() -> list[str]:
    rng = np.random.default_rng(0)
    return ["".join(rng.choice(list("ACGT"), LENGTH)) for _ in range(3)]


def test_a_stack_of_reductions_with_a_list_of_targets_equals_separate_calls():
    model = torch_model("plain")
    X = sa.one_hot(_sequences(), layout="NCL")
    parts = [HEADS[c][1] for c in ("sum-slice", "mean-mask-log1p", "index-log-minus")]
    together = sa.saliency(model, X, output_fn=heads.stack(*parts), target=[0, 1, 2], batch_size=4)
    as_list = sa.saliency(model, X, output_fn=parts, target=[0, 1, 2], batch_size=4)
    assert together.shape == (3, 3, 4, LENGTH)
    for k, part in enumerate(parts):
        alone = sa.saliency(model, X, output_fn=part, batch_size=4)
        assert_close(together[:, k], alone, CLOSED_FORM)
        assert_close(as_list[:, k], alone, CLOSED_FORM)


@pytest.mark.parametrize(
    ("start", "end", "window_start", "model", "expected"),
    [
        # Enformer: 896 bins of 128 bp from window_start + 40,960 (320 bins cropped per side)
        (1_040_960, 1_041_088, 1_000_000, "enformer", slice(0, 1)),
        (1_098_304, 1_098_305, 1_000_000, "enformer", slice(448, 449)),  # the window's centre
        (1_040_900 + 128 * 10 + 60, 1_040_960 + 128 * 12 + 1, 1_000_000, "enformer", slice(10, 13)),
        (1_155_520, 1_155_648, 1_000_000, "enformer", slice(895, 896)),
        # Borzoi: 6,144 bins of 32 bp from window_start + 163,840
        (163_840 + 32 * 3072, 163_840 + 32 * 3074, 0, "borzoi", slice(3072, 3074)),
    ],
)
def test_genome_coordinates_map_to_the_bins_that_cover_them(
    start, end, window_start, model, expected
):
    assert heads.bins_for(start, end, window_start=window_start, model=model) == expected


def test_bins_for_with_the_sizes_equals_the_model_preset():
    sizes = {"window_length": 196_608, "bin_size": 128, "n_bins": 896}
    for start in (40_960, 98_304, 155_000):
        assert heads.bins_for(start, start + 300, window_start=0, **sizes) == heads.bins_for(
            start, start + 300, window_start=0, model="enformer"
        )


@pytest.mark.parametrize(
    ("start", "end"), [(40_959, 41_000), (155_600, 155_649), (50_000, 50_000), (0, 100)]
)
def test_an_interval_outside_the_covered_bins_is_refused(start, end):
    with pytest.raises(ValueError, match=r"'start' parameter .*inside \[40960, 155648\)") as info:
        heads.bins_for(start, end, window_start=0, model="enformer")
    assert "\n" not in str(info.value)


def test_a_reduction_on_enformer_pytorch_equals_the_hand_written_output_fn():
    """enformer-pytorch's Enformer (small, random weights) returns {"human": (N, bins,
    tracks)}; the head reads it by key."""
    import torch
    from transformer_models import ENFORMER_LENGTH, enformer_small

    model = enformer_small()
    rng = np.random.default_rng(5)
    X = sa.one_hot(["".join(rng.choice(list("ACGT"), ENFORMER_LENGTH)) for _ in range(2)])
    head = heads.tracks([1, 4], bins=slice(6, 10), transform="log1p", output="human")

    def hand(out):
        return torch.log1p(out["human"][:, 6:10, [1, 4]].sum(dim=(1, 2)))[:, None]

    with torch.no_grad():
        raw = model(torch.from_numpy(X))
    assert_close(head(raw).numpy(), hand(raw).numpy(), CLOSED_FORM)
    for method, kwargs in ((sa.saliency, {}), (sa.integrated_gradients, {"n_steps": 3})):
        named = method(model, X, output_fn=head, batch_size=2, **kwargs)
        written = method(model, X, output_fn=hand, batch_size=2, **kwargs)
        assert np.abs(written).max() > 0
        assert_close(named, written, CLOSED_FORM)
