"""Undoing a run: ``--abort`` restores every file as it was, and recovers a wedged state.

``--abort`` restores every file the run may have changed, byte for byte, from the
backup made at the start, and forgets the resolutions the run recorded. A state
found in part (*wedged*, :func:`overlay.rebase.ondisk.inspect_state`) is recovered
from what is left of it (:meth:`AbortSteps.recover_wedged`).
"""

import os
import re

from overlay import layout
from overlay.errors import OverlayError
from overlay.rebase.backup import Backup
from overlay.rebase.base import RunBase, tracked_files
from overlay.rebase.files import restore, rr_remove
from overlay.rebase.ondisk import StateOnDisk, interrupts_deferred
from overlay.rebase.state import Fields, RunState
from overlay.records.resolutions import prune_resolution_dirs


class Recovery(Fields):
    """What :meth:`AbortSteps.recover_wedged` did.

    Attributes:
        kind: ``"rebase"`` or ``"sync"``.
        problem: why the state was wedged.
        restored: files restored from the backup, or removed as created by the run.
        kept: files the run had begun writing that had no backup copy: left as they are.
        note: one more sentence for the user (``""`` when none).
        forgotten: how many resolutions the run had recorded in the rr-cache that
            were forgotten with it (0 without a valid ``state.json``: nobody knows).
    """

    __slots__ = ("kind", "problem", "restored", "kept", "note", "forgotten")
    kind: str
    problem: str
    restored: list[str]
    kept: list[str]
    note: str
    forgotten: int

    def __init__(
        self,
        kind: str,
        problem: str,
        restored: list[str],
        kept: list[str],
        note: str,
        forgotten: int = 0,
    ) -> None:
        self.kind, self.problem, self.restored, self.kept = (
            kind,
            problem,
            restored,
            kept,
        )
        self.note, self.forgotten = note, forgotten


class AbortSteps(RunBase):
    """``--abort``: restore the records as before the run and remove its state."""

    def abort(self) -> list[str]:
        """Restore every file the run may have changed, byte for byte, and forget the run,
        including the resolutions it recorded in the rr-cache (shared case 17).

        Returns:
            Relative paths restored or removed.
        """
        # Restored whole: "as it was before the run" must be true.
        with interrupts_deferred():
            return self._abort()

    def _abort(self) -> list[str]:
        """:meth:`abort` itself, with Ctrl-C held back."""
        touched = self._remove_created(set(self.state.backup))
        copies = self.backup().copies
        for rel in sorted(self.state.backup):
            # A whole state (load refuses any other) has a copy of each.
            if restore(self.root, rel, *copies[rel]):
                touched.append(rel)
        prune_resolution_dirs(self.root)
        rr_remove(self.root, self.state.rr_recorded)
        self._discard_dir()
        self.ws.forget_records()  # restored as before the run
        return sorted(touched)

    def _remove_created(self, saved: set[str]) -> list[str]:
        """Remove the records the run created (tracked now, not in its backup list)."""
        removed = []
        for rel in tracked_files(self.root):
            if rel not in saved:
                os.unlink(os.path.join(self.root, rel))
                removed.append(rel)
        return removed

    def recover_wedged(self, info: StateOnDisk | None = None) -> Recovery:
        """``--abort`` on a wedged state: restore the records from what is left, remove
        the state.

        What is restored depends on what is there (:func:`overlay.rebase.ondisk.inspect_state`):

        * a valid ``state.json`` whose backup is gone or short: every file with a
          copy in the backup is restored; a file the run created (a tracked file
          not in the state's backup list) is removed; a file without a copy is
          kept as it is and named;
        * a backup without a valid ``state.json``: the copies that differ are
          restored, unless a run completed after the backup was made (its report
          is newer), which makes the backup a leftover of that run: then nothing
          is restored. Nothing is removed (without the state nobody knows which
          files the run created).

        Args:
            info: the state directory as the caller inspected it (:meth:`inspect`)
                under the records' lock it still holds; ``None``: inspected here.
        Returns:
            :class:`Recovery`.
        Raises:
            OverlayError: the state is not wedged (use :meth:`abort`), or there is none.
        """
        if info is None:
            info = self.inspect()
        if not info.present or not info.problem:
            raise OverlayError("the rebase state is not wedged")
        self._backup = info.backup
        backup = self.backup()
        restored: list[str] = []
        kept: list[str] = []
        note = ""
        forgotten = 0
        if info.state is not None:
            note = self._recover_from_state(info.state, backup, restored, kept)
            forgotten = len(info.state.rr_recorded)
        elif backup.copies:
            note = self._recover_from_backup(backup, restored)
        prune_resolution_dirs(self.root)
        self._discard_dir()
        self.ws.forget_records()  # restored from what was left
        return Recovery(
            info.kind, info.problem, sorted(restored), kept, note, forgotten
        )

    def _recover_from_state(
        self,
        state: RunState,
        backup: Backup,
        restored: list[str],
        kept: list[str],
    ) -> str:
        """Recover with a valid state: created files go once the records were being
        written, the copies are restored, files without one are kept; the run's
        rr-cache entries are forgotten. Returns the note for the user."""
        note = ""
        saved = set(state.backup)
        if state.commit_started:
            restored += self._remove_created(saved)
        else:
            note = (
                "the run had not begun writing the records, so they are as they were "
                "before it"
            )
        for rel in sorted(saved):
            if rel in backup.copies:
                if restore(self.root, rel, *backup.copies[rel]):
                    restored.append(rel)
            elif state.commit_started:
                kept.append(rel)
        # inspect_state checked these are sha256 keys; checked again, as the names
        # are removed from the rr-cache.
        rr_remove(
            self.root,
            [k for k in state.rr_recorded if re.fullmatch(r"[0-9a-f]{64}", k)],
        )
        return note

    def _recover_from_backup(self, backup: Backup, restored: list[str]) -> str:
        """Recover from a backup without a state: restore its copies, unless a run
        completed after it was made. Returns the note for the user."""
        try:
            completed_after = (
                os.path.getmtime(os.path.join(self.root, layout.LAST_REBASE_JSON))
                > backup.mtime
            )
        except OSError:
            completed_after = False
        if completed_after:
            return (
                "a run completed after this backup was made (.overlay/last-rebase.json "
                "is newer): the backup is its leftover, and nothing was restored from it"
            )
        for rel in sorted(backup.copies):
            if restore(self.root, rel, *backup.copies[rel]):
                restored.append(rel)
        return (
            "without state.json the files the run may have created are not known: "
            "check `git status` for new files under patches-rocm/"
        )
