"""Out-of-memory errors of torch, as the batch sizer catches them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ..protocol import OutOfDeviceMemory

#: How torch's CPU allocator words a failed allocation (a plain RuntimeError, where a GPU
#: raises ``torch.OutOfMemoryError``).
_CPU_ALLOCATOR = "DefaultCPUAllocator: can't allocate memory"


@contextmanager
def out_of_memory() -> Iterator[None]:
    """A failed allocation inside the block, on a GPU or on the host, raises
    ``OutOfDeviceMemory`` (which the batch sizer answers with a smaller batch)."""
    try:
        yield
    except RuntimeError as exc:
        if isinstance(exc, torch.OutOfMemoryError) or _CPU_ALLOCATOR in str(exc):
            raise OutOfDeviceMemory(str(exc)) from exc
        raise
