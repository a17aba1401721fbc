"""HDF5 details shared by the writers: format bounds, stale write flags, failed writes.

- ``LIBVER``: every file is written with the HDF5 1.10 format bounds, which HDF5 1.10 and every
  later version read, and which single-writer mode (SWMR) needs. ``libver="latest"`` would let
  a newer library (HDF5 2.x) write structures older ones cannot read.
- :func:`clear_write_flags`: a writer that dies leaves "open for writing" flags in the
  superblock, and HDF5 then refuses to open the file for writing. Under the writer's lock those
  flags are stale; they are cleared in place, and the end-of-allocation address is moved to the
  end of the file (what ``h5clear -s --increment`` does), without copying the file and without
  needing free space.
- :func:`abandon`: after a failed write (a full disk, an I/O error) HDF5 holds unwritten
  metadata that it tries to flush again on every later call, and at exit (where it can crash).
  The file's descriptor is pointed at an anonymous memory file before closing, so nothing more
  reaches the disk: the file keeps the state of its last complete flush.
- :func:`open_read`: the one way the package opens an HDF5 file for reading. A damaged or
  truncated file fails at once: a finished file is opened plainly (HDF5 checks its length and
  every checksum once), and only a file still marked "open for writing" (a writer running, or
  one that died) is opened in single-writer read mode, with a bounded number of metadata read
  attempts (HDF5's default retries a failed checksum with a doubling wait, for hours).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import glob
import os
import re
import tempfile
from collections.abc import Callable
from typing import Any, cast

from .._errors import parameter_error

LIBVER = ("v110", "v110")
_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: Metadata read attempts of a reader of a file being written: the waits between attempts
#: double from a nanosecond, so 24 attempts wait about 20 ms in all.
_READ_ATTEMPTS = 24


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & 0xFFFFFFFF


def lookup3(data: bytes, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle``: HDF5's metadata checksum."""
    m = 0xFFFFFFFF
    length = len(data)
    a = b = c = (0xDEADBEEF + length + initval) & m
    i = 0
    while length > 12:
        a = (a + int.from_bytes(data[i : i + 4], "little")) & m
        b = (b + int.from_bytes(data[i + 4 : i + 8], "little")) & m
        c = (c + int.from_bytes(data[i + 8 : i + 12], "little")) & m
        a = (a - c) & m ^ _rot(c, 4)
        c = (c + b) & m
        b = (b - a) & m ^ _rot(a, 6)
        a = (a + c) & m
        c = (c - b) & m ^ _rot(b, 8)
        b = (b + a) & m
        a = (a - c) & m ^ _rot(c, 16)
        c = (c + b) & m
        b = (b - a) & m ^ _rot(a, 19)
        a = (a + c) & m
        c = (c - b) & m ^ _rot(b, 4)
        b = (b + a) & m
        length -= 12
        i += 12
    if length == 0:
        return c
    tail = data[i:] + bytes(12 - length)
    a = (a + int.from_bytes(tail[0:4], "little")) & m
    b = (b + int.from_bytes(tail[4:8], "little")) & m
    c = (c + int.from_bytes(tail[8:12], "little")) & m
    c = (c ^ b) - _rot(b, 14) & m
    a = (a ^ c) - _rot(c, 11) & m
    b = (b ^ a) - _rot(a, 25) & m
    c = (c ^ b) - _rot(b, 16) & m
    a = (a ^ c) - _rot(c, 4) & m
    b = (b ^ a) - _rot(a, 14) & m
    c = (c ^ b) - _rot(b, 24) & m
    return c


def clear_write_flags(path: str) -> bool:
    """Make a file left open by a dead writer openable for writing again (``h5clear -s
    --increment``): clear the "open for writing" flags of its version 2 or 3 superblock, and
    make its end-of-allocation address cover the whole file.

    A killed SWMR writer can leave a superblock whose end-of-allocation lags behind what it
    wrote after it; HDF5 would then allocate new space over that data. Returns whether the file
    was changed. Call it only while holding the file's write lock. A file that is no HDF5 file,
    has a user block, an older superblock or no flags set is left alone.
    """
    with open(path, "r+b") as f:
        head = bytearray(f.read(64))
        if head[:8] != _SIGNATURE or len(head) < 12 or head[8] not in (2, 3):
            return False
        size = head[9]  # bytes of an address
        end = 12 + 4 * size  # signature, version, sizes, flags, four addresses
        if len(head) < end + 4 or head[11] == 0:
            return False
        if int.from_bytes(head[end : end + 4], "little") != lookup3(bytes(head[:end])):
            return False
        field = slice(12 + 2 * size, 12 + 3 * size)  # base, extension, end of allocation
        allocated = int.from_bytes(head[field], "little")
        length = os.fstat(f.fileno()).st_size
        if length < allocated:
            f.truncate(allocated)  # space allocated but never written: zeros, as HDF5 would
        head[field] = max(allocated, length).to_bytes(size, "little")
        head[11] = 0
        head[end : end + 4] = lookup3(bytes(head[:end])).to_bytes(4, "little")
        f.seek(0)
        f.write(head[: end + 4])
        f.flush()
        os.fsync(f.fileno())
    return True


def abandon(h5file: Any) -> None:
    """Close an h5py file after a failed write without writing anything more to it."""
    try:
        fd = h5file.id.get_vfd_handle()
        if hasattr(os, "memfd_create"):
            sink = os.memfd_create("seqattrib-abandoned")
            os.dup2(sink, fd)
            os.close(sink)
        else:  # pragma: no cover - macOS
            with tempfile.TemporaryFile() as spare:
                os.dup2(spare.fileno(), fd)
    except (OSError, ValueError, AttributeError, RuntimeError):
        pass
    try:
        h5file.close()
    except (OSError, RuntimeError, ValueError):
        pass


def failure(exc: BaseException) -> tuple[int | None, str]:
    """(errno, reason) of a failed h5py or OS write, e.g. (28, "No space left on device")."""
    code = getattr(exc, "errno", None)
    text = str(exc)
    if code is None:
        found = re.search(r"errno = (\d+)", text)
        code = int(found.group(1)) if found else None
    if code is not None and code in errno.errorcode:
        return code, os.strerror(code)
    first = " ".join(text.split())
    return code, first[:200] or type(exc).__name__


def damaged(func: str, param: str, path: str, detail: str, fix: str) -> ValueError:
    """The one-line error for a file that is damaged or truncated."""
    error = parameter_error(
        func,
        param,
        "an intact file",
        f"{path!r}, a damaged or truncated file ({detail})",
        fix,
        described=True,
    )
    return cast(ValueError, error)


def short_reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:160] or type(exc).__name__


def _open_for_writing(path: str) -> bool:
    """Whether the superblock of ``path`` says a writer has it open (or died holding it)."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return head[:8] == _SIGNATURE and head[8] in (2, 3) and head[11] != 0


def is_hdf5(path: str) -> bool:
    """Whether ``path`` starts with the HDF5 signature (at offset 0, as the package writes)."""
    try:
        with open(path, "rb") as f:
            return f.read(8) == _SIGNATURE
    except OSError:
        return False


@functools.cache
def _read_attempts_setter() -> Callable[[int, int], int] | None:
    """``H5Pset_metadata_read_attempts`` of the HDF5 library h5py uses, or None if not found."""
    import h5py

    names = []
    try:  # the library loaded in this process (Linux)
        with open("/proc/self/maps") as maps:
            loaded = {line.split()[-1] for line in maps if "/libhdf5" in line}
        names += sorted(name for name in loaded if "_hl" not in os.path.basename(name))
    except OSError:
        pass
    here = os.path.dirname(h5py.__file__)
    names += glob.glob(os.path.join(here, "..", "h5py.libs", "libhdf5-*"))
    names += glob.glob(os.path.join(here, ".dylibs", "libhdf5.*"))
    for name in names:
        try:
            function = ctypes.CDLL(name).H5Pset_metadata_read_attempts
        except (OSError, AttributeError):
            continue
        function.argtypes = [ctypes.c_int64, ctypes.c_uint]
        function.restype = ctypes.c_int
        return cast(Callable[[int, int], int], function)
    return None


def _open_swmr(h5py: Any, path: str) -> Any:
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    setter = _read_attempts_setter()
    if setter is not None:
        setter(fapl.id, _READ_ATTEMPTS)
    flags = h5py.h5f.ACC_RDONLY | h5py.h5f.ACC_SWMR_READ
    return h5py.File(h5py.h5f.open(os.fsencode(path), flags, fapl=fapl))


def open_read(h5py: Any, path: str, func: str, param: str, fix: str) -> Any:
    """Open an HDF5 file for reading, or raise the one-line "damaged or truncated" error
    (``fix`` says what to do about it) without waiting. The caller closes the file."""
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        if not _open_for_writing(path):
            raise damaged(func, param, path, short_reason(exc), fix) from exc
    try:  # being written, or left by a writer that died: single-writer read mode
        return _open_swmr(h5py, path)
    except OSError as exc:
        raise damaged(func, param, path, short_reason(exc), fix) from exc
