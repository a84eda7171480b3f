"""``overlay edit``: prepare the work tree (:func:`start_edit`), show what it changes
(:func:`changed_files`), throw it away (:func:`abort_edit`)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil

from overlay.edit.session import (
    EDIT_DIR,
    STATE_FILE,
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
from overlay.errors import OverlayError
from overlay.gitstore import Store
from overlay.layers import compute_layers
from overlay.manifest import Manifest
from overlay.series import PATCH_DIR, read_series


def start_edit(
    root: str,
    store: Store,
    manifest: Manifest,
    *,
    patch: str | None = None,
    new: str | None = None,
    after: str | None = None,
) -> Started:
    """``overlay edit``: prepare the work tree for an existing patch or a new one.

    Args:
        root: overlay repository.
        store: git store.
        manifest: the manifest.
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
    """
    if (patch is None) == (new is None):
        raise OverlayError(
            "give a PATCH of the series to edit, or --new NAME for a new one"
        )
    if after is not None and new is None:
        raise OverlayError(
            "--after goes with --new (an existing patch stays where it is)"
        )
    with records_locked(root, "edit"):
        refuse_during_run(root)
        if new is not None:
            name = patch_file_name(new)
        else:
            assert patch is not None
            name = patch if patch.endswith(".patch") else patch + ".patch"
        if after is not None and not after.endswith(".patch"):
            after = after + ".patch"
        current = load_session(root)
        if current is not None:
            if (
                current.name == name
                and current.new == (new is not None)
                and current.after == after
                and os.path.isdir(current.workdir(root))
            ):
                return Started(current, current.workdir(root), [], resumed=True)
            raise OverlayError(
                f"an edit of {current.name} is in progress in {current.directory}",
                hint="record it with `overlay record`, or throw it away with "
                "`overlay edit --abort`",
            )
        listed = [n for n, _ in read_series(root)]
        if new is not None:
            if name in listed or os.path.lexists(os.path.join(root, PATCH_DIR, name)):
                raise OverlayError(
                    f"{PATCH_DIR}/{name} already exists",
                    hint=f"edit it with `overlay edit {name}`, or choose another name",
                )
        layers = compute_layers(store, manifest, root, stepwise=True)
        base, start, first_later = where(layers, name, new is not None, after)
        subject = ""
        digest = None
        if new is None:
            existing = layers.patches[first_later - 1].patch
            subject, digest = (
                existing.subject,
                hashlib.sha256(existing.data).hexdigest(),
            )
        directory = os.path.join(EDIT_DIR, stem(name))
        workdir = os.path.join(root, directory)
        if os.path.lexists(workdir):
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
            make_worktree(store, workdir, base, start, subject)
            save_session(root, session)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        below = [
            r.patch.name
            for r in layers.patches[: first_later - (0 if new is not None else 1)]
        ]
        return Started(session, workdir, below)


def abort_edit(root: str) -> Session | None:
    """``overlay edit --abort``: throw the work tree and the edit state away.

    Args:
        root: overlay repository.
    An unreadable state file is removed too: ``--abort`` is the way out of it.

    Returns:
        The session that was thrown away, or ``None`` when there was none (or its
        state could not be read).
    """
    with records_locked(root, "edit --abort"):
        try:
            session = load_session(root)
        except OverlayError:
            session = None
        if session is not None:
            shutil.rmtree(session.workdir(root), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(root, STATE_FILE))
        return session


def changed_files(store: Store, root: str, session: Session) -> list[str]:
    """Paths the work tree changes relative to where it started (``overlay edit`` with
    no argument shows them).

    Args:
        store: git store.
        root: overlay repository.
        session: the edit in progress.
    Returns:
        Sorted paths (empty when the work tree is gone).
    """
    workdir = session.workdir(root)
    if not os.path.isdir(os.path.join(workdir, ".git")):
        return []
    tree = snapshot(store, workdir, session.base)
    return sorted(row[5] for row in store.diff_tree(session.start, tree))
