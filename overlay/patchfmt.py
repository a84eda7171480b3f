"""Byte-stable patch files (DESIGN 6).

A patch is written as ``git format-patch`` mail with everything that varies
between runs removed: a zero commit id, no ``Date:``, no diffstat, no tool
version footer, full 40-hex ``index`` lines (so a 3-way merge can always find
the pre-image), renames detected, binary data included. ``git am`` and quilt
accept the result. Formatting the same change twice gives the same bytes.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from overlay.gitstore import Store

ZERO_FROM = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
DEFAULT_AUTHOR = "overlay <overlay@localhost>"


def tree_diff(store: Store, old_tree: str, new_tree: str, paths: Iterable[str] = ()) -> bytes:
    """The git diff between two trees in the patch-file form.

    Args:
        store: git store holding both trees.
        old_tree, new_tree: tree SHAs.
        paths: limit to these paths (all when empty).
    Returns:
        ``diff --git`` text as bytes (empty when the trees are equal).
    """
    args = ["-c", "diff.algorithm=myers", "diff-tree", "-r", "-p", "-M", "--full-index", "--binary",
            "--no-color", "--src-prefix=a/", "--dst-prefix=b/", old_tree, new_tree]
    paths = list(paths)
    if paths:
        args += ["--", *paths]
    return store.git(*args).stdout


def format_patch(subject: str, description: str, trailers: Sequence[tuple[str, str]], diff: bytes,
                 author: str = DEFAULT_AUTHOR) -> bytes:
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
    parts = [ZERO_FROM, f"From: {author}\n", f"Subject: [PATCH] {' '.join(subject.split())}\n", "\n"]
    if description.strip():
        parts.append(description.strip("\n") + "\n\n")
    for key, value in trailers:
        parts.append(f"{key}: {value}\n")
    parts.append("---\n")
    return "".join(parts).encode("utf-8") + diff
