"""Path safety and the carry globs.

Every path that comes from a git tree or a patch header is checked with
:func:`check_path` before it is written, compared or named: no absolute path,
no empty, ``.`` or ``..`` component, no ``.git`` component (in any case), no
backslash or NUL. Symlink entries are checked with :func:`check_symlink` so a
link cannot point out of the exported tree.

Globs (manifest ``[carry]``) use ``**`` for "any number of directories" and
``*``/``?`` within one path component, like ``.gitignore`` without negation; a
run of three or more ``*`` means ``**``. Matching never backtracks
catastrophically (see :func:`glob_match`).
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable

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
        raise UnsafePath(
            f"refusing {what} {path!r}: absolute, empty or not a plain relative path"
        )
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise UnsafePath(
                f"refusing {what} {path!r}: component {part!r} is not allowed"
            )
        if part.rstrip(". ").casefold() == ".git":
            raise UnsafePath(
                f"refusing {what} {path!r}: a .git component is not allowed"
            )
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
                raise UnsafePath(
                    f"refusing symlink {path!r} -> {target!r}: escapes the tree"
                )
            parts.pop()
            continue
        if part.rstrip(". ").casefold() == ".git":
            raise UnsafePath(
                f"refusing symlink {path!r} -> {target!r}: points into .git"
            )
        parts.append(part)
        here = "/".join(parts)
        if here in links:
            hops += 1
            if hops > 40:
                raise UnsafePath(
                    f"refusing symlink {path!r} -> {target!r}: too many levels of links"
                )
            inner = links[here]
            if inner.startswith("/"):
                raise UnsafePath(
                    f"refusing symlink {path!r} -> {target!r}: resolves through {here!r} "
                    "to an absolute path"
                )
            parts.pop()
            pending = [p for p in inner.split("/") if p not in ("", ".")] + pending


def unsafe_links(links: dict[str, str]) -> dict[str, UnsafePath]:
    """Every symlink of a tree that :func:`check_symlink` refuses.

    The one check of a tree's links: ``overlay export`` refuses a tree with any
    (it would write a link out of DEST), ``overlay verify`` reports a patch that
    adds or changes one (SER016).

    Args:
        links: every symlink of the tree, path -> target.
    Returns:
        ``{path: UnsafePath}`` for each refused link, in path order.
    """
    out = {}
    for path in sorted(links):
        try:
            check_symlink(path, links[path], links)
        except UnsafePath as exc:
            out[path] = exc
    return out


#: Globs with at most this many wildcards (``*``, ``**``, ``**/``) are matched by a
#: regular expression; Python's backtracking engine takes time polynomial in the
#: path length with the wildcard count as the exponent, so two keeps the worst
#: case (a 4,096-byte path) near a second. Globs with more use :class:`_GlobNFA`,
#: linear in path length times glob length. Real carry globs have one or two.
_REGEX_MAX_WILDCARDS = 2

_LIT, _ANY, _STAR, _DSTAR, _DSS, _DSS_IN = range(6)


def collapse_stars(glob: str) -> str:
    """``glob`` with every run of two or more ``*`` written as ``**``.

    A run of ``*`` longer than two matches exactly what ``**`` matches
    (``**`` already spans directories); collapsing it removes the nested
    ``.*.*.*`` that made a 20-star glob backtrack for hours.
    """
    return re.sub(r"\*{3,}", "**", glob)


def _tokens(glob: str) -> list[tuple[int, str]]:
    """A glob as ``(kind, literal char)`` tokens, runs of stars collapsed first."""
    glob = collapse_stars(glob)
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append((_DSS, ""))
            i += 3
        elif glob.startswith("**", i):
            out.append((_DSTAR, ""))
            i += 2
        elif glob[i] == "*":
            out.append((_STAR, ""))
            i += 1
        elif glob[i] == "?":
            out.append((_ANY, ""))
            i += 1
        else:
            out.append((_LIT, glob[i]))
            i += 1
    return out


class _GlobNFA:
    """A glob as a small NFA, simulated state-set by state-set: no backtracking.

    States follow the tokens; ``**/`` (``(?:.*/)?``) takes two: one that may be
    skipped, one inside ``.*`` waiting for the ``/``.
    """

    def __init__(self, tokens: list[tuple[int, str]]):
        self.kinds: list[int] = []
        self.chars: list[str] = []
        self.nexts: list[int] = []
        for kind, char in tokens:
            if kind == _DSS:
                after = len(self.kinds) + 2
                self.kinds += [_DSS, _DSS_IN]
                self.chars += ["", ""]
                self.nexts += [after, after]
            else:
                self.kinds.append(kind)
                self.chars.append(char)
                self.nexts.append(len(self.kinds))
        self.accept = len(self.kinds)

    def _closure(self, states: set[int]) -> set[int]:
        """``states`` plus every state a wildcard may skip to without reading a char."""
        todo = list(states)
        while todo:
            s = todo.pop()
            if s < self.accept and self.kinds[s] in (_STAR, _DSTAR, _DSS):
                n = self.nexts[s]
                if n not in states:
                    states.add(n)
                    todo.append(n)
        return states

    def match(self, path: str) -> bool:
        """True when the whole ``path`` matches the glob."""
        current = self._closure({0})
        for c in path:
            new: set[int] = set()
            for s in current:
                if s == self.accept:
                    continue
                kind = self.kinds[s]
                if kind == _LIT:
                    if c == self.chars[s]:
                        new.add(s + 1)
                elif kind == _ANY:
                    if c != "/":
                        new.add(s + 1)
                elif kind == _STAR:
                    if c != "/":
                        new.add(s)
                elif kind == _DSTAR:
                    new.add(s)
                else:  # _DSS or _DSS_IN: inside ".*/", a "/" may end the group
                    new.add(s if kind == _DSS_IN else s + 1)
                    if c == "/":
                        new.add(self.nexts[s])
            if not new:
                return False
            current = self._closure(new)
        return self.accept in current


@functools.lru_cache(maxsize=256)
def _glob_matcher(glob: str):
    """A matcher for ``glob``: a regex, or the NFA when it has many wildcards."""
    tokens = _tokens(glob)
    if (
        sum(1 for kind, _c in tokens if kind in (_STAR, _DSTAR, _DSS))
        > _REGEX_MAX_WILDCARDS
    ):
        return _GlobNFA(tokens).match
    out = []
    for kind, char in tokens:
        out.append(
            {_DSS: "(?:.*/)?", _DSTAR: ".*", _STAR: "[^/]*", _ANY: "[^/]"}.get(kind)
            or re.escape(char)
        )
    regex = re.compile("".join(out) + r"\Z", re.S)
    return lambda path: regex.match(path) is not None


def glob_match(path: str, glob: str) -> bool:
    """True when ``path`` matches ``glob`` (``**`` spans directories, ``*`` does not).

    A run of three or more ``*`` is ``**`` (:func:`collapse_stars`). Time is
    bounded whatever the glob: see :data:`_REGEX_MAX_WILDCARDS`.
    """
    return _glob_matcher(glob)(path)


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
        return any(glob_match(path, g) for g in self.include) and not any(
            glob_match(path, g) for g in self.exclude
        )
