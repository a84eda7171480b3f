"""Refresh: re-export each patch of the series byte-stable from the layers (DESIGN 6).

A refresh owns only these bytes of a patch file: the diff (from the first
``diff --git`` line on, regenerated from the tree before and after the patch,
with full ``index`` lines and no signature footer), the mbox ``From <sha>``
line (zeroed), the ``Date:`` header (dropped) and a diffstat after the ``---``
line (dropped). Every other byte (headers, the message, notes between ``---``
and the diff, any encoding) is kept exactly (issue 12, item 9; shared case 16).
A patch that applies on its recorded pre-image refreshes to the same bytes.
Only patches whose bytes change are rewritten.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from overlay.fsutil import atomic_write
from overlay.gitstore import Store
from overlay.layers import Layers
import re
from typing import Sequence

from overlay.engine import carry_patch
from overlay.errors import LayerError
from overlay.patchfmt import ZERO_FROM, tree_diff, tree_diffs
from overlay.series import Patch, is_patch_break, split_patch

_MBOX_FROM = re.compile(rb"^From [0-9a-f]{40} ")
_DIFFSTAT = re.compile(rb"^ (?:.+ \| +(?:\d+ ?[-+]*|Bin .*)|\d+ files? changed.*|(?:create|delete) mode \d+ .*"
                       rb"|rename .* \(\d+%\)|mode change .*|copy .* \(\d+%\))\r?$")


def refreshed_bytes(data: bytes, diff: bytes) -> bytes:
    """A patch file with its diff replaced by ``diff`` and every byte it does not own kept.

    Args:
        data: the patch file's bytes as they are.
        diff: the new diff (:func:`overlay.patchfmt.tree_diff` output).
    Returns:
        The refreshed file's bytes.
    Raises:
        PatchFormatError: ``data`` has no ``diff --git`` line.
    """
    head, _old = split_patch(data)
    lines = head.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if lines and _MBOX_FROM.match(lines[0]):
        lines[0] = ZERO_FROM.rstrip("\n").encode()
    end = next((i for i, ln in enumerate(lines) if not ln.strip()), len(lines))
    # ``Date:`` (and its folded continuation lines) varies between exports: not ours to keep.
    out, skipping = [], False
    for i, ln in enumerate(lines):
        if i < end and (ln.lower().startswith(b"date:") or (skipping and ln[:1] in (b" ", b"\t"))):
            skipping = True
            continue
        skipping = False
        out.append(ln)
    brk = next((i for i, ln in enumerate(out) if is_patch_break(ln)), None)
    if brk is None:
        out.append(b"---")
    else:
        rest = out[brk + 1:]
        j = 0
        while j < len(rest) and _DIFFSTAT.match(rest[j]):
            j += 1
        if j and j < len(rest) and not rest[j].strip():
            j += 1  # the blank line format-patch writes after a diffstat
        out = out[:brk + 1] + rest[j:]
    return b"\n".join(out) + b"\n" + diff


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
    trees = [result.tree for result in layers.patches]
    if any(tree is None for tree in trees):
        raise ValueError("refresh needs layers computed with stepwise=True")
    # Every patch's diff from one `git diff-tree --stdin` (issue 14: one process per
    # patch was three quarters of a warm verify of a long series).
    diffs = tree_diffs(store, list(zip([layers.forked, *trees[:-1]], trees)))  # type: ignore[list-item]
    return [Refreshed(result.patch, refreshed_bytes(result.patch.data, diff))
            for result, diff in zip(layers.patches, diffs)]


def carry_series(store: Store, forked: str, patches: Sequence[Patch]) -> list[Refreshed]:
    """Refresh a series whose patches no longer sit on their recorded pre-images.

    Each patch is carried onto the tree the patches before it produced
    (:func:`overlay.engine.carry_patch`: exactly where its pre-images are there,
    else a cherry-pick by merge-ort from its recorded pre-image blobs), and its
    diff regenerated against that tree.

    Args:
        store: git store.
        forked: the ``forked`` tree.
        patches: the series.
    Returns:
        One :class:`Refreshed` per patch.
    Raises:
        LayerError: a patch conflicts with the layer below (the message names its
            paths and git's conflict types; `overlay rebase` is where conflicts are
            resolved), or it would become empty (already there: it is never
            deleted by a refresh), or its pre-image blobs are not in the store.
    """
    out = []
    tree = forked
    for patch in patches:
        carried = carry_patch(store, patch, tree)
        if carried.status == "conflict":
            assert carried.merge is not None
            what = "; ".join(f"{p} ({', '.join(carried.merge.conflict_types(p)) or 'CONFLICT'})"
                             for p in sorted(carried.merge.stages))
            raise LayerError(f"patch {patch.name} conflicts with the layer below: {what}",
                             hint="edit the patch by hand, or carry the series with `overlay rebase` "
                                  "(which stops with work files to resolve)")
        if carried.status == "upstream":
            raise LayerError(f"patch {patch.name} changes nothing on the layer below: its change is already there",
                             hint="remove it from patches-rocm/series yourself if that is right; "
                                  "refresh never deletes a patch")
        out.append(Refreshed(patch, refreshed_bytes(patch.data, tree_diff(store, tree, carried.tree))))
        tree = carried.tree
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
