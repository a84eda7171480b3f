"""Small file-system helpers shared by every module that writes files.

DESIGN 11: every write is temp + rename, so a reader (or a crash) never sees a
half-written file.
"""

from __future__ import annotations

import os
import random
import re
import tempfile
from typing import Callable, Container

DEFAULT_MODE = 0o644

#: Temp names written by this module: ``.NAME.XXXXXXXX.tmp`` next to ``NAME``
#: (``tempfile.mkstemp``'s eight characters), so a later run can find the ones a
#: killed process left behind.
TEMP_RE = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp$")
_TEMP_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def temp_owner(name: str) -> str | None:
    """The file name a temp name belongs to (``.a.txt.k3j9x_2q.tmp`` -> ``a.txt``), else ``None``."""
    match = TEMP_RE.match(name)
    return match.group("name") if match else None


def remove_stale_temps(directory: str, owners: Container[str] | None = None) -> list[str]:
    """Delete temp files a killed writer left in ``directory``.

    Args:
        directory: the directory to look in (a missing one holds nothing).
        owners: remove only temps of these file names; ``None`` removes every temp name.
    Returns:
        The names removed (sorted).
    """
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for name in names:
        owner = temp_owner(name)
        if owner is not None and (owners is None or owner in owners):
            try:
                os.unlink(os.path.join(directory, name))
                removed.append(name)
            except (FileNotFoundError, IsADirectoryError):
                pass
    return sorted(removed)


def atomic_symlink(target: str, path: str | os.PathLike) -> None:
    """Make ``path`` a symlink to ``target`` atomically (a temp link, then rename).

    Raises:
        OSError: the directory is missing or not writable; the temp link is removed.
    """
    path = os.fspath(path)
    directory, base = os.path.split(path)
    while True:
        rand = "".join(random.choice(_TEMP_CHARS) for _ in range(8))
        tmp = os.path.join(directory, f".{base}.{rand}.tmp")
        try:
            os.symlink(target, tmp)
            break
        except FileExistsError:
            continue
    try:
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write(path: str | os.PathLike, data: bytes, *, mode: int | None = None,
                 durable: bool = True, before_replace: Callable[[], None] | None = None) -> None:
    """Write ``data`` to ``path`` atomically: a temp file in the same directory, then rename.

    The temp file is flushed (and, when ``durable``, fsynced) before
    :func:`os.replace`, so ``path`` holds either its old content or ``data``,
    never a mix. The parent directory must exist.

    Args:
        path: destination file path (str or path-like).
        data: the complete new content, as bytes.
        mode: permission bits for the new file; default: the mode of the file
            being replaced, or ``0o644`` for a new file.
        durable: fsync before the rename (default). An export of a re-creatable
            tree passes ``False``: a thousand fsyncs would dominate it.
        before_replace: called once the temp file is complete, just before the
            rename (a test hook for kills at that point).

    Raises:
        TypeError: ``data`` is not bytes-like.
        OSError: the directory is missing or not writable, or the rename fails;
            the temp file is removed in every failure case.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"atomic_write needs bytes, got {type(data).__name__}")
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = DEFAULT_MODE
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
