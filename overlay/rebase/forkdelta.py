"""Step 1 of a run: the fork delta onto the new pin, each conflict settled in order.

A conflicted path is settled by carrying its recorded resolution (the same
conflict as before: as is; else ``git merge-file`` of the old resolution, the old
auto-merge and the new auto-merge), by a resolution recorded in an earlier run for
the very same conflict (rerere-like, ``.overlay/rr-cache``), or by stopping for the
user (:class:`~overlay.rebase.state.ResolutionStop`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import NoReturn

from overlay import layout
from overlay.engine.forked import (
    ForkMerge,
    changes_outside_conflicts,
    merge_fork_delta,
)
from overlay.git.treemodel import edit_tree
from overlay.rebase.base import (
    RebaseStopped,
    RunBase,
    Stages,
    _checkpoint,
    stage_oids,
)
from overlay.rebase.state import Bases, PatchOutcome, ResolutionOutcome, ResolutionStop
from overlay.records.manifest import Manifest
from overlay.records.markers import marker_lines
from overlay.records.resolutions import read_resolutions
from overlay.records.series import read_series

#: The fork-delta merge at the old bases, computed at most once and only when needed.
OldMerge = Callable[[], ForkMerge]
#: git's conflicted text of a path at the new bases, computed at most once, when needed.
NewAuto = Callable[[], bytes]


def _mode(stages: Stages) -> str:
    """The file mode a settled path takes: the pin's side, else the fork's."""
    return (stages.get(2) or stages.get(3) or ("100644", ""))[0]


class ForkDeltaSteps(RunBase):
    """Settle the fork delta's conflicts and build the fork layer on the new pin."""

    def _settle_fork_delta(self, manifest: Manifest, old: Bases, new: Bases) -> None:
        """Settle every conflicted path (saving after each), then write the fork layer
        and the pending series into the state.

        Raises:
            RebaseStopped: a path needs the user's resolution (exit 1).
        """
        merge = merge_fork_delta(
            self.store, new.merge_base, new.pin, new.fork, manifest.carry
        )
        old_res = (
            read_resolutions(self.root)
            if self._start_resolutions is None
            else self._start_resolutions
        )
        old_merge: OldMerge = functools.cache(
            lambda: merge_fork_delta(
                self.store, old.merge_base, old.pin, old.fork, manifest.carry
            )
        )
        decided = self.state.resolutions
        for path in sorted(merge.stages):
            if path in decided:
                continue
            new_auto = functools.cache(
                functools.partial(self._labelled, merge.stages[path], None)
            )
            outcome = self._settled(path, merge, old_res, old_merge, new_auto)
            if outcome is None:
                self._flush_blobs()  # the stop saves the outcomes decided so far
                self._stop_for_resolution(path, merge, old_res, new_auto(), new)
            # Saved with the fork layer (its blobs are written with its trees): a kill
            # before then settles these paths again, to the same outcomes.
            decided[path] = outcome
        self._build_fork_layer(merge, old_res, old_merge)

    def _settled(
        self,
        path: str,
        merge: ForkMerge,
        old_res: dict[str, bytes],
        old_merge: OldMerge,
        new_auto: NewAuto,
    ) -> ResolutionOutcome | None:
        """How ``path`` is settled without the user: its recorded resolution carried,
        or one the rr-cache knows; ``None`` when neither works."""
        if path in old_res:
            carried = self._carry_recorded(
                path, merge, old_res[path], old_merge, new_auto
            )
            if carried is not None:
                return carried
        return self._reuse_recorded(path, merge, new_auto())

    def _carry_recorded(
        self,
        path: str,
        merge: ForkMerge,
        recorded: bytes,
        old_merge: OldMerge,
        new_auto: NewAuto,
    ) -> ResolutionOutcome | None:
        """The recorded resolution on the new conflict: as is when the conflict is the
        same, else merged 3-way; ``None`` when that merge is not clean (or the old
        layers did not conflict at ``path``)."""
        old_stages = old_merge().stages.get(path, {})
        if not old_stages:
            return None
        # The same three blobs give the same conflicted text: no merge-file for either
        # (the common case of a bump: upstream did not touch the file).
        same = stage_oids(old_stages) == stage_oids(merge.stages[path])
        old_auto = b"" if same else self._labelled(old_stages, None)
        if same or old_auto == new_auto():
            return ResolutionOutcome(
                "unchanged",
                self._blob_name(recorded),
                "same conflict as before: the recorded resolution applies as is",
            )
        carried, clean = self._merge_file(
            recorded,
            old_auto,
            new_auto(),
            ("recorded resolution", "old auto-merge", "new auto-merge"),
        )
        if not clean or marker_lines(carried):
            return None
        return ResolutionOutcome(
            "carried",
            self._blob_name(carried),
            "recorded resolution carried by a 3-way merge"
            + self._outside_note(merge, path, carried),
        )

    def _reuse_recorded(
        self, path: str, merge: ForkMerge, new_auto: bytes
    ) -> ResolutionOutcome | None:
        """The resolution the rr-cache holds for this very conflict, or ``None``."""
        key = self._conflict_key(new_auto)
        recorded = self._rr_get(key)
        if recorded is None:
            return None
        return ResolutionOutcome(
            "reused",
            self._blob_name(recorded),
            "resolution recorded for the same conflict in an earlier run (rr-cache "
            f"{key[:12]}): review it; `overlay rebase --forget {path}` forgets it"
            + self._outside_note(merge, path, recorded),
        )

    def _stop_for_resolution(
        self,
        path: str,
        merge: ForkMerge,
        old_res: dict[str, bytes],
        new_auto: bytes,
        new: Bases,
    ) -> NoReturn:
        """Write the work file (and the recorded resolution beside it), save the stop and
        raise :class:`RebaseStopped` saying what to edit."""
        work_path = os.path.join(layout.REBASE_STATE_DIR, layout.WORK, path)
        work = {path: self._labelled(merge.stages[path], new)}
        previous = ""
        if path in old_res:
            # The recorded resolution did not carry over cleanly: put it beside the file.
            work[path + ".recorded"] = old_res[path]
            previous = (
                f" The recorded resolution {layout.RESOLVED_DIR}/{path} no longer merges cleanly; "
                f"it is beside the file as {work_path}.recorded for reference."
            )
        self._write_work(work)
        self.state.stop = ResolutionStop(
            path=path,
            key=self._conflict_key(new_auto),
            mode=_mode(merge.stages[path]),
            recorded=path in old_res,
        )
        self.save()
        raise RebaseStopped(
            f"{path}: the fork delta conflicts with pin {new.pin[:8]}; edit "
            f"{work_path} (markers labelled pin / merge base / fork), "
            f"then run `overlay {self.state.kind} --continue` (or `--abort`).{previous}"
        )

    def _build_fork_layer(
        self, merge: ForkMerge, old_res: dict[str, bytes], old_merge: OldMerge
    ) -> None:
        """Every conflict settled: the fork layer's tree, the stale resolutions (kept in
        the rr-cache), the merge counts and the pending series go into the state."""
        changes: dict[str, tuple[str, str] | None] = {
            path: (_mode(merge.stages[path]), entry.blob)
            for path, entry in self.state.resolutions.items()
            if path in merge.stages
        }
        # Computed in Python from the merged tree's listing; its trees and this run's
        # resolution blobs are written in one go (treemodel.edit_tree, write_typed).
        forked = edit_tree(self.store, merge.tree, changes, self._new_blobs)
        self._new_blobs = {}
        self.state.stale = sorted(p for p in old_res if p not in merge.stages)
        self._remember_stale(old_res, old_merge)  # saves the state
        _checkpoint("stale-remembered")
        self.state.merge_stats = {
            "carried": len(merge.carried),
            "conflicts": len(merge.stages),
        }
        self.state.patches = [
            PatchOutcome(name) for name, _line in read_series(self.root)
        ]
        # ``forked`` last: a state that has it is past this step, so a save with it
        # but without the pending series (a kill in between) would make --continue
        # write an empty series.
        self.state.forked = forked
        self.save()

    def _remember_stale(self, old_res: dict[str, bytes], old_merge: OldMerge) -> None:
        """Record each resolution this run removes in the rr-cache, keyed on the conflict it
        resolved, as ``git rerere`` records every resolution it sees.

        A resolution goes when its path stops conflicting (e.g. a sync to an older fork);
        a later run that meets the very same conflict again (the sync back) then reuses
        it instead of stopping, so a round trip restores the records byte for byte.
        ``--abort`` forgets these entries with the rest of the run's.
        """
        stale = [p for p in self.state.stale or [] if p in old_res]
        if not stale:
            return
        for path in stale:
            old_stages = old_merge().stages.get(path, {})
            if not old_stages:
                continue  # the old layers did not conflict there either: nothing to key it on
            key = self._conflict_key(self._labelled(old_stages, None))
            if self._rr_get(key) is None:
                self._rr_put(key, old_res[path], path)
        self.save()

    def _outside_note(self, merge: ForkMerge, path: str, resolution: bytes) -> str:
        """ "; WARNING: it differs ..." when a resolution leaves git's merge outside the
        conflict regions, else ""."""
        entry = self.store.entries(merge.tree, [path]).get(path)
        if entry is None or entry.kind != "blob":
            return ""
        outside = changes_outside_conflicts(self._blob(entry.oid), resolution)
        if not outside:
            return ""
        line, what = outside[0]
        return (
            "; WARNING: it differs from git's merge outside the conflict regions in "
            f"{len(outside)} place(s), first at line {line} ({what}): upstream may be "
            "reverted there (verify reports LAY005)"
        )
