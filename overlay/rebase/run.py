"""The run as a whole (:class:`Rebase`): advance it, and the user's ``--continue``,
``--skip`` and ``--drop``."""

from __future__ import annotations

import os

from overlay import layout
from overlay.errors import OverlayError
from overlay.fs.atomic import remove_dir
from overlay.rebase.base import RebaseStopped
from overlay.rebase.commit import CommitSteps
from overlay.rebase.forkdelta import ForkDeltaSteps
from overlay.rebase.formatting import FORMATTED_SUFFIX
from overlay.rebase.ondisk import interrupts_deferred
from overlay.rebase.patches import PatchSteps
from overlay.rebase.recover import AbortSteps
from overlay.rebase.report import RebaseReport
from overlay.rebase.state import (
    Bases,
    EmptyStop,
    PatchStatus,
    PatchStop,
    Phase,
    ResolutionOutcome,
    ResolutionStop,
    Stop,
)
from overlay.records.manifest import Manifest
from overlay.records.markers import marker_lines


class Rebase(ForkDeltaSteps, PatchSteps, CommitSteps, AbortSteps):
    """A rebase or sync in progress, persisted under ``.overlay/rebase/``.

    Start one with :meth:`start` then :meth:`run`; a stopped one is read with
    :meth:`load` and goes on with :meth:`continue_` or :meth:`skip`, or is undone
    with :meth:`abort` (:meth:`recover_wedged` when its state is wedged).

    Args:
        ws: the workspace: root, store and the manifest, read once for the command
            (see :class:`~overlay.rebase.base.RunBase`).
    Raises:
        ManifestError: there is no overlay repository (exit 2).
        GitError: the store cannot be opened (exit 2).
    """

    def run(self) -> RebaseReport:
        """Advance until the run completes or stops.

        Returns:
            The report (see :meth:`report`) when the run completed.
        Raises:
            RebaseStopped: a conflict waits for the user (exit 1); the message says
            which files to edit and what to run next.
        """
        manifest = self._manifest()
        new, old = self.state.new, self.state.old
        # One cat-file for every object question of the run (Store.reading).
        with self.store.reading():
            return self._run(manifest, new, old)

    def _run(self, manifest: Manifest, new: Bases, old: Bases) -> RebaseReport:
        """:meth:`run` inside the store's reader."""
        try:
            if self.state.phase is Phase.FORK_DELTA:
                self._settle_fork_delta(manifest, old, new)
            if self.state.phase is Phase.PATCHES:
                self._apply_patches()
            # The records are written whole, or (killed) --continue ends it.
            with interrupts_deferred():
                if self.state.phase is not Phase.COMMITTING:
                    self.state.committing = True
                    self.save()
                return self._commit(manifest, old, new)
        finally:
            self.close()

    def continue_(self, *, take_formatted: bool = False) -> RebaseReport:
        """Take the user's edit for the current stop and go on (see :meth:`run`).

        Args:
            take_formatted: ``--take-formatted``: each conflicted file that has a
                clean formatted merge (``PATH.formatted``, :mod:`.formatting`) is
                taken as that merge first.

        Raises:
            RebaseStopped: markers remain (exit 1, naming path and line), the edit
            leaves the patch empty (then ``--skip`` is the explicit way to drop it), or
            the next conflict stops the run.
            OverlayError: the edit would put a file where the new base has a submodule.
        """
        stop = self.state.stop
        if take_formatted:
            self._take_formatted(stop)
        if stop is not None:
            self._take_edit(stop)
            self.state.stop = None
            self.save()
            remove_dir(self.work)
        return self.run()

    def _take_edit(self, stop: Stop) -> None:
        """Take the user's work files for ``stop`` into the state (not yet saved).

        Raises:
            RebaseStopped: the patch is empty, or a work file still has markers.
        """
        if isinstance(stop, EmptyStop):
            raise RebaseStopped(self._empty_message(stop.name))
        self._refuse_markers(
            [stop.path] if isinstance(stop, ResolutionStop) else stop.files
        )
        if isinstance(stop, ResolutionStop):
            with open(os.path.join(self.work, stop.path), "rb") as fh:
                data = fh.read()
            self._rr_put(stop.key, data, stop.path)
            self.state.resolutions[stop.path] = ResolutionOutcome(
                "resolved", self.store.hash_blob(data), "conflict resolved by hand"
            )
        else:
            self._take_patch_edit(stop)

    def _take_formatted(self, stop: Stop | None) -> None:
        """Put each ``PATH.formatted`` of the stop in place of its work file.

        Raises:
            OverlayError: the stop offers no formatted merge (exit 2; nothing changed).
        """
        paths = stop.files if isinstance(stop, PatchStop) else []
        offered = [
            rel
            for rel in paths
            if os.path.isfile(os.path.join(self.work, rel + FORMATTED_SUFFIX))
        ]
        if not offered:
            raise OverlayError(
                "--take-formatted: this stop offers no formatted merge (no clean "
                "merge of the clang-formatted sides)",
                hint="edit the work files and `--continue`",
            )
        for rel in offered:
            full = os.path.join(self.work, rel)
            os.replace(full + FORMATTED_SUFFIX, full)

    def _refuse_markers(self, paths: list[str]) -> None:
        """Raise :class:`RebaseStopped` at the first conflict marker left in a work file."""
        for rel in paths:
            full = os.path.join(self.work, rel)
            if not os.path.isfile(full):
                continue
            with open(full, "rb") as fh:
                found = marker_lines(fh.read())
            if found:
                raise RebaseStopped(
                    f"{os.path.join(layout.REBASE_WORK_DIR, rel)}:{found[0][0]}: conflict "
                    "marker left; finish the edit, then --continue again"
                )

    def skip(self, *, drop: bool = False) -> RebaseReport:
        """Drop the patch the run stopped on and go on: its file and series line go when
        the run completes; its LOCAL_FIXES entry stays (the report says so).

        A patch that changes nothing on the new base (the "empty" stop, which already
        asked) goes with ``--skip`` or ``--drop``. A patch stopped on a conflict still
        carries a change the new base lacks: ``--skip`` asks for ``--drop`` instead of
        deleting it, as an emptied patch is never dropped without the word (a ``--skip``
        on the last stop would otherwise complete the run and delete the file).

        Args:
            drop: the explicit word (``--drop``).
        Returns:
            The report, when the run then completes.
        Raises:
            OverlayError: the run did not stop on a patch (exit 2).
            RebaseStopped: ``--skip`` on a conflict stop; nothing changed, the run
                stays stopped (exit 1).
        """
        stop = self.state.stop
        word = "--drop" if drop else "--skip"
        if not isinstance(stop, PatchStop | EmptyStop):
            raise OverlayError(
                f"{word} drops a patch; the run is not stopped on one",
                hint="a conflicting fork path needs a resolution: edit it and --continue",
            )
        fix = self._backup_patch(stop.name, header_only=True).local_fix
        if isinstance(stop, PatchStop) and not drop:
            raise RebaseStopped(
                f"--skip would delete {layout.PATCH_DIR}/{stop.name} and its series line when "
                "the run completes"
                + (f" (LOCAL_FIXES entry {fix} stays)" if fix else "")
                + ", and its change is not on the new base. It is not dropped without "
                f"your word: `overlay {self.state.kind} --drop` drops it; edit the work "
                "files and `--continue` to keep it; `--abort` restores everything"
            )
        entry = self.state.patch(stop.name)
        entry.status = PatchStatus.SKIPPED
        entry.note = (
            f"dropped by {word}; move or delete LOCAL_FIXES entry {fix}"
            if fix
            else f"dropped by {word}"
        )
        self.state.stop = None
        self.save()
        remove_dir(self.work)
        return self.run()
