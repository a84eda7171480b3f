"""Byte-stable patch files (docs/design.md §6).

A patch is written as ``git format-patch`` mail with everything that varies
between runs removed: a zero commit id, no ``Date:``, no diffstat, no tool
version footer, full 40-hex ``index`` lines (so a 3-way merge can always find
the pre-image), renames detected, binary data included. ``git am`` and quilt
accept the result. Formatting the same change twice gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from overlay.errors import GitError
from overlay.git.store import Store

ZERO_FROM = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
DEFAULT_AUTHOR = "overlay <overlay@localhost>"


#: The options every patch diff is made with (full blob names, renames, binary data,
#: fixed prefixes and algorithm), so that the same trees always give the same bytes.
_DIFF_ARGS = (
    "-c",
    "diff.algorithm=myers",
    "diff-tree",
    "-r",
    "-p",
    "-M",
    "--full-index",
    "--binary",
    "--no-color",
    "--src-prefix=a/",
    "--dst-prefix=b/",
)


def tree_diff(
    store: Store, old_tree: str, new_tree: str, paths: Iterable[str] = ()
) -> bytes:
    """The git diff between two trees in the patch-file form.

    Args:
        store: git store holding both trees.
        old_tree, new_tree: tree SHAs.
        paths: limit to these paths (all when empty).
    Returns:
        ``diff --git`` text as bytes (empty when the trees are equal).
    """
    args = [*_DIFF_ARGS, old_tree, new_tree]
    paths = list(paths)
    if paths:
        args += ["--", *paths]
    return store.git(*args).stdout


def tree_diffs(store: Store, pairs: Sequence[tuple[str, str]]) -> list[bytes]:
    """:func:`tree_diff` of every ``(old_tree, new_tree)`` pair, from one git process.

    ``git diff-tree --stdin`` reads the pairs and writes, for each, the pair's own
    line (``<old> <new>``) and then its diff, with the same options and so the same
    bytes as one ``diff-tree`` per pair (a series of 1,000 patches: one process, not
    1,000). The output is cut at those echoed lines, looked for in order;
    no line of a diff can be one (diff lines start with a marker or a keyword; binary
    data lines hold no space).

    Args:
        store: git store holding every tree.
        pairs: tree SHA pairs (full 40 or 64 hex).
    Returns:
        One diff per pair, in order (empty where the trees are equal).
    """
    if not pairs:
        return []
    echoes = [f"{a} {b}\n".encode() for a, b in pairs]
    out = store.git(*_DIFF_ARGS, "--stdin", input=b"".join(echoes)).stdout
    if not out.startswith(echoes[0]):
        raise GitError("git diff-tree --stdin did not echo the first tree pair")
    starts = [0]
    for echo in echoes[1:]:
        at = out.find(b"\n" + echo, starts[-1] + len(echoes[len(starts) - 1]) - 1)
        if at < 0:
            raise GitError("git diff-tree --stdin did not echo every tree pair")
        starts.append(at + 1)
    ends = starts[1:] + [len(out)]
    return [
        out[start + len(echo) : end]
        for start, end, echo in zip(starts, ends, echoes, strict=True)
    ]


def format_patch(
    subject: str,
    description: str,
    trailers: Sequence[tuple[str, str]],
    diff: bytes,
    author: str = DEFAULT_AUTHOR,
) -> bytes:
    """Assemble a byte-stable patch file.

    Args:
        subject: one line, without ``[PATCH]`` (a leading ``[rocm]`` tag is kept).
        description: the body; may be empty.
        trailers: ``[("Local-Fix", "12"), ("Forwarded", "not-needed")]``.
        diff: output of :func:`tree_diff`.
        author: ``Name <email>`` for the ``From:`` header.
    Returns:
        The file's bytes, LF line endings, ending with the diff.
    """
    parts = [
        ZERO_FROM,
        f"From: {author}\n",
        f"Subject: [PATCH] {' '.join(subject.split())}\n",
        "\n",
    ]
    if description.strip():
        parts.append(description.strip("\n") + "\n\n")
    for key, value in trailers:
        parts.append(f"{key}: {value}\n")
    parts.append("---\n")
    return "".join(parts).encode("utf-8") + diff
