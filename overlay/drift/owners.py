"""Which backend file should define an undefined free function (``overlay drift``'s
"fork file to follow").

A new free function of ``mlx::core`` (or a namespace under it) is declared in a shared
header (``mlx/backend/gpu/slicing.h``) beside functions the backend already defines:
the file to follow is the backend source that defines the most of those siblings
(``mlx/backend/rocm/slicing.cpp``), not the one that happens to mention the namespace
most often. :func:`free_function_owner` makes that choice from the exported tree's
text; :mod:`overlay.drift` calls it for an undefined symbol whose qualifier is a
namespace.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from overlay.lazy import lazy_pattern

#: Words that start a statement, not a declaration: ``return f(x);`` declares nothing.
_STATEMENT_WORDS = frozenset(
    "return if else while for switch case throw delete new co_return do using typedef".split()
)
#: A declaration's head at the start of a line: type words, then ``name(``.
_DECL_HEAD = lazy_pattern(
    r"(?m)^[ \t]*(?P<types>(?:[\w:<>,*&]+[ \t]+)+)[*&]?(?:\w+::)*(?P<name>\w+)\s*\("
)
SOURCE_SUFFIXES = (".cpp", ".hip", ".cu", ".cc")


def _statement_end(text: str, open_paren: int) -> str | None:
    """After the parameter list that opens at ``open_paren``: ``;`` (a declaration),
    ``{`` (a definition), or ``None`` (unbalanced, or something else first)."""
    depth = 0
    for i in range(open_paren, len(text)):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and ch in ";{}":
            return ch if ch != "}" else None
        elif depth == 0 and ch == "=":
            return ";"  # ``= delete;``, ``= default;``: a declaration all the same
    return None


def _heads(text: str, end: str) -> set[str]:
    """Names of the functions whose head starts a line of ``text`` and whose statement
    ends with ``end`` (``;``: declared, ``{``: defined)."""
    found = set()
    for m in _DECL_HEAD.finditer(text):
        first = m.group("types").split()[0]
        if first in _STATEMENT_WORDS or m.group("name") in _STATEMENT_WORDS:
            continue
        if _statement_end(text, m.end() - 1) == end:
            found.add(m.group("name"))
    return found


def declared_functions(text: str) -> set[str]:
    """The function names a header declares (``void slice_gpu(...);``)."""
    return _heads(text, ";")


def defined_functions(text: str) -> set[str]:
    """The function names a source defines (``void slice_gpu(...) {``), qualified or not."""
    return _heads(text, "{")


def free_function_owner(
    name: str, headers: Mapping[str, str], sources: Mapping[str, str]
) -> str | None:
    """The backend source that should define the free function ``name``.

    The headers that declare ``name`` give its siblings (the other functions they
    declare); the source that defines the most siblings is the owner (ties: the first
    path in sorted order, so the answer is stable).

    Args:
        name: the function's unqualified name (``slice_update_gpu``).
        headers: ``{repository path: text}`` of the tree's headers.
        sources: ``{repository path: text}`` of the backend's sources.
    Returns:
        The owner's repository path, or ``None`` when no header declares ``name`` or no
        source defines any of its siblings.
    """
    siblings: set[str] = set()
    for text in headers.values():
        declared = declared_functions(text)
        if name in declared:
            siblings |= declared - {name}
    if not siblings:
        return None
    best, best_count = None, 0
    for path in sorted(sources):
        if not path.endswith(SOURCE_SUFFIXES):
            continue
        count = len(defined_functions(sources[path]) & siblings)
        if count > best_count:
            best, best_count = path, count
    return best


def is_namespace(name: str, texts: Mapping[str, str]) -> bool:
    """Whether some text opens ``namespace name`` (or ``namespace a::name``)."""
    pattern = re.compile(rf"\bnamespace\s+(?:\w+::)*{re.escape(name)}\b")
    return any(pattern.search(text) for text in texts.values())


__all__ = [
    "declared_functions",
    "defined_functions",
    "free_function_owner",
    "is_namespace",
]
