"""One writer per results file: an advisory lock on a sidecar ``<file>.lock``.

The lock is an OS lock (``flock``, or POSIX ``lockf`` where a file system lacks ``flock``) on
the sidecar, so it ends with the process that holds it, however that process ends: a lock left
by a killed run never blocks the rerun that resumes it. The sidecar names its holder (host,
pid, start time) for the message a second writer gets, and is removed when the holder
releases the lock. The sidecar is opened without following links, and must be a regular file:
a link planted there never leads the writer to another file.

The sidecar is named after the path, so a second name of the same file (a hard link) has
another. While it writes into a file, a writer therefore also locks the file itself, by its
identity (an open-file-description lock on Linux, which does not interact with the locks
HDF5 takes): a second writer reaching the same file under another name is refused too.
Readers never take either lock.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct
import time
import warnings
from typing import Any, cast

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
        self.data_fd: int | None = None

    def hold_file(self, path: str, func: str, param: str = "out") -> None:
        """Also lock the file ``path`` itself (whatever name leads to it), or raise if another
        process writes it under another name (a hard link)."""
        try:
            fd = _open_checked(path, os.O_RDWR, func, param, "file")
        except OSError as exc:
            if exc.errno in READ_ONLY:
                return  # this process cannot write the file: its writer's open says so
            raise
        try:
            taken = _lock_identity(fd)
        except BaseException:
            os.close(fd)
            raise
        if not taken:
            os.close(fd)
            raise parameter_error(
                func,
                param,
                "a file that no other process is writing",
                f"{path!r}, which another process is writing under another name (a hard link)",
                "Wait for that run to end or stop it, or write to another path.",
                error=BlockingIOError,
                described=True,
            )
        if self.data_fd is not None:
            os.close(self.data_fd)
        self.data_fd = fd

    def release(self) -> None:
        if self.data_fd is not None:
            os.close(self.data_fd)
            self.data_fd = None
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


def _lock_identity(fd: int) -> bool:
    """An exclusive open-file-description lock on the file of ``fd``: True if taken (or the
    system has no such locks), False if another writer holds it."""
    import fcntl

    command = getattr(fcntl, "F_OFD_SETLK", None)
    if command is None:  # pragma: no cover - not Linux: the lock beside the path alone
        return True
    # struct flock: l_type, l_whence, l_start, l_len (0: to the end of the file), l_pid
    request = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    try:
        fcntl.fcntl(fd, command, request)
        return True
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return False
        if exc.errno in _UNSUPPORTED:
            return True
        raise


def _open_checked(path: str, flags: int, func: str, param: str, what: str) -> int:
    """Open ``path`` without following a link at its end; it must be a regular file."""
    extra = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fix = "Remove it (it is not a file seqattrib wrote) or write to another path."
    try:
        fd = os.open(path, flags | extra, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(func, param, path, what, "a symbolic link", fix) from exc
        if exc.errno == errno.EISDIR:
            raise _refuse(func, param, path, what, "a folder", fix) from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _refuse(func, param, path, what, "not a regular file", fix)
    return fd


def _refuse(func: str, param: str, path: str, what: str, got: str, fix: str) -> OSError:
    return cast(
        OSError,
        parameter_error(
            func,
            param,
            f"a path whose {what} is a regular file",
            f"{path!r}, {got}",
            fix,
            error=OSError,
            described=True,
        ),
    )


def acquire(path: str, func: str, param: str = "out") -> WriteLock | None:
    """Lock ``path`` for writing, or raise naming the process that holds it.

    Returns None when the folder cannot be written (a read-only mount): the caller may still
    read a finished file there.
    """
    sidecar = lock_path(os.path.realpath(path))  # one lock whatever link leads to the file
    while True:
        try:
            fd = _open_checked(sidecar, os.O_RDWR | os.O_CREAT, func, param, "lock file")
        except OSError as exc:
            if exc.errno in READ_ONLY:
                return None
            if exc.errno is None:  # refused above, in one line
                raise
            raise _refuse(
                func,
                param,
                sidecar,
                "lock file",
                f"which cannot be created ({os.strerror(exc.errno)})",
                "Free space or fix the folder's permissions, or write to another folder.",
            ) from exc
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
