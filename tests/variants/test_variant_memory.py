"""Bounded memory: the peak RSS of a 1,000,000-variant VCF exceeds that of 10,000 variants by
less than 120 bytes per added variant (each run in its own process: a tiny model, scores only,
the table streamed to a file). What grows with the number of variants is bookkeeping: the
catalog (about 14 bytes per kept variant, 37 bytes while it is built), the engine's row counts
and ends (16 bytes), the genome (4 bases per variant here); never the table, the windows or the
scores (a float32 row of scores alone is 16 bytes, a window 128). Measured here at 80 to 92."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pysam")
if not sys.platform.startswith("linux"):
    pytest.skip("reads the peak RSS from /proc/self/status", allow_module_level=True)

LENGTH = 32
RUN = """
import sys, torch
import seqattrib as sa
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv1d(4, 4, 5), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 28, 2)
)
sa.variant_effects(model, sys.argv[1], sys.argv[2], length=32, target=[0, 1], score="delta",
                   batch_size=4096, out=sys.argv[3])
# the high-water mark of this process's own memory (ru_maxrss would also count the pages of the
# process that started it, which Linux carries across exec: under pytest, those of TensorFlow)
with open("/proc/self/status") as status:
    print(next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")))
"""


def _write(folder, n, genome_size):
    rng = np.random.default_rng(n)
    genome = rng.choice(np.frombuffer(b"ACGT", np.uint8), genome_size).tobytes().decode()
    fasta = folder / "genome.fa"
    fasta.write_text(">chr1\n" + genome + "\n")
    pos = np.sort(rng.choice(np.arange(LENGTH, genome_size - LENGTH), n, replace=False)) + 1
    ref = np.frombuffer(genome.encode(), np.uint8)[pos - 1]
    bases = np.frombuffer(b"ACGT", np.uint8)
    alt = bases[(np.searchsorted(bases, ref) + 1) % 4]
    vcf = folder / f"calls{n}.vcf"
    with open(vcf, "w") as handle:
        handle.write("##fileformat=VCFv4.2\n")
        handle.write(f"##contig=<ID=chr1,length={genome_size}>\n")
        handle.write("#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n")
        step = 100_000
        for a in range(0, n, step):
            handle.writelines(
                f"chr1\t{p}\t.\t{chr(r)}\t{chr(x)}\t.\t.\t.\n"
                for p, r, x in zip(
                    pos[a : a + step], ref[a : a + step], alt[a : a + step], strict=True
                )
            )
    return fasta, vcf


def _peak_rss(folder, n):
    fasta, vcf = _write(folder, n, genome_size=max(4 * n, 10_000))
    out = folder / f"effects{n}.tsv"
    result = subprocess.run(
        [sys.executable, "-c", RUN, str(fasta), str(vcf), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    with open(out, "rb") as handle:
        assert sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b"")) == n + 2
    return int(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_number_of_variants(tmp_path):
    small = _peak_rss(tmp_path, 10_000)
    large = _peak_rss(tmp_path, 1_000_000)
    growth = (large - small) * 1024  # VmHWM is in KiB
    added = 1_000_000 - 10_000
    assert growth <= 120 * added, (
        f"peak RSS {large / 1024:.0f} MiB vs {small / 1024:.0f} MiB: "
        f"{growth / added:.0f} bytes per added variant"
    )
