"""Which upstream commits changed the declaration a compile error is about (``drift``).

A message naming a member (``no declaration matches``, Clang's ``out-of-line
definition ... does not match any declaration``, ``no matching function for call
to``, ``has no member named``, ``no member named ... in``, ``is not a member of``)
is about that member's declaration: :func:`member_reference` reads the member (and
its class) from the message, :func:`declaring_headers` finds the headers that
declare it in a commit (``git grep``), :func:`declaration_spans` the declaration's
lines in one header, and :func:`declaration_commits` the commits of a pin range
that changed those lines (``git log -L``) or the lines naming the member
(``git log -G``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from overlay.build.diagnostics import Diagnostic
from overlay.git.store import Store
from overlay.lazy import lazy_pattern

HEADER_GLOBS = ("*.h", "*.hpp", "*.hh", "*.cuh")
_IDENT = lazy_pattern(r"[A-Za-z_][A-Za-z0-9_]*")
_Q = "[`'\u2018]"  # an opening quote (GCC uses \u2018...\u2019 in UTF-8 locales)
_UNQ = "[`'\u2019]"  # a closing quote
_NQ = "[^`'\u2018\u2019]"
_CLS = rf"{_Q}(?:class |struct |union )?(?P<cls>{_NQ}+){_UNQ}"  # a quoted class name
#: Messages about a member and its declaration: ``sig`` is a signature to split
#: (``bool ns::Cls::member(args)``), else ``member`` and ``cls`` are named.
_MEMBER_MESSAGES = [
    re.compile(p)
    for p in (
        rf"no declaration matches {_Q}(?P<sig>.+){_UNQ}\s*$",
        rf"out-of-line definition of {_Q}(?P<member>\w+){_UNQ} does not match any "
        rf"declaration in {_CLS}",
        rf"no matching (?:member )?function for call to {_Q}(?P<sig>.+){_UNQ}\s*$",
        rf"{_CLS} has no member named {_Q}(?P<member>\w+){_UNQ}",
        rf"no (?:template )?member named {_Q}(?P<member>\w+){_UNQ} in (?:namespace )?{_CLS}",
        rf"{_Q}(?P<member>\w+){_UNQ} is not a member of {_CLS}",
    )
]
#: More headers than this declaring one member name (``eval_gpu``, ``size``) say nothing
#: about which declaration the error is about: fall back to the identifier search.
MAX_DECL_HEADERS = 12


def commits_naming(
    store: Store,
    old: str,
    new: str,
    ident: str,
    headers: bool,
    paths: Sequence[str] = (),
) -> list[tuple[str, str]]:
    """``(sha, subject)`` of the commits of ``old..new`` whose changed lines name
    ``ident`` (``git log -G '\\bident\\b'``), newest first.

    Args:
        ident: the name; headers: only changes to header files (:data:`HEADER_GLOBS`);
        paths: only changes to these paths (over ``headers``).
    """
    args = ["log", "--format=%H%x00%s", "-G", rf"\b{ident}\b", f"{old}..{new}"]
    if paths:
        args += ["--", *paths]
    elif headers:
        args += ["--", *HEADER_GLOBS]
    out = store.git(*args, check=False).stdout.decode("utf-8", "replace")
    pairs = (line.split("\0", 1) for line in out.splitlines() if "\0" in line)
    return [(sha, subject) for sha, subject in pairs]


def _strip_templates(text: str) -> str:
    """``text`` without its template argument lists (nested ``<...>`` removed)."""
    while True:
        stripped = re.sub(r"<[^<>]*>", "", text)
        if stripped == text:
            return text
        text = stripped


def member_reference(diag: Diagnostic) -> tuple[str, str | None] | None:
    """The member a compile error is about, and its class or namespace.

    Args:
        diag: a compile error (``kind == "error"``); only its message is read (the
            notes list candidates, not the member the code names).
    Returns:
        ``(member, innermost class or namespace name or None)`` for the messages of
        :data:`_MEMBER_MESSAGES` (``no declaration matches 'bool
        ns::Cls::f(int)'`` gives ``("f", "Cls")``; a constructor ``Cls::Cls(...)``
        gives ``("Cls", "Cls")``), else ``None``.
    """
    if diag.kind != "error":
        return None
    for pattern in _MEMBER_MESSAGES:
        m = pattern.search(diag.message)
        if not m:
            continue
        groups = m.groupdict()
        if groups.get("sig"):
            head = _strip_templates(groups["sig"]).split("(", 1)[0].strip()
            parts = [p for p in head.split()[-1].split("::") if p] if head else []
            if not parts or not _IDENT.fullmatch(parts[-1]):
                return None  # an operator, a lambda: no name to look up
            return parts[-1], (
                parts[-2] if len(parts) > 1 and _IDENT.fullmatch(parts[-2]) else None
            )
        cls = _strip_templates(groups["cls"]).split("::")[-1].strip()
        return groups["member"], (cls if _IDENT.fullmatch(cls) else None)
    return None


def _grep_paths(
    store: Store, commit: str, args: Sequence[str], paths: Sequence[str]
) -> list[str]:
    """Paths of ``commit`` (limited to ``paths`` or the header globs) where
    ``git grep ARGS`` matches."""
    proc = store.git(
        "grep", "-l", *args, commit, "--", *(paths or HEADER_GLOBS), check=False
    )
    prefix = f"{commit}:"
    out = (
        proc.stdout.decode("utf-8", "replace").splitlines()
        if proc.returncode == 0
        else []
    )
    return [line[len(prefix) :] if line.startswith(prefix) else line for line in out]


def declaring_headers(
    store: Store, commit: str, member: str, cls: str | None
) -> list[str]:
    """The headers of ``commit`` that declare ``member`` (of ``cls`` when given).

    A header counts when it names ``member`` as a word and, with ``cls``, also opens
    ``class``/``struct``/``namespace cls``; without ``cls``, when the member is
    followed by ``(`` there (a function declaration).

    Args:
        store: git store; commit: a pin (SHA); member: the name; cls: its class or
            namespace, or ``None``.
    Returns:
        Repository paths, sorted; empty when none or more than :data:`MAX_DECL_HEADERS`.
    """
    named = _grep_paths(store, commit, ["-w", "-F", "-e", member], ())
    if not named:
        return []
    if cls:
        found = _grep_paths(
            store,
            commit,
            [
                "-E",
                "-e",
                rf"(class|struct|union|namespace)[[:space:]]+{cls}"
                r"([^[:alnum:]_]|$)",
            ],
            named,
        )
    else:
        found = _grep_paths(
            store,
            commit,
            ["-E", "-e", rf"(^|[^[:alnum:]_]){member}[[:space:]]*\("],
            named,
        )
    return sorted(found) if len(found) <= MAX_DECL_HEADERS else []


def _block_end(text: str, start: int) -> int:
    """The offset just past the brace block whose ``{`` is the first at or after ``start``
    (the end of ``text`` when it does not close)."""
    open_at = text.find("{", start)
    if open_at < 0:
        return len(text)
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def declaration_spans(text: str, member: str, cls: str | None) -> list[tuple[int, int]]:
    """The line spans of ``member``'s function declarations in a header's ``text``.

    A declaration is found where ``member`` is followed by ``(`` (across line breaks),
    inside the body of ``class``/``struct``/``union``/``namespace cls`` when ``cls`` is
    given. It starts after the previous ``;``, ``{``, ``}`` or access specifier (so a
    return type on the line above is part of it) and ends at the first ``;`` or ``{``
    after its parameter list: a parameter added on a line of its own (as clang-format
    writes long signatures) lies inside the span although it does not name the member.

    Args:
        text: the header; member: the name; cls: its class or namespace, or ``None``.
    Returns:
        1-based ``(first, last)`` line numbers, in order.
    """
    regions: list[tuple[int, int]] = []
    if cls:
        for m in re.finditer(
            rf"\b(?:class|struct|union|namespace)\s+(?:\w+::)*{re.escape(cls)}\b[^;{{]*\{{",
            text,
        ):
            regions.append((m.end() - 1, _block_end(text, m.end() - 1)))
    else:
        regions.append((0, len(text)))
    spans: list[tuple[int, int]] = []
    for lo, hi in regions:
        for m in re.finditer(rf"(?<![\w~]){re.escape(member)}\s*\(", text[lo:hi]):
            at = lo + m.start()
            depth, end = 0, None
            for i in range(lo + m.end() - 1, hi):
                ch = text[i]
                if ch == "(":
                    depth += 1
                elif ch == ")":
                    depth -= 1
                elif depth == 0 and ch in ";{":
                    end = i
                    break
            if end is None:
                continue
            begin = max(text.rfind(c, lo, at) for c in ";{}") + 1
            spec = re.search(r"(?:public|private|protected)\s*:", text[begin:at])
            if spec:
                begin += spec.end()
            while begin < at and text[begin].isspace():
                begin += 1
            span = (text.count("\n", 0, begin) + 1, text.count("\n", 0, end) + 1)
            if span not in spans:
                spans.append(span)
    return spans


def _span_commits(
    store: Store, old: str, new: str, path: str, span: tuple[int, int]
) -> list[tuple[str, str]]:
    """Commits of ``old..new`` that changed lines ``span`` of ``path`` (as in ``new``),
    newest first (``git log -L``, which follows the lines back through the history)."""
    out = store.git(
        "log",
        "--format=%x01%H%x00%s",
        f"-L{span[0]},{span[1]}:{path}",
        f"{old}..{new}",
        check=False,
    ).stdout.decode("utf-8", "replace")
    pairs = (
        line[1:].split("\0", 1)
        for line in out.splitlines()
        if line.startswith("\x01") and "\0" in line
    )
    return [(sha, subject) for sha, subject in pairs]


def declaration_commits(
    store: Store,
    old: str,
    new: str,
    member: str,
    cls: str | None,
    declared: Sequence[str],
) -> list[tuple[str, str]]:
    """Commits of the range that changed ``member``'s declaration in the ``declared``
    headers, newest first: those that changed a line of the declaration as the new pin
    has it (:func:`declaration_spans`, ``git log -L``), and those whose changed lines
    name the member (``git log -G``: a declaration the new pin removed or renamed)."""
    found: dict[str, str] = {}
    for path in declared:
        blob = store.git("cat-file", "-p", f"{new}:{path}", check=False)
        if blob.returncode != 0:
            continue
        for span in declaration_spans(
            blob.stdout.decode("utf-8", "replace"), member, cls
        ):
            found.update(_span_commits(store, old, new, path, span))
    found.update(commits_naming(store, old, new, member, True, declared))
    if len(found) < 2:
        return list(found.items())
    order = (
        store.git("rev-list", "--no-walk=sorted", *found, check=False)
        .stdout.decode()
        .split()
    )
    return [(sha, found[sha]) for sha in order if sha in found]


__all__ = [
    "HEADER_GLOBS",
    "MAX_DECL_HEADERS",
    "commits_naming",
    "declaration_commits",
    "declaration_spans",
    "declaring_headers",
    "member_reference",
]
