"""Where things are: the overlay repository and the git store (standard library only).

Kept apart from :mod:`overlay.records.manifest` and :mod:`overlay.git.store`, which import
TOML, subprocess and the file helpers: the verdict cache of ``overlay verify``
(:mod:`overlay.checks.cache`) finds both before anything heavier is imported, so that a
verify with nothing changed costs little more than the interpreter's start.
Both modules re-export these names.
"""

from __future__ import annotations

import os

from overlay import layout
from overlay.errors import ManifestError


def find_root(start: str) -> str:
    """The overlay repository holding ``start``, found upwards as git finds its root.

    The root is the nearest directory, ``start`` itself first, then each parent up to
    ``/``, that holds ``patches-rocm/overlay.toml``.

    Args:
        start: where to begin (the current directory, or ``-C DIR``); made absolute.
    Returns:
        The absolute path of the root.
    Raises:
        ManifestError: ``start`` is not a directory, or neither it nor any parent
        holds the manifest; the message names where the search began and ended (exit 2).
    """
    here = os.path.abspath(start)
    if not os.path.isdir(here):
        raise ManifestError(
            f"cannot look for {layout.MANIFEST} from {here}: no such directory",
            hint="pass -C DIR (--root DIR) with an existing directory",
        )
    probe = here
    while True:
        if os.path.isfile(os.path.join(probe, layout.MANIFEST)):
            return probe
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    raise ManifestError(
        f"{layout.MANIFEST} not found in {here} or any parent directory up to {probe}",
        hint="run overlay inside the overlay repository, or pass -C DIR",
    )


def cache_dir() -> str:
    """overlay's directory of the user's cache: ``$XDG_CACHE_HOME/overlay`` (``~/.cache``
    when ``XDG_CACHE_HOME`` is unset), where the default git store lives."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache"
    )
    return os.path.join(base, "overlay")


def default_store_dir() -> str:
    """The default git store: ``$OVERLAY_GIT_DIR``, else ``store.git`` of :func:`cache_dir`."""
    if os.environ.get("OVERLAY_GIT_DIR"):
        return os.environ["OVERLAY_GIT_DIR"]
    return os.path.join(cache_dir(), "store.git")
