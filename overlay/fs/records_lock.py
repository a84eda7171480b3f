"""The records lock: one ``flock`` on ``.overlay/rebase.lock`` that every command which
reads or writes the records or the rebase state holds for its whole run (exclusive to
write, shared to read), so neither is ever seen half-changed (docs/design.md §11)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from overlay import layout
from overlay.errors import OverlayError
from overlay.fs.locks import LockBusy, flocked, pid_alive


class StateBusy(OverlayError):
    """Another overlay command holds the rebase lock (exit 2).

    Attributes:
        holder: ``(pid, command)`` of an exclusive holder that is still alive, else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        holder: tuple[str, str] | None = None,
        hint: str | None = None,
    ):
        super().__init__(message, hint=hint)
        self.holder = holder


def _holder(text: str) -> tuple[str, str] | None:
    """``(pid, command)`` from a lock file's line, when that process is still alive."""
    pid, _, command = text.partition(" ")
    if pid.isdigit() and len(pid) <= 9 and command and pid_alive(int(pid)):
        return pid, command
    return None


@contextlib.contextmanager
def state_lock(root: str, command: str, *, shared: bool = False) -> Iterator[None]:
    """Hold the lock of the rebase state and the records for a ``with`` block.

    Exclusive for commands that write the state or the records (``rebase``,
    ``sync`` and their ``--continue``/``--skip``/``--abort``/``--forget``,
    ``refresh``, ``fix new``), shared for those that only read them (``verify``,
    ``status``, ``--status``). Never waits: a command that would wait is refused.

    Args:
        root: overlay repository.
        command: how the holder is named to a refused command (``"rebase --continue"``).
        shared: take the shared (reader) lock. A reader where ``.overlay/`` does
            not exist, or cannot be opened, runs without the lock: no overlay
            command has written there.
    Raises:
        StateBusy: another command holds a conflicting lock; the message names it
            when it is a writer (exit 2).
        OverlayError: an exclusive lock cannot be created (exit 2).
    """
    meta = layout.under(root, layout.STATE_DIR)
    path = os.path.join(root, layout.REBASE_LOCK)
    with contextlib.ExitStack() as stack:
        try:
            if not shared:
                layout.make_state_dir(root)
            if not shared or os.path.isdir(meta):
                stack.enter_context(
                    flocked(
                        path,
                        shared=shared,
                        wait=False,
                        holder=f"{os.getpid()} {command}",
                    )
                )
        except LockBusy as busy:
            holder = _holder(busy.holder)
            who = (
                f"`overlay {holder[1]}` (pid {holder[0]}) is running on this overlay"
                if holder
                else "another overlay command (a verify or status reading the records) "
                "is running on this overlay"
            )
            raise StateBusy(
                f"{who} and holds {layout.REBASE_LOCK}: `overlay {command}` is refused, so that "
                "the rebase state and the records are never read or written half-changed",
                holder=holder,
                hint=f"run `overlay {command}` again when it has finished",
            ) from None
        except OSError as exc:
            if not shared:
                raise OverlayError(
                    f"cannot lock {layout.REBASE_LOCK}: {exc.strerror or exc}"
                ) from None
            # A reader that cannot open the lock file (a read-only checkout) reads unlocked.
        yield
