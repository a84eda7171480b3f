"""The forked layer: the fork delta (``merge-base..fork``, carried paths only) merged
onto the pin by ``git merge-tree``, with the recorded resolutions
(``patches-rocm/resolved/<path>``) on its conflicted paths (docs/design.md §5).

A conflict with no resolution is an error naming the path and its conflict hunks; a
resolution whose path does not conflict is *stale* (reported, not applied); one that
changes git's merge outside the conflict regions is said (LAY005). The merge, the
carried delta and the forked layer are each kept in the store (``overlay-merges/``)
under a key of everything they depend on: the forked layer does not depend on the
series, so a changed patch leaves it to be read. :mod:`overlay.engine.layers` puts
it between the pin and the patched layer.
"""

import contextlib
import json
from collections.abc import Callable, Sequence
from typing import NamedTuple

from overlay import layout
from overlay.digests import sha256
from overlay.errors import GitError, LayerError
from overlay.fs.paths import Carry, check_path
from overlay.git.store import Store
from overlay.git.treemodel import blob_name, edit_tree
from overlay.records.markers import conflict_regions


class Conflict(NamedTuple):
    """A carried path where the fork delta conflicts with the pin.

    Attributes:
        path: repository path.
        hunks: ``(first_line, last_line)`` of each conflict region in git's
            merged text (1-based, markers included); empty for a
            modify/delete conflict.
        resolved: true when ``patches-rocm/resolved/<path>`` supplied the result.
        outside: for a resolution, ``(resolution line, what)`` for each place where it
            differs from git's automatic merge outside the conflict regions: there a
            resolution would silently revert upstream (or the fork).
    """

    path: str
    hunks: list[tuple[int, int]]
    resolved: bool = False
    outside: Sequence[tuple[int, str]] = ()

    def describe(self) -> str:
        """``path (conflict hunks at lines a-b, c-d)`` for messages."""
        if not self.hunks:
            return f"{self.path} (modify/delete or type conflict)"
        spans = ", ".join(f"{a}-{b}" for a, b in self.hunks)
        return f"{self.path} (conflict hunks at lines {spans})"


def conflict_hunks(text: bytes) -> list[tuple[int, int]]:
    """Line spans of ``<<<<<<<`` ... ``>>>>>>>`` regions in merged text (1-based);
    see :mod:`overlay.records.markers`."""
    return conflict_regions(text)


def changes_outside_conflicts(auto: bytes, resolved: bytes) -> list[tuple[int, str]]:
    """Where a whole-file resolution differs from git's merge outside its conflict regions.

    A resolution may choose anything inside a region; every other line is what git
    merged from the pin and the fork, and changing it reverts one of them silently
    (and a 3-way carry to the next pin keeps the reversion). The comparison is a
    line diff (``difflib``, no junk heuristic): a check, not a merge.

    Args:
        auto: git's merged text with its markers (the conflicted blob of merge-tree).
        resolved: the resolution's bytes.
    Returns:
        ``[(1-based line of the resolution, description), ...]``; empty when the
        resolution keeps every line outside the regions, or when ``auto`` has no
        conflict region at all.
    """
    regions = [
        (start - 1, end) for start, end in conflict_regions(auto)
    ]  # 0-based, end exclusive
    if not regions:
        return []  # no text conflict (modify/delete, a binary file): nothing to compare
    import difflib  # only where a resolution is checked: not on every command's start-up

    old, new = auto.split(b"\n"), resolved.split(b"\n")
    # The lines both texts begin and end with are equal in any diff: only the middle
    # goes to difflib, whose matching grows faster than the text (docs/engine.md has
    # the figure for one header).
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    out = []
    matcher = difflib.SequenceMatcher(
        None, old[head : len(old) - tail], new[head : len(new) - tail], autojunk=False
    )
    for tag, a1, a2, b1, b2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        i1, i2, j1, j2 = a1 + head, a2 + head, b1 + head, b2 + head
        if any(lo <= i1 and i2 <= hi for lo, hi in regions) or (
            tag == "insert" and any(lo <= i1 <= hi for lo, hi in regions)
        ):
            continue
        if tag == "insert":
            what = f"adds {new[j1][:60].decode('utf-8', 'replace')!r}" + (
                f" and {j2 - j1 - 1} more line(s)" if j2 - j1 > 1 else ""
            )
        else:
            what = (
                f"{'drops' if tag == 'delete' else 'changes'} line {i1 + 1} of the automatic merge "
                f"{old[i1][:60].decode('utf-8', 'replace')!r}"
                + (f" and {i2 - i1 - 1} more" if i2 - i1 > 1 else "")
            )
        out.append((j1 + 1, what))
    return out


class ForkMerge(NamedTuple):
    """git's merge of the carried fork delta onto a pin, before any resolution.

    Attributes:
        tree: the merged tree (conflicted paths hold git's text with markers).
        carried, dropped: fork-delta paths carried / not carried (sorted).
        stages: conflicted path -> ``{stage: (mode, oid)}`` with stage 1 (merge
            base), 2 (pin) and 3 (fork); a missing stage means that side deleted it.
    """

    tree: str
    carried: list[str]
    dropped: list[str]
    stages: dict[str, dict[int, tuple[str, str]]]


def merge_fork_delta(
    store: Store, base: str, pin: str, fork: str, carry: Callable[[str], bool]
) -> ForkMerge:
    """Merge ``base..fork`` (carried paths only) onto ``pin`` with ``git merge-tree``.

    The result is kept in the store (``overlay-merges/``, keyed on the three commits and
    the carry globs of a :class:`~overlay.fs.paths.Carry`, as the layer cache is): a rebase
    merges the fork delta onto the new pin and needs the old layers' merge again for
    every recorded resolution, which is then read instead of merged a second time.
    The carried delta itself (the tree of ``base`` with the fork's carried
    changes) depends only on ``base`` and ``fork`` and is kept the same way, so a pin
    bump does not rebuild it.

    Args:
        store: the git store holding all three commits.
        base, pin, fork: commit SHAs (fork merge base, MLX pin, fork commit).
        carry: predicate on paths (see :class:`overlay.fs.paths.Carry`; another callable
            is not cached).
    Returns:
        :class:`ForkMerge`.
    Raises:
        UnsafePath: a fork path is hostile.
        LayerError: git merge-tree failed for another reason than conflicts.
    """
    globs = _carry_globs(carry)
    key = _json_key("merge", base, pin, fork, globs) if globs is not None else None
    cached = store.cache_read("overlay-merges", key) if key else None
    try:
        if cached is not None and store.has_object(cached["tree"], "tree"):
            return ForkMerge(
                cached["tree"],
                list(cached["carried"]),
                list(cached["dropped"]),
                {
                    p: {int(n): (e[0], e[1]) for n, e in st.items()}
                    for p, st in cached["stages"].items()
                },
            )
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        pass  # a damaged record: merge again
    base_tree, carried, dropped, theirs = _carried_delta(
        store, base, fork, carry, globs
    )
    pin_tree = store.tree_of(pin)
    if theirs is None:
        merged = ForkMerge(pin_tree, carried, dropped, {})
    elif pin_tree == base_tree:
        merged = ForkMerge(theirs, carried, dropped, {})
    else:
        try:
            merge = store.merge_trees(
                base_tree,
                pin_tree,
                theirs,
                labels=(
                    "overlay: fork merge base",
                    "overlay: pin",
                    "overlay: carried fork delta",
                ),
            )
        except GitError as exc:
            raise LayerError(
                f"git merge-tree failed on the fork delta: {exc.message}"
            ) from None
        for path in merge.stages:
            check_path(path, what="conflicted path")
        merged = ForkMerge(merge.tree, carried, dropped, merge.stages)
    if key:
        store.cache_write(
            "overlay-merges",
            key,
            {
                "tree": merged.tree,
                "carried": merged.carried,
                "dropped": merged.dropped,
                "stages": {
                    p: {str(n): list(e) for n, e in st.items()}
                    for p, st in merged.stages.items()
                },
            },
        )
    return merged


def _carried_delta(
    store: Store, base: str, fork: str, carry: Callable[[str], bool], globs: list | None
) -> tuple[str, list[str], list[str], str | None]:
    """``(base tree, carried paths, dropped paths, the tree of base with the carried changes
    or None when nothing is carried)``, kept in the store like the merge (see
    :func:`merge_fork_delta`)."""
    key = _json_key("delta", base, fork, globs) if globs is not None else None
    cached = store.cache_read("overlay-merges", key) if key else None
    try:
        if cached is not None and (
            cached["theirs"] is None or store.has_object(cached["theirs"], "tree")
        ):
            return (
                cached["base_tree"],
                list(cached["carried"]),
                list(cached["dropped"]),
                cached["theirs"],
            )
    except (KeyError, TypeError):
        pass  # a damaged record: compute again
    base_tree = store.tree_of(base)
    delta = store.diff_tree(base_tree, store.tree_of(fork))
    carried, dropped, changes = [], [], {}
    for _om, new_mode, _oo, new_oid, status, path in delta:
        check_path(path, what="fork tree entry")
        if not carry(path):
            dropped.append(path)
            continue
        carried.append(path)
        changes[path] = None if status == "D" else (new_mode, new_oid)
    # In Python, its trees written in one go (treemodel.edit_tree): the index way
    # is three git processes.
    theirs = edit_tree(store, base_tree, changes, {}) if changes else None
    if key:
        store.cache_write(
            "overlay-merges",
            key,
            {
                "base_tree": base_tree,
                "carried": carried,
                "dropped": dropped,
                "theirs": theirs,
            },
        )
    return base_tree, carried, dropped, theirs


#: Bump when a cached fork-delta merge, or a forked layer (:func:`compute_forked`: the
#: resolutions applied and checked), would differ for the same commits, globs and
#: resolutions.
MERGE_CACHE_VERSION = 1


def _carry_globs(carry: Callable[[str], bool]) -> list[list[str]] | None:
    """The include and exclude globs of ``carry`` for a key of ``overlay-merges/``;
    ``None`` for another callable than :class:`Carry` (its answers are not kept)."""
    return (
        [list(carry.include), list(carry.exclude)] if isinstance(carry, Carry) else None
    )


def _json_key(*parts) -> str:
    return sha256(json.dumps([MERGE_CACHE_VERSION, *parts]).encode()).hexdigest()


def compute_forked(
    store: Store,
    base: str,
    pin: str,
    fork: str,
    carry: Callable[[str], bool],
    resolutions: dict[str, bytes],
) -> tuple[str, list[str], list[str], list[Conflict], list[str]]:
    """Merge the carried fork delta onto the pin and apply the recorded resolutions.

    Args:
        store: the git store holding all three commits.
        base, pin, fork: commit SHAs (fork merge base, MLX pin, fork commit).
        carry: predicate on paths (see :class:`overlay.fs.paths.Carry`).
        resolutions: path -> resolved content (``patches-rocm/resolved/``).
    Returns:
        ``(forked_tree, carried_paths, dropped_paths, conflicts, stale_resolutions)``.
    Raises:
        LayerError: a conflicted path has no resolution (exit 1); the message
        names every such path and its conflict hunks.
    """
    globs = _carry_globs(carry)
    key = (
        _json_key(
            "forked",
            base,
            pin,
            fork,
            globs,
            [[p, sha256(data).hexdigest()] for p, data in sorted(resolutions.items())],
        )
        if globs is not None
        else None
    )
    kept = _forked_read(store, key) if key else None
    if kept is not None:
        return kept
    merge = merge_fork_delta(store, base, pin, fork, carry)
    conflicts: list[Conflict] = []
    fixes: dict[str, tuple[str, str] | None] = {}
    blobs: dict[str, bytes] = {}  # the resolutions, written with the tree's objects
    with contextlib.ExitStack() as stack:
        # Inside Store.reading, its reader; else a cat-file of this merge's own.
        cat = store.reader or stack.enter_context(store.cat_file())
        for path, stage in sorted(merge.stages.items()):
            mode = (stage.get(2) or stage.get(3) or stage.get(1) or ("100644", ""))[0]
            entry = store.entries(merge.tree, [path]).get(path)
            auto = (
                cat.read(entry.oid)[1]
                if entry is not None and entry.kind == "blob"
                else None
            )
            hunks = conflict_hunks(auto) if auto is not None else []
            if path in resolutions:
                data = resolutions[path]
                if len(merge.tree) == 40:  # named here, written by edit_tree below
                    oid = blob_name(data)
                    blobs[oid] = data
                else:
                    oid = store.hash_blob(data)
                fixes[path] = (mode, oid)
                outside = (
                    changes_outside_conflicts(auto, resolutions[path])
                    if auto is not None
                    else []
                )
                conflicts.append(Conflict(path, hunks, resolved=True, outside=outside))
                continue
            conflicts.append(Conflict(path, hunks))
    unresolved = [c for c in conflicts if not c.resolved]
    if unresolved:
        raise LayerError(
            f"fork delta conflicts with the pin in {len(unresolved)} path(s) without a resolution: "
            + "; ".join(c.describe() for c in unresolved),
            hint=f"resolve with `overlay rebase`, or write {layout.RESOLVED_DIR}/<path>",
        )
    # In Python, the resolutions and the trees written in one go (the index way was a
    # hash-object per resolution and three git processes more).
    forked = edit_tree(store, merge.tree, fixes, blobs)
    stale = sorted(p for p in resolutions if p not in merge.stages)
    if key:
        store.cache_write(
            "overlay-merges",
            key,
            {
                "forked": forked,
                "carried": merge.carried,
                "dropped": merge.dropped,
                "conflicts": conflicts_json(conflicts),
                "stale": stale,
            },
        )
    return forked, merge.carried, merge.dropped, conflicts, stale


def _forked_read(
    store: Store, key: str
) -> tuple[str, list[str], list[str], list[Conflict], list[str]] | None:
    """:func:`compute_forked`'s answer as kept under ``key`` (the merge's commits and
    globs and every resolution's bytes), or ``None``: absent, damaged, or its tree gone
    from the store.

    The forked layer does not depend on the series: after ``overlay record`` (or any
    edit of a patch) the layers are computed again, and this answer spares them the
    resolutions' checks against git's merge (:func:`changes_outside_conflicts`) and
    the write of the forked tree."""
    rec = store.cache_read("overlay-merges", key)
    try:
        if rec is not None and store.has_object(rec["forked"], "tree"):
            return (
                rec["forked"],
                list(rec["carried"]),
                list(rec["dropped"]),
                conflicts_from_json(rec["conflicts"]),
                list(rec["stale"]),
            )
    except (KeyError, TypeError, ValueError, IndexError):
        pass  # a damaged record: compute again
    return None


def conflicts_json(conflicts: Sequence[Conflict]) -> list[list]:
    """``conflicts`` as JSON lists (:func:`conflicts_from_json` reads them back)."""
    return [[c.path, c.hunks, c.resolved, c.outside] for c in conflicts]


def conflicts_from_json(rows: Sequence[Sequence]) -> list[Conflict]:
    """The :class:`Conflict` objects :func:`conflicts_json` wrote."""
    return [
        Conflict(c[0], [tuple(h) for h in c[1]], c[2], [tuple(o) for o in c[3]])
        for c in rows
    ]


__all__ = [
    "Conflict",
    "ForkMerge",
    "MERGE_CACHE_VERSION",
    "changes_outside_conflicts",
    "compute_forked",
    "conflict_hunks",
    "conflicts_from_json",
    "conflicts_json",
    "merge_fork_delta",
]
