"""Compiler and linker diagnostics: one :class:`Diagnostic` and one log parser.

``overlay build`` (the errors it attributes to a patch hunk, the fork or upstream)
and ``overlay drift`` (the upstream commit behind each error) read the same build
logs through :func:`parse_log`, so they agree on where every error is.

The parser reads GCC's and Clang's ``path:line[:col]: error: message`` lines (hipcc
is Clang), with

* the ``note:`` lines and GCC's bullet lines (``• candidate 1: ...``) that follow an
  error kept with it;
* an error inside a file outside the tree (a system header) moved to the tree line
  it was instantiated from, the header's position kept in
  :attr:`Diagnostic.reported_at`: with GCC the last ``path:line:col:   required
  from here`` inside the tree since the instantiation context began (GCC prints the
  chain *before* the error); with Clang the first ``note: in instantiation of ...
  requested here`` inside the tree among the notes that *follow* the error (Clang
  prints the chain innermost first, so that is the tree frame nearest the header).
  Other notes (``candidate ...``, ``declared here``) never move an error, and an
  error already in the tree stays where it was printed;
* linker undefined references (``undefined reference to `symbol'`` of GNU ld and
  lld, lld's ``undefined symbol: symbol``) as ``kind == "undefined"`` diagnostics;
* error lines without a location (``clang: error: ...``, the undefined-reference
  lines themselves) collected as they were printed (:attr:`ParsedLog.unlocated`).

Where a printed path lies is decided by a *locator* (:data:`Locate`):
:func:`tree_locator` resolves paths against the compiler's directory and the
exported tree (``build``), :func:`prefix_locator` strips the exported trees'
prefixes (``drift``, which reads a log without knowing the compiler's directory).
"""

import dataclasses
import os
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from overlay.lazy import lazy_pattern

if TYPE_CHECKING:
    from overlay.build.attribute import Origin

ERROR = "error"
UNDEFINED = "undefined"

ANSI_RE = lazy_pattern(r"\x1b\[[0-9;]*[A-Za-z]")
_DIAG_RE = lazy_pattern(
    r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)?\s*"
    r"(?P<kind>fatal error|error|note|warning):\s*(?P<msg>.*)$"
)
_HERE_RE = lazy_pattern(
    r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)?\s+required from here"
)
#: The first line of a new GCC/Clang context (``x.h: In instantiation of ...``,
#: ``x.cpp: In function ...``, ``In file included from ...``): the ``required from
#: here`` that places the next system-header error comes after it.
_CONTEXT_RE = lazy_pattern(
    r"^(?:In file included from |[^\s:][^:]*: (?:In |At global))"
)
#: A Clang instantiation-chain note (``in instantiation of function template
#: specialization 'f<int>' requested here``): the only note that moves an error.
_REQUESTED_RE = lazy_pattern(r"^in instantiation of\b.*\brequested here$")
#: GCC 14+'s structured notes (``  • there is 1 candidate``).
_BULLET_RE = lazy_pattern(r"^\s+[\u2022*-]\s+(?P<msg>.*)$")
_UNDEF_RE = lazy_pattern(
    r"undefined (?:reference to [`'\u2018]|symbol: )(?P<sym>[^'\u2019\n]+)"
)
#: An error line with no file and line: the driver's, the linker's.
_UNLOCATED_RE = lazy_pattern(
    r"^(?P<tool>[^\s:]+): (?:fatal )?error: (?P<msg>.*)$|.*undefined reference to .*"
)

#: ``printed path -> (path to report, inside the tree)``.
Locate = Callable[[str], tuple[str, bool]]


@dataclasses.dataclass
class Diagnostic:
    """One compiler error (with its notes) or one undefined symbol.

    Attributes:
        kind: ``"error"`` or ``"undefined"``.
        path: repository path when the file is in the tree, else the path as
            printed; ``None`` for an undefined symbol.
        line: 1-based line, or ``None`` (undefined symbol).
        message: the text after ``error:``, or the undefined symbol.
        notes: the ``note:`` and bullet lines that followed the error (and, for an
            error moved out of a system header, ``in <header>:<line>`` first; a
            Clang error keeps its whole ``in instantiation of ...`` chain).
        col: 1-based column, or ``None``.
        severity: ``error`` or ``fatal error`` (``error`` for an undefined symbol).
        in_tree: the file is part of the tree (``path`` is repository-relative).
        count: how many times the same error was printed (a header compiled by
            several units).
        origin: filled by build's attribution (:class:`overlay.build.attribute.Origin`).
        reported_at: ``<header>:<line>`` where the compiler printed an error that
            was moved to the tree line instantiating it, else ``None``.
    """

    kind: str
    path: str | None
    line: int | None
    message: str
    notes: list[str] = dataclasses.field(default_factory=list)
    col: int | None = None
    severity: str = "error"
    in_tree: bool = True
    count: int = 1
    origin: "Origin | None" = None
    reported_at: str | None = None

    def attribution(self) -> str:
        """``patch X hunk #N`` / ``from the fork`` / ``from upstream`` /
        ``outside the tree`` / ``not attributed``."""
        if not self.in_tree:
            return "outside the tree"
        if self.origin is None:
            return "not attributed"
        return self.origin.label()

    def format(self) -> str:
        """``path:line:col: error: message [attribution]``, then ``(reported Nx)`` for a
        repeated error and ``(instantiated here; the error is in H)`` for a moved one."""
        col = f":{self.col}" if self.col else ""
        more = f" (reported {self.count}x)" if self.count > 1 else ""
        if self.reported_at:
            more += f" (instantiated here; the error is in {self.reported_at})"
        return (
            f"{self.path}:{self.line}{col}: {self.severity}: {self.message} "
            f"[{self.attribution()}]{more}"
        )

    def as_dict(self) -> dict:
        """JSON-ready form: ``kind``, ``path``, ``line``, ``message``, ``notes``."""
        return {
            "kind": self.kind,
            "path": self.path,
            "line": self.line,
            "message": self.message,
            "notes": list(self.notes),
        }


@dataclasses.dataclass
class ParsedLog:
    """What :func:`parse_log` found.

    Attributes:
        diagnostics: errors and undefined symbols in log order, deduplicated.
        unlocated: error lines without a file and line, as printed (ANSI colours
            removed), each once.
    """

    diagnostics: list[Diagnostic] = dataclasses.field(default_factory=list)
    unlocated: list[str] = dataclasses.field(default_factory=list)

    @property
    def errors(self) -> list[Diagnostic]:
        """The compiler errors (``kind == "error"``)."""
        return [d for d in self.diagnostics if d.kind == ERROR]


def tree_locator(src: str, cwd: str) -> Locate:
    """The locator of a build: a path (relative ones against ``cwd``, the compiler's
    directory) under the exported tree ``src``, also through symlinks, becomes its
    repository path; any other stays as printed, outside the tree."""
    bases = {os.path.normpath(src), os.path.realpath(src)}
    real_base = os.path.realpath(src)

    def locate(path: str) -> tuple[str, bool]:
        full = os.path.normpath(
            path if os.path.isabs(path) else os.path.join(cwd, path)
        )
        for base in bases:
            if full.startswith(base + os.sep):
                return os.path.relpath(full, base).replace(os.sep, "/"), True
        real = os.path.realpath(full)
        if real.startswith(real_base + os.sep):
            return os.path.relpath(real, real_base).replace(os.sep, "/"), True
        return path, False

    return locate


def prefix_locator(prefixes: Sequence[str]) -> Locate:
    """The locator of a log read on its own: the first of ``prefixes`` (exported trees)
    a path starts with is removed; a path left relative is inside the tree."""
    heads = [prefix.rstrip("/") + "/" for prefix in prefixes]

    def locate(path: str) -> tuple[str, bool]:
        for head in heads:
            if path.startswith(head):
                path = path[len(head) :]
                break
        return path, not os.path.isabs(path)

    return locate


class _Parser:
    """The state of one pass over a log: the error notes attach to, the tree line the
    current GCC instantiation context was required from, and the system-header error
    waiting for a Clang ``requested here`` note in the tree (``pending``: it is
    recorded, and deduplicated, only once its place is known)."""

    def __init__(self, locate: Locate):
        self.locate = locate
        self.out = ParsedLog()
        self.errors: dict[tuple, Diagnostic] = {}
        self.symbols: set[str] = set()
        self.current: Diagnostic | None = None
        self.here: tuple[str, int, int | None] | None = None
        self.pending: Diagnostic | None = None

    def feed(self, raw: str) -> None:
        """Read one line: a context or ``required from here`` line, a diagnostic, a
        bullet note, an undefined reference, an unlocated error line."""
        line = ANSI_RE.sub("", raw).rstrip()
        text = line.strip()
        if self._here(text):
            return
        m = _DIAG_RE.match(text)
        if m:
            self._diagnostic(m)
            return
        if _UNLOCATED_RE.match(line) and line not in self.out.unlocated:
            self.out.unlocated.append(line)
        bullet = _BULLET_RE.match(line)
        if bullet and self.current is not None:
            self.current.notes.append(bullet.group("msg"))
            return
        undefined = _UNDEF_RE.search(line)
        if undefined:
            self._undefined(undefined.group("sym").strip())

    def _here(self, text: str) -> bool:
        """Whether ``text`` is a context line (which forgets the instantiation) or a
        ``required from here`` line (remembered when inside the tree)."""
        if _CONTEXT_RE.match(text):
            self.here = None
            return True
        m = _HERE_RE.match(text)
        if not m:
            return False
        path, inside = self.locate(m.group("path"))
        if inside:
            col = int(m.group("col")) if m.group("col") else None
            self.here = (path, int(m.group("line")), col)
        return True

    def _diagnostic(self, m: re.Match[str]) -> None:
        """An error starts a diagnostic (or counts a repeat); a note joins the current
        one; a warning ends it."""
        kind = m.group("kind")
        if kind == "note":
            if self.current is not None:
                self.current.notes.append(m.group("msg"))
            if self.pending is not None and _REQUESTED_RE.match(m.group("msg")):
                self._requested(m)
            return
        self.settle()
        if kind == "warning":
            self.current = None
            return
        self._error(m)

    def _requested(self, m: re.Match[str]) -> None:
        """A Clang ``in instantiation of ... requested here`` note after a pending
        system-header error: the first one inside the tree is where the error goes."""
        path, inside = self.locate(m.group("path"))
        diag = self.pending
        if not inside or diag is None:
            return
        self.pending = None
        diag.reported_at = f"{diag.path}:{diag.line}"
        diag.notes.insert(0, f"in {diag.reported_at}")
        diag.path, diag.line, diag.in_tree = path, int(m.group("line")), True
        diag.col = int(m.group("col")) if m.group("col") else None
        self._record(diag)

    def settle(self) -> None:
        """Record the pending system-header error where Clang printed it: no
        ``requested here`` note inside the tree followed it."""
        if self.pending is not None:
            diag, self.pending = self.pending, None
            self._record(diag)

    def _error(self, m: re.Match[str]) -> None:
        """Record an error where it belongs: its own line in the tree, else the tree line
        that instantiated it (GCC's ``required from here`` before it), else wait for
        Clang's ``requested here`` notes after it (:meth:`_requested`, :meth:`settle`)."""
        path, inside = self.locate(m.group("path"))
        line = int(m.group("line"))
        col = int(m.group("col")) if m.group("col") else None
        notes: list[str] = []
        reported_at = None
        if not inside and self.here is not None:
            reported_at = f"{path}:{line}"
            notes.append(f"in {reported_at}")
            (path, line, col), inside = self.here, True
        diag = Diagnostic(
            ERROR,
            path,
            line,
            m.group("msg"),
            notes,
            col=col,
            severity=m.group("kind"),
            in_tree=inside,
            reported_at=reported_at,
        )
        self.current = diag
        if inside:
            self._record(diag)
        else:
            self.pending = diag

    def _record(self, diag: Diagnostic) -> None:
        """Add an error at its final place, or count it on the same error seen before
        (same place and message; its notes were kept the first time)."""
        key = (diag.path, diag.line, diag.col, diag.message)
        seen = self.errors.get(key)
        if seen is not None:
            seen.count += 1
            self.current = None
            return
        self.errors[key] = diag
        self.out.diagnostics.append(diag)
        self.current = diag

    def _undefined(self, symbol: str) -> None:
        """One diagnostic per undefined symbol, however many objects reference it."""
        self.settle()
        self.current = None
        if symbol not in self.symbols:
            self.symbols.add(symbol)
            self.out.diagnostics.append(
                Diagnostic(UNDEFINED, None, None, symbol, in_tree=False)
            )


def parse_log(text: str, locate: Locate) -> ParsedLog:
    """Every error (with its notes) and undefined symbol in compiler and linker output.

    Args:
        text: the output (ANSI colours allowed).
        locate: maps a printed path to ``(path to report, inside the tree)``
            (:func:`tree_locator`, :func:`prefix_locator`).
    Returns:
        :class:`ParsedLog`; the same error printed again (one header compiled by
        several units) is counted on the first (:attr:`Diagnostic.count`).
    """
    parser = _Parser(locate)
    for raw in text.splitlines():
        parser.feed(raw)
    parser.settle()
    return parser.out


def merge_same_place(diags: Sequence[Diagnostic]) -> list[Diagnostic]:
    """One diagnostic per tree line: a later error at the same ``(path, line)`` (another
    error of one instantiation) joins the first one's notes, its message first.

    Args:
        diags: from :func:`parse_log` (not changed).
    Returns:
        New diagnostics in order of first appearance; undefined symbols as they were.
    """
    out: list[Diagnostic] = []
    first: dict[tuple, Diagnostic] = {}
    messages: dict[tuple, set[str]] = {}
    for diag in diags:
        place = (diag.path, diag.line)
        if diag.kind != ERROR:
            out.append(diag)
        elif place not in first:
            first[place] = dataclasses.replace(diag, notes=list(diag.notes))
            messages[place] = {diag.message}
            out.append(first[place])
        elif diag.message not in messages[place]:
            messages[place].add(diag.message)
            first[place].notes += [diag.message, *diag.notes]
    return out


def parse_diagnostics(
    text: str, src: str, cwd: str
) -> tuple[list[Diagnostic], list[str]]:
    """Compiler errors in build output, located in the exported tree (``build``'s view).

    Args:
        text: build output; src: the exported tree (paths under it become
            repository paths); cwd: directory relative paths are resolved against.
    Returns:
        ``(errors in order of first appearance, error lines without a location)``
        (``clang: error: ...``, ``undefined reference``: no file and line).
    """
    parsed = parse_log(text, tree_locator(src, cwd))
    return parsed.errors, parsed.unlocated


__all__ = [
    "ANSI_RE",
    "Diagnostic",
    "ERROR",
    "Locate",
    "ParsedLog",
    "UNDEFINED",
    "merge_same_place",
    "parse_diagnostics",
    "parse_log",
    "prefix_locator",
    "tree_locator",
]
