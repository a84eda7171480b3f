"""Small file-system helpers shared by every module that writes files.

DESIGN 11: every write is temp + rename, so a reader (or a crash) never sees a
half-written file.
"""

from __future__ import annotations

import os
import tempfile

DEFAULT_MODE = 0o644


def atomic_write(path: str | os.PathLike, data: bytes, *, mode: int | None = None,
                 durable: bool = True) -> None:
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
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
