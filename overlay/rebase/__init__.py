"""Rebase and sync: carry the overlay onto a new MLX pin or fork commit.

A run recomputes the layers on the new bases:

1. the fork delta onto the new pin (:mod:`.forkdelta`). Each conflicted path is
   settled, in order, by carrying its existing resolution (``git merge-file`` of
   the old resolution, the old auto-merge and the new auto-merge), by a
   resolution recorded in an earlier run for the very same conflict
   (rerere-like, ``.overlay/rr-cache``), or by stopping for the user;
2. each patch of the series, by the engine (:func:`overlay.engine.carry_patch`,
   :mod:`.patches`): applied exactly when its recorded pre-images are unchanged
   below it, else cherry-picked by merge-ort from the tree it was made on (the
   old layer, so upstream renames are followed); "already upstream" only when
   that cherry-pick is empty; a conflict stops for the user with diff3 work files.

A stop writes the conflicted files with labelled markers into
``.overlay/rebase/work/`` and says what to do; ``--continue`` takes the edit,
``--drop`` drops the current patch (``--skip`` too, where the patch changes
nothing on the new base; elsewhere it asks for ``--drop``), ``--abort`` restores
every file exactly as it was (:mod:`.recover`). Nothing in ``patches-rocm/`` or
``LOCAL_FIXES.md`` changes until the whole run completes; then the records and
the report are written (:mod:`.commit`). Every state change is saved
(:class:`overlay.rebase.state.RunState`) before the next step, so a run killed at
any point resumes with ``--continue`` or rolls back with ``--abort``. The state
directory appears and disappears whole (built beside its place and renamed,
renamed away before it is removed), so a kill never leaves half of it; a state
found in part anyway is *wedged* (:func:`overlay.rebase.ondisk.inspect_state`) and
``--abort`` recovers it (:meth:`~overlay.rebase.run.Rebase.recover_wedged`). The CLI holds
:func:`overlay.fs.records_lock.state_lock` around every command that reads or writes
the state.

The package, by step: :mod:`.plan` (what a run goes to and the checks before it
starts), :mod:`.base` (the state on disk and the shared tools), :mod:`.forkdelta`,
:mod:`.patches` (with :mod:`.rerere` and :mod:`.formatting`), :mod:`.commit`,
:mod:`.recover`, :mod:`.files` (file and rr-cache helpers) and :mod:`.run`
(:class:`~overlay.rebase.run.Rebase`, the steps put together, and the user's
``--continue``/``--skip``/``--drop``); the records of a run: :mod:`.state` (the run
state), :mod:`.report` (the last run's report, its one reader and writer),
:mod:`.ondisk` (what a run, or a killed one, left on disk). This module imports
nothing, so reading a run's state does not import the rebase.
"""
