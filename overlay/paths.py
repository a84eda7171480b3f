"""Path safety and the carry globs.

Every path that comes from a git tree or a patch header is checked with
:func:`check_path` before it is written, compared or named: no absolute path,
no empty, ``.`` or ``..`` component, no ``.git`` component (in any case), no
backslash or NUL. Symlink entries are checked with :func:`check_symlink` so a
link cannot point out of the exported tree.

Globs (manifest ``[carry]``) use ``**`` for "any number of directories" and
``*``/``?`` within one path component, like ``.gitignore`` without negation.
"""

from __future__ import annotations

import functools
import posixpath
import re
from typing import Iterable

from overlay.errors import UnsafePath


def check_path(path: str, *, what: str = "path") -> str:
    """Validate a repository-relative path; return it unchanged.

    Args:
        path: slash-separated relative path from a tree or a patch header.
        what: how to name the path's origin in the error (``"tree entry"``...).
    Returns:
        ``path``.
    Raises:
        UnsafePath: absolute, empty component, ``.``/``..``, ``.git``, backslash
        or NUL (exit 2).
    """
    if not path or path.startswith("/") or "\0" in path or "\\" in path:
        raise UnsafePath(f"refusing {what} {path!r}: absolute, empty or not a plain relative path")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise UnsafePath(f"refusing {what} {path!r}: component {part!r} is not allowed")
        if part.rstrip(". ").casefold() == ".git":
            raise UnsafePath(f"refusing {what} {path!r}: a .git component is not allowed")
    return path


def check_symlink(path: str, target: str, links: dict[str, str] | None = None) -> None:
    """Refuse a symlink at ``path`` whose ``target`` leaves the tree.

    The target is resolved component by component; where a component is
    itself a symlink of the same tree (``links``), its target is followed, so
    a chain of individually harmless links cannot climb out either.

    Args:
        path: the link's repository-relative path (already checked).
        target: the link's content.
        links: every symlink of the tree, path -> target (optional).
    Raises:
        UnsafePath: the target is absolute, climbs above the tree root, enters
        ``.git``, or loops.
    """
    links = links or {}
    if target.startswith("/") or "\0" in target:
        raise UnsafePath(f"refusing symlink {path!r} -> {target!r}: absolute target")
    parts = [p for p in posixpath.dirname(path).split("/") if p]
    pending = [p for p in target.split("/") if p not in ("", ".")]
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if not parts:
                raise UnsafePath(f"refusing symlink {path!r} -> {target!r}: escapes the tree")
            parts.pop()
            continue
        if part.rstrip(". ").casefold() == ".git":
            raise UnsafePath(f"refusing symlink {path!r} -> {target!r}: points into .git")
        parts.append(part)
        here = "/".join(parts)
        if here in links:
            hops += 1
            if hops > 40:
                raise UnsafePath(f"refusing symlink {path!r} -> {target!r}: too many levels of links")
            inner = links[here]
            if inner.startswith("/"):
                raise UnsafePath(f"refusing symlink {path!r} -> {target!r}: resolves through {here!r} "
                                 "to an absolute path")
            parts.pop()
            pending = [p for p in inner.split("/") if p not in ("", ".")] + pending


@functools.lru_cache(maxsize=256)
def _glob_regex(glob: str) -> re.Pattern:
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def glob_match(path: str, glob: str) -> bool:
    """True when ``path`` matches ``glob`` (``**`` spans directories, ``*`` does not)."""
    return _glob_regex(glob).match(path) is not None


class Carry:
    """The carried-path filter: included by some include glob, excluded by none.

    Args:
        include: globs of fork paths carried onto the pin.
        exclude: globs removed again from what ``include`` matched.
    """

    def __init__(self, include: Iterable[str], exclude: Iterable[str] = ()):
        self.include = tuple(include)
        self.exclude = tuple(exclude)

    def __call__(self, path: str) -> bool:
        """True when ``path`` is carried."""
        return (any(glob_match(path, g) for g in self.include)
                and not any(glob_match(path, g) for g in self.exclude))
