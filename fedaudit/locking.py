"""One writer per output directory: an advisory lock file held for the whole run.

:func:`directory_lock` takes an exclusive, non-blocking lock on ``DIR/.lock`` (``fcntl.flock``
on POSIX, ``msvcrt.locking`` on Windows) and writes the holder's PID into it. A second run
into the same directory gets a :class:`FedAuditError` at once instead of interleaving its files
with the first. The kernel drops the lock when the holder exits for any reason (even SIGKILL),
so a crashed run never leaves a stale lock behind; the file itself is removed on a clean exit.

Removing a lock file is racy in general (a waiter may have opened the old inode); after
locking, the holder therefore checks that ``DIR/.lock`` is still the inode it locked and
retries otherwise.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from fedaudit.errors import FedAuditError, writing

__all__ = ["LOCK_NAME", "create_directory", "directory_lock"]

#: name of the lock file inside a locked directory
LOCK_NAME = ".lock"


def create_directory(directory: str | os.PathLike, *, what: str = "directory", flag: str = "--out") -> Path:
    """Create ``directory`` (and its parents) or say in one line why it cannot be an output
    directory (a :class:`FedAuditError` naming ``flag``): it is a file, its parent is a file, or
    it cannot be created here (/proc, a read-only location)."""
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise FedAuditError(f"{flag} {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FedAuditError(f"{flag} {out}: cannot create the {what}: {exc.strerror or exc}") from None
    return out


def _try_lock(fd: int) -> bool:
    """Lock ``fd`` exclusively without waiting; False when another process holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(path: Path) -> str:
    try:
        pid = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


@contextlib.contextmanager
def directory_lock(directory: str | os.PathLike, *, what: str = "directory") -> Iterator[Path]:
    """Hold the exclusive lock of ``directory`` (which must exist) for the ``with`` block.

    Raises :class:`FedAuditError` when another process holds it, or when the lock file cannot be
    created or written (a read-only directory, a full disk); ``what`` names the directory in the
    message.
    """
    path = Path(directory) / LOCK_NAME
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise FedAuditError(f"cannot write into {what} {Path(directory)}: {exc.strerror or exc}") from None
        if not _try_lock(fd):
            os.close(fd)
            raise FedAuditError(f"{what} {Path(directory)} is in use by another fedaudit run{_holder(path)}; "
                                f"wait for it to finish or choose another directory")
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed the file after we opened it: lock the new one
    try:
        with writing(f"the lock file {path}"):  # a full disk: one line, and the lock is released below
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)  # while still locked, so a waiter sees a new inode and retries
        os.close(fd)
