"""The export's stamp ``DEST/.overlay-export.json``: its transaction record (docs/design.md §5).

The stamp holds the tree last exported into DEST and each file's ``[size,
mtime_ns, blob]`` as it was then; while a run is in progress, also ``pending``:
the tree it writes and every path it writes (with its blob) or removes.
:func:`read_stamp` reads and checks it, :func:`write_stamp` writes it atomically,
:func:`edited_files` names the files edited by hand since the last export,
:func:`stray_files` the files DEST holds that no export wrote.
"""

from __future__ import annotations

import json
import os
from collections.abc import Container

from overlay import layout
from overlay.errors import EXIT_INTERRUPTED, OverlayError
from overlay.export.disk import checkpoint, disk_state, is_recorded, stat_changed
from overlay.fs.atomic import atomic_write, temp_owner
from overlay.git.store import Store

#: The names in DEST that are overlay's own, never a tree's.
OURS = {layout.EXPORT_STAMP, layout.EXPORT_LOCK}


def read_stamp(dest: str) -> dict | None:
    """Read the stamp of DEST.

    Args:
        dest: export directory.
    Returns:
        ``{"tree": sha|None, "files": {path: [size, mtime_ns, blob]}, "pending": {...}}``
        (``pending``, the run in progress, only while one is; stamps of format 1
        lack the blob), or ``None`` when DEST has no stamp.
    Raises:
        OverlayError: the stamp is unreadable or malformed (exit 2).
    """
    path = os.path.join(dest, layout.EXPORT_STAMP)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        raise OverlayError(
            f"{path} is unreadable; export with --force to rebuild it"
        ) from None
    pending = data.get("pending") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or "tree" not in data
        or not isinstance(data.get("files"), dict)
        or (
            pending is not None
            and not (
                isinstance(pending, dict)
                and isinstance(pending.get("tree"), str)
                and isinstance(pending.get("write"), dict)
                and isinstance(pending.get("remove"), list)
            )
        )
    ):
        raise OverlayError(f"{path} is not an overlay export stamp")
    return data


def edited_note(edited: list[str]) -> str:
    """The one line every command prints about hand-edited files in an export.

    Args:
        edited: the paths (non-empty).
    Returns:
        ``"N file(s) edited or deleted by hand since the export were left as they are:
        a, b ..."`` (a file deleted since the export counts: the export leaves it
        deleted unless ``--force``).
    """
    more = " ..." if len(edited) > 5 else ""
    return (
        f"{len(edited)} file(s) edited or deleted by hand since the export were left "
        "as they "
        f"are: {', '.join(edited[:5])}{more}"
    )


def stray_files(dest: str, files: Container[str] | None) -> list[str]:
    """Files in DEST that the last finished export did not write (added by hand, or
    left from before a ``--force`` takeover), as ``git status`` names untracked files.

    The export never touches them; they are named because a build of DEST builds
    them too (a stray ``.cpp`` under a globbed directory, an old header that shadows
    a moved one), so the tree built is not the layer's. overlay's own names
    (:data:`OURS`) and the temp files of a writer (:func:`overlay.fs.atomic.temp_owner`)
    are not strays. Symbolic links are not followed.

    Args:
        dest: export directory.
        files: the paths DEST's stamp records (its ``files``, as
            :attr:`overlay.export.run.ExportResult.files` holds them after an export);
            ``None`` names nothing (no export was ever finished here, and the export
            itself refuses a non-empty DEST).
    Returns:
        The stray paths, relative to DEST, ``/``-separated, sorted.
    """
    if files is None:
        return []
    strays = []
    # os.walk's rules with scandir's entries directly (half its CPU on a 1,045-file
    # DEST): a link to a directory counts as a directory and is not entered, a
    # directory that cannot be read is passed over.
    pending = [("", dest)]
    while pending:
        prefix, directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    path = prefix + entry.name
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False
                    if is_dir:
                        if not entry.is_symlink():
                            pending.append((path + "/", entry.path))
                    elif not (
                        path in files
                        or (not prefix and entry.name in OURS)
                        or temp_owner(entry.name)
                    ):
                        strays.append(path)
        except OSError:
            continue
    return sorted(strays)


def stray_note(strays: list[str]) -> str:
    """The one line every command prints about files of DEST no export wrote.

    Args:
        strays: the paths (non-empty), from :func:`stray_files`.
    Returns:
        ``"N file(s) that the layer does not have were left as they are: a, b ..."``.
    """
    more = " ..." if len(strays) > 5 else ""
    return (
        f"{len(strays)} file(s) that the layer does not have were left as they are: "
        f"{', '.join(strays[:5])}{more}"
    )


def edited_files(
    dest: str,
    stamp: dict | None = None,
    *,
    store: Store | None = None,
    tree: str | None = None,
) -> list[str]:
    """Files of the last finished export of DEST that were edited (or deleted) since.

    A file whose size and mtime changed but whose content is the exported blob is
    not edited. With ``store`` and ``tree`` (the layer the next export would
    write), a file that already holds what ``tree`` has there (or is gone where
    ``tree`` has nothing) is not edited either: the next export adopts it, so
    ``status --dest`` and ``export`` name the same files.

    Args:
        dest: export directory.
        stamp: its stamp, when already read.
        store, tree: the git store and the tree to compare with (both or neither).
    Returns:
        Sorted paths; empty without a stamp. During an interrupted run, paths
        that run may have written are not listed (the next export resolves them).
    Raises:
        OverlayError: the stamp is unreadable (exit 2).
    """
    stamp = stamp if stamp is not None else read_stamp(dest)
    if stamp is None:
        return []
    pending = stamp.get("pending") or {}
    skip = set(pending.get("write", {})) | set(pending.get("remove", []))
    others = ((p, rec) for p, rec in stamp["files"].items() if p not in skip)
    edited = sorted(
        p
        for p, rec in stat_changed(dest, others)
        if not is_recorded(disk_state(dest, p, rec), rec)
    )
    if edited and store is not None and tree is not None and tree != stamp["tree"]:
        want = store.entries(tree, edited)
        hexlen = len(tree)
        kept = []
        for path in edited:
            disk = disk_state(dest, path, stamp["files"][path], hexlen)
            target = want.get(path)
            if disk is None and target is None:
                continue
            if (
                disk is not None
                and target is not None
                and (target.mode, target.oid) == (disk[0], disk[1])
            ):
                continue
            kept.append(path)
        edited = kept
    return edited


def write_stamp(dest: str, tree: str | None, files: dict, pending: dict | None) -> None:
    """Write DEST's stamp atomically (format 2), with two checkpoints around the rename.

    Args:
        dest: export directory; tree: the finished tree (``None``: none yet).
        files: path -> ``[size, mtime_ns, blob]``; pending: the run in progress, or
            ``None`` once it finished.
    """
    data: dict[str, object] = {"format": 2, "tree": tree, "files": files}
    if pending is not None:
        data["pending"] = pending
    atomic_write(
        os.path.join(dest, layout.EXPORT_STAMP),
        json.dumps(data, sort_keys=True, separators=(",", ":")).encode(),
        before_replace=checkpoint,
    )
    checkpoint()


def interrupted_error(dest: str, tree: str) -> OverlayError:
    """The one line for a Ctrl-C, saying what DEST holds now."""
    try:
        stamp = read_stamp(dest)
    except OverlayError:
        stamp = None
    if stamp and stamp.get("pending"):
        msg = (
            f"interrupted: {dest} holds a partial export of "
            f"{stamp['pending']['tree']} (recorded in {layout.EXPORT_STAMP}); "
            f"a plain `overlay export {dest}` completes it"
        )
    elif stamp and stamp["tree"] == tree:
        msg = f"interrupted after the export had finished: {dest} holds {tree}"
    else:
        msg = (
            f"interrupted before anything was written: {dest} is as it was; "
            f"`overlay export {dest}` exports it"
        )
    return OverlayError(msg, exit_code=EXIT_INTERRUPTED)
