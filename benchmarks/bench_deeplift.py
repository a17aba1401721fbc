"""DeepSHAP speed: ours against tangermeme's deep_lift_shap, against the bare forward and
backward passes over the same rows, and Keras 3 on TensorFlow against our torch path.

    python benchmarks/bench_deeplift.py [--repeats 3] [--n-bpnet 8] [--n-crested 16]
        [--device cpu|cuda] [--skip-tensorflow]

Models: BPNet-like (L=1000, 64 filters, 9 dilated residual layers, 5 outputs) and CREsted-like
(L=500, 128 filters, three conv/ReLU/max-pool blocks, 8 outputs), built from the same weights
as the test models (``tests/models.py``); tangermeme gets the same weights with ``nn.ReLU`` and
``nn.MaxPool1d`` modules (``tests/deeplift_models.py``), which it needs. Every variant runs 20
dinucleotide-shuffled references per sequence and is warmed up once, then timed in turn
``--repeats`` times; the table gives medians. Threads are pinned to one, and on a CPU the time
is this process's CPU time, which other processes on a shared machine do not inflate (on a GPU,
wall-clock time).

- tangermeme: its best batch size of 8, 16, 32, 64 and 128 (probed on the same sequences, one
  target), one call per target (it explains one output per call).
- bare forward + backward: input gradients of the same reference rows (passed as an array) with
  the plain model, at its best batch size of the same list; "ours" then gets the same
  references as an array (ours with references drawn on the fly is in the tangermeme rows).
- Keras 3 on TensorFlow: seconds per sequence against our torch path, same weights, one target
  (no other DeepSHAP runs Keras 3 models).
"""

from __future__ import annotations

import _common

_common.blas_threads(1)  # before NumPy loads

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import models  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402  (before TensorFlow)
from _common import Row, Variant, interleaved, log, machine_description, markdown_table  # noqa: E402
from deeplift_models import dinucleotide_references, torch_module_model  # noqa: E402

import seqattrib as sa  # noqa: E402
from seqattrib.engine.outputs import Head, model_session, vectorise_targets  # noqa: E402

BATCH_SIZES = (8, 16, 32, 64, 128)
N_REFERENCES = 20
CASES = {
    "BPNet-like L=1000": ("bpnet", 1000, models.bpnet_weights),
    "CREsted-like L=500": ("crested", 500, models.crested_weights),
}


def best_batch_size(run: callable, cpu: bool) -> tuple[int, dict[int, float]]:  # type: ignore[valid-type]
    """The fastest of ``BATCH_SIZES`` for ``run(batch_size)`` (each run twice, the second
    timed; ``cpu``: in this process's CPU seconds, else wall-clock, as ``interleaved``)."""
    clock = time.process_time if cpu else time.perf_counter
    seconds = {}
    for size in BATCH_SIZES:
        run(size)
        tick = clock()
        run(size)
        seconds[size] = clock() - tick
    return min(seconds, key=seconds.get), seconds  # type: ignore[arg-type]


def bare_gradients(model, rows: np.ndarray, targets: list[int], batch_size: int, device) -> None:
    """Input gradients of ``rows`` with the plain model (K targets from one forward pass)."""
    be = sa.get_backend(model)
    with model_session(be, model, device):
        for start in range(0, len(rows), batch_size):
            x = be.asarray(rows[start : start + batch_size])
            be.input_gradients(model, x, targets, Head(), vectorise_targets(be))
        be.synchronize()


def torch_rows(label: str, args: argparse.Namespace) -> list[Row]:
    kind, length, weights_fn = CASES[label]
    n = args.n_bpnet if kind == "bpnet" else args.n_crested
    weights = weights_fn()
    X = models.random_one_hot(n, length, seed=1, layout="NCL")
    setup = {
        "ours_model": models.torch_model(kind, weights, "NCL"),  # ReLU and pooling as calls
        "module_model": torch_module_model(kind, weights, length, "NCL"),
        "X": X,
        "references": dinucleotide_references(X, N_REFERENCES, 0, "NCL"),
    }
    return [row for k in (1, 5) for row in _compare(label, setup, list(range(k)), args)]


def _compare(label: str, setup: dict, targets: list[int], args: argparse.Namespace) -> list[Row]:
    from tangermeme.deep_lift_shap import deep_lift_shap as tangermeme_dls

    ours_model, module_model, X = setup["ours_model"], setup["module_model"], setup["X"]
    references = setup["references"]
    rows_flat = np.ascontiguousarray(references.reshape(-1, *X.shape[1:]))
    X_torch = torch.from_numpy(X)
    device = args.device
    k = len(targets)
    target = targets[0] if k == 1 else targets
    settings = f"N={len(X)}, {N_REFERENCES} refs, K={k}"

    def tangermeme(batch_size: int, X_torch: torch.Tensor = X_torch, ks: int = k) -> None:
        for t in range(ks):
            tangermeme_dls(
                module_model,
                X_torch,
                target=t,
                batch_size=batch_size,
                device=device,
                random_state=0,
            )

    def ours() -> None:
        sa.deep_lift_shap(ours_model, X, target=target, n_baselines=N_REFERENCES, device=device)

    def ours_arrays() -> None:
        sa.deep_lift_shap(
            ours_model,
            X,
            target=target,
            baselines=references,
            n_baselines=N_REFERENCES,
            device=device,
        )

    log(f"{label} K={k}: probing tangermeme's batch size")
    cpu = device == "cpu"
    best_theirs, _ = best_batch_size(lambda b: tangermeme(b, X_torch, 1), cpu)
    log(f"{label} K={k}: probing the bare gradients' batch size")
    best_bare, _ = best_batch_size(
        lambda b: bare_gradients(ours_model, rows_flat, targets, b, device), cpu
    )
    times = interleaved(
        [
            Variant("ours", ours),
            Variant("tangermeme", lambda: tangermeme(best_theirs)),
            Variant("ours_arrays", ours_arrays),
            Variant(
                "bare",
                lambda: bare_gradients(ours_model, rows_flat, targets, best_bare, device),
            ),
        ],
        args.repeats,
        clock=time.process_time if cpu else time.perf_counter,
    )
    return [
        Row.ratio_row(
            label,
            f"torch ({device})",
            "tangermeme ÷ ours",
            f"{settings}; tangermeme batch {best_theirs}, ours auto",
            times["ours"],
            times["tangermeme"],
            times["tangermeme"] / times["ours"],
            "≥ 1.5",
        ),
        Row.ratio_row(
            label,
            f"torch ({device})",
            "ours ÷ bare forward + backward",
            f"{settings}; same reference rows; bare batch {best_bare}, ours auto",
            times["ours_arrays"],
            times["bare"],
            times["ours_arrays"] / times["bare"],
            "≤ 1.15",
        ),
    ]


def keras_rows(label: str, args: argparse.Namespace) -> list[Row]:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    kind, length, weights_fn = CASES[label]
    n = args.n_bpnet if kind == "bpnet" else args.n_crested
    weights = weights_fn()
    torch_model = models.torch_model(kind, weights, "NLC")
    keras_model = models.keras_model(kind, weights, length, "NLC")
    X = models.random_one_hot(n, length, seed=1)

    def run(model) -> None:
        sa.deep_lift_shap(model, X, target=0, n_baselines=N_REFERENCES)

    times = interleaved(
        [Variant("keras", lambda: run(keras_model)), Variant("torch", lambda: run(torch_model))],
        args.repeats,
        clock=time.process_time,
    )
    return [
        Row(
            label,
            "tensorflow (cpu)",
            "Keras 3 on TensorFlow ÷ our torch path (s per sequence)",
            f"N={n}, {N_REFERENCES} refs, K=1, same weights, (N, L, 4)",
            f"{times['keras'] / n:.3f}",
            f"{times['torch'] / n:.3f}",
            times["keras"] / times["torch"],
            "",
            "—",
        )
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-bpnet", type=int, default=8)
    parser.add_argument("--n-crested", type=int, default=16)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (torch rows)")
    parser.add_argument("--skip-tensorflow", action="store_true")
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)
    frameworks = {"torch": torch}
    rows: list[Row] = []
    for label in CASES:
        rows += torch_rows(label, args)
    if not args.skip_tensorflow:
        import tensorflow as tf

        frameworks["tensorflow"] = tf
        for label in CASES:
            rows += keras_rows(label, args)
    import tangermeme

    frameworks["tangermeme"] = tangermeme
    print("\n".join(machine_description(frameworks)))
    print(
        f"threads: {torch.get_num_threads()} (torch), 1 (TensorFlow); device: {args.device}; "
        + ("times: CPU seconds of this process" if args.device == "cpu" else "wall-clock")
    )
    print()
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
