"""The stepwise apply as one chain of copies.

A stepwise apply (rebase, refresh and attribution need the tree after every
patch) would otherwise start two git processes per patch. :func:`apply_chained` applies
the whole series with one ``git apply --cached``: the series is re-emitted
(:func:`chain_sections`) so that every patch's result lands at a path of its own
(``k/<path>`` for patch ``k``), each patch still meeting exactly the content the
patches before it left. The trees after each patch are then computed in Python
from the layer below (:mod:`overlay.git.treemodel`) and written in one go: six git
processes for any length of series.

Anything not exactly as recorded gives ``None``, and the caller
(:func:`overlay.engine.apply_series`) applies one patch at a time, which names
the patch, the file and the reason.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from overlay.digests import sha256
from overlay.engine.gitapply import applied_exactly, git_apply
from overlay.errors import PatchFormatError
from overlay.fs.atomic import scratch_dir
from overlay.git.store import Store, TreeEntry, is_sha, zsplit
from overlay.lazy import lazy_pattern
from overlay.records.series import FileChange, Patch, diff_pieces, split_patch

#: The blob of an empty file: what a deletion, re-emitted as a copy, must leave.
_EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
#: The modes a blob entry of the chain's index can have.
_MODES = frozenset({"100644", "100755", "120000"})
_NEEDS_QUOTE = lazy_pattern(rb'[\x00-\x20"\\\x7f-\xff]')

#: One file change of a patch and the path (``k/<path>``) its result is at.
Step = tuple[FileChange, str]
#: path -> ``(mode, blob)`` of every entry of the chain's index.
IndexEntries = dict[str, tuple[str, str]]


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


def chain_sections(
    patches: Sequence[Patch], initial: dict[str, TreeEntry | None]
) -> tuple[list[str], list[bytes], list[list[Step]]] | None:
    """The series re-emitted as patches of copies, for :func:`apply_chained`.

    Every path the series touches starts as ``0/<path>`` (the layer below); each
    file change of patch ``k`` becomes a copy from where that path's content is now
    (``j/<path>``, j the last patch that wrote it) to ``k/<path>`` carrying the same
    hunks, so git writes every patch's result as an entry of its own. A deletion is a
    copy that must come out empty; a creation is created at ``k/<path>``.

    The re-emitted patches are grouped into git's inputs. git reads the source of a
    copy from the index as it stood when the input began (``git apply`` takes the
    file changes of one input as changes of one tree, where a copy's source is the
    pre-image), and each input meets the index the inputs before it left. So patch
    ``k`` joins the current input unless it copies from a path a patch of that input
    wrote; then it begins the next. A series that touches many files needs a few
    inputs, not one file per patch.

    Args:
        patches: the series; initial: the layer below's entry at every touched path.
    Returns:
        ``(index lines for update-index, the text of each input in order, per patch
        [(change, the path its result is at)])``, or ``None`` when the series needs
        the one-patch-at-a-time path: a binary change, a gitlink, or a patch that
        names one path in two file changes. (A result the patch does not record in
        full is refused later, when the results are compared with the records.)
    """
    at, lines = _layer_below(initial)
    inputs: list[list[bytes]] = []
    plan: list[list[Step]] = []
    current: set[int] = set()  # the patches of the last input
    for k, patch in enumerate(patches, 1):
        pieces = _pieces(patch)
        section = None if pieces is None else _patch_section(k, patch, pieces, at)
        if section is None:
            return None
        text, steps, reads = section
        if not inputs or reads & current:
            inputs.append([])
            current = set()
        inputs[-1].append(text)
        current.add(k)
        plan.append(steps)
    return lines, [b"".join(texts) for texts in inputs], plan


def _layer_below(
    initial: dict[str, TreeEntry | None],
) -> tuple[dict[str, int], list[str]]:
    """Which touched paths start as files at ``0/<path>``: ``(path -> 0, their
    update-index lines)``; an absent path, a directory or a gitlink does not."""
    at: dict[str, int] = {}
    lines = []
    for path, entry in initial.items():
        if entry is not None and entry.kind == "blob" and entry.mode != "160000":
            at[path] = 0
            lines.append(f"{entry.mode} {entry.oid}\t0/{path}")
    return at, lines


def _chainable(patch: Patch) -> bool:
    """False when a file change of ``patch`` is binary, a gitlink, or names a path an
    earlier change of the same patch named (those go one patch at a time)."""
    seen: set[str] = set()
    for change in patch.changes:
        own = {p for p in (change.source, change.target) if p}
        if (
            own & seen
            or change.binary
            or "160000" in (change.old_mode, change.new_mode)
        ):
            return False
        seen |= own
    return True


def _pieces(patch: Patch) -> list[bytes] | None:
    """The diff text of each file change of ``patch``, in order, or ``None`` when the
    patch cannot be chained or its text does not split into one piece per change."""
    if not _chainable(patch):
        return None
    try:
        pieces = diff_pieces(split_patch(patch.data)[1])
    except PatchFormatError:
        return None
    return pieces if len(pieces) == len(patch.changes) else None


def _patch_section(
    k: int, patch: Patch, pieces: list[bytes], at: dict[str, int]
) -> tuple[bytes, list[Step], set[int]] | None:
    """Patch ``k`` re-emitted as copies onto ``k/<path>``, with ``at`` (path -> the
    patch that last wrote it) advanced past it: ``(its text, its steps, the patches
    whose results it copies from, 0 for the layer below)``; ``None`` when a change's
    source is no file there."""
    steps: list[Step] = []
    text = []
    reads: set[int] = set()
    for change, piece in zip(patch.changes, pieces, strict=True):
        cut = piece.find(b"\n@@")
        body = (
            b""
            if cut < 0
            else piece[cut + 1 :] + (b"" if piece.endswith(b"\n") else b"\n")
        )
        dst = f"{k}/{change.target or change.source}"
        if change.source is None:
            head = _creation_head(change, dst, body)
        else:
            if change.source not in at:
                return None
            reads.add(at[change.source])
            src = f"{at[change.source]}/{change.source}"
            head = _copy_head(change, src, dst, body)
            if change.target is None or change.rename:
                del at[change.source]
        if change.target:
            at[change.target] = k
        text.append(("\n".join(head) + "\n").encode("utf-8", "surrogateescape") + body)
        steps.append((change, dst))
    return b"".join(text), steps, reads


def _creation_head(change: FileChange, dst: str, body: bytes) -> list[str]:
    """The header lines of a created file, created at ``dst``."""
    head = [
        f"diff --git {_quote('a/' + dst)} {_quote('b/' + dst)}",
        f"new file mode {change.new_mode or '100644'}",
    ]
    if body:
        head += ["--- /dev/null", f"+++ {_quote('b/' + dst)}"]
    return head


def _copy_head(change: FileChange, src: str, dst: str, body: bytes) -> list[str]:
    """The header lines of a change re-emitted as a copy from ``src`` to ``dst``
    (with its mode change, when it has one)."""
    head = [f"diff --git {_quote('a/' + src)} {_quote('b/' + dst)}"]
    if (
        change.target
        and change.old_mode
        and change.new_mode
        and change.old_mode != change.new_mode
    ):
        head += [f"old mode {change.old_mode}", f"new mode {change.new_mode}"]
    head += [f"copy from {_quote(src)}", f"copy to {_quote(dst)}"]
    if body:
        head += [f"--- {_quote('a/' + src)}", f"+++ {_quote('b/' + dst)}"]
    return head


def apply_chained(
    store: Store,
    base_tree: str,
    patches: Sequence[Patch],
    initial: dict[str, TreeEntry | None],
    expected_after: Sequence[dict[str, TreeEntry | None]],
) -> list[str] | None:
    """The stepwise apply with a number of git processes that does not grow with the series.

    The series is applied by one ``git apply --cached`` as a chain of copies
    (:func:`chain_sections`): each patch meets exactly the content the patches
    before it left at its paths, as in a one-at-a-time apply, and every patch's
    result stays in the index. One ``ls-files`` reads them all; each must be the
    post-image the patch records. The tree after each patch is then computed from
    the layer below (:mod:`overlay.git.treemodel`: in a run the directories it edits are
    read by the store's reader, else one ``ls-tree`` lists the tree) and written in one
    go (:func:`overlay.git.loose.write_typed`: loose files, or one ``index-pack`` for
    many): at most six git processes for any length of series, where
    the one-at-a-time path starts two per patch.

    Args:
        store: git store; base_tree: the layer below.
        patches: the series (its records already checked by
            :func:`overlay.engine.records.walk_records`).
        initial: the layer below's entry at every touched path.
        expected_after: the recorded state after each patch.
    Returns:
        The tree after each patch, or ``None`` when anything is not exactly as recorded
        (git fails, skips, places a hunk at an offset, or produces another blob) or
        the series cannot be chained: the caller then applies one patch at a time,
        which names the patch, the file and the reason.
    """
    if len(base_tree) != 40:
        return None  # the tree model hashes SHA-1 objects only
    chain = chain_sections(patches, initial)
    if chain is None:
        return None
    lines, inputs, plan = chain
    index = _run_chain(store, lines, inputs)
    if index is None or not _as_recorded(plan, expected_after, index):
        return None
    return _write_trees(store, base_tree, plan, index)


#: The store's directory of proven applies (:func:`_run_chain`).
APPLIES = "overlay-applies"
#: Bump when the git input of a chain (lines, inputs, the flags of
#: :func:`overlay.engine.gitapply.git_apply`) changes meaning, so older proofs are not
#: read.
APPLIES_VERSION = 1


def chain_key(lines: Sequence[str], inputs: Sequence[bytes]) -> str:
    """The key of a chain's proof: SHA-256 of everything git is given (the index lines,
    each input's bytes with its length, the version of the flags)."""
    h = sha256(
        b"overlay apply-chain %d\0" % APPLIES_VERSION,
        size=sum(len(text) for text in inputs),
    )
    for line in lines:
        h.update(line.encode("utf-8", "surrogateescape") + b"\0")
    for text in inputs:
        h.update(b"\0%d\0" % len(text) + text)
    return h.hexdigest()


def _recalled(store: Store, key: str) -> IndexEntries | None:
    """The index a chain with this key left when git last applied it, or ``None`` (never
    run, a record of another shape, or a blob it names is gone from the store)."""
    record = store.cache_read(APPLIES, key)
    rows = record.get("index") if record else None
    if not isinstance(rows, list):
        return None
    index: IndexEntries = {}
    for row in rows:
        if not (
            isinstance(row, list)
            and len(row) == 3
            and all(isinstance(x, str) for x in row)
            and row[1] in _MODES
            and is_sha(row[2])
        ):
            return None
        index[row[0]] = (row[1], row[2])
    if store.missing_objects(sorted({oid for _mode, oid in index.values()})):
        return None
    return index


def _run_chain(
    store: Store, lines: list[str], inputs: list[bytes]
) -> IndexEntries | None:
    """The entries git's apply of the chain leaves, or ``None`` when git fails, skips a
    file or places a hunk at an offset.

    ``git apply`` is a function of its input: the same index lines and inputs give the
    same entries. So a chain git applied once is kept in the store, keyed on that whole
    input (:func:`chain_key`), and read back instead of applied again (a pin bump that
    leaves the patched files alone meets the very chain the verify before it applied).
    What is read back is then checked against the records exactly as git's
    output is. A failure is not kept: git says again what is wrong.
    """
    key = chain_key(lines, inputs)
    index = _recalled(store, key)
    if index is None:
        index = _apply(store, lines, inputs)
        if index is not None:
            store.cache_write(
                APPLIES, key, {"index": [[p, *e] for p, e in sorted(index.items())]}
            )
    return index


def _apply(store: Store, lines: list[str], inputs: list[bytes]) -> IndexEntries | None:
    """Apply the chain on a scratch index (see :func:`_run_chain`)."""
    # A scratch index, swept after a kill as every other.
    with scratch_dir("idx") as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        if lines:
            store.git(
                "update-index",
                "-z",
                "--index-info",
                env=env,
                input=("\0".join(lines) + "\0").encode("utf-8", "surrogateescape"),
            )
        # One file per input (chain_sections says which patches share one).
        names = []
        for k, text in enumerate(inputs, 1):
            names.append(os.path.join(tmp, f"{k}.patch"))
            with open(names[-1], "wb") as fh:
                fh.write(text)
        if not applied_exactly(git_apply(store, env, names)):
            return None
        index: IndexEntries = {}
        for rec in zsplit(store.git("ls-files", "-s", "-z", env=env).stdout):
            meta, path = rec.split("\t", 1)
            mode, oid, _stage = meta.split()
            index[path] = (mode, oid)
        return index


def _as_recorded(
    plan: list[list[Step]],
    expected_after: Sequence[dict[str, TreeEntry | None]],
    index: IndexEntries,
) -> bool:
    """True when every patch's result in ``index`` is the post-image it records (a
    deletion: the empty blob, its hunks removed the whole file)."""
    for steps, expected in zip(plan, expected_after, strict=True):
        for change, at in steps:
            got = index.get(at)
            if got is None:
                return False
            if change.target is None:
                if got[1] != _EMPTY_BLOB:
                    return False  # the deletion's hunks do not remove the whole file
                continue
            want = expected.get(change.target)
            if want is None or want.oid != got[1] or want.mode != got[0]:
                return False
    return True


def _write_trees(
    store: Store, base_tree: str, plan: list[list[Step]], index: IndexEntries
) -> list[str] | None:
    """The tree after each patch, computed from ``base_tree`` and written to the store
    in one go; ``None`` when a file would stand where a directory is (or the reverse):
    git says that best, one patch at a time."""
    # Here, not at the top: only a stepwise apply needs the tree model.
    from overlay.git.treemodel import (
        TreeConflict,
        remember_trees,
        tree_model,
        write_objects,
    )

    model = tree_model(store, base_tree)
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
        return None
    write_objects(store, model.objects)
    remember_trees(store, model.objects)
    return trees
