"""Keeping the git store's packs few.

Every fetch into the store leaves a pack, and so does every write of
:data:`~overlay.git.loose.LOOSE_LIMIT` computed objects or more
(:func:`overlay.git.loose.write_typed`). overlay turns git's automatic ``gc`` off in
its children (``gc.auto=0``, :data:`overlay.git.run.GIT_FLAGS`: a ``gc`` detached in
the background would prune the unreferenced layer objects the store's caches name),
so nothing rolled them up: a store used for a few weeks held 74 packs here, and
every git process that looks up an object the store lacks (a ``write-tree`` writing
a new tree, a ``diff-tree``) opened every pack's index first, 1 to 2.5 ms of CPU more
per such process than with one pack (docs/engine.md, "Costs behind some choices").

:func:`tidy_packs` rolls them up past git's own limit with git's own roll-up for many
small packs: ``git repack --geometric=2 -d`` merges the smallest packs
(and the loose objects) into one until each pack holds at least twice the objects of
the next smaller. It keeps every object, reachable or not (it packs whole packs,
``pack-objects --stdin-packs``), so nothing a cache names goes.
"""

from __future__ import annotations

import os

from overlay.errors import GitError
from overlay.fs.locks import LockBusy, flocked
from overlay.git.run import run_git

#: More packs than this and the store's packs are rolled up: git's own default of
#: ``gc.autoPackLimit``, past which ``git gc --auto`` repacks.
PACK_LIMIT = 50


def pack_count(git_dir: str) -> int:
    """The packs of the store itself (``objects/pack/*.idx``; not its alternates').

    Args:
        git_dir: the store.
    Returns:
        Their number; 0 when the directory cannot be read.
    """
    try:
        names = os.listdir(os.path.join(git_dir, "objects", "pack"))
    except OSError:
        return 0
    return sum(name.endswith(".idx") for name in names)


def tidy_packs(git_dir: str, limit: int | None = None) -> bool:
    """Roll up the store's packs when it holds more than ``limit``.

    ``git repack -d -q -l --geometric=2`` (``-l``: objects borrowed from an alternate
    stay there; no bitmap: a store is read object by object), under a lock of its own
    that is never waited for: a roll-up another process runs is as good. git's readers
    meanwhile, an overlay run's ``cat-file`` among them, find a rolled-up object in the
    new pack (git looks again when a pack it listed is gone). A failure is quiet: a
    store with many packs is only slower.

    Args:
        git_dir: the store.
        limit: the most packs left as they are (default :data:`PACK_LIMIT`).
    Returns:
        Whether a roll-up ran (and succeeded).
    """
    if pack_count(git_dir) <= (PACK_LIMIT if limit is None else limit):
        return False
    try:
        with flocked(os.path.join(git_dir, "overlay-repack.lock"), wait=False):
            proc = run_git(
                [
                    "-c",
                    "repack.writeBitmaps=false",
                    "repack",
                    "-d",
                    "-q",
                    "-l",
                    "--geometric=2",
                ],
                git_dir=git_dir,
                check=False,
            )
    except (LockBusy, OSError, GitError):
        return False
    return proc.returncode == 0
