"""File locks: :func:`flocked` (the one ``flock`` helper of overlay), :func:`dir_lock`
(a directory one process at a time, waiting) and :func:`pid_alive`.

Re-exported by :mod:`overlay.fs.atomic`, where callers have always found them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Callable, Iterator


class LockBusy(Exception):
    """:func:`flocked` with ``wait=False`` found the lock held by another open file.

    Attributes:
        path: the lock file.
        holder: what the holder wrote into the lock file (``""`` when nothing:
            a shared holder, or a holder that writes nothing).
    """

    def __init__(self, path: str, holder: str):
        super().__init__(f"{path} is locked")
        self.path = path
        self.holder = holder


@contextlib.contextmanager
def flocked(
    path: str | os.PathLike,
    *,
    shared: bool = False,
    wait: bool = True,
    holder: str | None = None,
) -> Iterator[int]:
    """Hold an ``flock`` on ``path`` for the duration of a ``with`` block.

    The one lock helper of overlay: the git store, each export destination and
    the rebase state (``.overlay/rebase.lock``) are locked through it. The file is
    created when missing and never deleted (deleting a lock file while another
    process waits on it would let a third process lock a new file beside it).
    The lock goes with the process: a killed holder releases it.

    Args:
        path: the lock file.
        shared: a shared (reader) lock instead of an exclusive one; it needs only
            read access, so it also works on a file it cannot write.
        wait: block until the lock is free; ``False`` raises :class:`LockBusy` at once.
        holder: an exclusive holder writes this line into the file (who holds it,
            for the message of a refused command); the file is emptied on release.
    Yields:
        The open file descriptor.
    Raises:
        LockBusy: ``wait`` is false and another open file holds a conflicting lock.
        OSError: the file cannot be opened or created.
    """
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        if not shared or exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        try:
            fcntl.flock(
                fd,
                (fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
                | (0 if wait else fcntl.LOCK_NB),
            )
        except BlockingIOError:
            try:
                text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
            except OSError:
                text = ""
            raise LockBusy(path, text.strip()) from None
        written = False
        if holder is not None and not shared:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, holder.encode("utf-8", "replace") + b"\n", 0)
                written = True
        try:
            yield fd
        finally:
            if written:
                # Empty it before the unlock: a later refused command must not name a
                # finished holder.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (on this machine's process table).

    Args:
        pid: a process id; 0 and negative ids count as alive (they name groups, not processes).
    Returns:
        ``False`` only when no such process exists; a process of another user counts as alive.
    """
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def dir_lock(
    directory: str | os.PathLike,
    name: str = ".overlay.lock",
    *,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold an exclusive lock on ``directory/name`` for the block, waiting for it
    (docs/design.md §11).

    Every process that wants the directory for itself (a build directory: one
    ninja at a time) takes this lock; a second one waits until the first is
    done. It is :func:`flocked` with the holder's pid written into the file, only
    to name it in the waiting message.

    Args:
        directory: the directory to lock (created when absent).
        name: the lock file's name inside it.
        on_wait: called once, with the holder's pid as text (``"?"`` when unknown),
            when the lock is busy and this process is about to wait for it.
    Raises:
        OSError: the directory cannot be created or the lock file opened.
    """
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(flocked(path, wait=False, holder=str(os.getpid())))
        except LockBusy as busy:
            if on_wait is not None:
                on_wait(busy.holder or "?")
            stack.enter_context(flocked(path, holder=str(os.getpid())))
        yield
