"""The engine's records, checked without git (issue 12).

A patch records, per file change, the blob it was made from (``index`` line, left)
and the blob it produces (right). Before git runs, :func:`walk_records` follows the
series on those records alone: each patch's pre-images against the layer below
(and the post-images of the patches before it); after git ran,
:func:`postimage_mismatches` and :func:`same_entry` compare git's result with the
recorded post-images. Nothing here starts a git process except :func:`blob_checker`'s
``known``, asked only for a pre-image that differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from overlay.gitstore import Store, TreeEntry, is_sha
from overlay.series import FileChange, Patch


def oid_matches(recorded: str | None, actual: str | None) -> bool:
    """A recorded (possibly abbreviated) blob name against the blob in a tree."""
    if recorded is None or actual is None:
        return recorded is None and actual is None
    if set(recorded) == {"0"}:
        return False  # the null id stands for "no file"
    return actual.startswith(recorded)


def _describe(entry: TreeEntry | None) -> str:
    """What the layer below holds at a path, in words (for a mismatch's reason)."""
    if entry is None:
        return "absent"
    if entry.kind == "commit":
        return f"a submodule (gitlink {entry.oid[:12]})"
    if entry.kind == "tree":
        return "a directory"
    return f"blob {entry.oid[:12]}"


def touched_paths(patches: Iterable[Patch]) -> list[str]:
    """Every path the series touches (sources and targets), sorted."""
    return sorted({p for patch in patches for p in patch.touched})


def preimage_mismatches(
    patch: Patch,
    state: dict[str, TreeEntry | None],
    known: Callable[[str], bool] = lambda oid: True,
) -> list[tuple[str, str]]:
    """Why ``patch`` was not made on ``state``: ``(path, reason)`` per differing path.

    The file changes are checked in order, each on the state the one before it
    left (a patch may hold two sections for one path). ``state`` is advanced past
    the patch, as far as the patch records its results.

    Args:
        patch: the parsed patch.
        state: path -> the entry the layer below holds there (``None``: absent), for
            every path the patch touches; updated in place.
        known: whether a blob is in the git store. A recorded pre-image that is not
            (the patch was made in another clone, shared case 7) cannot be compared:
            that file is applied at its stated lines only, and its result is not
            checked against the recorded post-image either.
    Returns:
        ``[]`` when every recorded pre-image matches.
    """
    out = []
    for change in patch.changes:
        if change.source is None:
            if state.get(change.path) is not None:
                out.append(
                    (
                        change.path,
                        "the patch creates it, but the layer below has "
                        f"{_describe(state[change.path])}",
                    )
                )
            _advance(state, change)
            continue
        entry = state.get(change.source)
        foreign = False
        if entry is None or entry.kind != "blob":
            out.append(
                (
                    change.source,
                    f"the patch was made on a file, the layer below has {_describe(entry)}",
                )
            )
        elif change.old_oid is not None and not oid_matches(change.old_oid, entry.oid):
            if is_sha(change.old_oid) and not known(change.old_oid):
                foreign = True
            else:
                out.append(
                    (
                        change.source,
                        f"made against other content (the layer below has blob "
                        f"{entry.oid[:12]}, the patch records {change.old_oid[:12]})",
                    )
                )
        if change.rename and change.target and state.get(change.target) is not None:
            out.append(
                (
                    change.target,
                    "the patch renames onto it, but the layer below has "
                    f"{_describe(state[change.target])}",
                )
            )
        _advance(state, change, unknown_result=foreign)
    return out


def unchanged_paths(
    patch: Patch,
    before: dict[str, TreeEntry | None],
    after: dict[str, TreeEntry | None],
) -> list[str]:
    """Paths ``patch`` lists whose recorded result equals what was there before it
    (git exits 0 on such a patch; the engine calls it a failure)."""
    out = []
    for p in patch.touched:
        was, now = before.get(p), after.get(p)
        if (
            now is not None
            and was is not None
            and now.oid != "?"
            and now.oid == was.oid
            and now.mode == was.mode
        ):
            out.append(p)
    return sorted(out)


def _advance(
    state: dict[str, TreeEntry | None],
    change: FileChange,
    *,
    unknown_result: bool = False,
) -> None:
    """``state`` after ``change``, as far as the patch records it (post-image names;
    ``"?"`` where the patch changes content without recording the result, or where
    ``unknown_result`` says its record cannot be trusted here)."""
    before = state.get(change.source) if change.source else None
    if change.source and (change.target is None or change.rename):
        state[change.source] = None
    if change.target:
        mode = change.new_mode or (before.mode if before else "100644")
        if unknown_result:
            oid = "?"
        elif change.new_oid is not None:
            oid = change.new_oid
        elif before is not None and not change.hunks and not change.binary:
            oid = before.oid  # a mode-only change or a pure rename keeps the content
        else:
            oid = "?"
        state[change.target] = TreeEntry(mode, "blob", oid, change.target)


def postimage_mismatches(
    patch: Patch,
    expected: dict[str, TreeEntry | None],
    actual: dict[str, TreeEntry | None],
) -> list[tuple[str, str]]:
    """``(path, reason)`` where git's result differs from the post-image the patch records."""
    out = []
    for path in sorted({c.target for c in patch.changes if c.target} | patch.deleted):
        want, got = expected.get(path), actual.get(path)
        if want is None or got is None:
            if (want is None) != (got is None):
                out.append(
                    (
                        path,
                        f"the patch leaves it {'absent' if want is None else 'present'}, "
                        f"git's result has it {'absent' if got is None else 'present'}",
                    )
                )
            continue
        if want.oid != "?" and not oid_matches(want.oid, got.oid):
            out.append(
                (
                    path,
                    f"git produced blob {got.oid[:12]}, the patch records {want.oid[:12]}",
                )
            )
        elif want.mode != got.mode:
            out.append(
                (path, f"git produced mode {got.mode}, the patch records {want.mode}")
            )
    return out


def fully_recorded(patch: Patch) -> bool:
    """True when every file change names full 40-hex pre- and post-image blobs."""
    return all(
        (c.source is None or (c.old_oid and is_sha(c.old_oid)))
        and (c.target is None or (c.new_oid and is_sha(c.new_oid)))
        for c in patch.changes
    )


def walk_records(
    patches: Sequence[Patch],
    state: dict[str, TreeEntry | None],
    known: Callable[[str], bool],
) -> Iterator[tuple[int, Patch, list[tuple[str, str]], list[str]]]:
    """Walk the series on its records alone: for each patch, ``(index, patch, pre-image
    mismatches, paths it lists but leaves unchanged)``, with ``state`` advanced past it.
    The one check :func:`overlay.engine.apply_series` and
    :func:`overlay.engine.exact_prefix` share."""
    for k, patch in enumerate(patches):
        before = dict(state)
        bad = preimage_mismatches(patch, state, known)
        yield k, patch, bad, [] if bad else unchanged_paths(patch, before, state)


def blob_checker(store: Store) -> Callable[[str], bool]:
    """``known(oid)``: is the blob in the store (asked only for pre-images that differ)."""
    seen: dict[str, bool] = {}

    def known(oid: str) -> bool:
        if oid not in seen:
            seen[oid] = store.has_object(oid, "blob")
        return seen[oid]

    return known


def same_entry(want: TreeEntry | None, got: TreeEntry | None) -> bool:
    """True when git's entry ``got`` is the recorded ``want`` (``"?"``: any content)."""
    if want is None or got is None:
        return want is None and got is None
    return (want.oid == "?" or oid_matches(want.oid, got.oid)) and want.mode == got.mode
