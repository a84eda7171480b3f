"""Writing the records of ``overlay record`` together: each file temp + rename, and an
error while writing puts back what was already written."""

from __future__ import annotations

import contextlib
import os

from overlay.fsutil import atomic_write
from overlay.series import SERIES_PATH


class Writes:
    """Files to write together: each temp + rename; an error while writing puts back
    what was already written (a crash in between leaves at worst the earlier files)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, bytes]] = []

    def add(self, path: str, data: bytes) -> None:
        """Plan to write ``data`` to ``path``."""
        self.items.append((path, data))

    def commit(self) -> None:
        """Write every planned file that changes, in order; on an error put the earlier
        ones back (a created file is removed) and re-raise."""
        done: list[tuple[str, bytes | None]] = []
        try:
            for path, data in self.items:
                try:
                    with open(path, "rb") as fh:
                        old: bytes | None = fh.read()
                except FileNotFoundError:
                    old = None
                if old == data:
                    continue
                atomic_write(path, data)
                done.append((path, old))
        except BaseException:
            for path, old in reversed(done):
                with contextlib.suppress(OSError):
                    if old is None:
                        os.unlink(path)
                    else:
                        atomic_write(path, old)
            raise


def series_with(root: str, name: str, after: str | None) -> bytes:
    """``series`` with ``name`` on a new line after ``after`` (the end when ``None``)."""
    path = os.path.join(root, SERIES_PATH)
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
    except FileNotFoundError:
        text = ""
    nl = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines()
    if after is None:
        at = len(lines)
        while at and not lines[at - 1].strip():
            at -= 1  # before trailing blank lines, after the last entry or comment
    else:
        at = next(
            i + 1 for i, ln in enumerate(lines) if ln.split("#", 1)[0].strip() == after
        )
    lines.insert(at, name)
    return (nl.join(lines) + nl).encode("utf-8")
