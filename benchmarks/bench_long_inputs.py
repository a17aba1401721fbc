"""Long inputs on the CPU: time and peak host memory per sequence at Enformer's 196,608 bp
(saliency, EIG) and at Borzoi's 524,288 bp (saliency), against the bare forward and backward
pass of the same model.

    python benchmarks/bench_long_inputs.py [--length 196608] [--long-length 524288] [--n 2]
        [--channels 4] [--n-baselines 64] [--n-steps 3]

The model is the few-channel long-input net of the tests (``tests/transformer_models.py``: a
15-wide conv stem, 128x pooling to 1,536 bins at 196,608 bp, a conv block and a softplus
(bins, tracks) head), two targets (each track summed over the central 16 bins). Every variant
runs in a fresh process (``--memory-probe``), after a warm-up on a 4,096-bp input, with
X in memory and the tracks streamed to an HDF5 file (``out=``); it reports this process's CPU
time per sequence and its peak resident memory above what it held before the call (VmHWM, see
``_common.peak_rss``). One thread.

- bare: the model's input gradients of one sequence at batch 1 (one forward, a backward per
  target), by hand;
  the ratio of a method is its time per sequence over (rows per sequence x bare), where the
  rows are 1 for saliency and n_baselines x n_steps for EIG (gausslegendre, its default rule).
- memory ratio: a method's peak over bare's peak (the model's activations at batch 1).
- EIG's dinucleotide shuffles are drawn on the host; their time is part of EIG's.
"""

from __future__ import annotations

import _common

_common.blas_threads(1)  # before NumPy loads

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from _common import Row, machine_description, markdown_table  # noqa: E402


def _probe(spec: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: one variant's CPU seconds per sequence and its peak memory."""
    import numpy as np
    import torch
    import transformer_models as tm

    import seqattrib as sa

    torch.set_num_threads(1)
    length, n = spec["length"], spec["n"]
    model = tm.long_input_net(0, channels=spec["channels"])
    f = tm.central_bins(length // tm.LONG_POOL, 16)
    rng = np.random.default_rng(0)
    X = np.ascontiguousarray(
        np.eye(4, dtype=np.float32)[rng.integers(0, 4, (n, length))].transpose(0, 2, 1)
    )
    folder = Path(tempfile.mkdtemp(prefix="bench-long-"))
    eig = {"n_baselines": spec["n_baselines"], "n_steps": spec["n_steps"]}
    short = X[:1, :, :4096]
    sa.saliency(model, short, output_fn=f, out=folder / "warm1.h5")
    sa.expected_integrated_gradients(
        model, short, output_fn=f, n_baselines=2, n_steps=1, out=folder / "warm2.h5"
    )

    def bare() -> None:
        for i in range(n):
            x = torch.from_numpy(X[i : i + 1]).requires_grad_(True)
            y = f(model(x))
            for k in range(2):  # the two targets
                torch.autograd.grad(y[:, k].sum(), x, retain_graph=k == 0)

    def run() -> None:
        out = folder / "tracks.h5"
        if spec["mode"] == "bare":
            bare()
        elif spec["mode"] == "saliency":
            sa.saliency(model, X, target=[0, 1], output_fn=f, out=out)
        else:
            sa.expected_integrated_gradients(model, X, target=[0, 1], output_fn=f, out=out, **eig)

    start = time.process_time()
    peak, how = _common.peak_rss(run)
    seconds = time.process_time() - start
    return {"seconds_per_sequence": seconds / n, "peak_bytes": peak, "how": how}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=196_608)
    parser.add_argument("--long-length", type=int, default=524_288)
    parser.add_argument("--n", type=int, default=2, help="sequences per variant")
    parser.add_argument("--channels", type=int, default=4)
    parser.add_argument("--n-baselines", type=int, default=64)
    parser.add_argument("--n-steps", type=int, default=3)
    parser.add_argument("--memory-probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        print(json.dumps(_probe(json.loads(args.memory_probe))))
        return
    common = {"n": args.n, "channels": args.channels}
    common |= {"n_baselines": args.n_baselines, "n_steps": args.n_steps}
    rows: list[Row] = []
    how = ""
    for length, modes in (
        (args.length, ("bare", "saliency", "eig")),
        (args.long_length, ("bare", "saliency")),
    ):
        results = {}
        for mode in modes:
            results[mode] = _common.probe_in_subprocess(
                __file__, {**common, "mode": mode, "length": length}
            )
            how = results[mode]["how"]
        bare = results["bare"]
        for mode in modes[1:]:
            per_row = args.n_baselines * args.n_steps if mode == "eig" else 1
            settings = f"L={length:,}, {args.channels} channels, K=2, out=tracks.h5"
            if mode == "eig":
                settings += f", {args.n_baselines} baselines x {args.n_steps} steps"
            ours, theirs = (
                results[mode]["seconds_per_sequence"],
                bare["seconds_per_sequence"] * per_row,
            )
            rows.append(
                Row.ratio_row(
                    "long-input net", "torch cpu", f"{mode} ÷ bare fwd+bwd ({per_row} rows)",
                    settings, ours, theirs, ours / theirs, "≤ 1.5",
                )
            )  # fmt: skip
            mine, base = results[mode]["peak_bytes"], bare["peak_bytes"]
            rows.append(
                Row(
                    "long-input net", "torch cpu", f"{mode} peak memory ÷ bare's", settings,
                    _common.fmt_mib(mine), _common.fmt_mib(base), mine / max(1, base), "—", "—",
                )
            )  # fmt: skip
    print()
    print(markdown_table(rows))
    print()
    print(
        "Seconds are CPU seconds per sequence (ours) and rows x the bare pass's seconds per row "
        "(theirs); memory rows give peak MiB above the process's memory before the call. "
        + how
        + "."
    )
    import numpy
    import torch

    for line in machine_description({"torch": torch, "numpy": numpy}):
        print(f"- {line}")


if __name__ == "__main__":
    _common.run_main(main)
    sys.exit(0)
