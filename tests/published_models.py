"""Published model architectures, written the way their packages write them, with random weights.

Fast ISM must read models it was not written for. These builders copy the structure (and the
Python idioms) of models the field runs, at a size the tests and the benchmark choose:

- ``BPNet`` and ``CountWrapper``: bpnet-lite's profile model, ``forward(self, X, X_ctl=None)``
  with an optional control track, shape arithmetic on ``X.shape``, ``torch.add`` residuals, a
  profile head cropped to the output window and a counts head that is a mean over a cropped
  range; ``CountWrapper`` indexes the tuple output (``self.model(X, X_ctl)[1]``).
- ``BassetLike`` (torch) and ``keras_basset``: Basset's three valid convolutions with batch
  normalisation and max pooling, then dense layers.
- ``SmallConvNet`` (torch) and ``keras_small_convnet``: a two-layer conv net with a global
  average.
- ``PaddedPooling`` (torch): pooling with ``padding=`` (max, and average with and without the
  padding in the count), a functional cropping, ``torch.cat`` of two branches.
- ``keras_chrombpnet``: chrombpnet's dilated residual model (valid convolutions, symmetric
  ``Cropping1D`` before each residual ``add``, a profile head cropped to the output window, a
  counts head that is a global average of the cropped trunk), optionally nested inside a
  combined model the way chrombpnet nests its bias model.
- ``keras_topic_cnn``: CREsted's topic-classification CNN (conv blocks with batch
  normalisation and ``MaxPooling1D(padding="same")``).
- ``keras_control_bpnet``: a two-input Keras profile model (sequence and a control track)
  wrapped in a one-input model that feeds it a fixed control track.

Frameworks are imported inside the builders; torch classes are made on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import models  # the BPNet- and Basset-like benchmark models
import numpy as np


# --------------------------------------------------------------------------- torch
@cache
def _torch_classes() -> dict[str, type]:
    import torch

    class BPNet(torch.nn.Module):
        """bpnet-lite's BPNet (``bpnetlite.bpnet.BPNet``), its forward pass as written there."""

        def __init__(
            self,
            n_filters: int = 64,
            n_layers: int = 8,
            n_outputs: int = 2,
            n_control_tracks: int = 0,
            trimming: int | None = None,
        ) -> None:
            super().__init__()
            self.n_filters = n_filters
            self.n_layers = n_layers
            self.n_outputs = n_outputs
            self.n_control_tracks = n_control_tracks
            self.trimming = trimming or 2**n_layers

            self.iconv = torch.nn.Conv1d(4, n_filters, kernel_size=21, padding=10)
            self.irelu = torch.nn.ReLU()
            self.rconvs = torch.nn.ModuleList(
                [
                    torch.nn.Conv1d(
                        n_filters, n_filters, kernel_size=3, padding=2**i, dilation=2**i
                    )
                    for i in range(1, self.n_layers + 1)
                ]
            )
            self.rrelus = torch.nn.ModuleList(
                [torch.nn.ReLU() for i in range(1, self.n_layers + 1)]
            )
            self.fconv = torch.nn.Conv1d(
                n_filters + n_control_tracks, n_outputs, kernel_size=75, padding=37
            )
            n_count_control = 1 if n_control_tracks > 0 else 0
            self.linear = torch.nn.Linear(n_filters + n_count_control, 1)

        def forward(self, X: Any, X_ctl: Any = None) -> Any:
            start, end = self.trimming, X.shape[2] - self.trimming

            X = self.irelu(self.iconv(X))
            for i in range(self.n_layers):
                X_conv = self.rrelus[i](self.rconvs[i](X))
                X = torch.add(X, X_conv)

            if X_ctl is None:
                X_w_ctl = X
            else:
                X_w_ctl = torch.cat([X, X_ctl], dim=1)

            y_profile = self.fconv(X_w_ctl)[:, :, start:end]

            # counts prediction
            X = torch.mean(X[:, :, start - 37 : end + 37], dim=2)
            if X_ctl is not None:
                X_ctl = torch.sum(X_ctl[:, :, start - 37 : end + 37], dim=(1, 2))
                X_ctl = X_ctl.unsqueeze(-1)
                X = torch.cat([X, torch.log(X_ctl + 1)], dim=-1)

            y_counts = self.linear(X).reshape(X.shape[0], 1)
            return y_profile, y_counts

    class CountWrapper(torch.nn.Module):
        """bpnet-lite's wrapper that returns the counts head only (``**kwargs`` is what makes
        a plain ``torch.fx.symbolic_trace`` of it fail: "Proxy object cannot be iterated")."""

        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, X: Any, X_ctl: Any = None, **kwargs: Any) -> Any:
            return self.model(X, X_ctl, **kwargs)[1]

    class BassetLike(torch.nn.Module):
        """Basset: conv(19) BN relu maxpool 3, conv(11) BN relu maxpool 4, conv(7) BN relu
        maxpool 4, flatten, two hidden dense layers, sigmoid outputs."""

        def __init__(
            self,
            length: int = 500,
            filters: tuple[int, int, int] = (300, 200, 200),
            hidden: int = 1000,
            n_outputs: int = 164,
        ) -> None:
            super().__init__()
            f1, f2, f3 = filters
            self.conv1 = torch.nn.Conv1d(4, f1, kernel_size=19)
            self.bn1 = torch.nn.BatchNorm1d(f1)
            self.pool1 = torch.nn.MaxPool1d(3)
            self.conv2 = torch.nn.Conv1d(f1, f2, kernel_size=11)
            self.bn2 = torch.nn.BatchNorm1d(f2)
            self.pool2 = torch.nn.MaxPool1d(4)
            self.conv3 = torch.nn.Conv1d(f2, f3, kernel_size=7)
            self.bn3 = torch.nn.BatchNorm1d(f3)
            self.pool3 = torch.nn.MaxPool1d(4)
            positions = (((length - 18) // 3 - 10) // 4 - 6) // 4
            self.fc1 = torch.nn.Linear(f3 * positions, hidden)
            self.fc2 = torch.nn.Linear(hidden, hidden)
            self.fc3 = torch.nn.Linear(hidden, n_outputs)
            self.dropout = torch.nn.Dropout(0.3)

        def forward(self, x: Any) -> Any:
            x = self.pool1(torch.relu(self.bn1(self.conv1(x))))
            x = self.pool2(torch.relu(self.bn2(self.conv2(x))))
            x = self.pool3(torch.relu(self.bn3(self.conv3(x))))
            x = x.view(x.size(0), -1)
            x = self.dropout(torch.relu(self.fc1(x)))
            x = self.dropout(torch.relu(self.fc2(x)))
            return torch.sigmoid(self.fc3(x))

    class SmallConvNet(torch.nn.Module):
        """A small conv net: conv(15) relu, max-pool 2, conv(9) relu, global mean, dense."""

        def __init__(self, filters: int = 32, n_outputs: int = 1) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv1d(4, filters, 15, padding=7)
            self.conv2 = torch.nn.Conv1d(filters, filters, 9, padding=4)
            self.dense = torch.nn.Linear(filters, n_outputs)

        def forward(self, x: Any) -> Any:
            h = torch.nn.functional.max_pool1d(self.conv1(x).relu(), 2)
            h = self.conv2(h).relu()
            return self.dense(h.mean(dim=-1))

    class PaddedPooling(torch.nn.Module):
        """Pooling with padding (max; average counting the padding; average not counting it),
        a functional crop and ``torch.cat`` of two local branches along the channels."""

        def __init__(self, filters: int = 8) -> None:
            super().__init__()
            self.conv = torch.nn.Conv1d(4, filters, 5, padding=2)
            self.max = torch.nn.MaxPool1d(3, stride=2, padding=1)
            self.avg = torch.nn.AvgPool1d(4, stride=1, padding=2, count_include_pad=False)
            self.branch = torch.nn.Conv1d(filters, filters, 3, padding=1)
            self.dense = torch.nn.Linear(2 * filters, 2)

        def forward(self, x: Any) -> Any:
            h = torch.nn.functional.relu(self.conv(x)) - 0.5
            h = self.max(h)
            a = self.avg(h)[:, :, 1:]
            b = torch.nn.functional.avg_pool1d(self.branch(h).sigmoid(), 3, 1, 1)
            both = torch.cat([a, b], dim=1)
            return self.dense(both[:, :, 2:-2].amax(dim=-1))

    return {
        "BPNet": BPNet,
        "CountWrapper": CountWrapper,
        "BassetLike": BassetLike,
        "SmallConvNet": SmallConvNet,
        "PaddedPooling": PaddedPooling,
    }


def _randomise_batch_norm(model: Any, seed: int) -> None:
    """Non-trivial running statistics (fresh BatchNorm layers are the identity in eval mode)."""
    import torch

    rng = np.random.default_rng(seed)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            n = module.num_features
            with torch.no_grad():
                module.weight.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, n).astype(np.float32)))
                module.bias.copy_(torch.from_numpy(0.2 * rng.standard_normal(n).astype(np.float32)))
                module.running_mean.copy_(
                    torch.from_numpy(0.2 * rng.standard_normal(n).astype(np.float32))
                )
                module.running_var.copy_(
                    torch.from_numpy(rng.uniform(0.5, 1.5, n).astype(np.float32))
                )


def torch_bpnet(
    length: int = 2114,
    output_length: int = 1000,
    n_filters: int = 64,
    n_layers: int = 8,
    *,
    wrapped: bool = True,
    seed: int = 0,
) -> Any:
    """bpnet-lite's BPNet (optional control input left out), in a ``CountWrapper`` unless
    ``wrapped`` is False (then the model returns (profile, counts))."""
    import torch

    classes = _torch_classes()
    torch.manual_seed(seed)
    model = classes["BPNet"](
        n_filters=n_filters, n_layers=n_layers, trimming=(length - output_length) // 2
    )
    return (classes["CountWrapper"](model) if wrapped else model).eval()


def torch_basset(length: int = 500, *, small: bool = False, seed: int = 0) -> Any:
    import torch

    torch.manual_seed(seed)
    sizes: dict[str, Any] = {"filters": (12, 8, 8), "hidden": 16, "n_outputs": 3} if small else {}
    model = _torch_classes()["BassetLike"](length, **sizes)
    _randomise_batch_norm(model, seed)
    return model.eval()


def torch_small_convnet(*, filters: int = 32, seed: int = 0) -> Any:
    import torch

    torch.manual_seed(seed)
    return _torch_classes()["SmallConvNet"](filters).eval()


def torch_padded_pooling(seed: int = 0) -> Any:
    import torch

    torch.manual_seed(seed)
    return _torch_classes()["PaddedPooling"]().eval()


# --------------------------------------------------------------------------- keras
def _randomise_keras(model: Any, seed: int) -> Any:
    """Fresh random weights (scaled by fan-in) and non-trivial BatchNorm statistics."""
    import keras

    rng = np.random.default_rng(seed)
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.BatchNormalization):
            n = layer.gamma.shape[0] if layer.gamma is not None else layer.moving_mean.shape[0]
            values = {
                "gamma": rng.uniform(0.5, 1.5, n),
                "beta": 0.2 * rng.standard_normal(n),
                "moving_mean": 0.2 * rng.standard_normal(n),
                "moving_variance": rng.uniform(0.5, 1.5, n),
            }
            for name, value in values.items():
                variable = getattr(layer, name, None)
                if variable is not None:
                    variable.assign(value.astype(np.float32))
            continue
        if isinstance(layer, keras.Model):
            continue
        for variable in layer.weights:
            shape = tuple(variable.shape)
            fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
            scale = 1.0 / np.sqrt(max(fan_in, 1)) if len(shape) > 1 else 0.1
            variable.assign((scale * rng.standard_normal(shape)).astype(np.float32))
    return model


def keras_chrombpnet(
    length: int = 2114,
    output_length: int = 1000,
    filters: int = 64,
    n_dilated: int = 8,
    *,
    nested: bool = False,
    seed: int = 0,
) -> Any:
    """chrombpnet's dilated residual model (``bpnet_model.py``): outputs [profile logits,
    log counts]. ``nested``: the model inside a combined model (chrombpnet nests its bias
    model and the accessibility model the same way), with the two heads added to those of a
    smaller nested model of the same kind."""
    import keras
    from keras.layers import Conv1D, Cropping1D, Dense, Flatten, GlobalAvgPool1D, Input, add

    def trunk(name: str, n_filters: int, n_layers: int) -> Any:
        inp = Input(shape=(length, 4), name=f"{name}_sequence")
        x = Conv1D(
            n_filters, kernel_size=21, padding="valid", activation="relu", name=f"{name}_1st_conv"
        )(inp)
        for i in range(1, n_layers + 1):
            conv_x = Conv1D(
                n_filters,
                kernel_size=3,
                padding="valid",
                activation="relu",
                dilation_rate=2**i,
                name=f"{name}_{i}conv",
            )(x)
            x_len, conv_x_len = x.shape[1], conv_x.shape[1]
            x = Cropping1D((x_len - conv_x_len) // 2, name=f"{name}_{i}crop")(x)
            x = add([conv_x, x])
        prof_out_precrop = Conv1D(
            1, kernel_size=75, padding="valid", name=f"{name}_prof_out_precrop"
        )(x)
        cropsize = int(prof_out_precrop.shape[1] / 2) - int(output_length / 2)
        prof = Cropping1D(cropsize, name=f"{name}_logits_profile_predictions_preflatten")(
            prof_out_precrop
        )
        profile_out = Flatten(name=f"{name}_logits_profile_predictions")(prof)
        gap_combined_conv = GlobalAvgPool1D(name=f"{name}_gap")(x)
        count_out = Dense(1, name=f"{name}_logcount_predictions")(gap_combined_conv)
        return keras.Model(inputs=[inp], outputs=[profile_out, count_out], name=name)

    if not nested:
        return _randomise_keras(trunk("bpnet", filters, n_dilated), seed)
    bias = trunk("bias", max(4, filters // 2), max(1, n_dilated // 2))
    accessibility = trunk("accessibility", filters, n_dilated)
    inp = Input(shape=(length, 4), name="sequence")
    bias_profile, bias_counts = bias(inp)
    profile, counts = accessibility(inp)
    profile_out = keras.layers.Add(name="logits_profile_predictions")([profile, bias_profile])
    counts_out = keras.layers.Add(name="logcount_predictions")([counts, bias_counts])
    model = keras.Model(inputs=[inp], outputs=[profile_out, counts_out], name="chrombpnet")
    return _randomise_keras(model, seed)


def keras_topic_cnn(
    length: int = 500,
    n_classes: int = 16,
    filters: int = 256,
    *,
    pool_size: int = 4,
    blocks: tuple[tuple[int, int], ...] = ((17, 1), (11, 2), (7, 2), (3, 2)),
    hidden: int = 256,
    seed: int = 0,
) -> Any:
    """CREsted's topic-classification CNN (``deeptopic_cnn``): conv blocks (Conv1D "same",
    BatchNorm, activation, ``MaxPooling1D(padding="same")``, dropout), flatten, a dense block,
    sigmoid outputs. ``blocks``: (kernel size, divisor of ``filters``) per block."""
    import keras
    from keras import layers

    def conv_block(x: Any, n_filters: int, kernel_size: int, activation: str) -> Any:
        x = layers.Conv1D(n_filters, kernel_size, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization(momentum=0.99)(x)
        x = layers.Activation(activation)(x)
        x = layers.MaxPooling1D(pool_size=pool_size, padding="same")(x)
        return layers.Dropout(0.1)(x)

    inputs = layers.Input(shape=(length, 4), name="sequence")
    x = inputs
    for i, (kernel, divisor) in enumerate(blocks):
        x = conv_block(x, filters // divisor, kernel, "gelu" if i == 0 else "relu")
    x = layers.Flatten()(x)
    x = layers.Dropout(0.5)(x)
    x = layers.Dense(hidden, use_bias=False)(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    outputs = layers.Dense(n_classes, activation="sigmoid")(x)
    return _randomise_keras(keras.Model(inputs, outputs, name="topic_cnn"), seed)


def keras_basset(
    length: int = 500,
    filters: tuple[int, int, int] = (300, 200, 200),
    hidden: int = 1000,
    n_outputs: int = 164,
    *,
    seed: int = 0,
) -> Any:
    """Basset in Keras (the torch ``BassetLike``'s layers, channels-last)."""
    import keras
    from keras import layers

    inputs = layers.Input(shape=(length, 4))
    x = inputs
    for n_filters, kernel, pool in zip(filters, (19, 11, 7), (3, 4, 4), strict=True):
        x = layers.Conv1D(n_filters, kernel)(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
        x = layers.MaxPooling1D(pool)(x)
    x = layers.Flatten()(x)
    for _ in range(2):
        x = layers.Dropout(0.3)(layers.Dense(hidden, activation="relu")(x))
    outputs = layers.Dense(n_outputs, activation="sigmoid")(x)
    return _randomise_keras(keras.Model(inputs, outputs, name="basset"), seed)


def keras_small_convnet(
    length: int = 500, filters: int = 32, *, channels_first: bool = False, seed: int = 0
) -> Any:
    """A small conv net: conv(15) relu, max-pool 2, conv(9) relu, global mean, dense.
    ``channels_first``: the input is (4, L) and the convolutions read it channels-first."""
    import keras
    from keras import layers

    fmt = "channels_first" if channels_first else "channels_last"
    inputs = layers.Input(shape=(4, length) if channels_first else (length, 4))
    x = layers.Conv1D(filters, 15, padding="same", activation="relu", data_format=fmt)(inputs)
    x = layers.MaxPooling1D(2, data_format=fmt)(x)
    x = layers.Conv1D(filters, 9, padding="same", activation="relu", data_format=fmt)(x)
    x = layers.GlobalAveragePooling1D(data_format=fmt)(x)
    outputs = layers.Dense(1)(x)
    return _randomise_keras(keras.Model(inputs, outputs, name="small_convnet"), seed)


def keras_control_bpnet(
    length: int = 200, filters: int = 16, n_dilated: int = 3, *, seed: int = 0
) -> Any:
    """A two-input Keras profile model (sequence, control track (L, 2)) in a one-input model
    that feeds it a fixed control track: ``model([x, control])`` with ``control`` made from
    constants inside the graph. Outputs [profile, counts]."""
    import keras
    from keras import layers, ops

    sequence = layers.Input(shape=(length, 4), name="sequence")
    control = layers.Input(shape=(length, 2), name="control")
    x = layers.Conv1D(filters, 21, padding="same", activation="relu")(sequence)
    for i in range(1, n_dilated + 1):
        conv = layers.Conv1D(filters, 3, padding="same", activation="relu", dilation_rate=2**i)
        x = layers.Add()([x, conv(x)])
    profile = layers.Conv1D(2, 25, padding="same")(layers.Concatenate()([x, control]))
    total = layers.GlobalAveragePooling1D()(control)
    counts = layers.Dense(1)(layers.Concatenate()([layers.GlobalAveragePooling1D()(x), total]))
    two_inputs = keras.Model([sequence, control], [profile, counts], name="control_bpnet")

    class FixedControl(layers.Layer):
        """A control track that does not depend on the sequence (here a smooth ramp)."""

        def call(self, x: Any) -> Any:
            ramp = ops.linspace(0.0, 1.0, length)[None, :, None]
            track = ops.concatenate([ramp, 1.0 - ramp], axis=-1)
            return ops.zeros_like(x[:, :, :2]) + track

    x = layers.Input(shape=(length, 4))
    model = keras.Model(x, two_inputs([x, FixedControl()(x)]), name="with_fixed_control")
    return _randomise_keras(model, seed)


# --------------------------------------------------------------------------- the benchmark set
@dataclass(frozen=True)
class BenchmarkModel:
    """One model of ``benchmarks/bench_fast_ism.py`` (and of the test that ``fast="auto"``
    decides right on it): ``faster`` is the path the recorded benchmark measured faster
    (``docs/performance-fast-ism.md``)."""

    label: str
    framework: str
    length: int
    build: Callable[[], Any]
    output_fn: Callable[[Any], Any] | None = None
    faster: str = "fast"


def _bpnet_like(framework: str) -> Any:
    weights = models.bpnet_weights()
    if framework == "torch":
        return models.torch_model("bpnet", weights, "NCL")
    return models.keras_model("bpnet", weights, 1000, "NLC")


def _basset_like() -> Any:
    return models.torch_model("basset", models.basset_weights(1000, n_outputs=5, filters=64), "NCL")


BENCHMARK: dict[str, BenchmarkModel] = {
    "bpnet": BenchmarkModel("BPNet-like (L=1000)", "torch", 1000, lambda: _bpnet_like("torch")),
    "basset": BenchmarkModel("Basset-like (L=1000)", "torch", 1000, _basset_like),
    "bpnet-lite": BenchmarkModel(
        "bpnet-lite BPNet + CountWrapper (2114 → 1000)", "torch", 2114, torch_bpnet
    ),
    "basset-500": BenchmarkModel("Basset (500 bp)", "torch", 500, torch_basset),
    "small-500": BenchmarkModel("small conv net (500 bp)", "torch", 500, torch_small_convnet),
    "bpnet-keras": BenchmarkModel(
        "BPNet-like (L=1000)", "tensorflow", 1000, lambda: _bpnet_like("tensorflow")
    ),
    "chrombpnet": BenchmarkModel(
        "chrombpnet dilated peak model (2114 bp)",
        "tensorflow",
        2114,
        keras_chrombpnet,
        output_fn=lambda out: out[1],
    ),
    "topic-500": BenchmarkModel(
        "CREsted topic CNN, same-padded pooling (500 bp)", "tensorflow", 500, keras_topic_cnn
    ),
    "basset-500-keras": BenchmarkModel("Basset (500 bp)", "tensorflow", 500, keras_basset),
    "small-500-keras": BenchmarkModel(
        "small conv net (500 bp)", "tensorflow", 500, keras_small_convnet
    ),
}
