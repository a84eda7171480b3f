"""API drift after a pin bump: every compile error and undefined symbol, attributed.

Input is what the compiler and the linker printed (a build log); output is one
:class:`DriftItem` per error or undefined ``mlx::core`` symbol, naming

* the fork file that must follow (where the error is, or the symbol's owner), and
* the upstream commit between the old and the new pin that changed the API it
  trips on, found by searching the pin range with ``git log -G`` for each
  identifier the message names (with its notes): the rarest identifier that
  upstream changed wins, and among its commits the newest that changed a
  header (the declaration), else the newest at all.

Diagnostics follow GCC/Clang's ``path:line:col: error: message`` form (hipcc is
Clang); ``note:`` lines after an error belong to it. Linker lines are
``undefined reference to `symbol'`` (GNU ld, lld) or lld's
``undefined symbol: symbol``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Sequence

from overlay.gitstore import Store

_DIAG = re.compile(r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?P<kind>fatal error|error|note|warning):\s*(?P<msg>.*)$")
_UNDEF = re.compile(r"undefined (?:reference to [`'\u2018]|symbol: )(?P<sym>[^'\u2019\n]+)")
_QUOTED = re.compile(r"[`'\u2018\"]([^`'\u2019\"]+)[`'\u2019\"]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMON = frozenset("""
int void char bool float double long short unsigned signed const constexpr static inline auto virtual
override final class struct enum union namespace template typename using return operator new delete
this true false nullptr std mlx core array vector string size_t int32_t int64_t uint32_t uint64_t
shared_ptr unique_ptr tuple pair map set optional variant function type value values in of for to
the a an is not no declared scope member named candidate expects argument arguments provided
error note warning within following because pure abstract object""".split())


@dataclasses.dataclass
class Diagnostic:
    """One compiler error (with its notes) or one undefined symbol.

    Attributes:
        kind: ``"error"`` or ``"undefined"``.
        path: source path as printed (``None`` for a link error without one).
        line: 1-based line, or ``None``.
        message: the error text, or the undefined symbol.
        notes: the ``note:`` lines that followed the error.
    """

    kind: str
    path: str | None
    line: int | None
    message: str
    notes: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class DriftItem:
    """A diagnostic with its attribution.

    Attributes:
        diagnostic: what the tools printed.
        identifier: the name that led to the commit (``None`` when nothing matched).
        commit, subject: the upstream commit and its subject (``None`` when unattributed).
        also: other commits of the pin range that changed the same identifier.
        fork_file: the file that must follow (repository path when known).
    """

    diagnostic: Diagnostic
    identifier: str | None
    commit: str | None
    subject: str | None
    also: list[str]
    fork_file: str | None

    def as_dict(self) -> dict:
        """JSON-ready form."""
        return dataclasses.asdict(self)


def parse_log(text: str, strip_prefixes: Sequence[str] = ()) -> list[Diagnostic]:
    """Every error (with notes) and undefined symbol in a build log, deduplicated.

    Args:
        text: compiler and linker output.
        strip_prefixes: directory prefixes to remove from paths (the export dir),
            so paths come out repository-relative.
    Returns:
        Diagnostics in log order; the same error printed twice (two objects
        including one header) is reported once.
    """
    out: list[Diagnostic] = []
    seen: set[tuple] = set()
    current: Diagnostic | None = None

    def rel(path: str) -> str:
        for prefix in strip_prefixes:
            p = prefix.rstrip("/") + "/"
            if path.startswith(p):
                return path[len(p):]
        return path

    for raw in text.splitlines():
        m = _DIAG.match(raw.strip())
        if m:
            kind = m.group("kind")
            if kind in ("error", "fatal error"):
                key = (rel(m.group("path")), int(m.group("line")), m.group("msg"))
                if key in seen:
                    current = None
                    continue
                seen.add(key)
                current = Diagnostic("error", key[0], key[1], key[2])
                out.append(current)
            elif kind == "note" and current is not None:
                current.notes.append(m.group("msg"))
            else:
                current = None
            continue
        u = _UNDEF.search(raw)
        if u:
            sym = u.group("sym").strip()
            if ("undefined", sym) not in seen:
                seen.add(("undefined", sym))
                out.append(Diagnostic("undefined", None, None, sym))
            current = None
    return out


def identifiers(diag: Diagnostic) -> list[str]:
    """Candidate names a diagnostic trips on: quoted names in the message and notes,
    split at ``::`` and punctuation, common words and keywords removed."""
    if diag.kind == "undefined":
        texts = [diag.message.split("(", 1)[0]]  # the symbol without its argument list
    else:
        texts = [q for text in [diag.message, *diag.notes] for q in _QUOTED.findall(text)]
    names: list[str] = []
    for text in texts:
        for name in _IDENT.findall(text):
            if name not in _COMMON and len(name) > 2 and name not in names:
                names.append(name)
    return names


def _commits_for(store: Store, old: str, new: str, ident: str, headers: bool) -> list[tuple[str, str]]:
    args = ["log", "--format=%H%x00%s", "-G", rf"\b{ident}\b", f"{old}..{new}"]
    if headers:
        args += ["--", "*.h", "*.hpp"]
    out = store.git(*args, check=False).stdout.decode("utf-8", "replace")
    return [tuple(line.split("\0", 1)) for line in out.splitlines() if "\0" in line]  # type: ignore[misc]


def attribute(store: Store, old_pin: str, new_pin: str, diagnostics: Iterable[Diagnostic],
              fork_paths: Iterable[str] = ()) -> list[DriftItem]:
    """Attribute each diagnostic to the upstream commit of ``old_pin..new_pin`` it trips on.

    Args:
        store: git store holding both pins.
        old_pin, new_pin: commit SHAs (the bump).
        diagnostics: from :func:`parse_log`.
        fork_paths: repository paths of the patched tree, to name the fork file of
            an undefined symbol (the backend file defining that class's siblings).
    Returns:
        One :class:`DriftItem` per diagnostic, in order.
    """
    cache: dict[tuple[str, bool], list[tuple[str, str]]] = {}

    def commits(ident: str, headers: bool) -> list[tuple[str, str]]:
        if (ident, headers) not in cache:
            cache[(ident, headers)] = _commits_for(store, old_pin, new_pin, ident, headers)
        return cache[(ident, headers)]

    paths = list(fork_paths)
    items = []
    for diag in diagnostics:
        best: tuple[int, str, list[tuple[str, str]]] | None = None
        for ident in identifiers(diag):
            found = commits(ident, False)
            if found and (best is None or len(found) < best[0]):
                best = (len(found), ident, found)
        if best is None:
            items.append(DriftItem(diag, None, None, None, [], diag.path or _owner(diag, paths)))
            continue
        _n, ident, found = best
        in_headers = commits(ident, True)
        commit, subject = (in_headers or found)[0]  # git log is newest first
        also = [c for c, _s in found if c != commit]
        items.append(DriftItem(diag, ident, commit, subject, also, diag.path or _owner(diag, paths)))
    return items


def _owner(diag: Diagnostic, paths: Sequence[str]) -> str | None:
    """For an undefined ``mlx::core::Foo::eval_gpu``: the ROCm backend file that defines
    GPU evaluation for primitives (``primitives.cpp`` or the like), when present."""
    if diag.kind != "undefined" or "eval_gpu" not in diag.message:
        return None
    for candidate in ("mlx/backend/rocm/primitives.cpp", "mlx/backend/rocm/primitives.hip"):
        if candidate in paths:
            return candidate
    return None


def render_text(items: Sequence[DriftItem]) -> str:
    """One block per item: where, what, which upstream commit."""
    lines = []
    for item in items:
        d = item.diagnostic
        where = f"{d.path}:{d.line}" if d.path else "link"
        head = f"{where}: {d.kind}: {d.message}"
        lines.append(head)
        if item.commit:
            lines.append(f"    upstream {item.commit[:12]} {item.subject}  (via '{item.identifier}')")
        else:
            lines.append("    no upstream commit in the pin range changes a name it mentions")
        if item.fork_file:
            lines.append(f"    fork file to follow: {item.fork_file}")
    errors = sum(1 for i in items if i.diagnostic.kind == "error")
    undefined = len(items) - errors
    attributed = sum(1 for i in items if i.commit)
    lines.append(f"{errors} compile error(s), {undefined} undefined symbol(s); {attributed} attributed")
    return "\n".join(lines) + "\n"


def render_markdown(items: Sequence[DriftItem]) -> str:
    """A Markdown table for the rebase report."""
    out = ["| where | diagnostic | upstream commit | fork file |", "|---|---|---|---|"]
    for item in items:
        d = item.diagnostic
        where = f"`{d.path}:{d.line}`" if d.path else "link"
        msg = d.message.replace("|", "\\|")
        commit = f"`{item.commit[:12]}` {item.subject}" if item.commit else "not attributed"
        out.append(f"| {where} | {d.kind}: {msg} | {commit} | `{item.fork_file or ''}` |")
    return "\n".join(out) + "\n"
