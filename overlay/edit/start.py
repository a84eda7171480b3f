"""``overlay edit``: prepare the work tree (:func:`start_edit`), show what it changes
(:func:`show_edit`, :func:`changed_files`), throw it away (:func:`abort_edit`). Each
first completes a record a kill interrupted (:func:`~.finish.complete_interrupted`)."""

import contextlib
import dataclasses
import os
from typing import TYPE_CHECKING

from overlay import layout
from overlay.digests import sha256
from overlay.edit.finish import Completed, complete_interrupted
from overlay.edit.session import (
    Session,
    Started,
    load_session,
    patch_file_name,
    records_locked,
    refuse_during_run,
    save_session,
    stem,
    where,
)
from overlay.edit.worktree import make_worktree, snapshot
from overlay.edit.writes import remove_worktree
from overlay.errors import OverlayError
from overlay.fs.atomic import remove_dir
from overlay.git.store import Store
from overlay.records.series import read_series, resolve_patch_name

if TYPE_CHECKING:
    from overlay.workspace import Workspace


def start_edit(
    ws: "Workspace",
    *,
    patch: str | None = None,
    new: str | None = None,
    after: str | None = None,
) -> Started:
    """``overlay edit``: prepare the work tree for an existing patch or a new one.

    Args:
        ws: the workspace: its root, its store and its layers with each patch's tree
            (:meth:`Workspace.layers`, computed under the records' lock unless the
            command computed them before).
        patch: the existing patch to edit (its file name, ``.patch`` optional).
        new: the name of a new patch (``.patch`` is added when missing).
        after: for a new patch, the series entry it goes after (default: the last).
    Returns:
        :class:`Started` (``resumed`` when the very same edit was already prepared).
    Raises:
        OverlayError: neither or both of ``patch`` and ``new``; a bad or taken name;
            a patch not in the series; another edit in progress; a rebase or sync in
            progress (exit 2).
        LayerError: the layers cannot be computed (exit 1).
        ManifestError, GitError, OfflineMiss: see :meth:`Workspace.layers` (exit 2).
    """
    # The manifest first: a bad one is refused before anything else (the layers need it).
    root, store, _manifest = ws.root, ws.store, ws.manifest
    if after is not None and new is None:
        raise OverlayError(
            "--after goes with --new (an existing patch stays where it is)"
        )
    if patch is not None and new is not None:
        raise OverlayError(
            f"give a PATCH of the series to edit or --new NAME for a new one, not both "
            f"(got {patch} and --new {new})"
        )
    if patch is None and new is None:
        raise OverlayError(
            "give a PATCH of the series to edit, or --new NAME for a new one"
        )
    with records_locked(root, "edit"):
        refuse_during_run(root)
        completed = complete_interrupted(root, store)
        if completed is not None:
            ws.forget_records()  # that record wrote them
        listed = [n for n, _ in read_series(root)]
        if new is not None:
            name = patch_file_name(new)
        else:
            assert patch is not None
            name = resolve_patch_name(listed, patch)
        if after is not None:
            # A unique start of a name will do, as for the PATCH argument.
            after = resolve_patch_name(listed, after)
        current = load_session(root)
        if current is not None:
            if (
                current.name == name
                and current.new == (new is not None)
                and current.after == after
                and os.path.isdir(current.workdir(root))
            ):
                return Started(
                    current,
                    current.workdir(root),
                    [],
                    resumed=True,
                    completed=completed,
                )
            raise OverlayError(
                f"an edit of {current.name} is in progress in {current.directory}",
                hint="record it with `overlay record`, or throw it away with "
                "`overlay edit --abort`",
            )
        if new is not None:
            if name in listed or os.path.lexists(
                os.path.join(root, layout.PATCH_DIR, name)
            ):
                raise OverlayError(
                    f"{layout.PATCH_DIR}/{name} already exists",
                    hint=f"edit it with `overlay edit {name}`, or choose another name",
                )
        layers = ws.layers(stepwise=True)
        base, start, first_later = where(layers, name, new is not None, after)
        _refuse_unverified_below(layers.patches[:first_later])
        subject = ""
        digest = None
        if new is None:
            existing = layers.patches[first_later - 1].patch
            subject, digest = (
                existing.subject,
                sha256(existing.data).hexdigest(),
            )
        directory = os.path.join(layout.EDIT_DIR, stem(name))
        workdir = os.path.join(root, directory)
        if os.path.lexists(workdir):
            import shutil  # only for a leftover (it imports bz2 and lzma)

            shutil.rmtree(workdir)  # a leftover of an edit whose state is gone
        session = Session(
            name=name,
            new=new is not None,
            after=after,
            base=base,
            start=start,
            patch_sha256=digest,
            directory=directory,
        )
        try:
            from_spare = make_worktree(store, workdir, base, start, subject)
            save_session(root, session)
        except BaseException:
            remove_dir(workdir)
            raise
        below = [
            r.patch.name
            for r in layers.patches[: first_later - (0 if new is not None else 1)]
        ]
        return Started(
            session, workdir, below, completed=completed, from_spare=from_spare
        )


def _refuse_unverified_below(results) -> None:
    """Refuse an edit whose work tree would rest on an unverifiable patch's text alone
    (SER017): ``record`` would then write that text as the record (docs/engine.md, the
    truth model), which only ``refresh --accept-text`` may do.

    Raises:
        OverlayError: naming the first such patch and the way out (exit 2).
    """
    for result in results:
        if result.state == "unverified":
            name = result.patch.name
            raise OverlayError(
                f"patch {name} is unverifiable (a blob its `index` lines record is not "
                "in the git store, SER017): an edit on it would record its text alone "
                "as the truth",
                hint=f"take its text first with `overlay refresh --accept-text {name}`, "
                "or restore it from version control",
            )


@dataclasses.dataclass
class Aborted:
    """What :func:`abort_edit` did.

    Attributes:
        session: the edit thrown away (``None``: there was none, or its state was
            unreadable and only the state file went).
        lost: the unrecorded changes thrown away with its work tree (paths).
        completed: a record a kill had interrupted, completed first (the records end
            as that record wrote them), or ``None``.
        spare: the work tree became the spare the next edit starts from
            (:func:`overlay.edit.writes.remove_worktree`); else it was removed.
    """

    session: Session | None
    lost: list[str]
    completed: Completed | None = None
    spare: bool = False


def abort_edit(ws: "Workspace") -> Aborted:
    """``overlay edit --abort``: throw the work tree and the edit state away.

    A record a kill interrupted is completed first (its journal had passed every
    check; completing it is what ``overlay record`` would do). An unreadable state
    file is removed too: ``--abort`` is the way out of it. A work tree whose changes
    git cannot read is never removed: the user's edit may be in it.

    Args:
        ws: the workspace (its root and store).
    Returns:
        :class:`Aborted`.
    Raises:
        OverlayError: the work tree's changes cannot be read (nothing is thrown away;
            exit 2); an interrupted record cannot be completed (exit 2).
    """
    root, store = ws.root, ws.store
    with records_locked(root, "edit --abort"):
        completed = complete_interrupted(root, store)
        if completed is not None:
            ws.forget_records()  # that record wrote them
        try:
            session = load_session(root)
        except OverlayError:
            session = None
        lost: list[str] = []
        spare = False
        if session is not None:
            lost = _readable_changes(store, root, session)
            spare = remove_worktree(root, session.directory)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(root, layout.EDIT_STATE))
        return Aborted(session, lost, completed, spare)


def _readable_changes(store: Store, root: str, session: Session) -> list[str]:
    """The changes ``--abort`` would throw away; refused when they cannot be read."""
    workdir = session.workdir(root)
    if not os.path.lexists(workdir):
        return []
    try:
        if not os.path.isdir(os.path.join(workdir, ".git")):
            if os.path.isdir(workdir) and not os.listdir(workdir):
                return []
            raise OverlayError("it is not a git checkout any more")
        return changed_files(store, root, session)
    except OverlayError as exc:
        raise OverlayError(
            f"cannot read the changes in the work tree {session.directory} "
            f"({exc.message}): the edit of {session.name} is not thrown away, so that "
            "no change of yours is lost",
            hint=f"copy what you want to keep out of {session.directory}, remove that "
            "directory yourself, then run `overlay edit --abort` again",
        ) from None
    except OSError as exc:
        raise OverlayError(
            f"cannot read the work tree {session.directory}: {exc.strerror or exc}; "
            "nothing is thrown away"
        ) from None


def show_edit(ws: "Workspace") -> tuple[Completed | None, Session | None, list[str]]:
    """Plain ``overlay edit``: an interrupted record completed, then the edit in
    progress and the paths it changes.

    Args:
        ws: the workspace (its root and store).
    Returns:
        ``(completed, session, changed)``; ``session`` is ``None`` when no edit is in
        progress.
    Raises:
        OverlayError: the state, the journal or the work tree cannot be read (exit 2).
    """
    root, store = ws.root, ws.store
    with records_locked(root, "edit"):
        completed = complete_interrupted(root, store)
        if completed is not None:
            ws.forget_records()  # that record wrote them
        session = load_session(root)
        changed = changed_files(store, root, session) if session is not None else []
        return completed, session, changed


def changed_files(store: Store, root: str, session: Session) -> list[str]:
    """Paths the work tree changes relative to where it started (``overlay edit`` with
    no argument shows them).

    Args:
        store: git store.
        root: overlay repository.
        session: the edit in progress.
    Returns:
        Sorted paths (empty when the work tree is gone).
    Raises:
        OverlayError: git cannot read the work tree (exit 2).
    """
    workdir = session.workdir(root)
    if not os.path.isdir(os.path.join(workdir, ".git")):
        return []
    tree = snapshot(store, workdir, session.base)
    return sorted(row[5] for row in store.diff_tree(session.start, tree))
