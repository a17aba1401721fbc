"""DeepSHAP on transformer models of the Enformer class: the cost of the rules over our own
gradient passes, and what tangermeme's deep_lift_shap does on the same models.

    python benchmarks/bench_transformers.py [--n 8] [--n-baselines 20] [--repeats 3]
        [--device cpu|cuda]

Models (``tests/transformer_models.py``, random weights): enformer-pytorch's ``Enformer`` at
the test configuration (dim 48, one transformer layer of 2 heads with relative position logits,
attention pooling, 256 bp -> 16 bins x 6 tracks) and the hand-written Enformer-like
transformer (attention pooling, einsum attention, LayerNorm, GELU; 128 bp -> 32 bins x 5
tracks). The output function sums each track over the central bins; two targets.

- rules' overhead: ``deep_lift_shap`` with ``n_baselines`` dinucleotide-shuffled references
  per sequence (passed as an array) against ``saliency`` over the same rows (the references
  themselves): the same forward and backward passes without the rules. Times are the median of
  ``--repeats`` after a warm-up; on a CPU, this process's CPU time, one thread.
- tangermeme: its ``deep_lift_shap`` on the same sequences and references (a module that
  applies the output function, one target per call, batch 16): its time where it runs, and its
  largest relative summation gap |f(x) - mean f(r) - sum of attributions| / |f(x) - mean f(r)|
  against ours (its time has no target: a faster wrong sum is no gain); where it refuses, its
  error.
"""

from __future__ import annotations

import _common

_common.blas_threads(1)  # before NumPy loads

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformer_models as tm  # noqa: E402
from _common import Row, Variant, interleaved, log, machine_description, markdown_table  # noqa: E402
from models import random_one_hot  # noqa: E402

import seqattrib as sa  # noqa: E402

TARGETS = [0, 2]


def _cases() -> dict[str, tuple[Any, int, str, Callable[[Any], Any]]]:
    return {
        "Enformer (enformer-pytorch, small)": (
            tm.enformer_small(0),
            tm.ENFORMER_LENGTH,
            "NLC",
            tm.central_bins(tm.ENFORMER_BINS, 4, head="human"),
        ),
        "Enformer-like toy": (
            tm.toy_transformer(0),
            tm.TOY_LENGTH,
            "NCL",
            tm.central_bins(tm.TOY_LENGTH // 4, 8),
        ),
    }


def _references(X: np.ndarray, layout: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    nlc = X if layout == "NLC" else X.transpose(0, 2, 1)
    refs = np.stack([sa.dinucleotide_shuffle(x, n, rng) for x in nlc])
    return np.ascontiguousarray(refs if layout == "NLC" else refs.transpose(0, 1, 3, 2))


class _Selected(torch.nn.Module):
    """The model with its output function applied: (N, K) outputs, as tangermeme wants."""

    def __init__(self, model: Any, output_fn: Callable[[Any], Any], layout: str) -> None:
        super().__init__()
        self.model, self.output_fn, self.layout = model, output_fn, layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # tangermeme passes (N, 4, L); Enformer takes (N, L, 4)
        x = x.transpose(1, 2) if self.layout == "NLC" else x
        return self.output_fn(self.model(x))


def _tangermeme(
    model: Any, X: np.ndarray, refs: np.ndarray, output_fn: Any, layout: str, device: str
) -> tuple[Callable[[], Any] | None, str]:
    """A call of tangermeme's deep_lift_shap on both targets, or None and its error."""
    from tangermeme.deep_lift_shap import deep_lift_shap

    wrapped = _Selected(model, output_fn, layout).eval()
    ncl = X if layout == "NCL" else X.transpose(0, 2, 1)
    refs_ncl = refs if layout == "NCL" else refs.transpose(0, 1, 3, 2)
    x = torch.from_numpy(np.ascontiguousarray(ncl))
    r = torch.from_numpy(np.ascontiguousarray(refs_ncl))

    def run() -> np.ndarray:
        return np.stack(
            [
                deep_lift_shap(
                    wrapped, x, target=t, references=r, batch_size=16, device=device,
                    warning_threshold=1e9,
                ).numpy()
                for t in TARGETS
            ],
            axis=1,
        )  # fmt: skip

    try:
        run()
    except Exception as exc:  # what it says is the result
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return run, ""


def _worst_gap(model: Any, X: np.ndarray, refs: np.ndarray, attr: np.ndarray, f: Any) -> float:
    """max over sequences and targets of |f(x) - mean f(r) - sum attr| / |f(x) - mean f(r)|."""
    n, b = refs.shape[:2]
    with torch.no_grad():
        fx = f(model(torch.from_numpy(X))).numpy()[:, TARGETS]
        fr = f(model(torch.from_numpy(refs.reshape(n * b, *X.shape[1:])))).numpy()[:, TARGETS]
    gap = fx - fr.reshape(n, b, -1).mean(axis=1)
    total = attr.reshape(n, len(TARGETS), -1).sum(axis=-1)
    return float((np.abs(gap - total) / np.abs(gap)).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--n-baselines", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cpu = args.device == "cpu"
    clock = time.process_time if cpu else time.perf_counter
    rows: list[Row] = []
    notes: list[str] = []
    for label, (model, length, layout, f) in _cases().items():
        model = model.to(args.device)
        X = random_one_hot(args.n, length, seed=1, layout=layout)
        refs = _references(X, layout, args.n_baselines)
        flat = refs.reshape(args.n * args.n_baselines, *X.shape[1:])
        common = {"target": TARGETS, "output_fn": f, "device": args.device}
        sync = torch.cuda.synchronize if not cpu else None
        log(f"{label}: DeepSHAP against saliency over the same rows")
        times = interleaved(
            [
                Variant(
                    "deepshap",
                    lambda: sa.deep_lift_shap(model, X, baselines=refs, **common),  # noqa: B023
                    sync=sync,
                ),
                Variant("saliency", lambda: sa.saliency(model, flat, **common), sync=sync),  # noqa: B023
            ],
            args.repeats,
            clock,
        )
        per = args.n
        settings = f"{args.n} sequences x {args.n_baselines} references, K=2"
        ours, theirs = times["deepshap"] / per, times["saliency"] / per
        rows.append(
            Row.ratio_row(
                label, f"torch {args.device}", "DeepSHAP ÷ saliency on the same rows", settings,
                ours, theirs, ours / theirs, "≤ 3",
            )
        )  # fmt: skip
        ours_attr = sa.deep_lift_shap(model, X, baselines=refs, **common)
        ours_gap = _worst_gap(model, X, refs, ours_attr, f)
        run, error = _tangermeme(model, X, refs, f, layout, args.device)
        if run is None:
            notes.append(f"{label}: tangermeme's deep_lift_shap refused: {error}")
            rows.append(
                Row(
                    label, f"torch {args.device}", "tangermeme ÷ ours (DeepSHAP)", settings,
                    f"{ours:.2f}", "refused", None, "—", "—",
                )
            )  # fmt: skip
            notes.append(f"{label}: ours sums to within {ours_gap:.1e} of f(x) - mean f(r)")
            continue
        theirs_attr = run()
        theirs_gap = _worst_gap(model, X, refs, theirs_attr, f)
        their_times = interleaved([Variant("tangermeme", run, sync=sync)], args.repeats, clock)
        t = their_times["tangermeme"] / per
        rows.append(
            Row.ratio_row(
                label, f"torch {args.device}", "tangermeme ÷ ours (DeepSHAP)", settings,
                ours, t, t / ours, "—",
            )
        )  # fmt: skip
        notes.append(
            f"{label}: largest relative summation gap: ours {ours_gap:.1e}, "
            f"tangermeme {theirs_gap:.1e}"
        )
    print()
    print(markdown_table(rows))
    print()
    print(
        "Seconds per sequence: "
        + ("this process's CPU time" if cpu else "wall-clock time")
        + ", median of the repeats."
    )
    for note in notes:
        print(f"- {note}")
    import tangermeme

    for line in machine_description({"torch": torch, "tangermeme": tangermeme}):
        print(f"- {line}")


if __name__ == "__main__":
    _common.run_main(main)
    sys.exit(0)
