"""One writer per results file: an advisory lock on a sidecar ``<file>.lock``.

The lock is an OS lock (``flock``, or POSIX ``lockf`` where a file system lacks ``flock``) on
the sidecar, so it ends with the process that holds it, however that process ends: a lock left
by a killed run never blocks the rerun that resumes it. The sidecar names its holder (host,
pid, start time) for the message a second writer gets, and is removed when the holder
releases the lock. Readers never take it.
"""

from __future__ import annotations

import errno
import os
import socket
import time
import warnings
from typing import Any

from .._errors import SeqAttribWarning, parameter_error

#: errno values that mean "this folder cannot be written" (a read-only mount, permissions).
READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def lock_path(path: str) -> str:
    return path + ".lock"


class WriteLock:
    """A held lock; :meth:`release` removes the sidecar and lets the OS drop the lock."""

    def __init__(self, path: str, fd: int | None) -> None:
        self.path = path
        self.fd = fd

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            here = os.fstat(self.fd)
            there = os.stat(self.path)
            if (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino):
                os.remove(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "another process (it has not written its name yet)"


def _lock(fd: int, path: str) -> bool:
    """Take the lock without waiting: True if taken, False if another process holds it."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return False
        if exc.errno not in _UNSUPPORTED:
            raise
    warnings.warn(
        f"The file system of {os.path.dirname(os.path.abspath(path))} supports no file locks "
        "(flock or lockf): make sure that one process at a time writes each results file there.",
        SeqAttribWarning,
        stacklevel=4,
    )
    return True


def acquire(path: str, func: str, param: str = "out") -> WriteLock | None:
    """Lock ``path`` for writing, or raise naming the process that holds it.

    Returns None when the folder cannot be written (a read-only mount): the caller may still
    read a finished file there.
    """
    sidecar = lock_path(os.path.realpath(path))  # one lock whatever link leads to the file
    while True:
        try:
            fd = os.open(sidecar, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            if exc.errno in READ_ONLY:
                return None
            raise
        try:
            taken = _lock(fd, sidecar)
        except BaseException:
            os.close(fd)
            raise
        if not taken:
            holder = _holder(fd)
            os.close(fd)
            raise parameter_error(
                func,
                param,
                "a file that no other process is writing",
                f"{path!r}, which {holder} is writing (lock {sidecar!r})",
                "Wait for that run to end or stop it, or write to another path; a lock left by a "
                "process that died is taken over by the next run.",
                error=BlockingIOError,
                described=True,
            )
        try:
            same = _same_file(fd, sidecar)
        except BaseException:
            os.close(fd)
            raise
        if not same:  # the holder released and removed it between our open and lock: retry
            os.close(fd)
            continue
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        try:  # the holder's name, for the message a second writer gets; the lock holds without it
            os.ftruncate(fd, 0)
            os.pwrite(
                fd, f"pid {os.getpid()} on host {socket.gethostname()} since {stamp}".encode(), 0
            )
        except OSError:  # a full disk: the writer's own first write says so, in its message
            pass
        return WriteLock(sidecar, fd)


def _same_file(fd: int, path: str) -> bool:
    here: Any = os.fstat(fd)
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    return bool((here.st_dev, here.st_ino) == (there.st_dev, there.st_ino))
