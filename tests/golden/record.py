"""Golden results: every public method on fixed small models in both frameworks.

``python tests/golden/record.py`` computes them with the installed code and writes
``tests/golden/golden.npz`` together with the environment that produced them (platform, CPU,
framework versions). ``tests/test_golden.py`` recomputes them with the code under test: bit for
bit where the environment is the recorded one, to float32 rounding elsewhere (another CPU or
library build may round differently).
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

import models  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

LENGTH = 40
PATH = HERE / "golden.npz"
#: Arrays whose computation was changed on purpose after they were recorded, in a way that
#: moves float32 rounding only: compared to float32 rounding (1e-5 of the largest value) on
#: every machine. The fast ISM path now adds each mutant's changes to the reference values,
#: completes sums over positions from float64 tables and runs convolutions channels-last.
ROUNDING_ONLY = {
    "torch/ism_fast_bpnet",
    "torch/ism_fast_basset",
    "tensorflow/ism_fast_bpnet",
    "tensorflow/ism_fast_basset",
}


def environment() -> str:
    """What decides float32 rounding here: machine, CPU and library builds."""
    import tensorflow as tf

    cpu = ""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as handle:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in handle if "model name" in line), ""
            )
    return "|".join(
        [
            platform.machine(),
            cpu,
            f"numpy {np.__version__}",
            f"torch {torch.__version__}",
            f"tensorflow {tf.__version__}",
            f"blas {_blas_kernels()}",
        ]
    )


def _blas_kernels() -> str:
    """The BLAS library and the CPU kernels it dispatched to (OpenBLAS picks them per CPU, or
    as ``OPENBLAS_CORETYPE`` says): matrix products round differently under each."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown"
    found = [
        f"{info.get('internal_api')} {info.get('version')} {info.get('architecture')}"
        for info in threadpool_info()
        if info.get("user_api") == "blas"
    ]
    return ", ".join(sorted(found)) or "none"


def _set_up() -> None:
    import tensorflow as tf

    for setting in (
        torch.backends.cudnn.conv,
        torch.backends.cudnn.rnn,
        torch.backends.cuda.matmul,
    ):
        setting.fp32_precision = "ieee"
    torch.set_num_threads(1)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # already initialised (inside the test session, set by conftest)
        pass


def _feature_results(framework: str) -> dict[str, np.ndarray]:
    import seqattrib

    layout = "NCL" if framework == "torch" else "NLC"

    def build(kind: str, weights: dict[str, np.ndarray]) -> Any:
        if framework == "torch":
            return models.torch_model(kind, weights, layout)
        return models.keras_model(kind, weights, LENGTH, layout)

    bpnet = build("bpnet", models.bpnet_weights(n_outputs=3, filters=8, n_layers=3))
    basset = build("basset", models.basset_weights(LENGTH, n_outputs=3, filters=6))
    X = models.random_one_hot(6, LENGTH, seed=3, layout=layout)
    out: dict[str, np.ndarray] = {}
    out["saliency"] = seqattrib.saliency(bpnet, X, target=[0, 2], batch_size=7)
    ig, delta = seqattrib.integrated_gradients(
        bpnet, X, target=1, n_steps=8, batch_size=11, return_delta=True
    )
    out["ig"], out["ig_delta"] = ig, delta
    out["eig"] = seqattrib.expected_integrated_gradients(
        bpnet,
        X,
        target=[0, 2],
        n_baselines=4,
        n_steps=5,
        quadrature="riemann_trapezoid",  # the default when the arrays were recorded
        batch_size=13,
        random_state=5,
    )
    out["eig_hypothetical"] = seqattrib.expected_integrated_gradients(
        basset,
        X,
        target=0,
        baselines="shuffle",
        n_baselines=3,
        n_steps=4,
        batch_size=16,
        multiply_by_inputs=False,
        quadrature="gausslegendre",
    )
    out["ism_exact"] = seqattrib.ism(bpnet, X, target=[0, 1], fast=False, batch_size=50)
    for kind, model in (("bpnet", bpnet), ("basset", basset)):
        out[f"ism_fast_{kind}"] = seqattrib.ism(model, X, target=0, fast=True, batch_size=50)
    return {f"{framework}/{k}": np.asarray(v) for k, v in out.items()}


def _data_results(framework: str) -> dict[str, np.ndarray]:
    import seqattrib

    layout = "NCL" if framework == "torch" else "NLC"
    checkpoints_w = [models.convnet_weights(n_outputs=3, seed=10 + i) for i in range(2)]
    if framework == "torch":
        model = models.torch_model("convnet", checkpoints_w[0], layout)
        checkpoints = [models.torch_model("convnet", w, layout).state_dict() for w in checkpoints_w]
    else:
        model = models.keras_model("convnet", checkpoints_w[0], LENGTH, layout)
        checkpoints = [
            models.keras_model("convnet", w, LENGTH, layout).get_weights() for w in checkpoints_w
        ]
    rng = np.random.default_rng(7)
    X_train = models.random_one_hot(12, LENGTH, seed=8, layout=layout)
    X_test = models.random_one_hot(4, LENGTH, seed=9, layout=layout)
    y_train, y_test = rng.integers(0, 3, 12), rng.integers(0, 3, 4)
    out: dict[str, np.ndarray] = {}
    for name, kwargs in (
        ("tracin_exact", {}),
        ("tracin_bce", {"loss": "bce"}),
        ("tracin_projected", {"proj_dim": 16}),
        ("tracin_last", {"layer": "last"}),
    ):
        tracin = seqattrib.TracIn(model, checkpoints, batch_size=5, **kwargs)
        labels_train, labels_test = y_train, y_test
        if kwargs.get("loss") == "bce":
            labels_train = np.eye(3, dtype=np.float32)[y_train]
            labels_test = np.eye(3, dtype=np.float32)[y_test]
        tracin.fit(X_train, labels_train)
        out[name] = tracin.scores(X_test, labels_test)
        out[name + "_self"] = tracin.self_influence()
    trak = seqattrib.TRAK(model, checkpoints, proj_dim=8, batch_size=5)
    out["trak"] = trak.fit(X_train, y_train).scores(X_test, y_test)
    return {f"{framework}/{k}": np.asarray(v) for k, v in out.items()}


def compute() -> dict[str, np.ndarray]:
    """Every golden array, keyed ``framework/name``."""
    _set_up()
    import tensorflow  # noqa: F401  (after torch)

    results: dict[str, np.ndarray] = {}
    for framework in ("torch", "tensorflow"):
        results.update(_feature_results(framework))
        results.update(_data_results(framework))
    return results


if __name__ == "__main__":
    arrays = compute()
    np.savez_compressed(PATH, environment=np.array(environment()), **arrays)
    print(f"wrote {len(arrays)} arrays to {PATH}")
