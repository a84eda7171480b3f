"""Incremental export of a layer tree into a directory (DESIGN 5).

Only paths that differ from the last export are written; deleted paths are
removed (and directories left empty by them); unchanged files keep their
mtimes, so ninja rebuilds only what changed. Each file is written to a
temporary name in its directory and renamed; the stamp
``DEST/.overlay-export.json`` is written last and records the tree SHA plus
each file's size and mtime (ns), so a file edited by hand since the export is
never overwritten or deleted without ``--force``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import time

from overlay.errors import OverlayError
from overlay.fsutil import atomic_write
from overlay.gitstore import Store, zsplit
from overlay.paths import check_path, check_symlink

STAMP = ".overlay-export.json"
LOCK = ".overlay-export.lock"
_OURS = {STAMP, LOCK}


@dataclasses.dataclass
class ExportResult:
    """What an export did.

    Attributes:
        tree: the tree now in DEST.
        previous: the tree DEST held before (``None`` for a cold export).
        written: paths written (sorted).
        removed: paths deleted (sorted).
        unchanged: number of files left untouched.
        edited: files that differ from the last export and were kept as the user left them.
        seconds: wall time.
    """

    tree: str
    previous: str | None
    written: list[str]
    removed: list[str]
    unchanged: int
    edited: list[str]
    seconds: float


def read_stamp(dest: str) -> dict | None:
    """The stamp of DEST: ``{"tree": sha, "files": {path: [size, mtime_ns]}}``, or ``None``."""
    try:
        with open(os.path.join(dest, STAMP), encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        raise OverlayError(f"{os.path.join(dest, STAMP)} is unreadable; export with --force to rebuild it") from None
    if not isinstance(data, dict) or "tree" not in data or not isinstance(data.get("files"), dict):
        raise OverlayError(f"{os.path.join(dest, STAMP)} is not an overlay export stamp")
    return data


def _stat_key(path: str) -> list[int] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _entries(store: Store, tree: str) -> dict[str, tuple[str, str]]:
    out = {}
    for rec in zsplit(store.git("ls-tree", "-r", "-z", "--full-tree", tree).stdout):
        meta, path = rec.split("\t", 1)
        mode, _kind, oid = meta.split()
        out[path] = (mode, oid)
    return out


def _remove(dest: str, path: str) -> None:
    full = os.path.join(dest, path)
    try:
        os.unlink(full)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        return
    parent = os.path.dirname(path)
    while parent:
        try:
            os.rmdir(os.path.join(dest, parent))
        except OSError:
            break
        parent = os.path.dirname(parent)


def _safe_parent(dest_real: str, dest: str, path: str, checked: set[str]) -> None:
    parent = os.path.dirname(path)
    if parent in checked or not parent:
        return
    full = os.path.join(dest, parent)
    # A directory on the way that is a symlink (or was replaced by one) must not redirect writes.
    probe = full
    while probe != dest and probe.startswith(dest):
        if os.path.islink(probe):
            os.unlink(probe)
        probe = os.path.dirname(probe)
    os.makedirs(full, exist_ok=True)
    real = os.path.realpath(full)
    if not (real == dest_real or real.startswith(dest_real + os.sep)):
        raise OverlayError(f"refusing to write {path!r}: its directory resolves outside {dest}")
    checked.add(parent)


def export_tree(store: Store, tree: str, dest: str, *, force: bool = False) -> ExportResult:
    """Write ``tree`` into ``dest`` incrementally.

    Args:
        store: git store holding the tree.
        tree: tree SHA to export.
        dest: target directory (created when absent).
        force: export into a non-empty directory without a stamp, and overwrite
            files edited by hand since the last export.
    Returns:
        :class:`ExportResult`.
    Raises:
        OverlayError: DEST is non-empty and was not made by overlay, or files
            to be replaced were edited by hand (nothing is written; exit 2).
        UnsafePath: a tree entry is hostile (nothing is written; exit 2).
    """
    started = time.perf_counter()
    dest = os.path.abspath(dest)
    os.makedirs(dest, exist_ok=True)
    lock_fd = os.open(os.path.join(dest, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        stamp = None if force else read_stamp(dest)
        if stamp is None and not force and any(n not in _OURS for n in os.listdir(dest)):
            raise OverlayError(f"{dest} is not empty and holds no overlay export stamp",
                               hint="choose an empty directory, or pass --force to take it over")
        if stamp is None and force:
            try:
                stamp = read_stamp(dest)
            except OverlayError:
                stamp = None
        recorded: dict[str, list[int]] = dict(stamp["files"]) if stamp else {}
        previous = stamp["tree"] if stamp else None
        if previous == tree:
            edited = sorted(p for p, key in recorded.items() if _stat_key(os.path.join(dest, p)) != key)
            return ExportResult(tree, previous, [], [], len(recorded), edited,
                                time.perf_counter() - started)
        if previous is not None and store.has_object(previous, "tree"):
            changes = store.diff_tree(previous, tree)
            to_remove = [row[5] for row in changes if row[4] == "D"]
            to_write = {row[5]: (row[1], row[3]) for row in changes if row[4] != "D"}
            unchanged = len(recorded) - len(to_remove) - sum(1 for p in to_write if p in recorded)
        else:
            new_entries = _entries(store, tree)
            to_write = new_entries
            to_remove = sorted(p for p in recorded if p not in new_entries)
            unchanged = 0
        for path, (mode, _oid) in to_write.items():
            check_path(path, what="tree entry")
            if mode == "160000":
                raise OverlayError(f"refusing tree entry {path!r}: submodules are not exported")
        for path in to_remove:
            check_path(path, what="exported path")
        if not force:
            touched = [p for p in [*to_remove, *to_write] if p in recorded]
            edited = sorted(p for p in touched if _stat_key(os.path.join(dest, p)) != recorded[p])
            if edited:
                raise OverlayError(
                    f"{len(edited)} file(s) in {dest} were edited since the last export and would be "
                    f"replaced: {', '.join(edited[:5])}{' ...' if len(edited) > 5 else ''}",
                    hint="move your edits into a patch, or pass --force to discard them")
        with store.cat_file() as cat:
            blobs = {}
            for path, (mode, oid) in to_write.items():
                blobs[path] = (mode, cat.read(oid)[1])
            if any(mode == "120000" for mode, _ in blobs.values()):
                links = {p: cat.read(oid)[1].decode("utf-8", "surrogateescape")
                         for p, (mode, oid) in _entries(store, tree).items() if mode == "120000"}
                for path in links:
                    check_symlink(path, links[path], links)
            for path in sorted(to_remove, key=lambda p: p.count("/"), reverse=True):
                _remove(dest, path)
                recorded.pop(path, None)
            dest_real = os.path.realpath(dest)
            checked: set[str] = set()
            for path in sorted(blobs):
                mode, data = blobs[path]
                _safe_parent(dest_real, dest, path, checked)
                full = os.path.join(dest, path)
                if os.path.isdir(full) and not os.path.islink(full):
                    raise OverlayError(f"cannot write {path!r}: a directory is in the way")
                if mode == "120000":
                    tmp = f"{full}.overlay-tmp"
                    if os.path.lexists(tmp):
                        os.unlink(tmp)
                    os.symlink(data.decode("utf-8", "surrogateescape"), tmp)
                    os.replace(tmp, full)
                else:
                    atomic_write(full, data, mode=0o755 if mode == "100755" else 0o644, durable=False)
                recorded[path] = _stat_key(full)  # type: ignore[assignment]
        atomic_write(os.path.join(dest, STAMP),
                     json.dumps({"format": 1, "tree": tree, "files": recorded},
                                sort_keys=True, separators=(",", ":")).encode())
        return ExportResult(tree, previous, sorted(blobs), sorted(to_remove), max(unchanged, 0), [],
                            time.perf_counter() - started)
    finally:
        os.close(lock_fd)
