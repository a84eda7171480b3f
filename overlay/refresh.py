"""Refresh: re-export each patch of the series byte-stable from the layers (DESIGN 6).

The refreshed form of patch *k* is :func:`overlay.patchfmt.format_patch` of the
diff between the tree before it and the tree after it (as the engine applied
it), with the patch's own subject, description, trailers and author. A patch
that applied exactly refreshes to the same bytes; one that applied with an
offset or by a 3-way merge refreshes to a patch against the current layer.
Only patches whose bytes change are rewritten.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from overlay.fsutil import atomic_write
from overlay.gitstore import Store
from overlay.layers import Layers
from overlay.patchfmt import DEFAULT_AUTHOR, format_patch, tree_diff
from overlay.series import Patch


@dataclasses.dataclass
class Refreshed:
    """One patch's refresh.

    Attributes:
        patch: the patch as read.
        data: its refreshed bytes.
    """

    patch: Patch
    data: bytes

    @property
    def changed(self) -> bool:
        """True when refreshing would change at least one byte."""
        return self.data != self.patch.data


def trailer_pairs(patch: Patch) -> list[tuple[str, str]]:
    """The patch's trailers as ``[(key, value), ...]`` in their recorded order."""
    return [(key, value) for key, values in patch.trailers.items() for value in values]


def refresh_series(store: Store, layers: Layers) -> list[Refreshed]:
    """The refreshed bytes of every patch.

    Args:
        store: git store.
        layers: layers computed with ``stepwise=True`` (each patch's tree recorded).
    Returns:
        One :class:`Refreshed` per patch, in series order.
    Raises:
        ValueError: ``layers`` was computed without ``stepwise``.
    """
    out = []
    before = layers.forked
    for result in layers.patches:
        if result.tree is None:
            raise ValueError("refresh needs layers computed with stepwise=True")
        patch = result.patch
        data = format_patch(patch.subject, patch.description, trailer_pairs(patch),
                            tree_diff(store, before, result.tree), author=patch.author or DEFAULT_AUTHOR)
        out.append(Refreshed(patch, data))
        before = result.tree
    return out


def write_refreshed(refreshed: Iterable[Refreshed], names: Iterable[str] = ()) -> list[str]:
    """Rewrite the patches whose bytes changed (temp + rename each).

    Args:
        refreshed: output of :func:`refresh_series`.
        names: limit to these patch names (all when empty).
    Returns:
        Names of the files rewritten.
    """
    wanted = set(names)
    written = []
    for item in refreshed:
        if wanted and item.patch.name not in wanted:
            continue
        if item.changed:
            atomic_write(item.patch.path, item.data)
            written.append(item.patch.name)
    return written
