"""Incremental, resumable export of a layer tree into a directory (DESIGN 5).

Only paths that differ from the last export are written; deleted paths are
removed (and directories left empty by them); unchanged files keep their
mtimes, so ninja rebuilds only what changed.

The export is a transaction recorded in the stamp ``DEST/.overlay-export.json``:

1. Before the first write, the stamp records the run in progress: the target
   tree and every path it will write (with its blob) or remove, next to the
   last finished tree and each file's ``[size, mtime_ns, blob]`` as it is on
   disk at that moment.
2. Each file is written to ``.NAME.XXXXXXXX.tmp`` in its directory and renamed.
3. The stamp is rewritten last with the finished tree and no run in progress.

A run killed anywhere leaves a stamp from which a plain re-export completes the
job: a file of the interrupted run counts as overlay's when its content is the
recorded one or the one the run was writing, and the temp files it left are
removed. A file whose content differs from both (compared by git blob hash when
its size or mtime changed) was edited by hand and is never overwritten or
deleted without ``--force``; a file that already holds what the new tree
writes is not an edit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import stat
import time

from overlay.errors import EXIT_INTERRUPTED, GitError, OverlayError, UnsafePath
from overlay.fsutil import (
    atomic_symlink,
    atomic_write,
    flocked,
    remove_stale_temps,
    sweep_scratch_dirs,
    temp_owner,
)
from overlay.gitstore import Store, zsplit
from overlay.paths import check_path, unsafe_links

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
        edited: files that differ from the export and were kept as the user left them.
        seconds: wall time.
        resumed: the tree of an interrupted run this one completed or replaced, else ``None``.
    """

    tree: str
    previous: str | None
    written: list[str]
    removed: list[str]
    unchanged: int
    edited: list[str]
    seconds: float
    resumed: str | None = None


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
    path = os.path.join(dest, STAMP)
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
        ``"N file(s) edited by hand since the export were left as they are: a, b ..."``.
    """
    more = " ..." if len(edited) > 5 else ""
    return f"{len(edited)} file(s) edited by hand since the export were left as they are: {', '.join(edited[:5])}{more}"


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
    ``status --dest`` and ``export`` name the same files (issue 17, stumble 7).

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
    edited = sorted(
        p
        for p, rec in stamp["files"].items()
        if p not in skip and not _is_recorded(_disk(dest, p, rec), rec)
    )
    if edited and store is not None and tree is not None and tree != stamp["tree"]:
        want = store.entries(tree, edited)
        hexlen = len(tree)
        kept = []
        for path in edited:
            disk = _disk(dest, path, stamp["files"][path], hexlen)
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


#: ``OVERLAY_TEST_KILL_AT`` as read when the export began (three checkpoints a file: the
#: variable is not looked up each time).
_kill_spec: list[str] = []


def _arm_checkpoints() -> None:
    """Read the test hook's variable for the export that begins (see :func:`_checkpoint`)."""
    _kill_spec[:] = os.environ.get("OVERLAY_TEST_KILL_AT", "").split(":")


def _checkpoint() -> None:
    """Test hook: ``OVERLAY_TEST_KILL_AT=export:N`` SIGKILLs the process at its Nth
    checkpoint (``export:N:INT`` sends SIGINT instead)."""
    spec = _kill_spec
    if not spec or spec[0] != "export" or len(spec) < 2 or not spec[1].isdigit():
        return
    _checkpoint.count = getattr(_checkpoint, "count", 0) + 1  # type: ignore[attr-defined]
    if _checkpoint.count == int(spec[1]):  # type: ignore[attr-defined]
        os.kill(os.getpid(), signal.SIGINT if spec[2:] == ["INT"] else signal.SIGKILL)


def _blob_oid(data: bytes, hexlen: int) -> str:
    """``git hash-object`` of ``data`` (sha1, or sha256 for a 64-hex store)."""
    h = hashlib.sha256() if hexlen == 64 else hashlib.sha1()
    h.update(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def _disk(
    dest: str, path: str, rec: list | None, hexlen: int = 40
) -> tuple[str, str | None, list[int]] | None:
    """What DEST holds at ``path``: ``(mode, blob, [size, mtime_ns])``, or ``None`` when
    absent (a directory counts as absent). The blob is taken from ``rec`` when size and
    mtime match it, else hashed; it is ``None`` for something that is no file or link."""
    full = os.path.join(dest, path)
    try:
        st = os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return None
    key = [st.st_size, st.st_mtime_ns]
    if stat.S_ISDIR(st.st_mode):
        return None
    known = rec[2] if rec and len(rec) > 2 and rec[2] else None
    if known and list(rec[:2]) == key:  # type: ignore[index]
        oid = known
    elif stat.S_ISLNK(st.st_mode):
        oid = _blob_oid(os.fsencode(os.readlink(full)), len(known or "") or hexlen)
    elif stat.S_ISREG(st.st_mode):
        with open(full, "rb") as fh:
            oid = _blob_oid(fh.read(), len(known or "") or hexlen)
    else:
        return ("other", None, key)
    if stat.S_ISLNK(st.st_mode):
        mode = "120000"
    else:
        mode = "100755" if st.st_mode & 0o100 else "100644"
    return (mode, oid, key)


def _is_recorded(disk, rec: list | None) -> bool:
    """True when ``disk`` (see :func:`_disk`) is what the stamp records (``rec``)."""
    if rec is None:
        return disk is None
    if disk is None or disk[1] is None:
        return False
    return list(rec[:2]) == disk[2] or (len(rec) > 2 and rec[2] == disk[1])


def _entries(store: Store, tree: str) -> dict[str, tuple[str, str]]:
    out = {}
    for rec in zsplit(store.git("ls-tree", "-r", "-z", "--full-tree", tree).stdout):
        meta, path = rec.split("\t", 1)
        mode, _kind, oid = meta.split()
        out[path] = (mode, oid)
    return out


def tree_links(
    store: Store,
    tree: str,
    *,
    entries: dict[str, tuple[str, str]] | None = None,
    cat=None,
) -> dict[str, str]:
    """Every symlink of ``tree``: path -> target (undecodable bytes kept as surrogates).

    Args:
        store: git store holding the tree.
        tree: tree SHA.
        entries: the tree's entries when already read (``{path: (mode, oid)}``).
        cat: an open :class:`overlay.gitstore.CatFile` to read the targets with.
    Returns:
        ``{path: target}``.
    """
    entries = entries if entries is not None else _entries(store, tree)
    wanted = {p: oid for p, (mode, oid) in entries.items() if mode == "120000"}
    if not wanted:
        return {}
    with contextlib.ExitStack() as stack:
        reader = cat if cat is not None else stack.enter_context(store.cat_file())
        return {
            p: reader.read(oid)[1].decode("utf-8", "surrogateescape")
            for p, oid in wanted.items()
        }


def unsafe_tree_links(store: Store, tree: str) -> dict[str, UnsafePath]:
    """The symlinks of ``tree`` that export refuses (:func:`overlay.paths.unsafe_links`).

    Args:
        store: git store holding the tree.
        tree: tree SHA.
    Returns:
        ``{path: UnsafePath}``, in path order.
    """
    return unsafe_links(tree_links(store, tree))


def _inside(dest_real: str, path: str) -> bool:
    real = os.path.realpath(path)
    return real == dest_real or real.startswith(dest_real + os.sep)


def _remove(dest: str, dest_real: str, path: str) -> None:
    full = os.path.join(dest, path)
    if not _inside(dest_real, os.path.dirname(full)):
        return  # a directory on the way was replaced by a link out of DEST: touch nothing there
    try:
        os.unlink(full)
    except (FileNotFoundError, NotADirectoryError):
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
    if not _inside(dest_real, full):
        raise OverlayError(
            f"refusing to write {path!r}: its directory resolves outside {dest}"
        )
    checked.add(parent)


def _write_stamp(
    dest: str, tree: str | None, files: dict, pending: dict | None
) -> None:
    data = {"format": 2, "tree": tree, "files": files}
    if pending is not None:
        data["pending"] = pending
    atomic_write(
        os.path.join(dest, STAMP),
        json.dumps(data, sort_keys=True, separators=(",", ":")).encode(),
        before_replace=_checkpoint,
    )
    _checkpoint()


def _interrupted(dest: str, tree: str) -> OverlayError:
    """The one line for a Ctrl-C, saying what DEST holds now."""
    try:
        stamp = read_stamp(dest)
    except OverlayError:
        stamp = None
    if stamp and stamp.get("pending"):
        msg = (
            f"interrupted: {dest} holds a partial export of {stamp['pending']['tree']} (recorded in {STAMP}); "
            f"a plain `overlay export {dest}` completes it"
        )
    elif stamp and stamp["tree"] == tree:
        msg = f"interrupted after the export had finished: {dest} holds {tree}"
    else:
        msg = f"interrupted before anything was written: {dest} is as it was; `overlay export {dest}` exports it"
    return OverlayError(msg, exit_code=EXIT_INTERRUPTED)


def export_tree(
    store: Store, tree: str, dest: str, *, force: bool = False
) -> ExportResult:
    """Write ``tree`` into ``dest`` incrementally, as a resumable transaction.

    Args:
        store: git store holding the tree.
        tree: tree SHA to export.
        dest: target directory (created when absent).
        force: export into a non-empty directory without a stamp, overwrite (or
            delete) files edited by hand, and restore every file of the tree
            that is missing or differs, even when the tree is unchanged.
    Returns:
        :class:`ExportResult`; an interrupted earlier run is completed first.
    Raises:
        OverlayError: DEST is non-empty and was not made by overlay, or files
            to be replaced were edited by hand (nothing is written; exit 2);
            Ctrl-C (exit 130, saying what DEST holds).
        UnsafePath: a tree entry is hostile (nothing is written; exit 2).
    """
    started = time.perf_counter()
    _arm_checkpoints()
    dest = os.path.abspath(dest)
    os.makedirs(dest, exist_ok=True)
    # Scratch directories of overlay processes that were killed (they hold the
    # index and merge inputs of a run); the pid in each name keeps live ones.
    sweep_scratch_dirs()
    try:
        with flocked(os.path.join(dest, LOCK)):
            return _export_locked(store, tree, dest, force, started)
    except KeyboardInterrupt:
        raise _interrupted(dest, tree) from None


def _check_objects(store: Store, oids: list[str]) -> None:
    """Every object is in the store (one ``git cat-file --batch-check``), one checkpoint each.

    Raises:
        GitError: one is missing (before anything is written; exit 2).
    """
    if not oids:
        return
    lines = store.git(
        "cat-file", "--batch-check", input="".join(f"{oid}\n" for oid in oids).encode()
    ).stdout
    for oid, line in zip(oids, lines.split(b"\n")):
        if line.endswith(b" missing"):
            raise GitError(f"object {oid} is missing from the git store")
        _checkpoint()


def _umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _new_parent(dest: str, path: str, made: set[str]) -> bool:
    """Make the directories above ``path`` in a direct export, where each is new.

    Every directory under DEST is made by this run (DEST held nothing) and git trees hold
    no link where they hold a directory, so none on the way can be a link and the
    checks of :func:`_safe_parent` (a walk and a ``realpath`` per directory) are not
    needed. A directory that already exists (a link a case-insensitive file system
    took for it) is left to :func:`_safe_parent`.

    Returns:
        True when the parents exist (``made`` names them), False when one was there already.
    """
    parent = path.rpartition("/")[0]  # tree paths: "/"-separated, checked by check_path
    if not parent or parent in made:
        return True
    parts = parent.split("/")
    for i in range(1, len(parts) + 1):
        sub = "/".join(parts[:i])
        if sub in made:
            continue
        try:
            os.mkdir(os.path.join(dest, sub))
        except FileExistsError:
            return False
        made.add(sub)
    return True


def _write_new(full: str, data: bytes, mode: str, mask: int) -> tuple[int, int] | None:
    """Create ``full`` holding ``data`` in place (a direct export, see :func:`_export_locked`):
    no temp file, no rename. The permissions are exactly 0644 or 0755, as
    :func:`~overlay.fsutil.atomic_write` sets them, whatever the umask.

    Returns:
        ``(size, mtime_ns)``, or ``None`` when something is already at ``full`` (the caller
        then writes it the usual way).
    """
    if mode == "120000":
        try:
            os.symlink(data.decode("utf-8", "surrogateescape"), full)
        except FileExistsError:
            return None
        _checkpoint()
        st = os.lstat(full)
        return st.st_size, st.st_mtime_ns
    perm = 0o755 if mode == "100755" else 0o644
    try:
        fd = os.open(
            full,
            os.O_WRONLY
            | os.O_CREAT
            | os.O_EXCL
            | os.O_NOFOLLOW
            | getattr(os, "O_CLOEXEC", 0),
            perm,
        )
    except FileExistsError:
        return None
    try:
        if perm & mask:
            os.fchmod(fd, perm)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        _checkpoint()
        st = os.fstat(
            fd
        )  # closing does not change the mtime: this is what lstat will say
    finally:
        os.close(fd)
    return st.st_size, st.st_mtime_ns


def _partly_written(store: Store, dest: str, path: str, oid: str) -> bool:
    """True when the file at ``path`` holds the start of blob ``oid``: what a direct export
    killed while writing it leaves (a hand edit does not, and stays refused)."""
    try:
        with open(os.path.join(dest, path), "rb") as fh:
            have = fh.read()
    except OSError:
        return False
    want = store.git("cat-file", "blob", oid, check=False).stdout
    return len(have) < len(want) and want.startswith(have)


def _export_locked(
    store: Store, tree: str, dest: str, force: bool, started: float
) -> ExportResult:
    try:
        stamp = read_stamp(dest)
    except OverlayError:
        if not force:
            raise
        stamp = None
    if (
        stamp is None
        and not force
        and any(n not in _OURS and temp_owner(n) != STAMP for n in os.listdir(dest))
    ):
        raise OverlayError(
            f"{dest} is not empty and holds no overlay export stamp",
            hint="choose an empty directory, or pass --force to take it over",
        )
    remove_stale_temps(dest, {STAMP})
    recorded: dict[str, list] = (
        {p: list(v) for p, v in stamp["files"].items()} if stamp else {}
    )
    previous = stamp["tree"] if stamp else None
    pending = (stamp or {}).get("pending") or {}
    pend: dict[str, str | None] = {p: None for p in pending.get("remove", [])}
    pend.update(pending.get("write", {}))
    # A first export into an empty directory writes each file in place, without a temp
    # file and a rename per file (issue 14): nothing there can be the user's, and the
    # pending record says so ("direct"), so that a run killed mid-file is completed: a
    # file of a direct run holding the start of the blob it was writing is the run's.
    direct = stamp is None and not (set(os.listdir(dest)) - {LOCK})
    if previous == tree and not pend and not force:
        edited = edited_files(dest, stamp)
        return ExportResult(
            tree,
            previous,
            [],
            [],
            len(recorded) - len(edited),
            edited,
            time.perf_counter() - started,
        )

    usable = previous is not None and store.has_object(previous, "tree")
    if usable and any(
        len(rec) < 3 for rec in recorded.values()
    ):  # format 1: no blob recorded
        old = _entries(store, previous)
        for p, rec in recorded.items():
            if len(rec) < 3 and p in old:
                rec.append(old[p][1])
    if usable and not pend and not force:
        changes = store.diff_tree(previous, tree)  # type: ignore[arg-type]
        want = {row[5]: (row[1], row[3]) for row in changes if row[4] != "D"}
        candidates = {row[5] for row in changes}
        entries = None
    else:
        entries = want = _entries(store, tree)
        candidates = set(want) | set(pend) | set(recorded)
    for path in sorted(candidates):
        check_path(path, what="tree entry" if path in want else "exported path")
        if want.get(path, ("",))[0] == "160000":
            raise OverlayError(
                f"refusing tree entry {path!r}: submodules are not exported"
            )

    hexlen = len(tree)
    actions: dict[
        str, tuple[str, str] | None
    ] = {}  # path -> (mode, blob) to write, None to remove
    blocked, edited, final = [], [], dict(recorded)
    for path in sorted(candidates):
        rec, target = recorded.get(path), want.get(path)
        disk = (
            None if direct else _disk(dest, path, rec, hexlen)
        )  # an empty directory holds nothing
        if (
            disk is None
            and target is None
            or disk is not None
            and target == (disk[0], disk[1])
        ):
            if target is None:
                final.pop(path, None)
            else:
                final[path] = [
                    *disk[2],
                    disk[1],
                ]  # already what the tree holds: adopt, keep its mtime
            continue
        ours = _is_recorded(disk, rec) or (
            path in pend
            and (
                disk is None
                and pend[path] is None
                or disk is not None
                and disk[1] is not None
                and disk[1] == pend[path]
            )
        )
        if (
            not ours
            and pending.get("direct")
            and pend.get(path)
            and disk is not None
            and disk[0] != "120000"
            and disk[1] is not None
        ):
            ours = _partly_written(store, dest, path, pend[path])  # type: ignore[arg-type]
        if not ours and not force:
            if (
                path not in pend
                and rec is not None
                and target is not None
                and rec[2:3] == [target[1]]
            ):
                edited.append(
                    path
                )  # the tree leaves it as exported: the edit stays and is reported
            else:
                blocked.append(path)
            continue
        actions[path] = target
        if disk is None or disk[1] is None:
            final.pop(path, None)
        else:  # the baseline a killed run resumes from is what is on disk now
            final[path] = [*disk[2], disk[1]]
    if blocked:
        raise OverlayError(
            f"{len(blocked)} file(s) in {dest} were edited since the last export and would be "
            f"replaced: {', '.join(blocked[:5])}{' ...' if len(blocked) > 5 else ''}",
            hint="move your edits into a patch, or pass --force to discard them",
        )

    # Every object is looked up before anything is written (a missing one stops the export
    # here, as a hostile entry does); the contents are streamed while writing, one file at
    # a time, so the export never holds the tree (issue 14: peak memory).
    blobs: dict[str, tuple[str, str]] = {
        p: t for p, t in sorted(actions.items()) if t is not None
    }
    _check_objects(store, [oid for _mode, oid in blobs.values()])
    if any(mode == "120000" for mode, _oid in blobs.values()):
        entries = entries if entries is not None else _entries(store, tree)
        with store.cat_file() as cat:
            bad = unsafe_links(tree_links(store, tree, entries=entries, cat=cat))
        if bad:
            raise next(iter(bad.values()))

    # Edited files the run leaves alone are reported (and not touched).
    for path, rec in recorded.items():
        if path in candidates:
            continue
        disk = _disk(dest, path, rec, hexlen)
        if not _is_recorded(disk, rec):
            edited.append(path)
        elif disk is not None and list(rec[:2]) != disk[2]:
            final[path] = [
                *disk[2],
                disk[1],
            ]  # touched, same content: remember the new mtime

    dest_real = os.path.realpath(dest)
    owners = set() if direct else {os.path.basename(p) for p in candidates}
    for directory in (
        []
        if direct
        else sorted(
            {os.path.dirname(p) for p in [*actions, *pend]}
            | ({os.path.dirname(p) for p in candidates} if force else set())
        )
    ):
        if _inside(dest_real, os.path.join(dest, directory)):
            remove_stale_temps(os.path.join(dest, directory), owners)
            while (
                directory
            ):  # a killed run may have left directories it made and never filled
                try:
                    os.rmdir(os.path.join(dest, directory))
                except OSError:
                    break
                directory = os.path.dirname(directory)
    resumed = pending.get("tree")
    if not actions and final == recorded and previous == tree and not pend:
        return ExportResult(
            tree,
            previous,
            [],
            [],
            len(final) - len(edited),
            sorted(edited),
            time.perf_counter() - started,
        )
    if actions:
        _checkpoint()
        _write_stamp(
            dest,
            previous,
            final,
            {
                "tree": tree,
                "write": {p: t[1] for p, t in actions.items() if t is not None},
                "remove": sorted(p for p, t in actions.items() if t is None),
                **({"direct": True} if direct else {}),
            },
        )
    removals = [p for p, t in actions.items() if t is None]
    for path in sorted(removals, key=lambda p: p.count("/"), reverse=True):
        _remove(dest, dest_real, path)
        final.pop(path, None)
        _checkpoint()
    checked: set[str] = set()
    mask = _umask() if direct else 0
    paths = list(blobs)  # sorted
    if paths:
        for path, (_kind, data) in zip(
            paths, store.read_objects([blobs[p][1] for p in paths])
        ):
            mode, oid = blobs[path]
            if not (direct and _new_parent(dest, path, checked)):
                _safe_parent(dest_real, dest, path, checked)
            full = os.path.join(dest, path)
            written = _write_new(full, data, mode, mask) if direct else None
            if written is None:
                if os.path.isdir(full) and not os.path.islink(full):
                    raise OverlayError(
                        f"cannot write {path!r}: a directory is in the way"
                    )
                if mode == "120000":
                    _checkpoint()
                    atomic_symlink(data.decode("utf-8", "surrogateescape"), full)
                else:
                    atomic_write(
                        full,
                        data,
                        mode=0o755 if mode == "100755" else 0o644,
                        durable=False,
                        before_replace=_checkpoint,
                    )
                st = os.lstat(full)
                written = (st.st_size, st.st_mtime_ns)
            final[path] = [*written, oid]
            _checkpoint()
    _write_stamp(dest, tree, final, None)
    return ExportResult(
        tree,
        previous,
        sorted(blobs),
        sorted(removals),
        len(final) - len(blobs) - len(edited),
        sorted(edited),
        time.perf_counter() - started,
        resumed,
    )
