"""A run's backup: the records as it found them, in one file of its state directory.

``.overlay/rebase/backup.json`` holds every file a run may change (the manifest, the
series, the patches, the resolutions, LOCAL_FIXES.md), byte for byte, with its mode:
``{"format": 1, "files": {path: {"mode": int, "data": str}}}``, each file's bytes as
the Latin-1 string of the same code points (JSON holds any byte that way, and text
reads as text). ``--abort`` restores from it, the end of a run compares the records
with it (never overwrite an edit), and a stopped run reads its old patches from it.

One file, not a directory of copies: making a file costs this file system far more
than writing bytes (16 copies and their directories were about 13 ms of a pin bump's
CPU; one file about 2 ms: docs/engine.md, "Costs behind some choices"). A state
directory of an older overlay holds ``backup/``, a directory of copies: it is read as
well, so a run stopped before an upgrade still continues and aborts.
"""

import json
import os
import stat
from collections.abc import Iterable
from typing import NamedTuple

from overlay import layout

#: The format of ``backup.json`` (bump when what a reader must know changes).
BACKUP_FORMAT = 1


class Backup(NamedTuple):
    """A run's backup as read back (:func:`read_backup`).

    Attributes:
        copies: relative path -> ``(bytes, mode)`` of each file it holds.
        mtime: when it was made (seconds since the epoch), for the recovery of a
            state without ``state.json``.
        where: the backup's path relative to the repository, for messages.
    """

    copies: dict[str, tuple[bytes, int]]
    mtime: float
    where: str

    def resolutions(self) -> dict[str, bytes]:
        """The resolutions it holds: path below ``patches-rocm/resolved/`` -> bytes."""
        prefix = layout.RESOLVED_DIR + "/"
        return {
            rel[len(prefix) :]: data
            for rel, (data, _mode) in self.copies.items()
            if rel.startswith(prefix)
        }


def write_backup(state_dir: str, root: str, rels: Iterable[str]) -> Backup:
    """Write ``backup.json`` of the files ``rels`` of ``root`` into ``state_dir``.

    Written plainly: ``state_dir`` is the directory a start builds beside its place
    and renames into it whole (:data:`overlay.layout.REBASE_STATE_NEW`).

    Args:
        state_dir: the state directory being built.
        root: the overlay repository.
        rels: the files to back up (relative paths, each a regular file).
    Returns:
        The :class:`Backup` written.
    Raises:
        OSError: a file cannot be read, or the backup cannot be written.
    """
    copies: dict[str, tuple[bytes, int]] = {}
    for rel in rels:
        with open(os.path.join(root, *rel.split("/")), "rb") as fh:
            copies[rel] = (fh.read(), stat.S_IMODE(os.fstat(fh.fileno()).st_mode))
    data = json.dumps(
        {
            "format": BACKUP_FORMAT,
            "files": {
                rel: {"mode": mode, "data": body.decode("latin-1")}
                for rel, (body, mode) in copies.items()
            },
        },
        ensure_ascii=False,
    ).encode("utf-8")
    path = os.path.join(state_dir, layout.BACKUP_JSON)
    with open(path, "xb") as fh:
        fh.write(data)
    return Backup(copies, os.path.getmtime(path), _where(layout.BACKUP_JSON))


def read_backup(state_dir: str) -> Backup | None:
    """The backup in ``state_dir``: ``backup.json``, else an older overlay's
    ``backup/`` directory of copies; ``None`` when there is neither.

    A ``backup.json`` that is not one (damaged, a symlink, of another format) holds
    no copy: every file the state lists is then missing from it. A copy whose entry
    is not a path with its mode and bytes is left out the same way.
    """
    path = os.path.join(state_dir, layout.BACKUP_JSON)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return _read_backup_dir(state_dir)
    except OSError:
        return Backup({}, 0.0, _where(layout.BACKUP_JSON))
    copies: dict[str, tuple[bytes, int]] = {}
    if stat.S_ISREG(st.st_mode):
        try:
            with open(path, "rb") as fh:
                doc = json.loads(fh.read().decode("utf-8"))
        except (OSError, ValueError, RecursionError):
            doc = None
        files = doc.get("files") if isinstance(doc, dict) else None
        if isinstance(files, dict) and doc.get("format") == BACKUP_FORMAT:
            for rel, entry in files.items():
                if isinstance(entry, dict) and isinstance(entry.get("data"), str):
                    mode = entry.get("mode")
                    try:
                        body = entry["data"].encode("latin-1")
                    except UnicodeEncodeError:
                        continue  # not bytes this format wrote
                    if isinstance(mode, int) and not isinstance(mode, bool):
                        copies[rel] = (body, mode & 0o7777)
    return Backup(copies, st.st_mtime, _where(layout.BACKUP_JSON))


def _read_backup_dir(state_dir: str) -> Backup | None:
    """An older overlay's backup: ``backup/``, a copy of each file (symlinks not
    followed); ``None`` when there is no such directory."""
    top = os.path.join(state_dir, layout.BACKUP)
    if not os.path.isdir(top) or os.path.islink(top):
        return None
    copies: dict[str, tuple[bytes, int]] = {}
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            full = os.path.join(dirpath, name)
            if not os.path.isfile(full) or os.path.islink(full):
                continue
            rel = os.path.relpath(full, top).replace(os.sep, "/")
            try:
                with open(full, "rb") as fh:
                    copies[rel] = (
                        fh.read(),
                        stat.S_IMODE(os.fstat(fh.fileno()).st_mode),
                    )
            except OSError:
                continue
    return Backup(copies, os.path.getmtime(top), _where(layout.BACKUP))


def _where(name: str) -> str:
    """``.overlay/rebase/<name>``."""
    return f"{layout.REBASE_STATE_DIR}/{name}"
