"""The export's run itself, in the steps of :func:`_export_locked` (the
transaction is described in :mod:`overlay.export`)."""

import os
import time
from collections.abc import Iterable
from typing import NamedTuple

from overlay import layout
from overlay.errors import OverlayError
from overlay.export.checkout import check_objects, check_out, scratch_checkout
from overlay.export.disk import (
    Disk,
    arm_checkpoints,
    checkpoint,
    disk_state,
    is_recorded,
    new_parent,
    partly_written,
    remove_path,
    replace_file,
    safe_parent,
    stat_changed,
    sweep_directory,
    umask,
    write_new,
)
from overlay.export.links import Entries, tree_entries, tree_links
from overlay.export.stamp import (
    OURS,
    edited_files,
    interrupted_error,
    read_stamp,
    write_stamp,
)
from overlay.fs.atomic import remove_stale_temps, sweep_scratch_dirs, temp_owner
from overlay.fs.locks import flocked
from overlay.fs.paths import check_path, unsafe_links
from overlay.git.store import Store


class ExportResult(NamedTuple):
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
        files: what DEST's stamp now records, path -> ``[size, mtime_ns, blob]``
            (for :func:`overlay.export.stamp.stray_files`, without reading it again;
            every result :func:`export_tree` returns has it, the default is for none).
    """

    tree: str
    previous: str | None
    written: list[str]
    removed: list[str]
    unchanged: int
    edited: list[str]
    seconds: float
    resumed: str | None = None
    files: dict[str, list] = {}


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
        OverlayError: DEST cannot be made, is non-empty and was not made by
            overlay (nothing is written there, not even the lock file), or files to
            be replaced were edited by hand (nothing is written; exit 2); Ctrl-C
            (exit 130, saying what DEST holds).
        UnsafePath: a tree entry is hostile (nothing is written; exit 2).
    """
    started = time.perf_counter()
    arm_checkpoints()
    dest = os.path.abspath(dest)
    try:
        os.makedirs(dest, exist_ok=True)
    except OSError as exc:
        raise OverlayError(
            f"cannot make {dest}: {exc.strerror or type(exc).__name__}",
            hint="choose a directory that is, or can be made, a directory",
        ) from None
    if not force and not os.path.exists(os.path.join(dest, layout.EXPORT_STAMP)):
        # Refused before the lock file is made: a directory that is not an export
        # is left exactly as it was (the check runs again under the lock).
        _destination_stamp(dest, force)
    # Scratch directories of overlay processes that were killed (they hold the
    # index and merge inputs of a run); the pid in each name keeps live ones.
    sweep_scratch_dirs()
    try:
        with flocked(os.path.join(dest, layout.EXPORT_LOCK)) as lock_fd:
            return _export_locked(store, tree, dest, force, started, lock_fd)
    except KeyboardInterrupt:
        raise interrupted_error(dest, tree) from None


class _Run:
    """One export run, filled in step by step by :func:`_export_locked` (a plain class:
    a dataclass costs every export's start-up to build).

    Attributes:
        store, tree, dest, force, started: as given to :func:`export_tree`.
        stamp: DEST's stamp as read (``None``: none, or unreadable under ``force``).
        recorded: the stamp's files, path -> ``[size, mtime_ns, blob]`` (copies).
        previous: the tree of the last finished export, or ``None``.
        pending: the record of an interrupted run (``{}`` when none).
        pend: path -> the blob the interrupted run was writing there (``None``: it
            was removing it).
        direct: a first export into an empty directory (files written in place).
        final: what the stamp records next, path -> ``[size, mtime_ns, blob]``.
        edited: files edited by hand that the run leaves as they are.
        actions: path -> ``(mode, blob)`` to write, or ``None`` to remove.
        sizes: blob -> size of every blob to write.
    """

    def __init__(
        self,
        store: Store,
        tree: str,
        dest: str,
        force: bool,
        started: float,
        stamp: dict | None,
        recorded: dict[str, list],
        previous: str | None,
        pending: dict,
        pend: dict[str, str | None],
        direct: bool,
        final: dict[str, list],
    ) -> None:
        self.store, self.tree, self.dest = store, tree, dest
        self.force, self.started = force, started
        self.stamp, self.recorded, self.previous = stamp, recorded, previous
        self.pending, self.pend, self.direct, self.final = pending, pend, direct, final
        self.edited: list[str] = []
        self.actions: dict[str, tuple[str, str] | None] = {}
        self.sizes: dict[str, int] = {}

    def result(
        self,
        written: list[str],
        removed: list[str],
        unchanged: int,
        edited: list[str],
        resumed: str | None = None,
    ) -> ExportResult:
        """The :class:`ExportResult` of this run, timed now."""
        return ExportResult(
            self.tree,
            self.previous,
            written,
            removed,
            unchanged,
            edited,
            time.perf_counter() - self.started,
            resumed,
            self.final,
        )


def _export_locked(
    store: Store, tree: str, dest: str, force: bool, started: float, lock_fd: int
) -> ExportResult:
    """The export under DEST's lock (see :func:`export_tree`): decide everything, check
    every object and link, then journal, remove, write, and stamp the finished tree."""
    run = _open_run(store, tree, dest, force, started)
    if run.previous == tree and not run.pend and not force:
        edited = edited_files(dest, run.stamp)
        return run.result([], [], len(run.recorded) - len(edited), edited)
    want, candidates, entries = _targets(run)
    _decide(run, want, candidates)
    blobs: Entries = {p: t for p, t in sorted(run.actions.items()) if t is not None}
    _check_before_writing(run, blobs, entries)
    _note_untouched(run, candidates)
    dest_real = os.path.realpath(dest)
    _sweep_leftovers(run, dest_real, candidates)
    resumed = run.pending.get("tree")
    if (
        not run.actions
        and run.final == run.recorded
        and run.previous == tree
        and not run.pend
    ):
        unchanged = len(run.final) - len(run.edited)
        return run.result([], [], unchanged, sorted(run.edited))
    # A direct run's files are written by git when it can (None: by Python).
    git_entries = entries if run.direct and blobs else None
    with scratch_checkout(store, tree, git_entries) as index:
        if run.actions:
            _journal(run)
        removals = _remove_all(run, dest_real)
        if index is not None:
            run.final.update(
                check_out(
                    store, dest, index, blobs, run.sizes, lock_fd=lock_fd, mask=umask()
                )
            )
        else:
            _write_all(run, dest_real, blobs)
    write_stamp(dest, tree, run.final, None)
    unchanged = len(run.final) - len(blobs) - len(run.edited)
    return run.result(
        sorted(blobs), sorted(removals), unchanged, sorted(run.edited), resumed
    )


def _open_run(store: Store, tree: str, dest: str, force: bool, started: float) -> _Run:
    """The destination check and the last run's journal: DEST's stamp, the temp files a
    killed run left swept, and what the stamp records (an interrupted run included)."""
    stamp = _destination_stamp(dest, force)
    remove_stale_temps(dest, {layout.EXPORT_STAMP})
    recorded: dict[str, list] = (
        {p: list(v) for p, v in stamp["files"].items()} if stamp else {}
    )
    pending = (stamp or {}).get("pending") or {}
    pend: dict[str, str | None] = {p: None for p in pending.get("remove", [])}
    pend.update(pending.get("write", {}))
    # A first export into an empty directory writes each file in place, without a temp
    # file and a rename per file: nothing there can be the user's, and the
    # pending record says so ("direct"), so that a run killed mid-file is completed: a
    # file of a direct run holding the start of the blob it was writing is the run's.
    direct = stamp is None and not (set(os.listdir(dest)) - {layout.EXPORT_LOCK})
    previous = stamp["tree"] if stamp else None
    return _Run(
        store,
        tree,
        dest,
        force,
        started,
        stamp,
        recorded,
        previous,
        pending,
        pend,
        direct,
        dict(recorded),
    )


def _destination_stamp(dest: str, force: bool) -> dict | None:
    """DEST's stamp, once DEST is known to be a place export may write into.

    Returns:
        The stamp, or ``None`` for an empty DEST (or any DEST under ``force``, when
        its stamp is missing or unreadable).
    Raises:
        OverlayError: the stamp is unreadable, or DEST is not empty and holds no
            stamp (both without ``force``; exit 2).
    """
    try:
        stamp = read_stamp(dest)
    except OverlayError:
        if not force:
            raise
        stamp = None
    if (
        stamp is None
        and not force
        and any(
            n not in OURS and temp_owner(n) != layout.EXPORT_STAMP
            for n in os.listdir(dest)
        )
    ):
        raise OverlayError(
            f"{dest} is not empty and holds no overlay export stamp",
            hint="choose an empty directory, or pass --force to take it over",
        )
    return stamp


def _targets(run: _Run) -> tuple[Entries, set[str], Entries | None]:
    """What the tree holds and which paths the run looks at: after a finished export,
    the paths that changed between the two trees (the update of an existing export);
    else every path of the tree, of the interrupted run and of the stamp.

    Returns:
        ``(want, candidates, entries)``: path -> ``(mode, blob)`` the tree holds (at
        least at every candidate), the paths, and the tree's whole listing when it
        was read (else ``None``).
    Raises:
        UnsafePath: a path is hostile; OverlayError: a submodule (nothing written).
    """
    store = run.store
    format_1 = any(len(rec) < 3 for rec in run.recorded.values())
    # Changes kept by the command that made the tree (a record) need no old tree.
    kept = (
        store.kept_diff(run.previous, run.tree)
        if run.previous is not None and not format_1
        else None
    )
    usable = run.previous is not None and (
        kept is not None or store.has_object(run.previous, "tree")
    )
    previous = run.previous if usable else None
    if previous is not None and format_1:
        # A stamp of format 1 records no blob: take it from the tree it recorded.
        old = tree_entries(store, previous)
        for p, rec in run.recorded.items():
            if len(rec) < 3 and p in old:
                rec.append(old[p][1])
    entries: Entries | None
    if previous is not None and not run.pend and not run.force:
        changes = kept if kept is not None else store.diff_tree(previous, run.tree)
        want = {row[5]: (row[1], row[3]) for row in changes if row[4] != "D"}
        candidates = {row[5] for row in changes}
        entries = None
    else:
        entries = want = tree_entries(store, run.tree)
        candidates = set(want) | set(run.pend) | set(run.recorded)
    for path in sorted(candidates):
        check_path(path, what="tree entry" if path in want else "exported path")
        if want.get(path, ("",))[0] == "160000":
            raise OverlayError(
                f"refusing tree entry {path!r}: submodules are not exported"
            )
    return want, candidates, entries


def _decide(run: _Run, want: Entries, candidates: set[str]) -> None:
    """For each candidate path: adopt what DEST already holds, or write or remove it
    (``run.actions``), or keep a hand edit; ``run.final`` takes what DEST holds now at
    each path acted on (the baseline a killed run resumes from).

    Raises:
        OverlayError: files to be replaced were edited by hand (without ``force``;
            nothing is written; exit 2).
    """
    hexlen = len(run.tree)
    blocked = []
    for path in sorted(candidates):
        rec, target = run.recorded.get(path), want.get(path)
        # A direct export's empty directory holds nothing.
        disk = None if run.direct else disk_state(run.dest, path, rec, hexlen)
        if disk is None and target is None:
            run.final.pop(path, None)
            continue
        if disk is not None and target == (disk[0], disk[1]):
            # Already what the tree holds: adopt it, keep its mtime.
            run.final[path] = [*disk[2], disk[1]]
            continue
        if not run.force and not _is_ours(run, path, disk, rec):
            if (
                path not in run.pend
                and rec is not None
                and target is not None
                and rec[2:3] == [target[1]]
            ):
                # The tree leaves it as exported: the edit stays and is reported.
                run.edited.append(path)
            else:
                blocked.append(path)
            continue
        run.actions[path] = target
        if disk is None or disk[1] is None:
            run.final.pop(path, None)
        else:  # the baseline a killed run resumes from is what is on disk now
            run.final[path] = [*disk[2], disk[1]]
    if blocked:
        raise OverlayError(
            f"{len(blocked)} file(s) in {run.dest} were edited since the last export "
            f"and would be replaced: {', '.join(blocked[:5])}"
            f"{' ...' if len(blocked) > 5 else ''}",
            hint="move your edits into a patch, or pass --force to discard them",
        )


def _is_ours(run: _Run, path: str, disk: Disk | None, rec: list | None) -> bool:
    """True when what DEST holds at ``path`` is overlay's: what the stamp records, what
    the interrupted run wrote (or removed) there, or the start of the blob a direct run
    was writing when it was killed (a hand edit is none of these)."""
    if is_recorded(disk, rec):
        return True
    writing = run.pend.get(path)
    if path in run.pend and (
        disk is None
        and writing is None
        or disk is not None
        and disk[1] is not None
        and disk[1] == writing
    ):
        return True
    return bool(
        run.pending.get("direct")
        and writing
        and disk is not None
        and disk[0] != "120000"
        and disk[1] is not None
        and partly_written(run.store, run.dest, path, writing)
    )


def _check_before_writing(run: _Run, blobs: Entries, entries: Entries | None) -> None:
    """Every object to write is in the store and no link to write is hostile.

    Every object is looked up before anything is written (a missing one stops the
    export here, as a hostile entry does); the contents are streamed while writing,
    one file at a time, so the export never holds the tree (peak memory stays flat).

    Raises:
        GitError: an object is missing; UnsafePath: a link points outside the tree.
    """
    run.sizes = check_objects(run.store, [oid for _mode, oid in blobs.values()])
    if any(mode == "120000" for mode, _oid in blobs.values()):
        if entries is None:
            entries = tree_entries(run.store, run.tree)
        with run.store.cat_file() as cat:
            bad = unsafe_links(
                tree_links(run.store, run.tree, entries=entries, cat=cat)
            )
        if bad:
            raise next(iter(bad.values()))


def _note_untouched(run: _Run, candidates: set[str]) -> None:
    """The stamp's other files: an edited one is reported (and not touched), one touched
    with the same content has its new size and mtime recorded."""
    hexlen = len(run.tree)
    others = ((p, rec) for p, rec in run.recorded.items() if p not in candidates)
    for path, rec in stat_changed(run.dest, others):
        disk = disk_state(run.dest, path, rec, hexlen)
        if not is_recorded(disk, rec):
            run.edited.append(path)
        elif disk is not None and list(rec[:2]) != disk[2]:
            run.final[path] = [*disk[2], disk[1]]


def _sweep_leftovers(run: _Run, dest_real: str, candidates: set[str]) -> None:
    """Remove the temp files and the empty directories a killed run left where this one
    writes (nothing in a direct export: DEST was empty)."""
    if run.direct:
        return
    owners = {os.path.basename(p) for p in candidates}
    directories = {os.path.dirname(p) for p in [*run.actions, *run.pend]}
    if run.force:
        directories |= {os.path.dirname(p) for p in candidates}
    for directory in sorted(directories):
        sweep_directory(run.dest, dest_real, directory, owners)


def _journal(run: _Run) -> None:
    """The transaction journal: before the first write, the stamp records the run in
    progress (its tree, every path it writes with its blob or removes) next to the
    baseline ``run.final``."""
    checkpoint()
    write_stamp(
        run.dest,
        run.previous,
        run.final,
        {
            "tree": run.tree,
            "write": {p: t[1] for p, t in run.actions.items() if t is not None},
            "remove": sorted(p for p, t in run.actions.items() if t is None),
            **({"direct": True} if run.direct else {}),
        },
    )


def _remove_all(run: _Run, dest_real: str) -> list[str]:
    """Remove the paths the tree no longer holds, deepest first; returns them."""
    removals = [p for p, t in run.actions.items() if t is None]
    for path in sorted(removals, key=lambda p: p.count("/"), reverse=True):
        remove_path(run.dest, dest_real, path)
        run.final.pop(path, None)
        checkpoint()
    return removals


#: Up to this many blobs an export writes are read one by one from the store's reader
#: (a round trip each); more are streamed from a ``cat-file --batch`` of their own,
#: whose start costs less than that many round trips.
READ_ONE_BY_ONE = 64


def _write_all(run: _Run, dest_real: str, blobs: Entries) -> None:
    """Write every blob (path order), read from the store's reader (a few, inside
    :meth:`~overlay.git.store.Store.reading`) or streamed from one ``git cat-file
    --batch``: in place in a direct export, else through a temp file and a rename."""
    checked: set[str] = set()
    mask = umask() if run.direct else 0
    paths = list(blobs)  # sorted
    if not paths:
        return
    reader = run.store.reader
    if reader is not None and len(paths) <= READ_ONE_BY_ONE:
        contents: Iterable[tuple[str, bytes]] = (
            reader.read(blobs[p][1]) for p in paths
        )
    else:
        contents = run.store.read_objects([blobs[p][1] for p in paths])
    for path, (_kind, data) in zip(paths, contents, strict=True):
        mode, oid = blobs[path]
        if not (run.direct and new_parent(run.dest, path, checked)):
            safe_parent(dest_real, run.dest, path, checked)
        full = os.path.join(run.dest, path)
        written = write_new(full, data, mode, mask) if run.direct else None
        if written is None:
            written = replace_file(full, path, data, mode)
        run.final[path] = [*written, oid]
        checkpoint()


__all__ = ["ExportResult", "export_tree"]
