"""The patch engine: the one place patches meet trees (issue 12).

One invariant: **a patch records the exact blobs it was made from and produces,
and the engine never places a hunk anywhere else.**

* :func:`apply_series` applies the series at the current layer. A patch applies
  only where every path it touches holds the pre-image blob recorded in its
  ``index`` line, and the result must hold the recorded post-image blob. git does
  the applying (``git apply --cached`` on a private index); anything else is a
  :class:`PatchApplyError` naming the patch, the path and both blob names. A patch
  without recorded blobs (made elsewhere, abbreviated ``index`` lines) applies only
  at its stated lines: an offset is refused, never reported as a success.
* :func:`carry_patch` carries one patch onto a new base (rebase, sync, refresh).
  A patch whose touched blobs are unchanged on the new base is applied exactly.
  Otherwise it is a cherry-pick by merge-ort: ``git merge-tree`` with base = the
  tree the patch was made on, ours = the new tree, theirs = the tree it produced.
  merge-ort follows renames and names modify/delete, add/add, rename/delete,
  file/directory and submodule conflicts with git's own types. "Already
  upstream" means only that the cherry-pick came out empty.

Every git child runs with a private index and a working directory of ours
(:mod:`overlay.gitstore`); nothing is written outside the git store.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence

from overlay.errors import LayerError, PatchFormatError
from overlay.gitstore import (
    MergeResult,
    Store,
    TreeEntry,
    first_error_line,
    is_sha,
    zsplit,
)
from overlay.series import FileChange, Patch

_OFFSET_RE = re.compile(
    r"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)\.", re.M
)
_FAILED_AT_RE = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)


class PatchApplyError(LayerError):
    """A patch of the series does not apply at the current layer (exit 1).

    Attributes:
        patch: the patch's name; file, hunk: where it failed (may be ``None``);
        reason: why, in words.
    """

    def __init__(
        self,
        patch: str,
        file: str | None,
        hunk: int | None,
        reason: str,
        hint: str | None = None,
    ):
        where = f"{file}" + (f" hunk #{hunk}" if hunk else "") if file else "(no file)"
        super().__init__(
            f"patch {patch} does not apply: {where}: {reason}",
            hint=hint
            or "carry it onto the layer below with `overlay refresh` (a 3-way "
            "merge from its recorded pre-image), or with `overlay rebase`",
        )
        self.patch, self.file, self.hunk, self.reason = patch, file, hunk, reason


@dataclasses.dataclass
class PatchResult:
    """How one patch of the series applied.

    Attributes:
        patch: the parsed patch.
        state: ``"exact"`` (on its recorded pre-image), or, from :func:`carry_patch`
            only, ``"merged"`` (a clean cherry-pick by merge-ort).
        tree: the tree after this patch, or ``None`` when the series was applied in
            one batch (the fast path).
    """

    patch: Patch
    state: str
    tree: str | None = None


def _oid_matches(recorded: str | None, actual: str | None) -> bool:
    """A recorded (possibly abbreviated) blob name against the blob in a tree."""
    if recorded is None or actual is None:
        return recorded is None and actual is None
    if set(recorded) == {"0"}:
        return False  # the null id stands for "no file"
    return actual.startswith(recorded)


def _describe(entry: TreeEntry | None) -> str:
    if entry is None:
        return "absent"
    if entry.kind == "commit":
        return f"a submodule (gitlink {entry.oid[:12]})"
    if entry.kind == "tree":
        return "a directory"
    return f"blob {entry.oid[:12]}"


def _touched_paths(patches: Iterable[Patch]) -> list[str]:
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
        elif change.old_oid is not None and not _oid_matches(change.old_oid, entry.oid):
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
    return sorted(
        p
        for p in patch.touched
        if after.get(p) is not None
        and before.get(p) is not None
        and after[p].oid != "?"
        and after[p].oid == before[p].oid
        and after[p].mode == before[p].mode
    )


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
        if want.oid != "?" and not _oid_matches(want.oid, got.oid):
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


def _refuse_binary_without_data(patches: Iterable[Patch]) -> None:
    for patch in patches:
        for change in patch.changes:
            if change.binary and not change.binary_data:
                raise PatchApplyError(
                    patch.name,
                    change.path,
                    None,
                    "binary change without data ('Binary files differ'); "
                    "re-export it with --binary",
                    hint="make the patch with `git diff --binary`",
                )


def _fully_recorded(patch: Patch) -> bool:
    """True when every file change names full 40-hex pre- and post-image blobs."""
    return all(
        (c.source is None or (c.old_oid and is_sha(c.old_oid)))
        and (c.target is None or (c.new_oid and is_sha(c.new_oid)))
        for c in patch.changes
    )


def _git_apply(store: Store, env: dict[str, str], patches: Sequence[Patch]):
    return store.git(
        "apply",
        "--cached",
        "-v",
        "--whitespace=nowarn",
        *[p.path for p in patches],
        env=env,
        check=False,
    )


def _explain_git_failure(store: Store, patch: Patch, stderr: str) -> PatchApplyError:
    m = _FAILED_AT_RE.search(stderr)
    if m:
        reason = "its context does not match the layer below"
        for change in patch.changes:
            if (
                change.source == m.group(1)
                and change.old_oid
                and is_sha(change.old_oid)
                and not store.has_object(change.old_oid, "blob")
            ):
                reason += (
                    f", and a 3-way merge cannot run: its pre-image blob {change.old_oid[:12]} is not "
                    "in the git store (the patch was made elsewhere)"
                )
        return PatchApplyError(
            patch.name,
            m.group(1),
            _hunk_number(patch, m.group(1), int(m.group(2))),
            reason,
        )
    fm = re.search(
        r"error: (.+?): (does not exist in index|already exists in index)", stderr
    )
    if fm:
        return PatchApplyError(patch.name, fm.group(1), None, fm.group(2))
    return PatchApplyError(
        patch.name,
        patch.changes[0].path if patch.changes else None,
        None,
        "git cannot read it: " + first_error_line(stderr.encode()),
    )


def _mismatch_error(
    store: Store,
    base_tree: str,
    before: Sequence[Patch],
    patch: Patch,
    first: tuple[str, str],
) -> PatchApplyError:
    """The error for a patch whose recorded pre-image is not in the layer below.

    git is asked, without effect, whether the context would still match (then
    ``overlay refresh`` can carry it by a merge), or which hunk differs; a patch
    with LF lines against a CRLF target (or the reverse) is named as such.
    """
    path, why = first
    with store.scratch_index(base_tree) as env:
        if before:
            _git_apply(store, env, before)
        proc = store.git(
            "apply",
            "--cached",
            "--check",
            "-v",
            "--whitespace=nowarn",
            patch.path,
            env=env,
            check=False,
        )
        err = proc.stderr.decode("utf-8", "replace")
        hunk = None
        if proc.returncode == 0:
            why += (
                "; its context still matches there, so `overlay refresh` can carry it by a 3-way merge"
                if "other content" in why
                else ""
            )
        else:
            m = _FAILED_AT_RE.search(err)
            if m:
                path, hunk = (
                    m.group(1),
                    _hunk_number(patch, m.group(1), int(m.group(2))),
                )
                why += "; its context differs there too"
            if b"\r\n" not in patch.data:
                target = store.git(
                    "cat-file",
                    "blob",
                    f"{store.out('write-tree', env=env)}:{path}",
                    check=False,
                ).stdout
                if b"\r\n" in target:
                    why += " (the target has CRLF line endings, the patch LF)"
    return PatchApplyError(patch.name, path, hunk, why)


def _hunk_number(patch: Patch, file: str, line: int) -> int | None:
    for change in patch.changes:
        if file in (change.source, change.target):
            for number, hunk in enumerate(change.hunks, 1):
                if hunk.source_start == line or (
                    hunk.source_length == 0 and hunk.source_start + 1 == line
                ):
                    return number
            return 1 if change.hunks else None
    return None


def _offset_error(patch: Patch, stderr: str) -> PatchApplyError | None:
    """git placed a hunk away from its stated line: refused (no offset placement)."""
    current = None
    for line in stderr.splitlines():
        if line.startswith("Checking patch "):
            current = line[len("Checking patch ") :].rstrip(".")
        om = _OFFSET_RE.match(line)
        if om:
            return PatchApplyError(
                patch.name,
                current,
                int(om.group(1)),
                f"its context matches only {om.group(3)} line(s) away from the stated line; "
                "the engine places no hunk anywhere but where the patch says",
            )
    return None


def _check_result(
    patch: Patch,
    stderr: str,
    expected: dict[str, TreeEntry | None],
    actual: dict[str, TreeEntry | None],
) -> None:
    if "Skipped patch" in stderr:
        skipped = re.findall(r"Skipped patch '(.+)'", stderr)
        raise PatchApplyError(
            patch.name,
            skipped[0] if skipped else None,
            None,
            "git skipped this file although it exited 0",
        )
    bad = postimage_mismatches(patch, expected, actual)
    if bad:
        raise PatchApplyError(patch.name, bad[0][0], None, bad[0][1])
    offset = _offset_error(patch, stderr)
    if offset is not None:
        raise offset


def _walk_records(
    patches: Sequence[Patch],
    state: dict[str, TreeEntry | None],
    known: Callable[[str], bool],
) -> Iterator[tuple[int, Patch, list[tuple[str, str]], list[str]]]:
    """Walk the series on its records alone: for each patch, ``(index, patch, pre-image
    mismatches, paths it lists but leaves unchanged)``, with ``state`` advanced past it.
    The one check :func:`apply_series` and :func:`exact_prefix` share."""
    for k, patch in enumerate(patches):
        before = dict(state)
        bad = preimage_mismatches(patch, state, known)
        yield k, patch, bad, [] if bad else unchanged_paths(patch, before, state)


def apply_series(
    store: Store, base_tree: str, patches: Sequence[Patch], *, stepwise: bool = False
) -> tuple[str, list[PatchResult]]:
    """Apply ``patches`` in order onto ``base_tree``, each on its exact pre-image.

    Before git runs, the recorded pre-image of every path is compared with the
    layer below (and with the post-image of the patch before it that touched the
    same path). Fast path (``stepwise`` false): one ``git apply --cached`` of the
    whole series and one ``write-tree``, then the result is compared with the last
    recorded post-image of every touched path. Stepwise: one patch at a time on one
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
    _refuse_binary_without_data(patches)
    state: dict[str, TreeEntry | None] = dict.fromkeys(_touched_paths(patches))
    state.update(store.entries(base_tree, list(state)))
    initial = dict(state)
    expected_after: list[dict[str, TreeEntry | None]] = []
    for k, patch, bad, same in _walk_records(patches, state, _blob_checker(store)):
        if bad:
            raise _mismatch_error(store, base_tree, patches[:k], patch, bad[0])
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
    if stepwise:
        trees = _apply_chained(store, base_tree, patches, initial, expected_after)
        if trees is not None:
            return trees[-1], [
                PatchResult(p, "exact", t) for p, t in zip(patches, trees)
            ]
    with store.scratch_index(base_tree) as env:
        if not stepwise:
            proc = _git_apply(store, env, patches)
            err = proc.stderr.decode("utf-8", "replace")
            if (
                proc.returncode == 0
                and "Skipped patch" not in err
                and not _OFFSET_RE.search(err)
            ):
                tree = store.out("write-tree", env=env)
                actual = dict.fromkeys(state)
                actual.update(store.entries(tree, list(state)))
                final = expected_after[-1]
                if all(_same(final.get(k), actual.get(k)) for k in state):
                    return tree, [PatchResult(p, "exact") for p in patches]
            # Something is off: go patch by patch to say which and why.
            store.git("read-tree", base_tree, env=env)
        results, errs = [], []
        for patch in patches:
            proc = _git_apply(store, env, [patch])
            err = proc.stderr.decode("utf-8", "replace")
            if proc.returncode != 0:
                raise _explain_git_failure(store, patch, err)
            results.append(
                PatchResult(patch, "exact", store.out("write-tree", env=env))
            )
            errs.append(err)
        # Every patch's result against its recorded post-image, read for the whole series
        # by one `git diff-tree --stdin` (tree pairs in, changed entries out).
        changed = _changed_entries(
            store,
            [base_tree] + [r.tree for r in results[:-1]],
            [r.tree for r in results],
        )
        current = dict(initial)
        for result, err, expected, rows in zip(results, errs, expected_after, changed):
            current.update(rows)
            actual = {p: current.get(p) for p in result.patch.touched}
            _check_result(result.patch, err, expected, actual)
        return results[-1].tree, results


#: The blob of an empty file: what a deletion, re-emitted as a copy, must leave.
_EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
_NEEDS_QUOTE = re.compile(rb'[\x00-\x20"\\\x7f-\xff]')


def _quote(name: str) -> str:
    """``name`` as git's C-style quoted path when it holds a space, a quote, a backslash,
    a control or a non-ASCII byte (git apply unquotes it), else as it is."""
    raw = name.encode("utf-8", "surrogateescape")
    if not _NEEDS_QUOTE.search(raw):
        return name
    out = []
    for b in raw:
        if b in (0x22, 0x5C):
            out.append("\\" + chr(b))
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def _chain_sections(
    patches: Sequence[Patch], initial: dict[str, TreeEntry | None]
) -> tuple[list[str], list[bytes], list[list[tuple[FileChange, str]]]] | None:
    """The series re-emitted as one patch of copies, for :func:`_apply_chained`.

    Every path the series touches starts as ``0/<path>`` (the layer below); each
    file change of patch ``k`` becomes a copy from where that path's content is now
    (``j/<path>``, j the last patch that wrote it) to ``k/<path>`` carrying the same
    hunks, so git writes every patch's result as an entry of its own. A deletion is a
    copy that must come out empty; a creation is created at ``k/<path>``.

    Returns:
        ``(index lines for update-index, each patch's re-emitted text, per patch
        [(change, the path its result is at)])``, or ``None`` when the series needs the one-patch-at-a-time
        path: a binary change, a gitlink, or a patch that names one path in two file
        changes. (A result the patch does not record in full is refused later, when
        the results are compared with the records.)
    """
    from overlay.series import diff_pieces, split_patch

    at: dict[str, int] = {}
    lines = []
    for path, entry in initial.items():
        if entry is not None and entry.kind == "blob" and entry.mode != "160000":
            at[path] = 0
            lines.append(f"{entry.mode} {entry.oid}\t0/{path}")
    sections: list[bytes] = []
    plan: list[list[tuple[FileChange, str]]] = []
    for k, patch in enumerate(patches, 1):
        seen: set[str] = set()
        for change in patch.changes:
            own = {p for p in (change.source, change.target) if p}
            if (
                own & seen
                or change.binary
                or "160000" in (change.old_mode, change.new_mode)
            ):
                return None
            seen |= own
        try:
            pieces = diff_pieces(split_patch(patch.data)[1])
        except PatchFormatError:
            return None
        if len(pieces) != len(patch.changes):
            return None
        steps, text = [], []
        for change, piece in zip(patch.changes, pieces):
            cut = piece.find(b"\n@@")
            body = (
                b""
                if cut < 0
                else piece[cut + 1 :] + (b"" if piece.endswith(b"\n") else b"\n")
            )
            dst = f"{k}/{change.target or change.source}"
            if change.source is None:
                head = [
                    f"diff --git {_quote('a/' + dst)} {_quote('b/' + dst)}",
                    f"new file mode {change.new_mode or '100644'}",
                ]
                if body:
                    head += ["--- /dev/null", f"+++ {_quote('b/' + dst)}"]
            else:
                if change.source not in at:
                    return None
                src = f"{at[change.source]}/{change.source}"
                head = [f"diff --git {_quote('a/' + src)} {_quote('b/' + dst)}"]
                if (
                    change.target
                    and change.old_mode
                    and change.new_mode
                    and change.old_mode != change.new_mode
                ):
                    head += [
                        f"old mode {change.old_mode}",
                        f"new mode {change.new_mode}",
                    ]
                head += [f"copy from {_quote(src)}", f"copy to {_quote(dst)}"]
                if body:
                    head += [f"--- {_quote('a/' + src)}", f"+++ {_quote('b/' + dst)}"]
                if change.target is None or change.rename:
                    del at[change.source]
            if change.target:
                at[change.target] = k
            text.append(
                ("\n".join(head) + "\n").encode("utf-8", "surrogateescape") + body
            )
            steps.append((change, dst))
        sections.append(b"".join(text))
        plan.append(steps)
    return lines, sections, plan


def _apply_chained(
    store: Store,
    base_tree: str,
    patches: Sequence[Patch],
    initial: dict[str, TreeEntry | None],
    expected_after: Sequence[dict[str, TreeEntry | None]],
) -> list[str] | None:
    """The stepwise apply with a number of git processes that does not grow with the series.

    The series is applied by one ``git apply --cached`` as a chain of copies
    (:func:`_chain_sections`): each patch meets exactly the content the patches
    before it left at its paths, as in a one-at-a-time apply, and every patch's
    result stays in the index. One ``ls-files`` reads them all; each must be the
    post-image the patch records. The tree after each patch is then computed from
    the layer below (:mod:`overlay.treemodel`, one ``ls-tree``) and written with one
    ``unpack-objects``: six git processes for any length of series, where the
    one-at-a-time path starts two per patch.

    Args:
        store: git store; base_tree: the layer below.
        patches: the series (its records already checked by :func:`_walk_records`).
        initial: the layer below's entry at every touched path.
        expected_after: the recorded state after each patch.
    Returns:
        The tree after each patch, or ``None`` when anything is not exactly as recorded
        (git fails, skips, places a hunk at an offset, or produces another blob) or
        the series cannot be chained: the caller then applies one patch at a time,
        which names the patch, the file and the reason.
    """
    from overlay.fsutil import scratch_dir
    from overlay.treemodel import TreeConflict, TreeModel, listing, write_objects

    if len(base_tree) != 40:
        return None  # the tree model hashes SHA-1 objects only
    chain = _chain_sections(patches, initial)
    if chain is None:
        return None
    lines, sections, plan = chain
    with scratch_dir(
        "idx"
    ) as tmp:  # a scratch index, swept after a kill as every other
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        if lines:
            store.git(
                "update-index",
                "-z",
                "--index-info",
                env=env,
                input=("\0".join(lines) + "\0").encode("utf-8", "surrogateescape"),
            )
        # One input file per patch: git chains the patches of separate inputs (each
        # meets the index the ones before it left), never the sections of one.
        names = []
        for k, text in enumerate(sections, 1):
            names.append(os.path.join(tmp, f"{k}.patch"))
            with open(names[-1], "wb") as fh:
                fh.write(text)
        proc = store.git(
            "apply",
            "--cached",
            "-v",
            "--whitespace=nowarn",
            *names,
            env=env,
            check=False,
        )
        err = proc.stderr.decode("utf-8", "replace")
        if proc.returncode != 0 or "Skipped patch" in err or _OFFSET_RE.search(err):
            return None
        index: dict[str, tuple[str, str]] = {}
        for rec in zsplit(store.git("ls-files", "-s", "-z", env=env).stdout):
            meta, path = rec.split("\t", 1)
            mode, oid, _stage = meta.split()
            index[path] = (mode, oid)
    for steps, expected in zip(plan, expected_after):
        for change, at in steps:
            got = index.get(at)
            if got is None:
                return None
            if change.target is None:
                if got[1] != _EMPTY_BLOB:
                    return None  # the deletion's hunks do not remove the whole file
                continue
            want = expected.get(change.target)
            if want is None or want.oid != got[1] or want.mode != got[0]:
                return None
    model = TreeModel(listing(store, base_tree), base_tree)
    trees = []
    try:
        for steps in plan:
            for change, at in steps:
                if change.source is not None and (
                    change.target is None or change.rename
                ):
                    model.remove(change.source)
                if change.target is not None:
                    model.set(change.target, *index[at])
            trees.append(model.write())
    except TreeConflict:
        return None  # a file where a directory is (or the reverse): git says it best, one patch at a time
    write_objects(store, model.objects)
    return trees


def _changed_entries(
    store: Store, olds: Sequence[str], news: Sequence[str]
) -> list[dict[str, TreeEntry | None]]:
    """For each tree pair, path -> new entry (``None`` when deleted) of what changed,
    from one ``git diff-tree --stdin`` process."""
    lines = "".join(f"{a} {b}\n" for a, b in zip(olds, news)).encode()
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
        while _PAIR_LINE.match(field):
            current = {}
            result.append(current)
            field = field[82:]
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


_PAIR_LINE = re.compile(r"^[0-9a-f]{40} [0-9a-f]{40}\n")


def _blob_checker(store: Store) -> Callable[[str], bool]:
    """``known(oid)``: is the blob in the store (asked only for pre-images that differ)."""
    seen: dict[str, bool] = {}

    def known(oid: str) -> bool:
        if oid not in seen:
            seen[oid] = store.has_object(oid, "blob")
        return seen[oid]

    return known


def _same(want: TreeEntry | None, got: TreeEntry | None) -> bool:
    if want is None or got is None:
        return want is None and got is None
    return (
        want.oid == "?" or _oid_matches(want.oid, got.oid)
    ) and want.mode == got.mode


@dataclasses.dataclass
class Carried:
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
    """

    status: str
    tree: str
    merge: MergeResult | None = None
    base: str | None = None
    theirs: str | None = None


class CarryError(LayerError):
    """A patch cannot even be merged: the 3-way fallback has nothing to run from (exit 1)."""


def made_on(store: Store, patch: Patch, new_tree: str) -> tuple[str, str]:
    """The tree ``patch`` was made on and the tree it produced, rebuilt from its records.

    Every touched path takes its recorded pre-image blob on top of ``new_tree``
    (a created path is removed); the patch is then applied exactly there.

    Args:
        store: git store.
        patch: the patch (full 40-hex ``index`` lines needed).
        new_tree: the tree it is to be carried onto.
    Returns:
        ``(base_tree, theirs_tree)``.
    Raises:
        CarryError: a pre-image blob is not recorded in full or not in the git store
            (the patch was made elsewhere): the reason names the path and the blob.
    """
    changes: dict[str, tuple[str, str] | None] = {}
    current = store.entries(new_tree, sorted(patch.touched))
    for change in patch.changes:
        if change.source is None:
            changes[change.path] = None
            continue
        oid = change.old_oid
        if not oid or not is_sha(oid):
            have = current.get(change.source)
            if (
                oid is None
                and have is not None
                and have.kind == "blob"
                and not change.hunks
            ):
                oid = (
                    have.oid
                )  # a mode-only change or a pure rename: no content recorded
            else:
                raise CarryError(
                    f"patch {patch.name}: {change.source}: the 3-way fallback cannot run: the "
                    "pre-image is not recorded as a full blob name (abbreviated `index` line)",
                    hint="refresh the patch where it applies, so the index lines are full",
                )
        if not store.has_object(oid, "blob"):
            raise CarryError(
                f"patch {patch.name}: {change.source}: the 3-way fallback cannot run: pre-image "
                f"blob {oid[:12]} is not in the git store (the patch was made elsewhere)",
                hint="apply it where it was made and refresh it there, or edit it by hand",
            )
        mode = change.old_mode or (
            current[change.source].mode if change.source in current else "100644"
        )
        changes[change.source] = (mode, oid)
        if change.rename and change.target:
            changes[change.target] = None
    with store.scratch_index(new_tree) as env:
        base = store.edit_tree_in(env, changes)
        proc = _git_apply(store, env, [patch])
        if proc.returncode != 0:
            raise CarryError(
                f"patch {patch.name}: does not apply even to its own recorded pre-image: "
                + first_error_line(proc.stderr)
            )
        theirs = store.out("write-tree", env=env)
    return base, theirs


def carry_patch(
    store: Store,
    patch: Patch,
    new_tree: str,
    *,
    made: tuple[str, str] | Callable[[], tuple[str, str] | None] | None = None,
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
    Returns:
        :class:`Carried`.
    Raises:
        CarryError: the patch needs a merge and there is nothing to merge from.
        PatchApplyError: a binary change without data.
    """
    _refuse_binary_without_data([patch])
    if exact_prefix(store, new_tree, [patch]):
        try:
            tree, _results = apply_series(store, new_tree, [patch])
            return Carried("exact", tree)
        except PatchApplyError:
            pass  # git disagrees with the records: let merge-ort decide
    pair = made() if callable(made) else made
    base, theirs = pair if pair is not None else made_on(store, patch, new_tree)
    merge = store.merge_trees(
        base,
        new_tree,
        theirs,
        labels=("patch pre-image", "new base", f"patch {patch.name}"),
    )
    if not merge.clean:
        return Carried("conflict", merge.tree, merge, base, theirs)
    return Carried(
        "upstream" if merge.tree == new_tree else "merged",
        merge.tree,
        merge,
        base,
        theirs,
    )


def exact_prefix(store: Store, tree: str, patches: Sequence[Patch]) -> int:
    """How many leading ``patches`` sit exactly on their recorded pre-images over ``tree``
    (each on the post-images of the ones before it): those go through
    :func:`apply_series` in one batch, with no merge (the common case of a pin bump).

    Returns:
        A count from 0 to ``len(patches)``; one ``ls-tree`` whatever the count.
    """
    state: dict[str, TreeEntry | None] = dict.fromkeys(_touched_paths(patches))
    state.update(store.entries(tree, list(state)))
    for k, patch, bad, same in _walk_records(patches, state, lambda oid: True):
        if (
            bad
            or same
            or not _fully_recorded(patch)
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
        for pid, commit in zip(ids[::2], ids[1::2]):
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
    "CarryError",
    "exact_prefix",
    "PatchApplyError",
    "PatchResult",
    "apply_series",
    "carry_patch",
    "made_on",
    "postimage_mismatches",
    "preimage_mismatches",
    "upstream_commit",
]
