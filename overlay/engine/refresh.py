"""Refresh: re-export each patch of the series byte-stable from the layers (docs/design.md §6).

A refresh owns only these bytes of a patch file: the diff (from the first
``diff --git`` line on, regenerated from the tree before and after the patch,
with full ``index`` lines and no signature footer), the mbox ``From <sha>``
line (zeroed), the ``Date:`` header (dropped) and a diffstat after the ``---``
line (dropped). Every other byte (headers, the message, notes between ``---``
and the diff, any encoding) is kept exactly (shared case 16).
A patch that applies on its recorded pre-image refreshes to the same bytes.
Only patches whose bytes change are rewritten.

A refresh never turns a text diff into a binary one: git takes a file
holding a NUL byte for binary, so one NUL in an added line would have the
patch, and the next one touching that file, rewritten as ``GIT binary patch``
deltas nobody can review. :func:`binary_turns` names each such file (the patch,
the path, the line); ``overlay refresh`` then writes nothing and ``overlay
verify`` reports SER015.
"""

from collections.abc import Collection, Iterable, Sequence
from typing import NamedTuple

from overlay.engine.layers import Layers
from overlay.errors import LayerError, OverlayError
from overlay.fs.atomic import kill_point
from overlay.git.store import Store
from overlay.lazy import lazy_pattern
from overlay.records.patchfmt import ZERO_FROM, tree_diff, tree_diffs
from overlay.records.series import (
    Patch,
    is_patch_break,
    parse_patch,
    rewrite_patch,
    split_patch,
)

_MBOX_FROM = lazy_pattern(rb"^From [0-9a-f]{40} ")
_DIFFSTAT = lazy_pattern(
    rb"^ (?:.+ \| +(?:\d+ ?[-+]*|Bin .*)|\d+ files? changed.*|(?:create|delete) mode \d+ .*"
    rb"|rename .* \(\d+%\)|mode change .*|copy .* \(\d+%\))\r?$"
)


def refreshed_bytes(data: bytes, diff: bytes) -> bytes:
    """A patch file with its diff replaced by ``diff`` and every byte it does not own kept.

    Args:
        data: the patch file's bytes as they are.
        diff: the new diff (:func:`overlay.records.patchfmt.tree_diff` output).
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
        if i < end and (
            ln.lower().startswith(b"date:") or (skipping and ln[:1] in (b" ", b"\t"))
        ):
            skipping = True
            continue
        skipping = False
        out.append(ln)
    brk = next((i for i, ln in enumerate(out) if is_patch_break(ln)), None)
    if brk is None:
        out.append(b"---")
    else:
        rest = out[brk + 1 :]
        j = 0
        while j < len(rest) and _DIFFSTAT.match(rest[j]):
            j += 1
        if j and j < len(rest) and not rest[j].strip():
            j += 1  # the blank line format-patch writes after a diffstat
        out = out[: brk + 1] + rest[j:]
    return b"\n".join(out) + b"\n" + diff


class BinaryTurn(NamedTuple):
    """A file whose text diff a refresh would write as a binary patch.

    Attributes:
        patch: the patch file's name (as listed in ``series``).
        path: the repository path of the file.
        line: the patch file's line at fault: the first hunk line holding a NUL
            byte when this patch has one for the file, else the file's ``diff --git`` line.
        nul_here: the NUL byte is in this patch's own lines; ``False`` when the
            file holds one that an earlier patch (or the layer below) put there.
    """

    patch: str
    path: str
    line: int | None
    nul_here: bool

    def message(self) -> str:
        """What is wrong, in one line."""
        if self.nul_here:
            return (
                f"{self.path}: a line of its text diff holds a NUL byte; git takes the "
                "file for binary, so a refresh would rewrite the diff as "
                "`GIT binary patch`"
            )
        return (
            f"{self.path}: refreshing would turn its text diff into `GIT binary patch` "
            "(the file holds a NUL byte before this patch)"
        )


def nul_turns(patch: Patch) -> list[BinaryTurn]:
    """The files of ``patch`` whose text hunks hold a NUL byte (no refresh needed to know).

    Args:
        patch: a parsed patch (not ``header_only``).
    Returns:
        One :class:`BinaryTurn` per such file, in the patch's order.
    """
    return [
        BinaryTurn(patch.name, c.path, c.nul_line, True)
        for c in patch.changes
        if c.nul_line is not None and not c.binary
    ]


def binary_turns(patch: Patch, new_data: bytes) -> list[BinaryTurn]:
    """The files that ``patch`` holds as a text diff and ``new_data`` (its refresh)
    holds as a binary one, and the files whose text hunks hold a NUL byte.

    Args:
        patch: the patch as read.
        new_data: its refreshed bytes.
    Returns:
        One :class:`BinaryTurn` per file, in the patch's order.
    """
    turns = {t.path: t for t in nul_turns(patch)}
    if new_data != patch.data:
        try:
            new = parse_patch(new_data, patch.name)
        except (OverlayError, ValueError, RecursionError):
            new = None
        text = {c.path: c for c in patch.changes if not c.binary}
        for change in new.changes if new is not None else ():
            old = text.get(change.path)
            if change.binary and old is not None and change.path not in turns:
                turns[change.path] = BinaryTurn(
                    patch.name,
                    change.path,
                    old.nul_line or old.line,
                    old.nul_line is not None,
                )
    order = {c.path: i for i, c in enumerate(patch.changes)}
    return sorted(turns.values(), key=lambda t: order.get(t.path, len(order)))


class Refreshed(NamedTuple):
    """One patch's refresh.

    Attributes:
        patch: the patch as read.
        data: its refreshed bytes.
        note: what the refresh had to decide, in words (``""``: nothing), e.g. that
            the text was re-rendered from the recorded blobs it disagreed with.
    """

    patch: Patch
    data: bytes
    note: str = ""

    @property
    def changed(self) -> bool:
        """True when refreshing would change at least one byte."""
        return self.data != self.patch.data

    @property
    def reason(self) -> str:
        """Why the bytes change, in words: :attr:`note` when the refresh decided
        something, else what :func:`rewrite_reasons` finds (``""``: unchanged)."""
        if self.note or not self.changed:
            return self.note
        return ", ".join(rewrite_reasons(self.patch.data, self.data))

    @property
    def turns(self) -> list[BinaryTurn]:
        """Files this refresh would turn from a text diff into a binary one (see
        :func:`binary_turns`)."""
        return binary_turns(self.patch, self.data)


_FULL_INDEX = lazy_pattern(rb"^index ([0-9a-f]+)\.\.([0-9a-f]+)")


def rewrite_reasons(old: bytes, new: bytes) -> list[str]:
    """What a refresh changes in a patch file, in words, one per kind of line it
    rewrote (the bytes a refresh owns, see the module doc), in file order.

    Args:
        old: the patch file as read.
        new: its refreshed bytes.
    Returns:
        E.g. ``["index lines made full-length", "hunk line numbers"]``; empty when
        the bytes are equal.
    """
    import difflib  # only for a patch a refresh changes: `refresh --check` of a clean series never

    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    found: dict[str, None] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
        None, a, b, autojunk=False
    ).get_opcodes():
        if tag == "equal":
            continue
        for line in a[i1:i2] or b[j1:j2]:
            found.setdefault(_line_kind(line, b[j1:j2] if tag == "replace" else []))
    return list(found)


def _line_kind(line: bytes, replacements: list[bytes]) -> str:
    """The kind of one rewritten line (see :func:`rewrite_reasons`)."""
    if line.startswith(b"index "):
        short = _FULL_INDEX.match(line)
        longer = any(
            (full := _FULL_INDEX.match(r))
            and short
            and full[1].startswith(short[1])
            and full[2].startswith(short[2])
            and len(full[1]) > len(short[1])
            for r in replacements
        )
        return "index lines made full-length" if longer else "index lines"
    if line.startswith(b"From "):
        return "mbox From line zeroed"
    if line.startswith(b"Date: "):
        return "Date header dropped"
    if line.startswith(b"@@"):
        return "hunk line numbers"
    if _DIFFSTAT.match(line):
        return "diffstat dropped"
    if line.startswith(b"-- ") or line.rstrip() == b"--":
        return "signature footer dropped"
    return "diff lines regenerated"


def refresh_series(
    store: Store, layers: Layers, accept_text: Collection[str] | None = None
) -> list[Refreshed]:
    """The refreshed bytes of every patch.

    Args:
        store: git store.
        layers: layers computed with ``stepwise=True`` (each patch's tree recorded).
        accept_text: the names of unverified patches (a recorded blob the store lacks,
            SER017) whose text the user takes as the truth; ``None``: no refusal
            (``verify``'s comparison, which writes nothing).
    Returns:
        One :class:`Refreshed` per patch, in series order.
    Raises:
        ValueError: ``layers`` was computed without ``stepwise``.
        LayerError: an unverified patch not in ``accept_text``: its text alone would
            be written as its record (docs/engine.md, the truth model).
    """
    trees = [result.tree for result in layers.patches if result.tree is not None]
    if len(trees) != len(layers.patches):
        raise ValueError("refresh needs layers computed with stepwise=True")
    if accept_text is not None:
        refuse_unverified(
            [r.patch for r in layers.patches if r.state == "unverified"], accept_text
        )
    # Every patch's diff from one `git diff-tree --stdin`: a process per patch would
    # be most of a warm verify of a long series.
    olds = [layers.forked, *trees][: len(trees)]  # each patch's tree below it
    pairs = list(zip(olds, trees, strict=True))
    diffs = tree_diffs(store, pairs)  # one diff per pair
    return [
        Refreshed(result.patch, refreshed_bytes(result.patch.data, diff))
        for result, diff in zip(layers.patches, diffs, strict=True)
    ]


def refuse_unverified(
    unverified: Sequence[Patch], accept_text: Collection[str]
) -> None:
    """Refuse to rewrite an unverified patch (a recorded blob cannot be found) on the
    strength of its text alone, unless its name is in ``accept_text``.

    Raises:
        LayerError: naming the first such patch and ``--accept-text`` (exit 1).
    """
    for patch in unverified:
        if patch.name not in accept_text:
            raise LayerError(
                f"patch {patch.name} is unverifiable: a blob its `index` lines record is "
                "not in the git store (`overlay verify` names it, SER017), so its text "
                "cannot be checked against its record; nothing was written",
                hint=f"`overlay refresh --accept-text {patch.name}` takes its text as the "
                "truth; or restore the patch from version control",
            )


def carry_series(
    store: Store,
    forked: str,
    patches: Sequence[Patch],
    accept_text: Collection[str] = (),
) -> list[Refreshed]:
    """Refresh a series whose patches no longer sit on their recorded pre-images.

    Each patch is carried onto the tree the patches before it produced
    (:func:`overlay.engine.carry_patch`: exactly where its pre-images are there,
    else a cherry-pick by merge-ort from its recorded pre-image blobs), and its
    diff regenerated against that tree.

    Args:
        store: git store.
        forked: the ``forked`` tree.
        patches: the series.
        accept_text: names of patches whose text the user takes as the truth where
            their records cannot be checked: applied at their stated lines.
    Returns:
        One :class:`Refreshed` per patch.
    Raises:
        LayerError: a patch conflicts with the layer below (the message names its
            paths and git's conflict types; `overlay rebase` is where conflicts are
            resolved), or it would become empty (already there: it is never
            deleted by a refresh), or its pre-image blobs are not in the store.
    """
    # the engine's carry: only for a series that no longer sits on its records
    from overlay.engine.apply import carry_patch

    out = []
    tree = forked
    for patch in patches:
        if patch.name in accept_text:
            new_tree = _text_or_carry(store, patch, tree)
            out.append(
                Refreshed(
                    patch,
                    refreshed_bytes(patch.data, tree_diff(store, tree, new_tree)),
                    "its text taken as the truth (--accept-text)",
                )
            )
            tree = new_tree
            continue
        carried = carry_patch(store, patch, tree)
        if carried.status == "conflict":
            assert carried.merge is not None
            what = "; ".join(
                f"{p} ({', '.join(carried.merge.conflict_types(p)) or 'CONFLICT'})"
                for p in sorted(carried.merge.stages)
            )
            raise LayerError(
                f"patch {patch.name} conflicts with the layer below: {what}",
                hint="edit the patch by hand, or carry the series with `overlay rebase` "
                "(which stops with work files to resolve)",
            )
        if carried.status == "upstream":
            raise LayerError(
                f"patch {patch.name} changes nothing on the layer below: its change is "
                "already there",
                hint="remove it from patches-rocm/series yourself if that is right; "
                "refresh never deletes a patch",
            )
        note = (
            "re-rendered from its recorded blobs (its text did not produce them)"
            if carried.text_disagrees
            else ""
        )
        out.append(
            Refreshed(
                patch,
                refreshed_bytes(patch.data, tree_diff(store, tree, carried.tree)),
                note,
            )
        )
        tree = carried.tree
    return out


def _text_or_carry(store: Store, patch: Patch, tree: str) -> str:
    """The tree after ``patch``, whose text the user accepted: its text applied at its
    stated lines where it applies there, else carried by merge-ort from the tree its
    text gives on its recorded pre-images (``made_on(accept_text=True)``).

    Raises:
        LayerError: neither can run, or the carry conflicts.
    """
    # the engine's apply and carry: only for a patch whose text the user accepted
    from overlay.engine.apply import apply_text, carry_patch

    try:
        return apply_text(store, tree, patch)
    except LayerError:
        carried = carry_patch(store, patch, tree, accept_text=True)
    if carried.status != "merged":
        raise LayerError(
            f"patch {patch.name}: its text does not apply on the layer below "
            f"({carried.status})",
            hint="carry the series with `overlay rebase`, or edit the patch by hand",
        )
    return carried.tree


def write_refreshed(
    refreshed: Iterable[Refreshed], names: Iterable[str] = ()
) -> list[str]:
    """Rewrite the patches whose bytes changed (temp + rename each).

    Args:
        refreshed: output of :func:`refresh_series`.
        names: limit to these patch names (all when empty).
    Returns:
        Names of the files rewritten.
    Raises:
        OverlayError: a refresh would turn a text diff into a binary one
            (:func:`binary_turns`); nothing is written (exit 1).
    """
    items = list(refreshed)
    turns = [t for item in items for t in item.turns]
    if turns:
        # The whole series or nothing: the next patch touching the file would turn too.
        raise OverlayError(
            f"refresh refused: {len(turns)} text diff(s) would become `GIT binary patch`; "
            "nothing was written",
            exit_code=1,
        )
    wanted = set(names)
    written = []
    for item in items:
        if wanted and item.patch.name not in wanted:
            continue
        if item.changed:
            rewrite_patch(
                item.patch, item.data, before_replace=lambda: kill_point("refresh")
            )
            written.append(item.patch.name)
    return written
