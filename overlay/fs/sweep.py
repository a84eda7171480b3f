"""The sweep of what killed overlay commands left behind in a repository.

An ``atomic_write`` killed before its rename leaves a temp file next to the record
(:mod:`overlay.fs.atomic`); a rebase or sync killed while building or removing its
state directory leaves ``.overlay/rebase.tmp-new`` or ``.overlay/rebase.tmp-old``
(:mod:`overlay.rebase.ondisk`); any command killed in a git step leaves a scratch
directory under the temp directory. :func:`sweep_killed_runs` removes all of them.
It is a module of its own so that the commands that sweep (``refresh``, ``record``,
the runs) load neither the rebase state nor its run.
"""

from __future__ import annotations

import os
from collections.abc import Container

from overlay import layout
from overlay.fs.atomic import remove_dir, remove_stale_temps, sweep_scratch_dirs


class _RecordTemps:
    """The names whose temp files may be swept in ``patches-rocm/``: the manifest,
    the series, the patches."""

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is a record of ``patches-rocm/`` (its temps may go)."""
        return isinstance(name, str) and (
            name in (os.path.basename(layout.MANIFEST), os.path.basename(layout.SERIES))
            or name.endswith(".patch")
        )


def sweep_killed_runs(root: str) -> list[str]:
    """Remove what killed overlay commands left behind: the temp files ``atomic_write``
    leaves next to a record, the state directory a run was building or removing,
    and the scratch directories of dead processes.

    Call it holding the exclusive :func:`~overlay.fs.records_lock.state_lock`: then
    no live command is writing a record, so every temp name there belongs to a dead one.

    Args:
        root: overlay repository.
    Returns:
        Repository-relative paths (and scratch directory names) removed, sorted.
    """
    removed: list[str] = []

    def sweep(rel_dir: str, owners: Container[str] | None = None) -> None:
        """Remove the stale temps in ``rel_dir`` (of ``owners`` only, when given)."""
        for name in remove_stale_temps(os.path.join(root, rel_dir), owners):
            removed.append(os.path.join(rel_dir, name) if rel_dir else name)

    sweep("", {layout.LOCAL_FIXES})
    sweep(layout.PATCH_DIR, _RecordTemps())
    resolved = layout.under(root, layout.RESOLVED_DIR)
    # A temp file under resolved/ would be read as a resolution: every temp name there goes.
    for dirpath, _dirs, _files in os.walk(resolved):
        sweep(os.path.relpath(dirpath, root))
    sweep(
        layout.STATE_DIR,
        {
            os.path.basename(layout.LAST_REBASE_MD),
            os.path.basename(layout.LAST_REBASE_JSON),
        },
    )
    sweep(layout.RR_CACHE)
    sweep(layout.REBASE_STATE_DIR, {layout.STATE_JSON})
    for rel in (layout.REBASE_STATE_NEW, layout.REBASE_STATE_OLD):
        full = os.path.join(root, rel)
        if os.path.islink(full) or os.path.isfile(full):
            os.unlink(full)
            removed.append(rel)
        elif os.path.isdir(full):
            remove_dir(full)
            removed.append(rel)
    removed += sweep_scratch_dirs()
    return sorted(removed)
