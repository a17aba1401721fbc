"""K targets from one call: K=5 ÷ K=1 time, with the K backward passes run one after another
(the CPU default) or as one vectorised pass (the accelerator default).

    python benchmarks/bench_targets.py [--n-sequences 8] [--device cuda --backends torch]
        [--batch-size 128]

BPNet-like model (L=1000, 5 outputs), IG with 25 steps, batch_size=128, both backends; the
minimum of 2 timed calls after a warm-up, all in this run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import _common  # noqa: F401  (first: the paths and environment every benchmark runs with)
import models
import torch  # noqa: F401  (before TensorFlow)

import seqattrib as sa
from seqattrib.engine import outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-sequences", type=int, default=8)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (torch only off the CPU)")
    parser.add_argument("--backends", default="torch,tensorflow")
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    frameworks = [b for b in ("torch", "tensorflow") if b in args.backends.split(",")]
    weights = models.bpnet_weights()
    print(f"command: python {' '.join(sys.argv)}")
    print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    print(f"device: {args.device}; batch_size={args.batch_size}; N={args.n_sequences}")
    print("\n| backend | K=1 (s) | K=5 sequential (s) | ratio | K=5 vectorised (s) | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    judged = []
    for framework in frameworks:
        if framework == "torch":
            model = models.torch_model("bpnet", weights, "NCL")
            X = models.random_one_hot(args.n_sequences, 1000, layout="NCL")
        else:
            model = models.keras_model("bpnet", weights, 1000, "NLC")
            X = models.random_one_hot(args.n_sequences, 1000)

        def run(target: object, model: object = model, X: object = X) -> float:
            tick = time.perf_counter()
            out = sa.integrated_gradients(
                model, X, target=target, batch_size=args.batch_size, device=args.device
            )
            assert out.shape[0] == len(X)  # numpy on the host: the device work has finished
            return time.perf_counter() - tick

        times = {}
        for vectorise in (False, True):
            outputs.VECTORISE_ON_CPU = outputs.VECTORISE_ON_ACCELERATOR = vectorise
            run(0)
            run([0, 1, 2, 3, 4])
            times[vectorise] = min(run([0, 1, 2, 3, 4]) for _ in range(2))
        outputs.VECTORISE_ON_CPU, outputs.VECTORISE_ON_ACCELERATOR = False, True
        one = min(run(0) for _ in range(2))
        print(
            f"| {framework} | {one:.2f} | {times[False]:.2f} | {times[False] / one:.2f} | "
            f"{times[True]:.2f} | {times[True] / one:.2f} |"
        )
        default = times[args.device != "cpu"] / one  # the path the device runs by default
        judged.append(f"{framework} {default:.2f} ({'met' if default <= 2.5 else 'not met'})")
    path = "vectorised" if args.device != "cpu" else "sequential"
    print(
        f"\ntarget K=5 ÷ K=1 <= 2.5 on the {path} path (this device's default): "
        + ", ".join(judged)
    )


if __name__ == "__main__":
    main()
