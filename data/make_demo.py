"""Make the embedded demo: synthetic DNA with planted JASPAR motifs, and a tiny CNN on it.

    python data/make_demo.py [--motifs ../shared/data/cases/motifs/jaspar_2024_consensus.meme]

Writes, next to this script:
- ``demo_sequences.fa``: 2,000 random 200-bp sequences (uniform background); each carries a
  GATA (JASPAR cluster C101 GATA_MECOM), an E-box (C012 ASCL_FIGLA, bHLH) and a CTCF (C055)
  instance, each with probability 0.4, sampled from the motif's PWM raised to the power 3
  (strong sites) at a random position (motifs never overlap);
- ``demo_motifs.tsv``: per sequence, which motifs were planted and where (0-based, end
  exclusive; -1 where absent);
- ``demo_regions.bed`` and ``demo.chrom.sizes``: made-up genome coordinates (chromosome
  ``demo``, one window every 250 bp) for the bigWig export;
- ``demo_model.pt`` (torch state_dict) and ``demo_model.keras``: ``seqattrib.demo``'s CNN
  trained in under a minute to predict the three motifs (multi-label, logits); the Keras
  model carries the same weights (checked to 1e-5).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MOTIFS = {
    "GATA": "C101:GATA_MECOM:GATA",
    "Ebox": "C012:ASCL_FIGLA:bHLH",
    "CTCF": "C055:CTCF:C2H2_ZF",
}
N, LENGTH, SPACING = 2000, 200, 250


def read_meme(path: Path) -> dict[str, np.ndarray]:
    pwms: dict[str, np.ndarray] = {}
    name, rows = None, []
    for line in path.read_text().splitlines():
        if line.startswith("MOTIF"):
            name, rows = line.split()[1], []
        elif name and line.strip() and line.split()[0].replace(".", "").isdigit():
            rows.append([float(v) for v in line.split()])
        elif name and line.startswith("URL"):
            pwms[name] = np.array(rows)
            name = None
    return pwms


def make_sequences(pwms: dict[str, np.ndarray], rng: np.random.Generator):
    bases = np.array(list("ACGT"))
    seqs, table = [], []
    for i in range(N):
        seq = rng.choice(bases, LENGTH)
        free = np.ones(LENGTH, bool)
        row = [f"seq{i:04d}"]
        for motif in MOTIFS.values():
            pwm = pwms[motif]
            width = len(pwm)
            start = end = -1
            if rng.random() < 0.4:
                options = [s for s in range(LENGTH - width) if free[s : s + width].all()]
                start = int(rng.choice(options))
                end = start + width
                sharpened = pwm**3  # strong instances: the demo model must learn them fast
                probabilities = sharpened / sharpened.sum(axis=1, keepdims=True)
                seq[start:end] = [bases[rng.choice(4, p=p)] for p in probabilities]
                free[max(0, start - 2) : end + 2] = False
            row += [int(start >= 0), start, end]
        seqs.append("".join(seq))
        table.append(row)
    return seqs, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--motifs",
        type=Path,
        default=HERE.parent.parent / "shared/data/cases/motifs/jaspar_2024_consensus.meme",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    seqs, table = make_sequences(read_meme(args.motifs), rng)
    with open(HERE / "demo_sequences.fa", "w") as fa:
        for row, seq in zip(table, seqs, strict=True):
            fa.write(f">{row[0]}\n{seq}\n")
    header = ["name"] + [h for t in MOTIFS for h in (f"has_{t}", f"{t}_start", f"{t}_end")]
    with open(HERE / "demo_motifs.tsv", "w") as out:
        out.write("\t".join(header) + "\n")
        for row in table:
            out.write("\t".join(map(str, row)) + "\n")
    with open(HERE / "demo_regions.bed", "w") as bed:
        for i, row in enumerate(table):
            bed.write(f"demo\t{i * SPACING}\t{i * SPACING + LENGTH}\t{row[0]}\n")
    (HERE / "demo.chrom.sizes").write_text(f"demo\t{N * SPACING}\n")

    import torch  # torch before TensorFlow in one process

    import seqattrib as sa
    from seqattrib import demo

    torch.manual_seed(args.seed)
    X = torch.from_numpy(sa.one_hot(seqs, layout="NCL"))
    y = torch.from_numpy(np.array([[r[1], r[4], r[7]] for r in table], np.float32))
    n_train = 1600
    model = demo.torch_model(weights="")
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    tick = time.perf_counter()
    model.train()
    epochs = 0
    for _ in range(30):
        for batch in torch.randperm(n_train).split(64):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(X[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        epochs += 1
        if time.perf_counter() - tick > 90:
            break
    model.eval()
    with torch.no_grad():
        logits = model(X[n_train:]).numpy()
    accuracy = ((logits > 0) == (y[n_train:].numpy() > 0)).mean(axis=0)
    print(
        f"trained {epochs} epochs in {time.perf_counter() - tick:.0f} s; "
        "held-out accuracy per task "
        + ", ".join(f"{t} {a:.3f}" for t, a in zip(MOTIFS, accuracy, strict=True))
    )
    torch.save(model.state_dict(), HERE / "demo_model.pt")

    keras_model = demo.keras_model(weights="")
    conv, dense = model[0], model[4]
    keras_model.layers[0].set_weights(
        [conv.weight.detach().numpy().transpose(2, 1, 0), conv.bias.detach().numpy()]
    )
    keras_model.layers[2].set_weights(
        [dense.weight.detach().numpy().T, dense.bias.detach().numpy()]
    )
    check = keras_model(X[n_train:].numpy().transpose(0, 2, 1)).numpy()
    assert np.abs(check - logits).max() < 1e-4, np.abs(check - logits).max()
    keras_model.save(HERE / "demo_model.keras")
    print("wrote", ", ".join(sorted(p.name for p in HERE.glob("demo*"))))


if __name__ == "__main__":
    main()
