"""Benchmark of TracIn (``seqattrib.TracIn``) against captum; prints one markdown table.

Run ``python benchmarks/bench_data_attribution.py [--quick] [--repeats N]
[--backends torch,tensorflow]``.

Setting: 2,000 training and 100 test sequences of 200 bp (random one-hot; class 1 carries a
motif), a small CNN (conv 4->32 width 11, relu, max-pool 4, conv 32->32 width 5 dilation 2,
relu, global mean, dense 32->2; 6,658 parameters), trained for 3 epochs with a state-dict file
saved after each: 3 checkpoints, cross-entropy loss. Every ratio is measured in this run: the
variants of a comparison are warmed up once (on a subset) and then timed in turn, median over
the repeats. A timed call is the whole job: ``TracIn(...).fit(X_train, y_train).scores(X_test,
y_test)`` for ours, construction + ``influence((X_test, y_test))`` for captum.

Rows:

1. exact TracIn: captum ``TracInCP`` ÷ ours, captum at its best ``batch_size`` (a probe on a
   subset of the training set picks it among 1, 4, 8, 16) and at its default (1); captum
   computes per-example gradients with one ``autograd.grad`` call per example (its batched
   alternative supports only Conv2d and Linear layers);
2. last layer: captum ``TracInCPFast`` ÷ ours ``layer="last"`` (captum's best of 64, 256, 1024);
3. peak memory of each variant, measured in a fresh subprocess per variant;
4. (tensorflow) the same model and checkpoints in Keras: captum (torch) ÷ ours on Keras.

``--quick`` runs 300 training and 20 test sequences (a smoke test; its ratios are not the
benchmark). ``--threads N`` sets torch's (and TensorFlow's) intra-op threads for both sides: on a
busy machine, idle-waiting threads slow captum's thousands of tiny per-example calls far more
than our batched ones, so ``--threads 1`` gives the ratio least inflated by load. Timings are
wall-clock on a shared machine: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    Row,
    Variant,
    interleaved,
    load_average,
    log,
    machine_description,
    peak_rss,
    print_report,
    probe_in_subprocess,
    relative_error,
    run_main,
    time_once,
)

import seqattrib

LENGTH = 200
N_CHECKPOINTS = 3
FILTERS = 32
MOTIF = "GATAAGGC"
CAPTUM_BATCHES = (1, 4, 8, 16)
CAPTUM_FAST_BATCHES = (64, 256, 1024)
MODEL_LABEL = "small CNN (6,658 parameters), L=200"


@dataclass(frozen=True)
class Plan:
    n_train: int
    n_test: int
    n_probe: int  # training sequences in captum's batch-size probe and in warm-ups
    repeats: int


FULL = Plan(n_train=2000, n_test=100, n_probe=200, repeats=2)
QUICK = Plan(n_train=300, n_test=20, n_probe=60, repeats=1)


# --------------------------------------------------------------------------- data and models
def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, 4, L) one-hot (torch layout) and 0/1 labels; class 1 carries the motif once."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 4, size=(n, LENGTH))
    y = rng.integers(0, 2, n)
    motif = np.array(["ACGT".index(c) for c in MOTIF])
    for i in np.flatnonzero(y == 1):
        start = rng.integers(0, LENGTH - len(motif))
        codes[i, start : start + len(motif)] = motif
    X = np.eye(4, dtype=np.float32)[codes].transpose(0, 2, 1)
    return np.ascontiguousarray(X), y.astype(np.int64)


def torch_model(device: str = "cpu") -> Any:
    import torch

    class SmallCNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv1d(4, FILTERS, 11)
            self.conv2 = torch.nn.Conv1d(FILTERS, FILTERS, 5, dilation=2)
            self.dense = torch.nn.Linear(FILTERS, 2)

        def forward(self, x: Any) -> Any:
            h = torch.nn.functional.max_pool1d(torch.relu(self.conv1(x)), 4)
            return self.dense(torch.relu(self.conv2(h)).mean(dim=-1))

    torch.manual_seed(0)
    return SmallCNN().eval().to(device)


def keras_model() -> Any:
    import keras

    inputs = keras.Input((LENGTH, 4))
    h = keras.layers.Conv1D(FILTERS, 11, activation="relu")(inputs)
    h = keras.layers.MaxPooling1D(4)(h)
    h = keras.layers.Conv1D(FILTERS, 5, dilation_rate=2, activation="relu")(h)
    h = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(inputs, keras.layers.Dense(2)(h))


def keras_weights(state: dict[str, Any]) -> list[np.ndarray]:
    """A torch state dict of ``torch_model`` in ``keras_model().get_weights()`` order."""
    w = {k: v.detach().cpu().numpy() for k, v in state.items()}
    return [
        w["conv1.weight"].transpose(2, 1, 0),
        w["conv1.bias"],
        w["conv2.weight"].transpose(2, 1, 0),
        w["conv2.bias"],
        w["dense.weight"].T,
        w["dense.bias"],
    ]


def train_checkpoints(folder: Path, X: np.ndarray, y: np.ndarray) -> list[str]:
    """Three epochs of SGD; a state-dict file after each. Returns the paths."""
    import torch

    model = torch_model().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    generator = torch.Generator().manual_seed(0)
    paths = []
    for epoch in range(N_CHECKPOINTS):
        order = torch.randperm(len(X), generator=generator)
        for start in range(0, len(X), 64):
            idx = order[start : start + 64]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
        paths.append(str(folder / f"epoch{epoch + 1}.pt"))
        torch.save(model.state_dict(), paths[-1])
    return paths


# --------------------------------------------------------------------------- the variants
def ours(model: Any, checkpoints: list[Any], data: Any, **kwargs: Any) -> np.ndarray:
    (X, y), (Xt, yt) = data
    return seqattrib.TracIn(model, checkpoints, **kwargs).fit(X, y).scores(Xt, yt)


def captum_exact(model: Any, paths: list[str], data: Any, batch_size: int) -> np.ndarray:
    import torch
    from captum.influence import TracInCP
    from torch.utils.data import TensorDataset

    (X, y), (Xt, yt) = data
    device = next(model.parameters()).device
    dataset = TensorDataset(torch.from_numpy(X).to(device), torch.from_numpy(y).to(device))
    loss = torch.nn.CrossEntropyLoss(reduction="none")
    tracin = TracInCP(model, dataset, paths, loss_fn=loss, batch_size=batch_size)
    test = (torch.from_numpy(Xt).to(device), torch.from_numpy(yt).to(device))
    return tracin.influence(test).detach().cpu().numpy()


def captum_fast(model: Any, paths: list[str], data: Any, batch_size: int) -> np.ndarray:
    import torch
    from captum.influence import TracInCPFast
    from torch.utils.data import TensorDataset

    (X, y), (Xt, yt) = data
    device = next(model.parameters()).device
    dataset = TensorDataset(torch.from_numpy(X).to(device), torch.from_numpy(y).to(device))
    loss = torch.nn.CrossEntropyLoss(reduction="sum")
    tracin = TracInCPFast(model, model.dense, dataset, paths, loss_fn=loss, batch_size=batch_size)
    test = (torch.from_numpy(Xt).to(device), torch.from_numpy(yt).to(device))
    return tracin.influence(test).detach().cpu().numpy()


def run_variant(name: str, model: Any, checkpoints: list[Any], data: Any, batch: int) -> Any:
    if name == "ours":
        return ours(model, checkpoints, data)
    if name == "ours_last":
        return ours(model, checkpoints, data, layer="last")
    if name == "captum":
        return captum_exact(model, checkpoints, data, batch)
    return captum_fast(model, checkpoints, data, batch)


def best_batch(
    name: str, candidates: tuple[int, ...], model: Any, paths: list[str], data: Any
) -> tuple[int, dict[int, float]]:
    """captum's fastest batch size on the probe data (each warmed up once, then timed once)."""
    times = {}
    for batch in candidates:
        run_variant(name, model, paths, data, batch)
        times[batch] = time_once(lambda b=batch: run_variant(name, model, paths, data, b))
        log(f"  probe {name} batch_size={batch}: {times[batch]:.2f} s")
    return min(times, key=times.__getitem__), times


# --------------------------------------------------------------------------- peak memory
def peak_memory(spec: dict[str, Any]) -> tuple[float, str]:
    """Peak memory of one variant's call, measured in a fresh subprocess."""
    result = probe_in_subprocess(__file__, spec)
    return float(result["bytes"]), str(result["method"])


def memory_probe(spec: dict[str, Any]) -> None:
    """Run one variant once in this (fresh) process and print its peak memory as JSON."""
    import captum.influence  # noqa: F401  (imports are part of the baseline, not the call)
    import torch
    import torch.func  # noqa: F401

    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    data = (make_data(spec["n_train"], seed=1), make_data(spec["n_test"], seed=2))
    tiny = ((data[0][0][:4], data[0][1][:4]), (data[1][0][:2], data[1][1][:2]))
    model = torch_model()
    run_variant(spec["name"], model, spec["paths"], tiny, spec["batch"])  # one-time costs
    gc.collect()
    peak, method = peak_rss(
        lambda: run_variant(spec["name"], model, spec["paths"], data, spec["batch"])
    )
    method += (
        ", in a fresh subprocess per variant after imports, data, model and a warm-up call on 4 "
        "training sequences (one-time costs such as lazy imports excluded)"
    )
    print(json.dumps({"bytes": peak, "method": method}))


def fmt_mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:.1f} MiB"


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small N, one repeat (smoke test)")
    parser.add_argument("--backends", default="torch,tensorflow", help="torch, or torch,tensorflow")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per variant")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch (and TensorFlow) intra-op threads for both sides (default: unchanged)",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="torch device of the model, ours and captum alike (cuda: no peak-RSS rows)",
    )
    parser.add_argument("--memory-probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_probe:
        memory_probe(json.loads(args.memory_probe))
        return
    backends = {b.strip() for b in args.backends.split(",") if b.strip()}
    if "torch" not in backends or backends - {"torch", "tensorflow"}:
        parser.error(f"--backends must be torch or torch,tensorflow, got {args.backends!r}")
    plan = QUICK if args.quick else FULL
    repeats = args.repeats or plan.repeats

    import captum
    import torch  # torch before TensorFlow, always

    frameworks: dict[str, Any] = {"torch": torch, "captum": captum}
    # seqattrib computes in full float32 (TF32 off inside its calls); so does everything else
    # here, so both sides of a comparison do the same arithmetic.
    for setting in (
        torch.backends.cudnn.conv,
        torch.backends.cudnn.rnn,
        torch.backends.cuda.matmul,
    ):
        setting.fp32_precision = "ieee"
    if "tensorflow" in backends:
        import keras
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")
        frameworks |= {"tensorflow": tf, "keras": keras}
    header = machine_description(frameworks)
    if args.threads:
        torch.set_num_threads(args.threads)
        if "tensorflow" in backends:
            tf.config.threading.set_intra_op_parallelism_threads(args.threads)
            tf.config.threading.set_inter_op_parallelism_threads(args.threads)
        header.append(f"threads for this run (--threads): {args.threads}, torch and TensorFlow")

    train, test = make_data(plan.n_train, seed=1), make_data(plan.n_test, seed=2)
    data = (train, test)
    probe = ((train[0][: plan.n_probe], train[1][: plan.n_probe]), test)
    rows: list[Row] = []
    notes: list[str] = []
    settings = f"n_train={plan.n_train}, n_test={plan.n_test}, {N_CHECKPOINTS} checkpoints"
    with tempfile.TemporaryDirectory() as folder:
        log("training the checkpoints")
        paths = train_checkpoints(Path(folder), *train)
        model = torch_model(args.device)
        header.append(f"device: {args.device}")

        log("exact TracIn: captum's batch size")
        best, probe_times = best_batch("captum", CAPTUM_BATCHES, model, paths, probe)
        notes.append(
            "captum TracInCP batch-size probe on "
            f"{plan.n_probe} training sequences: "
            + ", ".join(f"{b}: {t:.2f} s" for b, t in probe_times.items())
        )
        variants = [
            Variant("ours", lambda: ours(model, paths, data), lambda: ours(model, paths, probe)),
            Variant(
                f"captum batch_size={best}",
                lambda: captum_exact(model, paths, data, best),
                lambda: captum_exact(model, paths, probe, best),
            ),
        ]
        if best != 1:
            variants.append(
                Variant(
                    "captum batch_size=1",
                    lambda: captum_exact(model, paths, data, 1),
                    lambda: captum_exact(model, paths, probe, 1),
                )
            )
        t = interleaved(variants, repeats)
        for batch in sorted({best, 1}, reverse=True):
            which = "best" if batch == best else "default"
            rows.append(
                Row.ratio_row(
                    MODEL_LABEL,
                    "torch",
                    f"exact TracIn: captum TracInCP ({which} batch_size={batch}) ÷ ours",
                    f"{settings}; ours batch_size='auto'",
                    t["ours"],
                    t[f"captum batch_size={batch}"],
                    t[f"captum batch_size={batch}"] / t["ours"],
                    "≥ 20",
                )
            )
        exact_ours = ours(model, paths, data)
        notes.append(
            "check: ours vs captum TracInCP, max|diff| / max|captum| = "
            f"{relative_error(exact_ours, captum_exact(model, paths, data, best)):.1e}"
        )

        log("last layer: captum's batch size")
        best_fast, fast_times = best_batch("captum_fast", CAPTUM_FAST_BATCHES, model, paths, data)
        notes.append(
            "captum TracInCPFast batch-size probe (full data): "
            + ", ".join(f"{b}: {t:.2f} s" for b, t in fast_times.items())
        )
        t_last = interleaved(
            [
                Variant(
                    "ours last",
                    lambda: ours(model, paths, data, layer="last"),
                    lambda: ours(model, paths, probe, layer="last"),
                ),
                Variant(
                    "captum fast",
                    lambda: captum_fast(model, paths, data, best_fast),
                    lambda: captum_fast(model, paths, probe, best_fast),
                ),
            ],
            repeats,
        )
        rows.append(
            Row.ratio_row(
                MODEL_LABEL,
                "torch",
                "last layer: captum TracInCPFast ÷ ours layer='last'",
                f"{settings}; captum batch_size={best_fast}, ours 'auto'",
                t_last["ours last"],
                t_last["captum fast"],
                t_last["captum fast"] / t_last["ours last"],
                "≥ 1",
            )
        )

        log("peak memory")
        memory = {}
        for name, batch in (
            ()
            if args.device != "cpu"
            else (
                ("ours", 0),
                ("captum", best),
                ("ours_last", 0),
                ("captum_fast", best_fast),
            )
        ):
            spec = {
                "name": name,
                "batch": batch,
                "paths": paths,
                "n_train": plan.n_train,
                "n_test": plan.n_test,
                "threads": args.threads,
            }
            memory[name] = peak_memory(spec)
        method = memory["ours"][1] if memory else "not measured off the CPU (host RSS only)"
        for label, mine, theirs in (
            ()
            if not memory
            else (
                ("exact, captum TracInCP vs ours", "ours", "captum"),
                ("last layer, captum TracInCPFast vs ours", "ours_last", "captum_fast"),
            )
        ):
            m_ours, m_theirs = memory[mine][0], memory[theirs][0]
            rows.append(
                Row(
                    MODEL_LABEL,
                    "torch",
                    f"peak memory, {label}",
                    "same settings",
                    fmt_mib(m_ours),
                    fmt_mib(m_theirs),
                    m_theirs / m_ours if m_ours > 0 else None,
                    "—",
                    "—",
                )
            )
        notes.append(f"memory: {method}")

        if "tensorflow" in backends:
            log("Keras")
            kmodel = keras_model()
            files = []
            for path in paths:
                kmodel.set_weights(keras_weights(torch.load(path, weights_only=True)))
                files.append(path.replace(".pt", ".weights.h5"))
                kmodel.save_weights(files[-1])
            as_nlc = [(np.ascontiguousarray(X.transpose(0, 2, 1)), y) for X, y in data]
            kdata = (as_nlc[0], as_nlc[1])
            kprobe = ((as_nlc[0][0][: plan.n_probe], as_nlc[0][1][: plan.n_probe]), as_nlc[1])
            t_keras = interleaved(
                [
                    Variant(
                        "keras exact",
                        lambda: ours(kmodel, files, kdata),
                        lambda: ours(kmodel, files, kprobe),
                    ),
                    Variant(
                        "keras last",
                        lambda: ours(kmodel, files, kdata, layer="last"),
                        lambda: ours(kmodel, files, kprobe, layer="last"),
                    ),
                ],
                repeats,
            )
            for which, key, theirs in (
                ("exact: captum TracInCP (torch", "keras exact", t[f"captum batch_size={best}"]),
                ("last layer: captum TracInCPFast (torch", "keras last", t_last["captum fast"]),
            ):
                rows.append(
                    Row.ratio_row(
                        MODEL_LABEL,
                        "tensorflow",
                        f"{which}, timed above) ÷ ours on Keras",
                        f"{settings}, Keras .weights.h5 files",
                        t_keras[key],
                        theirs,
                        theirs / t_keras[key],
                        "—",
                    )
                )
            notes.append(
                "check: ours on Keras vs ours on torch (exact), max|diff| / max|torch| = "
                f"{relative_error(ours(kmodel, files, kdata), exact_ours):.1e}"
            )

    print("\n".join(header))
    print(f"load average at end (1/5/15 min): {load_average()}")
    print(
        f"repeats per variant: {repeats} (median), each variant warmed up once on "
        f"{plan.n_probe} training sequences; variants of a comparison timed in turn"
    )
    print_report(
        rows,
        "Ratios: time rows are theirs ÷ ours (a speed-up); memory rows captum ÷ ours. A timed "
        "call is the whole job (fit + scores; construction + influence). Timings are "
        "wall-clock, so they move with the machine's load.",
        notes,
    )


if __name__ == "__main__":
    run_main(main)
