"""Damaged tracks files, and a worker that runs every reader on them (run as a subprocess, so a
reader that hangs is stopped by the caller's timeout).

``python _damaged.py FOLDER`` builds a small real tracks file (a one-shard saliency run with
regions) in FOLDER, damages copies of it in seeded ways, runs every API reader on each copy and
prints one JSON line per (variant, reader): the outcome and, for errors, the type and message.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np

N, LENGTH = 12, 24
SEED = 20261201


def inputs() -> tuple[object, np.ndarray, SimpleNamespace]:
    from models import convnet_weights, random_one_hot, torch_model

    model = torch_model("convnet", convnet_weights(n_outputs=3), "NLC")
    X = random_one_hot(N, LENGTH, seed=31)
    start = np.arange(N) * 100
    regions = SimpleNamespace(chrom=["chr1"] * N, start=start, end=start + LENGTH)
    return model, X, regions


def run(model: object, X: np.ndarray, regions: SimpleNamespace, out: Path) -> str:
    import seqattrib as sa

    return sa.saliency(model, X, target=[0, 1], out=out, regions=regions, shard=(0, 1))


def _delete(path: Path, name: str) -> None:
    with h5py.File(path, "r+") as f:
        if name.startswith("@"):
            del f.attrs[name[1:]]
        else:
            del f[name]


def _set_attribute(path: Path, name: str, value: str) -> None:
    with h5py.File(path, "r+") as f:
        f.attrs[name] = value


def _flagged(data: bytes) -> bytes:
    """The file with the "open for writing" flags of its (version 2 or 3) superblock set, as a
    killed single-writer-mode writer leaves them."""
    from seqattrib.io.hdf5 import lookup3

    head = bytearray(data[:64])
    assert head[8] in (2, 3), "the test file has a version 2 or 3 superblock"
    end = 12 + 4 * head[9]
    head[11] = 0x05  # write access and single-writer mode
    head[end : end + 4] = lookup3(bytes(head[:end])).to_bytes(4, "little")
    return bytes(head) + data[64:]


def damage(good: Path, folder: Path) -> list[Path]:
    """Seeded damaged copies of ``good``: truncations, random bytes, deleted datasets and
    attributes, attributes that are not JSON."""
    rng = np.random.default_rng(SEED)
    size = good.stat().st_size
    data = good.read_bytes()
    variants: list[Path] = []

    def copy(name: str) -> Path:
        path = folder / f"{name}.h5"
        shutil.copyfile(good, path)
        variants.append(path)
        return path

    for offset in [size // 2, *sorted(rng.integers(8, size - 1, 6))]:
        copy(f"truncated-{offset}").write_bytes(data[:offset])
    for k in range(6):
        start = int(rng.integers(512, size - 64))
        length = int(rng.integers(16, 2048))
        noise = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
        copy(f"noise-{k}-{start}").write_bytes(data[:start] + noise + data[start + length :])
    # A file still marked open for writing (its writer died) is read in single-writer mode,
    # where HDF5 by default retries a bad checksum with doubling waits, for hours.
    flagged = _flagged(data)
    copy("flagged-truncated").write_bytes(flagged[: size // 2])
    start = int(rng.integers(512, size // 2))
    noise = rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
    copy(f"flagged-noise-{start}").write_bytes(flagged[:start] + noise + flagged[start + 4096 :])
    for name in ["attributions", "sequences", "row_hashes", "regions/chrom", "regions"]:
        _delete(copy("deleted-" + name.replace("/", "-")), name)
    for name in ["settings", "n_completed", "format", "alphabet_axis", "method", "seed"]:
        _delete(copy(f"deleted-attr-{name}"), "@" + name)
    for name in ["settings", "provenance"]:
        _set_attribute(copy(f"not-json-{name}"), name, "{not json")
    return variants


def readers(model: object, X: np.ndarray, regions: SimpleNamespace, work: Path) -> dict:
    from seqattrib.io import export_bigwig, export_modisco, read_tracks
    from seqattrib.io.merge import merge_tracks

    sizes = work / "sizes"
    sizes.write_text(f"chr1\t{N * 100 + LENGTH}\n")

    def rerun(path: Path) -> object:
        copied = work / "rerun.h5"
        shutil.copyfile(path, copied)
        return read_tracks(run(model, X, regions, copied)).attributions

    def folder(name: str) -> Path:
        out = work / name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        return out

    return {
        "read_tracks": lambda p: read_tracks(p).attributions,
        "rerun": rerun,
        "merge_tracks": lambda p: (
            read_tracks(merge_tracks([p], work / "merged.h5", overwrite=True)).attributions
        ),
        "export_modisco": lambda p: export_modisco(p, folder("modisco")),
        "export_bigwig": lambda p: export_bigwig(p, folder("bigwig"), sizes),
    }


def main(folder: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1]))
    model, X, regions = inputs()
    good = Path(run(model, X, regions, folder / "good.h5"))
    expected = h5py.File(good, "r")["attributions"][:]
    work = folder / "work"
    work.mkdir()
    checks = readers(model, X, regions, work)
    for path in damage(good, folder):
        for reader, call in checks.items():
            print(f"{path.name} {reader}", file=sys.stderr, flush=True)
            try:
                value = call(path)
            except Exception as exc:  # noqa: BLE001 - every outcome is reported to the test
                outcome = {"outcome": "error", "type": type(exc).__name__, "message": str(exc)}
            else:
                same = not isinstance(value, np.ndarray) or np.array_equal(value, expected)
                outcome = {"outcome": "ok" if same else "wrong"}
            print(json.dumps({"variant": path.name, "reader": reader, **outcome}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
