"""The write lock: one holder, named in the refusal; released with its process; no sidecar
left after a release."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from seqattrib.io import lock


def test_a_second_holder_is_refused_with_the_first_named(tmp_path):
    path = str(tmp_path / "t.h5")
    first = lock.acquire(path, "explain")
    assert first is not None
    with open(lock.lock_path(path)) as f:
        holder = f.read()
    assert holder.startswith(f"pid {os.getpid()} on host {socket.gethostname()} since ")
    with pytest.raises(BlockingIOError, match=r"'out' parameter of explain .*which pid") as info:
        lock.acquire(path, "explain")
    assert "Wait for that run to end or stop it" in str(info.value)
    first.release()
    assert not os.path.exists(lock.lock_path(path))
    again = lock.acquire(path, "explain")
    assert again is not None
    again.release()
    again.release()  # releasing twice is harmless


def test_a_lock_held_by_another_process_refuses_then_goes_with_it(tmp_path):
    path = str(tmp_path / "t.h5")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from seqattrib.io import lock\n"
            "held = lock.acquire(sys.argv[1], 'ism')\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n",
            path,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(BlockingIOError, match=rf"which pid {holder.pid} on host"):
            lock.acquire(path, "explain")
    finally:
        holder.kill()  # dies without releasing: the OS drops the lock
        holder.wait()
    taken = lock.acquire(path, "explain")
    assert taken is not None
    taken.release()


def test_a_sidecar_replaced_while_waiting_is_not_trusted(tmp_path, monkeypatch):
    """Between opening the sidecar and locking it, the holder may release and remove it; the
    lock on the removed file is worthless, so the acquisition starts over."""
    path = str(tmp_path / "t.h5")
    real = lock._lock
    swaps = []

    def lock_then_swap(fd, sidecar):
        taken = real(fd, sidecar)
        if not swaps:
            swaps.append(1)
            os.remove(sidecar)  # what a releasing holder does
        return taken

    monkeypatch.setattr(lock, "_lock", lock_then_swap)
    held = lock.acquire(path, "explain")
    assert held is not None and swaps and os.path.exists(lock.lock_path(path))
    held.release()


def test_a_read_only_folder_gives_no_lock(tmp_path, monkeypatch):
    import errno

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(lock.os, "open", read_only)
    assert lock.acquire(str(tmp_path / "t.h5"), "explain") is None


def test_a_file_reached_through_a_link_has_the_same_lock(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    held = lock.acquire(str(tmp_path / "real" / "t.h5"), "explain")
    with pytest.raises(BlockingIOError):
        lock.acquire(str(tmp_path / "link" / "t.h5"), "explain")
    held.release()


def test_a_full_disk_does_not_stop_the_lock(tmp_path, monkeypatch):
    """The holder's name is only for the message of a second writer: a disk too full to write
    it still gives the lock (the writer's own first write then reports the full disk)."""
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    path = str(tmp_path / "t.h5")
    monkeypatch.setattr(lock.os, "pwrite", full)
    held = lock.acquire(path, "explain")
    assert held is not None
    monkeypatch.undo()
    with pytest.raises(BlockingIOError, match="another process"):
        lock.acquire(path, "explain")
    held.release()
    lock.acquire(path, "explain").release()


def test_a_link_planted_as_the_lock_is_refused_and_its_target_untouched(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    path = str(tmp_path / "y.h5")
    os.symlink(outside, lock.lock_path(path))
    with pytest.raises(OSError, match=r"'out' parameter of explain .*lock file.*symbolic link"):
        lock.acquire(path, "explain")
    assert outside.read_text() == "precious\n"
    os.remove(lock.lock_path(path))
    os.mkfifo(lock.lock_path(path))
    with pytest.raises(OSError, match=r"lock file is a regular file.*not a regular file"):
        lock.acquire(path, "explain")


def test_a_lock_that_cannot_be_created_is_one_line_naming_out(tmp_path, monkeypatch):
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(lock.os, "open", full)
    with pytest.raises(OSError, match=r"'out' parameter of explain .*No space left on device"):
        lock.acquire(str(tmp_path / "t.h5"), "explain")


def test_the_file_itself_is_locked_whatever_name_leads_to_it(tmp_path):
    """A hard link has another path, so another lock beside it: the lock on the file's own
    identity refuses its second writer."""
    path = tmp_path / "t.h5"
    path.write_bytes(b"data")
    (tmp_path / "other").mkdir()
    link = tmp_path / "other" / "t.h5"
    os.link(path, link)
    first = lock.acquire(str(path), "explain")
    first.hold_file(str(path), "explain")
    second = lock.acquire(str(link), "explain")  # another sidecar: taken
    with pytest.raises(BlockingIOError, match=r"another process is writing under another name"):
        second.hold_file(str(link), "explain")
    second.release()
    first.release()
    again = lock.acquire(str(link), "explain")
    again.hold_file(str(link), "explain")
    again.release()
