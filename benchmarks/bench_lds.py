"""Linear datamodeling score (LDS, Park et al. 2023) of TRAK and TracIn on planted-motif DNA;
prints one markdown table.

Run ``python benchmarks/bench_lds.py [--quick] [--subsets 100] [--threads 1]``.

Does a data-attribution method predict what retraining on a subset of the training data does?
For each of ``--subsets`` class-stratified random halves ``S_j`` of the training set, a small
CNN is trained from scratch with 2 seeds, and its margin ``log p_y / (1 - p_y)`` is measured on
held-out targets. A method's scores ``tau(z, i)`` (computed once, from models trained on the
full training set) predict the margin of target ``z`` under ``S_j`` as ``sum_{i in S_j}
tau(z, i)``. LDS(z) is the Spearman correlation over the subsets between predicted and actual
margins (the mean over the 2 seeds); the table gives its mean over targets with a standard
error. The **noise ceiling** is the Spearman correlation over subsets between the two seeds'
margins (how reproducible the target is at all); its Spearman-Brown step-up 2r / (1 + r) is
the reliability of the 2-seed mean the methods are scored against, and the square root of that
the correlation a perfect predictor could expect (the attenuation bound, exact for Pearson
correlations, approximate for Spearman's).

Data: 3 classes of random 100 bp sequences; a class-k sequence carries class k's motif
(AGATAAGG, GCACGTGC, ATGACTCA) with probability 0.8 and, with probability 0.2, a distractor:
the motif of another class. 600 training sequences (200 per class), 100 held-out targets.
Model: conv(4->16, width 10) relu, global mean pool, dense(16->3): 707 parameters, trained by
full-batch Adam (lr 0.02, weight decay 1e-3, 200 steps) from a seeded initialisation. Full
batches remove batch-order noise and mean pooling makes training smooth: in trials with max
pooling and mini-batches the seed-to-seed correlation of the margins was 0.04-0.3, too low to
rank methods; mean pooling costs some accuracy (the motif signal is averaged over 91 positions).

Methods (all scores for the 600 training sequences, from models trained on all of them):

- TRAK, 1 model: ``seqattrib.TRAK`` on the final weights of one training run;
- TRAK, 5 models: the final weights of 5 runs with different seeds (independently trained);
- ``proj_dim`` 128 and 256, and ``proj_dim=None`` (707 exact gradient features for 600
  examples: the regime TRAK warns about);
- the projection at ``proj_dim`` 128: the default (``"auto"``: a dense Rademacher matrix for a
  model this small) against a dense Gaussian one and the sparse one (8 nonzeros per parameter)
  that ``"auto"`` takes for large models;
- TracIn: ``seqattrib.TracIn`` over 4 checkpoints of one run (steps 50, 100, 150, 200),
  cross-entropy, learning rate 0.02 (Adam's step size; TracIn assumes SGD);
- trivial baselines: random scores; "same label" (1 when the training label equals the
  target's); "carries the target's motif" (1 when the training sequence holds the motif of the
  target's class). Under class-stratified subsets every subset holds the same number of each
  label, so "same label" predicts the same margin for every subset: its LDS is undefined, and
  counts as 0.

``--quick`` runs 20 subsets, 150 training sequences and 30 targets (a smoke test; its numbers
are not the benchmark). Not timing-sensitive; about 2.5 minutes on one core.
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings
from dataclasses import dataclass
from typing import Any

import _common  # noqa: F401  (first: the paths and environment every benchmark runs with)
import models
import numpy as np
from _common import load_average, log, machine_description

import seqattrib

LENGTH = 100
MOTIFS = ("AGATAAGG", "GCACGTGC", "ATGACTCA")
P_MOTIF, P_DISTRACTOR = 0.8, 0.2
FILTERS, WIDTH = 16, 10
STEPS, LR, WEIGHT_DECAY = 200, 0.02, 1e-3
N_SEEDS = 2  # per subset
N_MODELS = 5  # independently trained models for TRAK
TRACIN_STEPS = (50, 100, 150, 200)


@dataclass(frozen=True)
class Plan:
    n_train: int  # multiple of 6 (3 classes, halves)
    n_test: int
    n_subsets: int


FULL = Plan(n_train=600, n_test=100, n_subsets=100)
QUICK = Plan(n_train=150, n_test=30, n_subsets=20)


# --------------------------------------------------------------------------- data and model
def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, 4, L) one-hot, labels (n,), and which motifs each sequence holds (n, 3) bool."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 4, size=(n, LENGTH))
    y = np.arange(n) % 3
    rng.shuffle(y)
    holds = np.zeros((n, 3), bool)
    for i in range(n):
        chosen = []
        if rng.random() < P_MOTIF:
            chosen.append(y[i])
        if rng.random() < P_DISTRACTOR:
            chosen.append(rng.choice([k for k in range(3) if k != y[i]]))
        starts = rng.permutation(LENGTH // 10 - 1)[: len(chosen)] * 10  # non-overlapping
        for k, start in zip(chosen, starts, strict=True):
            codes[i, start : start + 8] = ["ACGT".index(c) for c in MOTIFS[k]]
            holds[i, k] = True
    X = np.eye(4, dtype=np.float32)[codes].transpose(0, 2, 1)
    return np.ascontiguousarray(X), y.astype(np.int64), holds


def make_model() -> Any:
    return models.motif_cnn(FILTERS, WIDTH)


def train(X: np.ndarray, y: np.ndarray, seed: int, keep: tuple[int, ...] = ()) -> tuple[Any, list]:
    """Full-batch Adam from a seeded initialisation (no batch-order noise); returns the model
    (eval) and state copies after the steps in ``keep``."""
    import torch

    torch.manual_seed(seed)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    states = []
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xt), yt).backward()
        opt.step()
        if step in keep:
            states.append(copy.deepcopy(model.state_dict()))
    return model.eval(), states


def margins(model: Any, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log p_y / (1 - p_y) per example, float64."""
    import torch

    with torch.no_grad():
        z = model(torch.from_numpy(X)).double().numpy()
    rows = np.arange(len(y))
    others = z.copy()
    others[rows, y] = -np.inf
    return z[rows, y] - np.logaddexp.reduce(others, axis=1)


def test_accuracy(model: Any, X: np.ndarray, y: np.ndarray) -> float:
    import torch

    with torch.no_grad():
        return float((model(torch.from_numpy(X)).argmax(dim=1).numpy() == y).mean())


# --------------------------------------------------------------------------- LDS
def ranks(a: np.ndarray) -> np.ndarray:
    """Ranks along axis 0 of a 2-D array, ties sharing their mean rank."""
    out = np.empty(a.shape, np.float64)
    for col in range(a.shape[1]):
        order = np.argsort(a[:, col], kind="stable")
        ordered = a[order, col]
        first = np.r_[True, ordered[1:] != ordered[:-1]]
        group = np.cumsum(first) - 1
        mean_rank = np.flatnonzero(first) + (np.bincount(group) - 1) / 2
        out[order, col] = mean_rank[group]
    return out


def spearman_columns(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman correlation of each column of a with the same column of b (NaN if constant)."""
    ra, rb = ranks(a), ranks(b)
    ra -= ra.mean(axis=0)
    rb -= rb.mean(axis=0)
    denom = np.sqrt((ra**2).sum(axis=0) * (rb**2).sum(axis=0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (ra * rb).sum(axis=0) / np.where(denom > 0, denom, 1), np.nan)


def lds(scores: np.ndarray, subsets: np.ndarray, actual: np.ndarray) -> tuple[float, float, str]:
    """Mean LDS over targets, its standard error, and a note.

    scores (n_test, n_train); subsets (n_subsets, n_train) bool; actual (n_subsets, n_test).
    """
    predicted = subsets.astype(np.float64) @ scores.T.astype(np.float64)
    per_target = spearman_columns(predicted, actual)
    if np.isnan(per_target).all():
        return 0.0, 0.0, "undefined: the prediction is the same for every subset (counted as 0)"
    valid = per_target[~np.isnan(per_target)]
    note = "" if len(valid) == len(per_target) else f"{len(per_target) - len(valid)} targets NaN"
    return float(valid.mean()), float(valid.std(ddof=1) / np.sqrt(len(valid))), note


def stratified_halves(y: np.ndarray, n_subsets: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.zeros((n_subsets, len(y)), bool)
    for j in range(n_subsets):
        for k in range(3):
            members = np.flatnonzero(y == k)
            out[j, rng.choice(members, len(members) // 2, replace=False)] = True
    return out


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run (smoke test)")
    parser.add_argument("--subsets", type=int, default=None, help="number of training subsets")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    n_subsets = args.subsets or plan.n_subsets

    import torch

    torch.set_num_threads(args.threads)
    header = machine_description({"torch": torch})
    header.append(f"threads for this run (--threads): {args.threads}")
    start = time.perf_counter()

    X, y, holds = make_data(plan.n_train, seed=1)
    Xt, yt, holds_t = make_data(plan.n_test, seed=2)
    subsets = stratified_halves(y, n_subsets, seed=3)

    log(f"retraining on {n_subsets} subsets x {N_SEEDS} seeds")
    actual = np.empty((N_SEEDS, n_subsets, plan.n_test))
    accuracy = []
    for j in range(n_subsets):
        for s in range(N_SEEDS):
            model, _ = train(X[subsets[j]], y[subsets[j]], seed=1000 * (j + 1) + s)
            actual[s, j] = margins(model, Xt, yt)
            accuracy.append(test_accuracy(model, Xt, yt))
        if (j + 1) % 10 == 0:
            log(f"  {j + 1}/{n_subsets} subsets")
    t_retrain = time.perf_counter() - start
    mean_actual = actual.mean(axis=0)
    seed_to_seed = spearman_columns(actual[0], actual[1])
    ceiling = float(np.nanmean(seed_to_seed))
    stepped_up = 2 * ceiling / (1 + ceiling)

    log("full-data models")
    full = [train(X, y, seed=s, keep=TRACIN_STEPS if s == 0 else ()) for s in range(N_MODELS)]
    full_accuracy = [test_accuracy(m, Xt, yt) for m, _ in full]
    finals = [copy.deepcopy(m.state_dict()) for m, _ in full]
    n_params = sum(p.numel() for p in full[0][0].parameters())

    rows: list[tuple[str, float, float, str, float]] = []

    def add(name: str, scores_fn: Any) -> None:
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", seqattrib.SeqAttribWarning)
            scores = scores_fn()
        seconds = time.perf_counter() - t0
        mean, sem, note = lds(scores, subsets, mean_actual)
        if caught:
            note = (note + "; " if note else "") + "warned: " + str(caught[0].message)[:80]
        rows.append((name, mean, sem, note, seconds))
        log(f"  {name}: LDS {mean:.3f} ± {sem:.3f} ({seconds:.1f} s)")

    def trak(states: list, **kwargs: Any) -> np.ndarray:
        method = seqattrib.TRAK(make_model(), states, **kwargs)
        return method.fit(np.ascontiguousarray(X), y).scores(Xt, yt)

    log("methods")
    for states, d in ((finals[:1], 128), (finals, 128), (finals[:1], 256), (finals, 256)):
        label = f"{len(states)} model" + ("s" if len(states) > 1 else "")
        add(f"TRAK, {label}, proj_dim={d}", lambda s=states, d=d: trak(s, proj_dim=d))
    for states, kind in (
        (finals[:1], "gaussian"),
        (finals[:1], "sparse"),
        (finals, "gaussian"),
        (finals, "sparse"),
    ):
        label = f"{len(states)} model" + ("s" if len(states) > 1 else "")
        add(
            f"TRAK, {label}, proj_dim=128, projection={kind!r}",
            lambda s=states, k=kind: trak(s, proj_dim=128, projection=k),
        )
    add(
        f"TRAK, {N_MODELS} models, proj_dim=None ({n_params} features >= {plan.n_train} examples)",
        lambda: trak(finals, proj_dim=None),
    )
    tracin_states = full[0][1]
    add(
        f"TracIn, 1 run, {len(TRACIN_STEPS)} checkpoints (steps "
        + ", ".join(map(str, TRACIN_STEPS))
        + ")",
        lambda: (
            seqattrib.TracIn(make_model(), tracin_states, learning_rates=LR)
            .fit(X, y)
            .scores(Xt, yt)
        ),
    )
    rng = np.random.default_rng(4)
    add("baseline: random scores", lambda: rng.standard_normal((plan.n_test, plan.n_train)))
    add("baseline: same label", lambda: (yt[:, None] == y[None, :]).astype(np.float64))
    add(
        "baseline: carries the target's motif",
        lambda: holds[:, yt].T.astype(np.float64),
    )

    print("\n".join(header))
    print(f"load average at end (1/5/15 min): {load_average()}")
    print(
        f"data: {plan.n_train} training sequences ({plan.n_train // 3} per class), "
        f"{plan.n_test} held-out targets, L={LENGTH}; model: {n_params} parameters; "
        f"{n_subsets} class-stratified 50 % subsets x {N_SEEDS} seeds "
        f"({n_subsets * N_SEEDS} trainings, {t_retrain:.0f} s)"
    )
    print(
        f"test accuracy: subset models {np.mean(accuracy):.3f} (mean), full-data models "
        + ", ".join(f"{a:.3f}" for a in full_accuracy)
    )
    print()
    print("| method | LDS (mean Spearman over targets) | ± s.e. | time (s) | note |")
    print("|---|---|---|---|---|")
    sem_ceiling = np.nanstd(seed_to_seed, ddof=1) / np.sqrt(np.isfinite(seed_to_seed).sum())
    print(
        f"| noise ceiling: seed-to-seed Spearman r of the margins | {ceiling:.3f} | "
        f"{sem_ceiling:.3f} | — | reliability of the {N_SEEDS}-seed mean 2r/(1+r) = "
        f"{stepped_up:.3f}; best LDS a perfect predictor can expect: sqrt of it = "
        f"{np.sqrt(max(stepped_up, 0)):.3f} |"
    )
    for name, mean, sem, note, seconds in rows:
        print(f"| {name} | {mean:.3f} | {sem:.3f} | {seconds:.1f} | {note} |")
    print()
    best_trivial = max(mean for name, mean, _, _, _ in rows if name.startswith("baseline"))
    trak_rows = [
        (name, mean)
        for name, mean, _, _, _ in rows
        if name.startswith("TRAK") and "None" not in name
    ]
    beaten = all(mean > best_trivial for _, mean in trak_rows)
    print(
        f"TRAK beats every trivial baseline (best trivial LDS {best_trivial:.3f}): "
        + ("yes" if beaten else "**no**")
        + " — TRAK rows: "
        + ", ".join(f"{mean:.3f}" for _, mean in trak_rows)
    )
    log(f"done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
