"""How many sequences move together, all derived from ``max_cpu_sequences`` in one place.

- **Input chunk**: sequences read from X and copied to the device at a time: at most
  ``max_cpu_sequences``, about ``INPUT_ROWS`` rows' worth (fewer sequences when each has many
  rows), and at most ``INPUT_BYTES`` of rows (a method's payload per sequence, its baselines
  too, grows with its rows), at least one. The byte cap binds for long inputs: 4,096 rows of
  196,608-bp sequences would be 12 GiB.
- **Host block**: finished sequences copied from the device to the host at once and handed to
  the sink (memory, or one write of a tracks file): at most ``max_cpu_sequences``, and at most
  ``DEVICE_BLOCK_BYTES`` of results kept on the device meanwhile.
- **File chunk**: the HDF5 chunk of a tracks file holds one host block of sequences (the writer
  caps a chunk at 1 MiB for compression).

So host memory is bounded by ``max_cpu_sequences`` results plus one input chunk, whatever N is.
"""

from __future__ import annotations

#: Rows' worth of sequences read from X per input chunk.
INPUT_ROWS = 4096
#: Bytes of rows (rows x one sequence's float32 bytes) per input chunk.
INPUT_BYTES = 64 * 2**20
#: Finished results kept on the device before one copy to the host (bytes).
DEVICE_BLOCK_BYTES = 64 * 2**20


def input_chunk(max_cpu_sequences: int, mean_rows: float, sequence_bytes: int) -> int:
    """Sequences per input chunk for a kernel of ``mean_rows`` rows per sequence, each row the
    size of one sequence (``sequence_bytes`` as float32)."""
    by_bytes = INPUT_BYTES // max(1.0, mean_rows * sequence_bytes)
    return max(1, min(max_cpu_sequences, int(INPUT_ROWS // mean_rows), int(by_bytes)))


def host_block(max_cpu_sequences: int, result_bytes: int) -> int:
    """Sequences per host block (and file chunk) for ``result_bytes`` of results per
    sequence."""
    return max(1, min(max_cpu_sequences, DEVICE_BLOCK_BYTES // max(1, result_bytes)))
