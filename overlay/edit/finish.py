"""The end of a record: the journal's files written, the edit ended or kept, the journal
removed (:func:`finish_record`); and the completion of a record a kill interrupted
(:func:`complete_interrupted`), which every command of the edit loop runs first."""

import contextlib
import dataclasses
import os
from typing import TYPE_CHECKING

from overlay import layout
from overlay.edit.session import (
    BRANCH,
    Session,
    records_locked,
    save_session,
)
from overlay.edit.worktree import snapshot, sweep_worktree_locks, wt_git
from overlay.edit.writes import (
    REMOVING_PREFIX,
    Journal,
    checkpoint,
    load_journal,
    remove_journal,
    remove_worktree,
    write_files,
)
from overlay.errors import OverlayError
from overlay.fs.atomic import remove_dir, remove_stale_temps
from overlay.fs.sweep import sweep_killed_runs
from overlay.git.store import Store
from overlay.records.series import ParsedSeries, patch_bytes, read_series

if TYPE_CHECKING:
    from overlay.engine.layers import Layers
    from overlay.engine.results import PatchResult
    from overlay.records.series import Patch
    from overlay.workspace import Workspace


@dataclasses.dataclass
class Completed:
    """A record that a kill had interrupted, completed by a later command.

    Attributes:
        name: the patch recorded.
        kept: the work tree stays, at the recorded patch.
        why_kept: ``"keep"`` (``--keep`` was given), ``"changed"`` (it changed after
            the kill: those changes are still to record), ``"unreadable"`` (git could
            not read it: never removed then), or ``None``.
        directory: the work tree, relative to the repository.
        spare: it was not kept, and became the spare work tree the next edit starts
            from (:data:`overlay.edit.writes.SPARE`) instead of being removed.
    """

    name: str
    kept: bool
    why_kept: str | None
    directory: str
    spare: bool = False


def finish_record(
    root: str, store: Store, journal: Journal, *, resume: bool = False
) -> Completed:
    """Write the journal's files, end (or keep) the edit, remove the journal.

    Args:
        root: overlay repository.
        store: git store.
        journal: the record's journal, already saved (:func:`~.writes.save_journal`).
        resume: completing an interrupted record (see :func:`~.writes.write_files`);
            then a work tree that no longer holds what was recorded is kept, never
            removed.
    Returns:
        :class:`Completed`.
    Raises:
        OverlayError: (``resume``) a record changed after the kill (exit 2).
        OSError: a file cannot be written.
    """
    write_files(root, journal, resume=resume)
    workdir = os.path.join(root, journal.directory)
    why = "keep" if journal.keep else None
    spare = False
    if resume and why is None and os.path.isdir(workdir):
        why = _changed_since(store, workdir, journal)
    if why is None:
        spare = remove_worktree(root, journal.directory)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(root, layout.EDIT_STATE))
    else:
        if why != "unreadable" and os.path.isdir(workdir):
            wt_git(workdir, "update-ref", BRANCH, journal.start_commit)
            wt_git(workdir, "reset", "-q", "--mixed", journal.start_commit)
        save_session(root, Session(**journal.kept_session))
    checkpoint()
    remove_journal(root)
    return Completed(journal.name, why is not None, why, journal.directory, spare)


def _changed_since(store: Store, workdir: str, journal: Journal) -> str | None:
    """``None`` when the work tree still holds what was recorded, else why it is kept."""
    try:
        tree = snapshot(store, workdir, journal.kept_session["base"])
    except OverlayError:
        return "unreadable"
    return None if tree == journal.tree else "changed"


def sweep_edit_leftovers(root: str) -> None:
    """Remove what killed commands of the edit loop left: temp files of the records
    and of the edit state, work trees half removed, stale private index locks.

    Call it holding the records' lock (then no live overlay command writes there).
    """
    sweep_killed_runs(root)
    remove_stale_temps(
        os.path.join(root, os.path.dirname(layout.EDIT_STATE)),
        {os.path.basename(layout.EDIT_STATE)},
    )
    edits = os.path.join(root, layout.EDIT_DIR)
    with contextlib.suppress(OSError):
        for name in os.listdir(edits):
            full = os.path.join(edits, name)
            if name.startswith(REMOVING_PREFIX):
                remove_dir(full)
            elif os.path.isdir(os.path.join(full, ".git")):
                sweep_worktree_locks(full)


def complete_interrupted(root: str, store: Store) -> Completed | None:
    """Complete a record a kill interrupted, and sweep what killed commands left.

    Args:
        root: overlay repository.
        store: git store.
    Returns:
        :class:`Completed` when a record was completed, else ``None``.
    Raises:
        OverlayError: the journal is unreadable, or a record changed after the kill
            (exit 2; nothing is overwritten).
    """
    sweep_edit_leftovers(root)
    journal = load_journal(root)
    if journal is None:
        return None
    return finish_record(root, store, journal, resume=True)


def resume_record(ws: "Workspace") -> Completed | None:
    """``overlay record`` first: under the records' lock, complete a record a kill
    interrupted (:func:`complete_interrupted`).

    Args:
        ws: the workspace (its root and store); its manifest and layers are read again
            on their next use when a record was completed.
    Returns:
        :class:`Completed`, or ``None`` when no record was interrupted.
    Raises:
        OverlayError: as :func:`complete_interrupted`; the lock is taken (exit 2).
    """
    with records_locked(ws.root, "record"):
        completed = complete_interrupted(ws.root, ws.store)
    if completed is not None:
        ws.forget_records()  # that record wrote them
    return completed


def keep_recorded_layers(
    root: str,
    store: Store,
    layers: "Layers",
    before: int,
    new_patch: "Patch",
    applied: tuple[str, list["PatchResult"]],
) -> bool:
    """Keep the recorded series' layers for the next command (``export``, ``tree``,
    ``verify``; :func:`overlay.engine.layers.keep_layers`).

    The first ``before`` patches of ``layers`` are unchanged; the recorded patch is
    exact, its result the work tree it was rendered from (both sides of its change
    are in the store: the records' truth, docs/design.md §5); the later ones are as
    the engine applied them onto that tree. Kept only when the series the files now
    hold is these patches, byte for byte; best effort (a record never fails by it).

    Args:
        root: overlay repository, after the record's files were written.
        store: git store.
        layers: the layers the record was checked on (:meth:`Workspace.layers`).
        before: how many patches of ``layers`` come before the recorded one.
        new_patch: the recorded patch, parsed from the bytes written.
        applied: ``(patched tree, results of the later patches)``: the tree the
            work tree became with the later patches applied, and how they applied.
    Returns:
        ``True`` when the layers were kept.
    """
    # the engine's modules: only for a record (the edit loop's other commands load none)
    from overlay.engine.layers import keep_layers
    from overlay.engine.results import PatchResult

    tree, later = applied
    results = [
        *(PatchResult(r.patch, r.state) for r in layers.patches[:before]),
        PatchResult(new_patch, "exact"),
        *(PatchResult(r.patch, r.state) for r in later),
    ]
    series = [r.patch for r in results]
    try:
        listed = [name for name, _line in read_series(root)]
        if listed != [p.name for p in series] or any(
            patch_bytes(root, p.name) != p.data for p in series
        ):
            return False
    except (OSError, OverlayError):
        return False
    # the next command reads these files: no parse then
    kept = ParsedSeries(root, read=False)
    for patch in series:
        kept.add(patch)
    kept.save()
    if not keep_layers(store, layers, series, tree, results):
        return False
    # An export of the old layer is brought up to this one by what changed between them.
    store.keep_diff(layers.patched, tree)
    return True
