"""The Keras 3 reader of a model's local prefix (fast ISM): the nodes, windowed with a plain
reference evaluator, reproduce every model through the tail; unsupported models are refused
with the offending layer named."""

from __future__ import annotations

from typing import Any

import models
import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from seqattrib.backends.keras.graph import keras_local_graph  # noqa: E402
from seqattrib.backends.local_graph import GraphUnsupported, LocalGraph  # noqa: E402

layers = keras.layers


# --------------------------------------------------------------------------- reference
def _along(axis: int, index: slice) -> tuple[slice, ...]:
    return (slice(None),) * axis + (index,)


def node_values(graph: LocalGraph, x: Any) -> list[Any]:
    """Every node's full value, straight from the node descriptions."""
    values: list[Any] = []
    for node in graph.nodes:
        if node.kind == "input":
            value = x
        elif node.kind == "fixed":
            value = node.apply(x)
        else:
            first = node.inputs[0]
            src, axis = values[first], graph.nodes[first].length_axis
            if node.kind == "window":
                width = (node.length - 1) * node.stride + (node.kernel - 1) * node.dilation + 1
                right = max(width - node.pad_left - int(src.shape[axis]), 0)
                pad = [[0, 0], [0, 0], [0, 0]]
                pad[axis] = [node.pad_left, right]
                padded = tf.pad(src, pad, constant_values=node.fill)
                value = node.apply(padded[_along(axis, slice(0, width))])
            elif node.kind == "pointwise":
                value = node.apply(src)
            elif node.kind == "merge":
                value = node.apply(*[values[i] for i in node.inputs])
            elif node.kind == "crop":
                value = src[_along(axis, slice(node.offset, node.offset + node.length))]
            elif node.kind == "reduce":
                reduce = tf.reduce_sum if node.how == "sum" else tf.reduce_max
                values.append(node.apply(reduce(src, axis=axis)))
                continue
            else:  # pragma: no cover
                raise AssertionError(node.kind)
        if node.kind != "fixed" or len(value.shape) == 3:
            assert int(value.shape[node.length_axis]) == node.length, node.name
        values.append(value)
    return values


def assert_reproduces(model: Any, row_shape: tuple[int, int], n: int = 3) -> LocalGraph:
    graph = keras_local_graph(model, row_shape)
    x = np.random.default_rng(1).standard_normal((n, *row_shape)).astype(np.float32)
    assert graph.nodes[0].kind == "input"
    assert graph.nodes[0].length_axis == (1 if row_shape[1] == 4 else 2)
    for i, node in enumerate(graph.nodes):
        assert all(j < i for j in node.inputs)
    values = node_values(graph, tf.constant(x))
    got = keras.tree.flatten(graph.tail(*[values[c] for c in graph.cut]))
    want = keras.tree.flatten(model(x, training=False))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
    return graph


def _kinds(graph: LocalGraph) -> list[str]:
    return [node.kind for node in graph.nodes]


# --------------------------------------------------------------------------- toy models
@pytest.mark.parametrize("layout", ["NLC", "NCL"])
@pytest.mark.parametrize(
    ("kind", "length", "weights"),
    [
        ("convnet", 40, models.convnet_weights(filters=8)),
        ("bpnet", 40, models.bpnet_weights(n_layers=3, filters=8)),
        ("crested", 100, models.crested_weights(filters=8)),
    ],
)
def test_toy_models(kind: str, length: int, weights: dict, layout: str) -> None:
    model = models.keras_model(kind, weights, length, layout)
    row_shape = (length, 4) if layout == "NLC" else (4, length)
    graph = assert_reproduces(model, row_shape)
    kinds = _kinds(graph)
    if layout == "NCL":  # the Permute flips the length axis
        assert kinds[1] == "pointwise" and graph.nodes[1].length_axis == 1
    assert graph.cut == [len(graph.nodes) - 1]
    assert kinds[-1] == "reduce"  # the global average or maximum over positions
    expected = {"convnet": 2, "bpnet": 4, "crested": 5}[kind]  # convs and pools
    assert kinds.count("window") == expected
    if kind == "bpnet":
        assert kinds.count("merge") == 3
        dilations = [n.dilation for n in graph.nodes if n.kind == "window"]
        assert dilations == [1, 1, 2, 4]
        assert [n.pad_left for n in graph.nodes if n.kind == "window"] == [10, 1, 2, 4]


def basset_like() -> Any:
    rng = np.random.default_rng(0)
    x = keras.Input((40, 4))
    h = layers.Conv1D(8, 7, name="conv1")(x)
    h = layers.BatchNormalization(name="bn1")(h)
    h = layers.Activation("relu")(h)
    h = layers.MaxPooling1D(3)(h)
    h = layers.Conv1D(8, 3, name="conv2")(h)
    h = layers.BatchNormalization(name="bn2")(h)
    h = layers.Activation("relu")(h)
    h = layers.MaxPooling1D(2)(h)
    h = layers.Flatten()(h)
    h = layers.Dense(16, activation="relu")(h)
    model = keras.Model(x, layers.Dense(3)(h))
    for name in ("bn1", "bn2"):
        model.get_layer(name).set_weights(
            [
                rng.uniform(0.5, 2.0, 8).astype(np.float32),
                rng.standard_normal(8).astype(np.float32),
                rng.standard_normal(8).astype(np.float32),
                rng.uniform(0.5, 2.0, 8).astype(np.float32),
            ]
        )
    return model


def test_basset_like() -> None:
    graph = assert_reproduces(basset_like(), (40, 4))
    assert _kinds(graph) == ["input"] + ["window", "pointwise", "pointwise", "window"] * 2
    assert [n.length for n in graph.nodes] == [40, 34, 34, 34, 11, 9, 9, 9, 4]
    assert graph.nodes[4].kernel == 3 and graph.nodes[4].stride == 3


def test_padding_strides_crop_and_local_outputs() -> None:
    """Even kernels with "same", strides with "same" and "valid", causal, dilated, cropping,
    a residual add, per-position normalisation, a model output that is local (a profile) and
    a branch that reads the input directly (so the input is in the cut)."""
    x = keras.Input((41, 4))
    a = layers.Conv1D(6, 4, padding="same", name="even_same")(x)
    b = layers.Conv1D(6, 3, padding="causal", dilation_rate=2, name="causal")(a)
    h = layers.Add(name="residual")([a, b])
    h = layers.Cropping1D((3, 4), name="crop")(h)
    h = layers.Conv1D(6, 5, strides=2, padding="same", name="stride_same")(h)
    h = layers.Conv1D(6, 4, strides=2, padding="same", activation="gelu", name="even_stride")(h)
    h = layers.Conv1D(6, 4, strides=2, name="stride_valid")(h)
    h = layers.LayerNormalization()(h)
    h = layers.Dropout(0.5)(h)
    h = layers.PReLU(shared_axes=[1], name="prelu")(h)
    h = layers.Conv1D(6, 2, padding="same", dilation_rate=3, name="even_dilated")(h)
    h = layers.Softmax(axis=-1, name="softmax")(h)
    profile = layers.Conv1D(2, 1, name="profile")(h)
    counts = layers.Dense(1)(layers.GlobalAveragePooling1D()(h))
    direct = layers.Dense(1)(layers.Flatten()(x))
    model = keras.Model(x, [profile, layers.Add()([counts, direct])])
    model.get_layer("prelu").set_weights([np.linspace(-1, 1, 6, dtype=np.float32)[None]])
    graph = assert_reproduces(model, (41, 4))
    by_name = {n.name: n for n in graph.nodes}
    for name, pad_left in [
        ("even_same", 1),  # TF "same": the extra padding goes on the right
        ("causal", 4),
        ("stride_same", 1),  # 34 positions, stride 2: 3 in all, not (5 - 1) // 2 = 2
        ("even_stride", 1),
        ("stride_valid", 0),
        ("even_dilated", 1),
    ]:
        assert by_name[name].pad_left == pad_left, name
    assert by_name["crop"].kind == "crop" and by_name["crop"].offset == 3
    assert [by_name[k].length for k in ("crop", "stride_same", "even_stride", "stride_valid")] == [
        34,
        17,
        9,
        3,
    ]
    cut = {graph.nodes[c].name: graph.nodes[c] for c in graph.cut}
    assert graph.nodes[graph.cut[0]].name == graph.nodes[0].name and "profile" in cut
    (average,) = [n for n in cut.values() if n.kind == "reduce"]  # the global average
    assert average.how == "sum" and len(cut) == 3


def test_sequential() -> None:
    model = keras.Sequential(
        [
            keras.Input((30, 4)),
            layers.Conv1D(4, 5, activation="relu"),
            layers.AveragePooling1D(2),
            layers.GlobalMaxPooling1D(),
            layers.Dense(2),
        ]
    )
    graph = assert_reproduces(model, (30, 4))
    # the convolution, its activation, the pooling, the global maximum
    assert _kinds(graph) == ["input", "window", "pointwise", "window", "reduce"]


def test_free_length_input() -> None:
    x = keras.Input((None, 4))
    h = layers.Conv1D(4, 5, padding="same")(x)
    model = keras.Model(x, layers.Dense(2)(layers.GlobalAveragePooling1D()(h)))
    graph = assert_reproduces(model, (25, 4))
    assert graph.nodes[1].length == 25 and graph.nodes[-1].kind == "reduce"
    with pytest.raises(GraphUnsupported, match="rows of shape"):
        keras_local_graph(models.keras_model("convnet", models.convnet_weights(), 40), (30, 4))


# --------------------------------------------------------------------------- refused
def _model(*middle: Any, length: int = 20) -> Any:
    x = keras.Input((length, 4))
    h = x
    for layer in middle:
        h = layer(h)
    return keras.Model(x, layers.Dense(2)(layers.Flatten()(h)))


def test_lambda_after_input() -> None:
    model = _model(layers.Lambda(lambda t: t * 2.0, name="double"), layers.Conv1D(4, 3))
    with pytest.raises(GraphUnsupported, match=r"layer 'double' \(Lambda\).*arbitrary function"):
        keras_local_graph(model, (20, 4))


def test_lstm_after_input() -> None:
    model = _model(layers.LSTM(4, return_sequences=True, name="lstm"))
    with pytest.raises(GraphUnsupported, match=r"layer 'lstm' \(LSTM\) reads the input directly"):
        keras_local_graph(model, (20, 4))


def test_same_pooling_reads_its_padding_value() -> None:
    """ "same" max pooling ignores its padding (it reads -inf there); "same" average pooling
    leaves it out of the count (NaN there, averaged over the values that are not)."""
    x = keras.Input((23, 4))
    h = layers.Conv1D(4, 3, name="conv")(x)
    a = layers.MaxPooling1D(2, padding="same", name="max")(h)
    b = layers.AveragePooling1D(5, strides=2, padding="same", name="avg")(h)
    model = keras.Model(x, [layers.Flatten()(a), layers.Flatten()(b)])
    graph = assert_reproduces(model, (23, 4))
    by_name = {n.name: n for n in graph.nodes}
    assert by_name["max"].fill == -np.inf and np.isnan(by_name["avg"].fill)
    assert (by_name["max"].length, by_name["avg"].length) == (11, 11)
    assert (by_name["max"].pad_left, by_name["avg"].pad_left) == (0, 2)


def test_refused_configurations() -> None:
    with pytest.raises(GraphUnsupported, match=r"'conv' \(Conv1D\).*positions lie on axis 2"):
        x = keras.Input((4, 20))
        h = layers.Conv1D(4, 3, name="conv")(x)
        keras_local_graph(keras.Model(x, layers.Dense(1)(layers.Flatten()(h))), (4, 20))
    with pytest.raises(GraphUnsupported, match=r"'prelu' \(PReLU\).*shared_axes=\[1\]"):
        keras_local_graph(_model(layers.Conv1D(4, 3), layers.PReLU(name="prelu")), (20, 4))
    with pytest.raises(GraphUnsupported, match="not built"):
        keras_local_graph(keras.Sequential([layers.Conv1D(4, 3)]), (20, 4))
    two = [keras.Input((20, 4)), keras.Input((20, 2))]
    joined = layers.Concatenate()([layers.Conv1D(4, 3, padding="same")(two[0]), two[1]])
    with pytest.raises(GraphUnsupported, match="takes 2 inputs.*wrap it in a one-input model"):
        keras_local_graph(keras.Model(two, layers.Dense(1)(layers.Flatten()(joined))), (20, 4))

    class Subclassed(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.conv = layers.Conv1D(4, 3)

        def call(self, t: Any) -> Any:
            return self.conv(t)

    with pytest.raises(GraphUnsupported, match="subclassed"):
        keras_local_graph(Subclassed(), (20, 4))


def test_channels_first_and_nested_models() -> None:
    """A Permute to (4, L) and channels-first layers read along axis 2; a nested model is read
    through (its layers join the prefix), and a nested model called twice twice."""
    inner_x = keras.Input((4, 20))
    inner = keras.Model(
        inner_x,
        layers.Conv1D(4, 3, padding="same", data_format="channels_first", name="inner_conv")(
            inner_x
        ),
    )
    x = keras.Input((20, 4))
    h = layers.Permute((2, 1))(x)
    h = layers.Conv1D(4, 3, data_format="channels_first", name="cf")(h)
    h = layers.ZeroPadding1D(1, data_format="channels_first", name="pad")(h)
    h = layers.Add()([inner(h), inner(h)])
    model = keras.Model(x, layers.Dense(2)(layers.Flatten()(h)))
    graph = assert_reproduces(model, (20, 4))
    names = [n.name for n in graph.nodes]
    assert names.count("inner_conv") == 2 and "cf" in names
    by_name = {n.name: n for n in graph.nodes}
    assert by_name["cf"].length_axis == 2 and by_name["pad"].pad_left == 1


def test_custom_activation_ends_prefix() -> None:
    """A conv with an activation we cannot vouch for goes to the tail, with a note."""
    model = _model(layers.Conv1D(4, 3), layers.Conv1D(4, 3, activation=lambda t: t * t))
    graph = assert_reproduces(model, (20, 4))
    assert _kinds(graph) == ["input", "window"]
    assert graph.notes and "custom function" in graph.notes[0]


def test_global_normalisation_ends_prefix() -> None:
    """Softmax over positions (attention pooling) and a layer norm across positions are
    global: they go to the tail, with a note."""
    x = keras.Input((30, 4))
    h = layers.Conv1D(4, 5, activation="relu")(x)
    weights = layers.Softmax(axis=1, name="attention")(layers.Conv1D(4, 1)(h))
    normed = layers.LayerNormalization(axis=(1, 2), name="norm")(h)
    pooled = layers.GlobalAveragePooling1D()(layers.Multiply()([weights, normed]))
    model = keras.Model(x, layers.Dense(2)(pooled))
    graph = assert_reproduces(model, (30, 4))
    assert _kinds(graph) == ["input", "window", "pointwise", "window"]
    assert len(graph.cut) == 2
    assert any("'attention' (Softmax)" in note for note in graph.notes)
    assert any("'norm' (LayerNormalization)" in note for note in graph.notes)


def test_traces_in_tf_function() -> None:
    """The applies and the tail run inside tf.function (the backend compiles the fast path)."""
    model = basset_like()
    graph = keras_local_graph(model, (40, 4))
    x = tf.constant(models.random_one_hot(5, 40))

    @tf.function
    def run(x: Any) -> Any:
        values = node_values(graph, x)
        return graph.tail(*[values[c] for c in graph.cut])

    np.testing.assert_allclose(run(x).numpy(), model(x, training=False).numpy(), atol=1e-5)
