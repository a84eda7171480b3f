"""Writing the records of ``overlay record`` all or nothing: a journal first, then the
files, then the end of the edit; a killed record is completed by the next command of
the edit loop.

A record changes up to four files (the patch, carried later patches, ``LOCAL_FIXES.md``,
``series``) and then ends the edit. No rename makes several files change at once, so
the record writes a *journal* first (:func:`save_journal`): every file's old and new
bytes and how the edit ends, built in ``.overlay/record-journal.tmp-new`` and renamed
to ``.overlay/record-journal`` (the commit point). Then each file is written temp +
rename, the edit is ended, and the journal's ``journal.json`` is removed last. A kill
before the commit point leaves the records as before (the temp directory is swept);
a kill after it leaves a journal that :func:`complete_interrupted` finishes (every
file at its new bytes, the edit ended), so a re-run of ``record`` never adds a
second entry. An error (not a kill) while writing puts back what was written.
"""

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable

from overlay import digests, layout
from overlay.errors import OverlayError
from overlay.fs.atomic import atomic_write, counted_kill_point, remove_dir
from overlay.fs.paths import check_path

JOURNAL_FILE = "journal.json"
#: A work tree being removed is renamed here first (``<stem>`` appended): a kill
#: inside the removal never leaves a half-deleted tree where the edit was.
REMOVING_PREFIX = ".removing-"
#: The work tree the last edit ended with, kept beside the edits' work trees for the
#: next edit to start from (:func:`overlay.edit.worktree.make_worktree`): ``git reset
#: --hard`` then rewrites the files the two layers differ in, not all of them, and
#: the record that ends an edit renames its work tree here instead of deleting a
#: thousand files (about 20 ms of a record's CPU here, docs/engine.md). Not a patch's
#: directory: a patch's name starts with a letter or digit.
SPARE = ".spare"


def spare_of(workdir: str) -> str:
    """The spare work tree beside the edit's work tree ``workdir`` (:data:`SPARE` in
    its directory; absolute or relative as ``workdir`` is)."""
    return os.path.join(os.path.dirname(workdir), SPARE)


def checkpoint() -> None:
    """A write point of ``record`` (``OVERLAY_TEST_KILL_AT=record:N`` kills at the Nth)."""
    counted_kill_point("record")


@dataclasses.dataclass
class Journal:
    """What a record writes and how it ends the edit.

    Attributes:
        name: the patch recorded.
        files: ``(path relative to the root, old bytes or None for a new file, new
            bytes or None for a file the record removes: a renamed patch's old name)``.
        directory: the edit's work tree, relative to the root.
        tree: the work tree's content that was recorded (a tree of the store).
        keep: ``--keep``: the work tree stays, moved to the recorded patch.
        kept_session: the edit state for a kept work tree (``.overlay/edit.json``'s
            fields), also used when the work tree changed after the kill.
        start_commit: the work tree's commit at the recorded patch.
    """

    name: str
    files: list[tuple[str, bytes | None, bytes | None]]
    directory: str
    tree: str
    keep: bool
    kept_session: dict
    start_commit: str


def _read(path: str) -> bytes | None:
    """The file's bytes, ``None`` when it does not exist."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def save_journal(root: str, journal: Journal) -> None:
    """Write the journal whole: built beside its place, then renamed (the commit point).

    Raises:
        OSError: it cannot be written; nothing of the records has changed.
    """
    new = os.path.join(root, layout.RECORD_JOURNAL_NEW)
    remove_dir(new)
    os.makedirs(new)
    rows = []
    for i, (rel, old, data) in enumerate(journal.files):
        if old is not None:
            atomic_write(os.path.join(new, f"{i}.old"), old)
        if data is not None:
            atomic_write(os.path.join(new, f"{i}.new"), data)
        rows.append({"path": rel, "old": old is not None, "gone": data is None})
    meta = dataclasses.asdict(journal)
    meta["files"] = rows
    atomic_write(os.path.join(new, JOURNAL_FILE), json.dumps(meta, indent=1).encode())
    checkpoint()
    os.rename(new, os.path.join(root, layout.RECORD_JOURNAL))


def load_journal(root: str) -> Journal | None:
    """The journal of an interrupted record, or ``None``.

    A journal directory without ``journal.json`` is the leftover of a record that had
    finished (the file goes first) and is removed; so is a journal being built.

    Raises:
        OverlayError: the journal is unreadable (exit 2).
    """
    remove_dir(os.path.join(root, layout.RECORD_JOURNAL_NEW))
    top = os.path.join(root, layout.RECORD_JOURNAL)
    try:
        with open(os.path.join(top, JOURNAL_FILE), encoding="utf-8") as fh:
            meta = json.load(fh)
        files = []
        for i, row in enumerate(meta["files"]):
            rel = check_path(row["path"], what="journal path")
            old = _read(os.path.join(top, f"{i}.old")) if row["old"] else None
            gone = bool(row.get("gone", False))
            data = None if gone else _read(os.path.join(top, f"{i}.new"))
            if (data is None and not gone) or (row["old"] and old is None):
                raise ValueError("a file's bytes are missing")
            files.append((rel, old, data))
        meta["files"] = files
        return Journal(**meta)
    except FileNotFoundError:
        remove_dir(top)
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OverlayError(
            f"{layout.RECORD_JOURNAL} (an interrupted `overlay record`) is unreadable: "
            f"{exc}",
            hint="see what it holds, put the records right with git, then remove "
            f"{layout.RECORD_JOURNAL}",
        ) from None


def remove_journal(root: str) -> None:
    """The last step of a record: ``journal.json`` first (then nothing is pending)."""
    top = os.path.join(root, layout.RECORD_JOURNAL)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(top, JOURNAL_FILE))
    remove_dir(top)


def write_files(root: str, journal: Journal, *, resume: bool = False) -> None:
    """Bring every file of the journal to its new bytes, in order.

    Args:
        root: overlay repository.
        journal: the record's journal.
        resume: completing an interrupted record: a file already at its new bytes is
            left alone, and an error leaves the journal for the next try. Otherwise an
            error puts back the files already written, removes the journal and re-raises.
    Raises:
        OverlayError: (``resume``) a file is neither as before nor as recorded: someone
            changed it after the kill; nothing is overwritten (exit 2).
        OSError: a file cannot be written.
    """
    done: list[tuple[str, bytes | None]] = []
    try:
        for rel, old, data in journal.files:
            path = os.path.join(root, rel)
            now = _read(path)
            if now == data:
                continue
            if resume and now != old:
                raise OverlayError(
                    f"{rel} changed after `overlay record` of {journal.name} was "
                    "interrupted: it is not overwritten",
                    hint=f"undo that change (`git diff -- {rel}`), then run `overlay "
                    "record` again to complete the record",
                )
            if data is None:
                checkpoint()
                os.unlink(path)
            else:
                atomic_write(path, data, before_replace=checkpoint)
            done.append((path, now))
    except BaseException:
        if not resume:
            for path, before in reversed(done):
                with contextlib.suppress(OSError):
                    if before is None:
                        os.unlink(path)
                    else:
                        atomic_write(path, before)
            remove_journal(root)
        raise


def remove_worktree(root: str, directory: str) -> bool:
    """End an edit's work tree: it becomes the spare (:data:`SPARE`, one rename) when
    none is kept, else it is renamed aside first and removed, so it is whole or gone.
    A spare that is no git checkout (its ``.git`` removed by hand) is of no use to an
    edit: it is removed, and the work tree takes its place.

    Returns:
        Whether the work tree became the spare.
    """
    workdir = os.path.join(root, directory)
    spare = spare_of(workdir)
    if workdir != spare and os.path.isdir(os.path.join(workdir, ".git")):
        if os.path.lexists(spare) and not os.path.isdir(os.path.join(spare, ".git")):
            with contextlib.suppress(OSError):  # then this one is removed below
                discard(spare)
        if not os.path.lexists(spare):
            try:
                os.rename(workdir, spare)
            except OSError:
                pass  # removed below
            else:
                checkpoint()
                return True
    discard(workdir, renamed=checkpoint)
    return False


def discard(path: str, renamed: Callable[[], None] | None = None) -> None:
    """Remove the directory (or file) ``path``: renamed aside (:data:`REMOVING_PREFIX`)
    first, so that a kill leaves it whole or leaves a leftover the next edit sweeps
    (a leftover of an earlier kill there goes first).

    Args:
        path: what to remove; gone already is fine.
        renamed: called once it is renamed aside (a record's write point).
    Raises:
        OSError: it cannot be renamed aside.
    """
    parent, name = os.path.split(path)
    aside = os.path.join(parent, REMOVING_PREFIX + name)
    remove_dir(aside)
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if renamed is not None:
        renamed()
    if os.path.isdir(aside) and not os.path.islink(aside):
        remove_dir(aside)
    else:
        os.unlink(aside)


def sha256(data: bytes) -> str:
    """The hex sha256 of ``data`` (the edit state's ``patch_sha256``)."""
    return digests.sha256(data).hexdigest()
