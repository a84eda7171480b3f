"""``LOCAL_FIXES.md``'s bytes: every read of the file as it is and every write of it.

Apart from :mod:`~overlay.records.fixes.parser` so that a command which only rewrites
the file's bytes (a completed rebase or sync sets the headings' commits) does not load
the parser and the model.
"""

from __future__ import annotations

import os

from overlay import layout
from overlay.fs.atomic import atomic_write
from overlay.fs.reading import decode_record, read_record


def fixes_bytes(root: str) -> bytes | None:
    """``<root>/LOCAL_FIXES.md``'s bytes as they are (a byte-order mark kept), for a
    rewrite of it or a comparison; ``None`` when it is not a regular file (none there,
    a directory, a FIFO that a read would wait on).

    Raises:
        OSError: the file cannot be read (no permission).
    """
    path = os.path.join(root, layout.LOCAL_FIXES)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def fixes_record(root: str) -> bytes:
    """``<root>/LOCAL_FIXES.md`` read as a record (a regular file inside ``root``, a
    symlink within it followed, at most 16 MiB) and checked to be UTF-8: the file of
    a directory that is not an overlay repository yet (an import's source).

    Raises:
        RecordMissing: there is no such file; RecordError: it is refused or not
            UTF-8 (exit 2).
    """
    data = read_record(root, layout.LOCAL_FIXES, what="file")
    decode_record(data, layout.LOCAL_FIXES, what="file")
    return data


def write_fixes(root: str, data: bytes) -> None:
    """Write ``data`` as ``<root>/LOCAL_FIXES.md`` (temp + rename).

    Raises:
        OSError: it cannot be written.
    """
    atomic_write(os.path.join(root, layout.LOCAL_FIXES), data)


__all__ = ["fixes_bytes", "fixes_record", "write_fixes"]
