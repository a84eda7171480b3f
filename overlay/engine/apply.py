"""The series apply and the carry of one patch onto a new base: the engine's two
operations (described in :mod:`overlay.engine`)."""

from collections.abc import Callable, Sequence
from typing import NamedTuple

from overlay.engine.chain import apply_chained
from overlay.engine.gitapply import (
    PatchApplyError,
    applied_exactly,
    check_result,
    explain_git_failure,
    git_apply,
    mismatch_error,
    refuse_binary_without_data,
)
from overlay.engine.made import made_on
from overlay.engine.records import (
    blob_checker,
    fully_recorded,
    resolve_records,
    same_entry,
    touched_paths,
    unverified_paths,
    walk_records,
)
from overlay.engine.results import PatchResult
from overlay.git.store import (
    MergeResult,
    Store,
    TreeEntry,
    zsplit,
)
from overlay.lazy import lazy_pattern
from overlay.records.series import Patch


def apply_series(
    store: Store, base_tree: str, patches: Sequence[Patch], *, stepwise: bool = False
) -> tuple[str, list[PatchResult]]:
    """Apply ``patches`` in order onto ``base_tree``, each on its exact pre-image.

    Before git runs, the recorded pre-image of every path is compared with the
    layer below (and with the post-image of the patch before it that touched the
    same path). Fast path (``stepwise`` false): one ``git apply --cached`` of the
    whole series and one ``write-tree``, then the result is compared with the last
    recorded post-image of every touched path. Stepwise: the chain of copies
    (:func:`overlay.engine.chain.apply_chained`), or one patch at a time on one
    private index, with its tree recorded (rebase, refresh and attribution need it).

    Args:
        store: git store.
        base_tree: the ``forked`` tree.
        patches: parsed series.
        stepwise: record the tree after each patch.
    Returns:
        ``(patched_tree, results)``.
    Raises:
        PatchApplyError: a patch was made against other content, git cannot apply
            it, git skipped a file, its result is not the recorded post-image, or a
            hunk would land at an offset (exit 1).
    """
    if not patches:
        return base_tree, []
    refuse_binary_without_data(patches)
    patches = resolve_records(store, patches)
    initial, expected_after = _recorded_states(store, base_tree, patches)
    states = [
        "unverified" if unverified_paths(p, after) else "exact"
        for p, after in zip(patches, expected_after, strict=True)
    ]
    if stepwise:
        trees = apply_chained(store, base_tree, patches, initial, expected_after)
        if trees is not None:
            return trees[-1], [
                PatchResult(p, s, t)
                for p, s, t in zip(patches, states, trees, strict=True)
            ]
    with store.scratch_index(base_tree) as env:
        if not stepwise:
            tree = _apply_batch(store, env, patches, expected_after[-1])
            if tree is not None:
                return tree, [
                    PatchResult(p, s) for p, s in zip(patches, states, strict=True)
                ]
            # Something is off: go patch by patch to say which and why.
            store.git("read-tree", base_tree, env=env)
        results = _apply_one_by_one(
            store, env, base_tree, patches, initial, expected_after
        )
        return results[-1][0], [
            PatchResult(p, s, t) for (t, p), s in zip(results, states, strict=True)
        ]


def _recorded_states(
    store: Store, base_tree: str, patches: Sequence[Patch]
) -> tuple[dict[str, TreeEntry | None], list[dict[str, TreeEntry | None]]]:
    """The layer below at every touched path, and the state the records promise after
    each patch (one ``ls-tree``).

    Raises:
        PatchApplyError: a patch was made against other content, or lists a path it
            leaves unchanged.
    """
    state: dict[str, TreeEntry | None] = dict.fromkeys(touched_paths(patches))
    state.update(store.entries(base_tree, list(state)))
    initial = dict(state)
    expected_after: list[dict[str, TreeEntry | None]] = []
    for k, patch, bad, same in walk_records(patches, state, blob_checker(store)):
        if bad:
            raise mismatch_error(store, base_tree, patches[:k], patch, bad[0])
        if same:
            raise PatchApplyError(
                patch.name,
                same[0],
                None,
                f"the patch lists {len(patch.touched)} path(s) but changes only "
                f"{len(patch.touched) - len(same)}",
                hint="remove the sections that change nothing",
            )
        expected_after.append(dict(state))
    return initial, expected_after


def _apply_batch(
    store: Store,
    env: dict[str, str],
    patches: Sequence[Patch],
    final: dict[str, TreeEntry | None],
) -> str | None:
    """The fast path: the whole series in one ``git apply``; its tree when git applied
    every hunk where stated and the result is the last recorded state ``final``, else
    ``None`` (the caller then goes patch by patch)."""
    if not applied_exactly(git_apply(store, env, patches)):
        return None
    tree = store.out("write-tree", env=env)
    actual: dict[str, TreeEntry | None] = dict.fromkeys(final)
    actual.update(store.entries(tree, list(final)))
    if all(same_entry(final.get(k), actual.get(k)) for k in final):
        return tree
    return None


def _apply_one_by_one(
    store: Store,
    env: dict[str, str],
    base_tree: str,
    patches: Sequence[Patch],
    initial: dict[str, TreeEntry | None],
    expected_after: Sequence[dict[str, TreeEntry | None]],
) -> list[tuple[str, Patch]]:
    """Each patch on its own ``git apply`` and ``write-tree``: ``(tree, patch)`` per
    patch, every result checked against its recorded post-image.

    Raises:
        PatchApplyError: naming the first patch git refuses or gets wrong, and why.
    """
    trees, errs = [], []
    for patch in patches:
        proc = git_apply(store, env, [patch])
        err = proc.stderr.decode("utf-8", "replace")
        if proc.returncode != 0:
            raise explain_git_failure(store, patch, err)
        trees.append(store.out("write-tree", env=env))
        errs.append(err)
    # Every patch's result against its recorded post-image, read for the whole series
    # by one `git diff-tree --stdin` (tree pairs in, changed entries out).
    changed = _changed_entries(store, [base_tree, *trees[:-1]], trees)
    current = dict(initial)
    for patch, err, expected, rows in zip(
        patches, errs, expected_after, changed, strict=True
    ):
        current.update(rows)
        actual = {p: current.get(p) for p in patch.touched}
        check_result(patch, err, expected, actual)
    return list(zip(trees, patches, strict=True))


#: diff-tree --stdin's echo of one input pair (SHA-1 or SHA-256 names).
_PAIR_LINE = lazy_pattern(
    r"^[0-9a-f]{40}(?:[0-9a-f]{24})? [0-9a-f]{40}(?:[0-9a-f]{24})?\n"
)


def _changed_entries(
    store: Store, olds: Sequence[str], news: Sequence[str]
) -> list[dict[str, TreeEntry | None]]:
    """For each tree pair, path -> new entry (``None`` when deleted) of what changed,
    from one ``git diff-tree --stdin`` process."""
    lines = "".join(f"{a} {b}\n" for a, b in zip(olds, news, strict=True)).encode()
    out = store.git(
        "diff-tree",
        "--stdin",
        "-r",
        "-z",
        "--no-renames",
        "--full-index",
        "--no-commit-id",
        input=lines,
    ).stdout
    result: list[dict[str, TreeEntry | None]] = []
    current: dict[str, TreeEntry | None] = {}
    fields = zsplit(out)
    i = 0
    while i < len(fields):
        field = fields[i]
        # diff-tree --stdin echoes each input line ("<old> <new>\n") before its records,
        # glued to the next record's metadata.
        while m := _PAIR_LINE.match(field):
            current = {}
            result.append(current)
            field = field[m.end() :]
        if not field:
            i += 1
            continue
        meta = field[1:].split()
        path = fields[i + 1]
        current[path] = (
            None if meta[4] == "D" else TreeEntry(meta[1], "blob", meta[3], path)
        )
        i += 2
    return result


class Carried(NamedTuple):
    """One patch carried onto a new base by :func:`carry_patch`.

    Attributes:
        status: ``"exact"`` (its pre-images were unchanged: applied as recorded),
            ``"merged"`` (a clean cherry-pick by merge-ort), ``"upstream"`` (the
            cherry-pick came out empty: the new base already holds the change),
            ``"conflict"`` (merge-ort stopped; see ``merge``).
        tree: the tree after the patch (for a conflict: merge-ort's tree, with
            markers in conflicted text files).
        merge: git's merge result when a merge ran, else ``None``.
        base, theirs: the trees the cherry-pick ran from (the tree the patch was made
            on and the tree it produced), when a merge ran.
        text_disagrees: the patch sat on its recorded pre-images, but its text did not
            produce its recorded post-images (a hand-edited hunk header): it was carried
            by its recorded blobs, and its text is re-rendered from them.
    """

    status: str
    tree: str
    merge: MergeResult | None = None
    base: str | None = None
    theirs: str | None = None
    text_disagrees: bool = False


def carry_patch(
    store: Store,
    patch: Patch,
    new_tree: str,
    *,
    made: tuple[str, str] | Callable[[], tuple[str, str] | None] | None = None,
    accept_text: bool = False,
) -> Carried:
    """Carry ``patch`` onto ``new_tree``: exactly when its pre-images are there, else 3-way.

    Args:
        store: git store.
        patch: the patch.
        new_tree: the new tree below it.
        made: ``(base, theirs)``: the tree the patch was made on and the tree it
            produced, when known (the old layer of a rebase: merge-ort then follows
            upstream's renames), or a function giving them only when a merge is needed
            (``None`` from it, or no ``made``: rebuilt from the recorded blobs, :func:`made_on`).
        accept_text: see :func:`made_on`.
    Returns:
        :class:`Carried`.
    Raises:
        CarryError: the patch needs a merge and there is nothing to merge from.
        PatchApplyError: a binary change without data.
    """
    refuse_binary_without_data([patch])
    patch = resolve_records(store, [patch])[0]
    text_disagrees = False
    if exact_prefix(store, new_tree, [patch]):
        try:
            tree, _results = apply_series(store, new_tree, [patch])
            return Carried("exact", tree)
        except PatchApplyError:
            # On its recorded pre-images, yet git's result from the text is not the
            # recorded post-image: the blobs decide (the merge below is theirs).
            text_disagrees = True
    pair = made() if callable(made) else made
    base, theirs = (
        pair
        if pair is not None
        else made_on(store, patch, new_tree, accept_text=accept_text)
    )
    merge = store.merge_trees(
        base,
        new_tree,
        theirs,
        labels=("patch pre-image", "new base", f"patch {patch.name}"),
    )
    status = (
        "conflict"
        if not merge.clean
        else "upstream"
        if merge.tree == new_tree
        else "merged"
    )
    return Carried(status, merge.tree, merge, base, theirs, text_disagrees)


def apply_text(store: Store, tree: str, patch: Patch) -> str:
    """``patch``'s text applied on ``tree`` at its stated lines, its records not asked:
    what ``--accept-text`` takes as the truth (no offset, no fuzz, nothing skipped).

    Returns:
        The tree after it.
    Raises:
        PatchApplyError: git refuses it, skips a file or places a hunk elsewhere.
    """
    refuse_binary_without_data([patch])
    with store.scratch_index(tree) as env:
        proc = git_apply(store, env, [patch])
        if not applied_exactly(proc):
            err = proc.stderr.decode("utf-8", "replace")
            if proc.returncode != 0:
                raise explain_git_failure(store, patch, err)
            check_result(patch, err, {}, {})
            raise PatchApplyError(
                patch.name, None, None, "git did not apply it exactly"
            )
        return store.out("write-tree", env=env)


def exact_prefix(store: Store, tree: str, patches: Sequence[Patch]) -> int:
    """How many leading ``patches`` sit exactly on their recorded pre-images over ``tree``
    (each on the post-images of the ones before it): those go through
    :func:`apply_series` in one batch, with no merge (the common case of a pin bump).

    Returns:
        A count from 0 to ``len(patches)``; one ``ls-tree`` whatever the count.
    """
    state: dict[str, TreeEntry | None] = dict.fromkeys(touched_paths(patches))
    state.update(store.entries(tree, list(state)))
    for k, patch, bad, same in walk_records(patches, state, lambda oid: True):
        if (
            bad
            or same
            or not fully_recorded(patch)
            or any(c.binary and not c.binary_data for c in patch.changes)
        ):
            return k
    return len(patches)


def upstream_commit(
    store: Store,
    patch_diff: bytes,
    ranges: Sequence[tuple[str, str]],
    paths: Sequence[str],
) -> str | None:
    """The commit that made a patch "already upstream", when one can be found.

    First a commit of the ranges with the same ``git patch-id --stable`` as the patch;
    else the newest commit of the ranges that touched the patch's paths.

    Args:
        store: git store.
        patch_diff: the patch's diff bytes.
        ranges: ``[(old, new), ...]`` commit ranges to search (pin and fork moves).
        paths: the paths the patch touches.
    Returns:
        ``"<sha> <subject>"`` or ``None``.
    """
    want = store.git(
        "patch-id", "--stable", input=patch_diff, check=False
    ).stdout.split()[:1]
    newest = None
    for old, new in ranges:
        if old == new:
            continue
        log = store.git(
            "log",
            "-p",
            "--format=commit %H",
            "--full-index",
            f"{old}..{new}",
            "--",
            *paths,
            check=False,
        ).stdout
        if not log:
            continue
        ids = (
            store.git("patch-id", "--stable", input=log, check=False)
            .stdout.decode()
            .split()
        )
        # "<patch-id> <commit>" pairs; a lone trailing field (none expected) is ignored.
        for pid, commit in zip(ids[::2], ids[1::2], strict=False):
            if want and pid == want[0].decode():
                return store.out("log", "-1", "--format=%H %s", commit)
        if newest is None:
            first = store.out(
                "log", "-1", "--format=%H %s", f"{old}..{new}", "--", *paths
            )
            newest = first or None
    return newest


__all__ = [
    "Carried",
    "apply_series",
    "apply_text",
    "carry_patch",
    "exact_prefix",
    "upstream_commit",
]
