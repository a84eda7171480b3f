"""The engine's records: a patch's recorded blobs, checked without applying it.

A patch records, per file change, the blob it was made from (``index`` line, left)
and the blob it produces (right); those blobs are the truth, its text a rendering of
them (docs/engine.md, the truth model). :func:`resolve_records` gives abbreviated
names in full where each names one blob of the store. Before git applies anything,
:func:`walk_records` follows the series on those records alone: each patch's
pre-images against the layer below (and the post-images of the patches before it);
after git ran, :func:`postimage_mismatches` and :func:`same_entry` compare git's
result with the recorded post-images, and :func:`missing_records` names the recorded
blobs that cannot be found (SER017). The only git processes started here are object
look-ups: :func:`blob_checker`'s ``known`` (asked only for a pre-image that differs),
:func:`resolve_records` (only for abbreviated names) and :func:`missing_records`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from overlay.git.store import Store, TreeEntry, is_sha
from overlay.records.series import FileChange, Patch


def oid_matches(recorded: str | None, actual: str | None) -> bool:
    """A recorded (possibly abbreviated) blob name against the blob in a tree, or
    against the name an earlier patch recorded there (which may be the abbreviated
    one: the same blob under both names)."""
    if recorded is None or actual is None:
        return recorded is None and actual is None
    if set(recorded) == {"0"}:
        return False  # the null id stands for "no file"
    return actual.startswith(recorded) or recorded.startswith(actual)


def _describe(entry: TreeEntry | None) -> str:
    """What the layer below holds at a path, in words (for a mismatch's reason)."""
    if entry is None:
        return "absent"
    if entry.kind == "commit":
        return f"a submodule (gitlink {entry.oid[:12]})"
    if entry.kind == "tree":
        return "a directory"
    return f"blob {entry.oid[:12]}"


def resolve_records(store: Store, patches: Sequence[Patch]) -> list[Patch]:
    """The series with every abbreviated ``index`` name that names exactly one blob of
    the store replaced by that blob's full name (docs/engine.md, the truth model: an
    abbreviation is the blob it abbreviates); the patch bytes are not touched.

    Args:
        store: git store; patches: the parsed series.
    Returns:
        The patches, the same objects where nothing was abbreviated; one ``git
        cat-file --batch-check`` when something was, none otherwise.
    """
    short = sorted(
        {
            oid
            for patch in patches
            for change in patch.changes
            for oid in (change.old_oid, change.new_oid)
            if oid and not is_sha(oid) and set(oid) != {"0"}
        }
    )
    if not short:
        return list(patches)
    full = store.resolve_blobs(short)
    if not full:
        return list(patches)

    def resolved(change: FileChange) -> FileChange:
        old, new = change.old_oid, change.new_oid
        return change._replace(
            old_oid=full.get(old, old) if old else old,
            new_oid=full.get(new, new) if new else new,
        )

    return [
        patch._replace(changes=tuple(resolved(c) for c in patch.changes))
        if any(c.old_oid in full or c.new_oid in full for c in patch.changes)
        else patch
        for patch in patches
    ]


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
            if not known(change.old_oid) and not _known_result(change, known):
                # Made in another clone (shared case 7) and nothing recorded here to
                # check its result against: applied at its stated lines, unverified.
                foreign = True
            else:
                missing = (
                    "" if known(change.old_oid) else ", which is not in the git store"
                )
                out.append(
                    (
                        change.source,
                        f"made against other content (the layer below has blob "
                        f"{entry.oid[:12]}, the patch records {change.old_oid[:12]}"
                        f"{missing})",
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


def _known_result(change: FileChange, known: Callable[[str], bool]) -> bool:
    """Whether the post-image ``change`` records is a blob of the store: then no other
    pre-image than the recorded one can give it, and a differing pre-image is a
    mismatch even when the recorded one is missing (docs/engine.md, the truth model)."""
    return bool(change.target and change.new_oid and known(change.new_oid))


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


def unverified_paths(patch: Patch, after: dict[str, TreeEntry | None]) -> list[str]:
    """The paths whose content after ``patch`` its records do not determine (``"?"`` in
    ``after``, the state :func:`walk_records` left after it): a recorded blob that is
    not in the git store, or none recorded. Sorted."""
    return sorted(
        c.target
        for c in patch.changes
        if c.target and (e := after.get(c.target)) is not None and e.oid == "?"
    )


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


def missing_records(
    store: Store, patches: Sequence[Patch], *, last_pre_only: bool = False
) -> list[tuple[Patch, str, str, str]]:
    """The recorded blobs of ``patches`` that cannot be found (docs/engine.md, the truth
    model): a full name the store lacks, an abbreviation that names no blob or several
    (:meth:`overlay.git.store.Store.resolve_blobs`), or a content change with no
    ``index`` line.

    Args:
        store: git store; patches: the series as far as the layers were computed (each
            patch applied, so git wrote its post-images).
        last_pre_only: the last patch did not apply: only its pre-images are asked for.
    Returns:
        ``(patch, path, side, reason)`` per blob, ``side`` ``"pre-image"`` or
        ``"post-image"``, in series order; at most two ``git cat-file`` round trips.
    """
    asked: list[tuple[Patch, str, str, str | None]] = []
    for k, patch in enumerate(patches):
        post = not (last_pre_only and k == len(patches) - 1)
        for c in patch.changes:
            content = bool(c.hunks) or c.binary
            if c.source is not None and (c.old_oid or content):
                asked.append((patch, c.source, "pre-image", c.old_oid))
            if post and c.target is not None and (c.new_oid or content):
                asked.append((patch, c.target, "post-image", c.new_oid))
    names = [n for *_r, n in asked if n and set(n) != {"0"}]
    short: dict[str, str] = {}
    if any(not is_sha(n) for n in names):
        short = store.resolve_blobs(sorted({n for n in names if not is_sha(n)}))
    absent = set(store.missing_objects(sorted({n for n in names if is_sha(n)})))
    out = []
    for patch, path, side, name in asked:
        if name is None:
            out.append((patch, path, side, f"no `index` line records the {side}"))
        elif set(name) == {"0"}:
            continue
        elif is_sha(name) and name in absent:
            out.append(
                (patch, path, side, f"{side} blob {name} is not in the git store")
            )
        elif not is_sha(name) and name not in short:
            out.append(
                (
                    patch,
                    path,
                    side,
                    f"{side} {name} names no blob of the git store, or several",
                )
            )
    return out
