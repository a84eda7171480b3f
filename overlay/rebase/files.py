"""File helpers of a run: restore from the backup, and the rr-cache entries
(``rebase --forget``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

from overlay import layout
from overlay.fs.atomic import atomic_write
from overlay.fs.paths import check_path


def restore(root: str, rel: str, data: bytes, mode: int) -> bool:
    """Write ``data`` (a backed-up copy, with its ``mode``) to ``root/rel`` unless
    the file already holds those bytes.

    Returns:
        True when the file was written.
    Raises:
        UnsafePath: ``rel`` would lead outside ``root``.
    """
    check_path(rel, what="backed-up file")
    dst = os.path.join(root, *rel.split("/"))
    try:
        with open(dst, "rb") as fh:
            if fh.read() == data:
                return False
    except (FileNotFoundError, IsADirectoryError):
        pass
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    atomic_write(dst, data, mode=mode)
    return True


def rr_remove(root: str, keys: Iterable[str]) -> None:
    """Remove the rr-cache entries ``keys`` (each resolution, its ``.path`` and, for a
    patch conflict, its ``.patch``) from every rr-cache they are in.

    The private rr-cache directory (:data:`overlay.layout.RR_CACHE`, git-ignored state)
    goes too when that leaves it empty, so an aborted first run leaves no trace; the
    team's shared one stays, empty or not: it is a tracked record of theirs.
    """
    for key in keys:
        for cache in (layout.RR_CACHE, layout.SHARED_RR_CACHE):
            for name in (key, key + ".path", key + ".patch"):
                try:
                    os.unlink(os.path.join(root, cache, name))
                except FileNotFoundError:
                    pass
    with contextlib.suppress(OSError):  # not empty, or not there
        os.rmdir(os.path.join(root, layout.RR_CACHE))


def forget_resolution(root: str, path: str) -> int:
    """Forget every resolution recorded in the rr-cache for ``path`` (``rebase --forget``).

    Args:
        root: overlay repository.
        path: repository path of the conflicted file, e.g. ``mlx/fast_primitives.h``.
    Returns:
        How many recorded resolutions were removed (one entry in both rr-caches
        counts once).
    """
    keys = set()
    for rel in (layout.RR_CACHE, layout.SHARED_RR_CACHE):
        cache = os.path.join(root, rel)
        for name in sorted(os.listdir(cache)) if os.path.isdir(cache) else []:
            if not name.endswith(".path"):
                continue
            with open(os.path.join(cache, name), "rb") as fh:
                if fh.read().decode("utf-8", "surrogateescape") == path:
                    keys.add(name[: -len(".path")])
    rr_remove(root, sorted(keys))
    return len(keys)
