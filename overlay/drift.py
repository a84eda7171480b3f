"""API drift after a pin bump: every compile error and undefined symbol, attributed.

Input is what the compiler and the linker printed (a build log); output is one
:class:`DriftItem` per error or undefined ``mlx::core`` symbol, naming

* the fork file that must follow (where the error is, or the symbol's owner), and
* the upstream commit between the old and the new pin that changed the API it
  trips on. When the message names a member whose declaration it is about (``no
  declaration matches``, Clang's ``out-of-line definition ... does not match any
  declaration``, ``no matching function for call to``, ``has no member named``,
  ``no member named ... in``, ``is not a member of``), the headers that declare
  that member (of that class) in the new or the old pin are found with ``git
  grep``, and the commits of the range that changed the member's lines in those
  headers are the cause: no other name on the line (a quoted ``Stream`` or
  ``array``) can outrank the declaration. Otherwise the pin range is searched with
  ``git log -G`` for each identifier the message names (with its notes): the
  rarest identifier that upstream changed wins, and among its commits the oldest
  that changed a header (the declaration), else the oldest at all.

Diagnostics follow GCC/Clang's ``path:line:col: error: message`` form (hipcc is
Clang); ``note:`` lines after an error belong to it. Linker lines are
``undefined reference to `symbol'`` (GNU ld, lld) or lld's
``undefined symbol: symbol``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Sequence

from overlay.gitstore import Store

_DIAG = re.compile(
    r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?P<kind>fatal error|error|note|warning):\s*(?P<msg>.*)$"
)
_HERE = re.compile(
    r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)?\s+required from here"
)
_BULLET = re.compile(r"^\s+[\u2022*-]\s+(?P<msg>.*)$")
_UNDEF = re.compile(
    r"undefined (?:reference to [`'\u2018]|symbol: )(?P<sym>[^'\u2019\n]+)"
)
_QUOTED = re.compile(r"[`'\u2018\"]([^`'\u2019\"]+)[`'\u2019\"]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMON = frozenset(
    """
int void char bool float double long short unsigned signed const constexpr static inline auto virtual
override final class struct enum union namespace template typename using return operator new delete
this true false nullptr std mlx core array vector string size_t int32_t int64_t uint32_t uint64_t
shared_ptr unique_ptr tuple pair map set optional variant function type value values in of for to
the a an is not no declared scope member named candidate expects argument arguments provided
error note warning within following because pure abstract object""".split()
)


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
        declared_in: the headers declaring the member the error is about, when the
            commit was found through that declaration (else empty).
    """

    diagnostic: Diagnostic
    identifier: str | None
    commit: str | None
    subject: str | None
    also: list[str]
    fork_file: str | None
    declared_in: list[str] = dataclasses.field(default_factory=list)

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
                return path[len(p) :]
        return path

    def inside(path: str) -> bool:
        return not os.path.isabs(rel(path))

    here: tuple[str, int] | None = None  # the last "required from here" inside the tree
    for raw in text.splitlines():
        h = _HERE.match(raw.strip())
        if h:
            if inside(h.group("path")):
                here = (rel(h.group("path")), int(h.group("line")))
            continue
        m = _DIAG.match(raw.strip())
        if m:
            kind = m.group("kind")
            if kind in ("error", "fatal error"):
                path, line, msg = (
                    rel(m.group("path")),
                    int(m.group("line")),
                    m.group("msg"),
                )
                notes = []
                if not inside(m.group("path")) and here is not None:
                    # An error inside a system header, instantiated from the tree: report it there.
                    notes.append(f"in {path}:{line}")
                    path, line = here
                key = (path, line, msg)
                if key in seen:
                    current = None
                    continue
                seen.add(key)
                same = next(
                    (
                        d
                        for d in out
                        if d.kind == "error" and (d.path, d.line) == (path, line)
                    ),
                    None,
                )
                if same is not None:
                    # A second error at the same place (one instantiation): one diagnostic.
                    same.notes += [msg, *notes]
                    current = same
                    continue
                current = Diagnostic("error", path, line, msg, notes)
                out.append(current)
            elif kind == "note" and current is not None:
                current.notes.append(m.group("msg"))
            else:
                current = None
            continue
        b = _BULLET.match(raw)
        if b and current is not None:
            current.notes.append(
                b.group("msg")
            )  # GCC 16's structured "• candidate 1: ..." lines
            continue
        u = _UNDEF.search(raw)
        if u:
            sym = u.group("sym").strip()
            if ("undefined", sym) not in seen:
                seen.add(("undefined", sym))
                out.append(Diagnostic("undefined", None, None, sym))
            current = None
    return out


def identifiers(diag: Diagnostic, source: str = "") -> list[str]:
    """Candidate names a diagnostic trips on: the names on the offending source lines
    (``source``), then the quoted names in the message and notes, split at ``::`` and
    punctuation, common words and keywords removed."""
    return [name for _rank, name in ranked_identifiers(diag, source)]


def ranked_identifiers(diag: Diagnostic, source: str = "") -> list[tuple[int, str]]:
    """:func:`identifiers` with their rank: 0 for names the tools quoted (the message,
    its notes), 1 for names only on the source lines."""
    if diag.kind == "undefined":
        groups = [
            (0, [diag.message.split("(", 1)[0]])
        ]  # the symbol without its argument list
    else:
        groups = [
            (
                0,
                [
                    q
                    for text in [diag.message, *diag.notes]
                    for q in _QUOTED.findall(text)
                ],
            ),
            (1, [re.sub(r"//.*", "", source)]),
        ]
    names: list[tuple[int, str]] = []
    seen: set[str] = set()
    for rank, texts in groups:
        for text in texts:
            text = re.sub(
                r"\bstd::(?:\w+::)*\w+", " ", text
            )  # the standard library is not the API
            for name in _IDENT.findall(text):
                if (
                    name not in _COMMON
                    and len(name) > 2
                    and not name.startswith("_")
                    and name not in seen
                ):
                    seen.add(name)
                    names.append((rank, name))
    return names


def _commits_for(
    store: Store,
    old: str,
    new: str,
    ident: str,
    headers: bool,
    paths: Sequence[str] = (),
) -> list[tuple[str, str]]:
    args = ["log", "--format=%H%x00%s", "-G", rf"\b{ident}\b", f"{old}..{new}"]
    if paths:
        args += ["--", *paths]
    elif headers:
        args += ["--", *HEADER_GLOBS]
    out = store.git(*args, check=False).stdout.decode("utf-8", "replace")
    return [tuple(line.split("\0", 1)) for line in out.splitlines() if "\0" in line]  # type: ignore[misc]


HEADER_GLOBS = ("*.h", "*.hpp", "*.hh", "*.cuh")
_Q = "[`'\u2018]"  # an opening quote (GCC uses \u2018...\u2019 in UTF-8 locales)
_UNQ = "[`'\u2019]"  # a closing quote
_NQ = "[^`'\u2018\u2019]"
#: Messages about a member and its declaration: ``sig`` is a signature to split
#: (``bool ns::Cls::member(args)``), else ``member`` and ``cls`` are named.
_MEMBER_MESSAGES = [
    re.compile(p)
    for p in (
        rf"no declaration matches {_Q}(?P<sig>.+){_UNQ}\s*$",
        rf"out-of-line definition of {_Q}(?P<member>\w+){_UNQ} does not match any declaration in "
        rf"{_Q}(?:class |struct |union )?(?P<cls>{_NQ}+){_UNQ}",
        rf"no matching (?:member )?function for call to {_Q}(?P<sig>.+){_UNQ}\s*$",
        rf"{_Q}(?:class |struct |union )?(?P<cls>{_NQ}+){_UNQ} has no member named {_Q}(?P<member>\w+){_UNQ}",
        rf"no (?:template )?member named {_Q}(?P<member>\w+){_UNQ} in (?:namespace )?"
        rf"{_Q}(?:class |struct |union )?(?P<cls>{_NQ}+){_UNQ}",
        rf"{_Q}(?P<member>\w+){_UNQ} is not a member of {_Q}(?:class |struct |union )?(?P<cls>{_NQ}+){_UNQ}",
    )
]
#: More headers than this declaring one member name (``eval_gpu``, ``size``) say nothing
#: about which declaration the error is about: fall back to the identifier search.
MAX_DECL_HEADERS = 12


def _strip_templates(text: str) -> str:
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
    """Paths of ``commit`` (limited to ``paths`` or the header globs) where ``git grep ARGS`` matches."""
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
    return [
        tuple(line[1:].split("\0", 1))
        for line in out.splitlines()  # type: ignore[misc]
        if line.startswith("\x01") and "\0" in line
    ]


def _declaration_commits(
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
    found.update(_commits_for(store, old, new, member, True, declared))
    if len(found) < 2:
        return list(found.items())
    order = (
        store.git("rev-list", "--no-walk=sorted", *found, check=False)
        .stdout.decode()
        .split()
    )
    return [(sha, found[sha]) for sha in order if sha in found]


#: An identifier that changed in more commits than this says nothing about one API change.
MAX_HITS = 40


def attribute(
    store: Store,
    old_pin: str,
    new_pin: str,
    diagnostics: Iterable[Diagnostic],
    fork_paths: Iterable[str] = (),
    read_source=None,
) -> list[DriftItem]:
    """Attribute each diagnostic to the upstream commit of ``old_pin..new_pin`` it trips on.

    An error about a member's declaration (:func:`member_reference`) goes to the
    commits of the range that changed the member's declaration (every line of it,
    ``git log -L``, and the lines naming it, ``git log -G``) in the headers that
    declare it in the new pin or the old one (:func:`declaring_headers`); the oldest
    is the commit, the others ``also``.

    Otherwise, and when that finds nothing, for every candidate name (see
    :func:`ranked_identifiers`) the pin range is searched with ``git log -G
    '\\bname\\b'``. The name chosen is a quoted one before a name only on the
    source lines, then one whose changes touched a header (a declaration), then the
    one with the fewest commits; its oldest such commit is the one that introduced
    the API the code trips on.

    Args:
        store: git store holding both pins.
        old_pin, new_pin: commit SHAs (the bump).
        diagnostics: from :func:`parse_log`.
        fork_paths: repository paths of the patched tree, to name the fork file of
            an undefined symbol.
        read_source: ``(path, line) -> str`` giving the offending line and the two after
            it (the call often continues there), or ``None``.
    Returns:
        One :class:`DriftItem` per diagnostic, in order.
    """
    cache: dict[tuple[str, bool], list[tuple[str, str]]] = {}

    def commits(ident: str, headers: bool) -> list[tuple[str, str]]:
        if (ident, headers) not in cache:
            cache[(ident, headers)] = _commits_for(
                store, old_pin, new_pin, ident, headers
            )
        return cache[(ident, headers)]

    paths = list(fork_paths)
    headers_cache: dict[tuple[str, str, str | None], list[str]] = {}

    def headers(commit: str, member: str, cls: str | None) -> list[str]:
        if (commit, member, cls) not in headers_cache:
            headers_cache[(commit, member, cls)] = declaring_headers(
                store, commit, member, cls
            )
        return headers_cache[(commit, member, cls)]

    items = []
    for diag in diagnostics:
        ref = member_reference(diag)
        if ref is not None:
            member, cls = ref
            declared = sorted(
                set(headers(new_pin, member, cls)) | set(headers(old_pin, member, cls))
            )
            found = (
                _declaration_commits(store, old_pin, new_pin, member, cls, declared)
                if declared
                else []
            )
            if found:
                commit, subject = found[
                    -1
                ]  # git log lists newest first: the oldest changed it first
                items.append(
                    DriftItem(
                        diag,
                        member,
                        commit,
                        subject,
                        [c for c, _s in found if c != commit],
                        diag.path or _owner(diag, paths),
                        declared,
                    )
                )
                continue
        source = ""
        if read_source is not None and diag.path and diag.line:
            source = read_source(diag.path, diag.line) or ""
        best = None
        for order, (rank, ident) in enumerate(ranked_identifiers(diag, source)):
            found = commits(ident, False)
            if not found or len(found) > MAX_HITS:
                continue
            in_headers = commits(ident, True)
            key = (rank, 0 if in_headers else 1, len(found), order)
            if best is None or key < best[0]:
                best = (key, ident, found, in_headers)
        if best is None:
            items.append(
                DriftItem(diag, None, None, None, [], diag.path or _owner(diag, paths))
            )
            continue
        _key, ident, found, in_headers = best
        commit, subject = (in_headers or found)[
            -1
        ]  # git log lists newest first: take the oldest
        also = [c for c, _s in found if c != commit]
        items.append(
            DriftItem(
                diag, ident, commit, subject, also, diag.path or _owner(diag, paths)
            )
        )
    return items


def source_reader(root: str):
    """A ``read_source`` for :func:`attribute` over an exported tree at ``root``."""

    def read(path: str, line: int) -> str | None:
        try:
            with open(
                os.path.join(root, path), encoding="utf-8", errors="replace"
            ) as fh:
                lines = fh.read().splitlines()
        except OSError:
            return None
        return "\n".join(lines[line - 1 : line + 2])

    return read


def _owner(diag: Diagnostic, paths: Sequence[str]) -> str | None:
    """For an undefined ``mlx::core::Foo::eval_gpu``: the ROCm backend file that defines
    GPU evaluation for primitives (``primitives.cpp`` or the like), when present."""
    if diag.kind != "undefined" or "eval_gpu" not in diag.message:
        return None
    for candidate in (
        "mlx/backend/rocm/primitives.cpp",
        "mlx/backend/rocm/primitives.hip",
    ):
        if candidate in paths:
            return candidate
    return None


def owners_from_tree(
    root: str, items: Sequence[DriftItem], backend: str = "mlx/backend/rocm"
) -> None:
    """Name the fork file for undefined symbols by reading the exported tree at ``root``.

    For ``mlx::core::Cls::member``: the backend file that defines most other members of
    ``Cls`` (``Cls::name(`` at the start of a definition); for a primitive no backend
    file mentions, the file defining the most ``::eval_gpu`` (where the backend keeps its
    primitives). Items that already name a file are left alone.
    """
    files: dict[str, str] = {}
    base = os.path.join(root, backend)
    for dirpath, _dirs, names in os.walk(base):
        for name in names:
            if name.endswith((".cpp", ".hip", ".cu", ".h", ".hpp")):
                full = os.path.join(dirpath, name)
                try:
                    with open(full, encoding="utf-8", errors="replace") as fh:
                        files[os.path.relpath(full, root).replace(os.sep, "/")] = (
                            fh.read()
                        )
                except OSError:
                    continue
    for item in items:
        d = item.diagnostic
        if d.kind != "undefined" or item.fork_file:
            continue
        parts = d.message.split("(", 1)[0].split("::")
        if len(parts) < 2:
            continue
        cls = parts[-2]
        pattern = re.compile(rf"(?m)^[^\n;]*\b{re.escape(cls)}::\w+\s*\(")
        counts = {p: len(pattern.findall(t)) for p, t in files.items()}
        best = max(counts, key=counts.get, default=None) if counts else None
        if best and counts[best]:
            item.fork_file = best
        elif parts[-1] == "eval_gpu":
            evals = {p: t.count("::eval_gpu(") for p, t in files.items()}
            best = max(evals, key=evals.get, default=None)
            item.fork_file = best if best and evals[best] else None


def last_rebase_pin(root: str, pin: str) -> str | None:
    """The pin the last completed rebase started from, when it moved to ``pin``.

    Args:
        root: the overlay repository (``.overlay/last-rebase.json`` under it).
        pin: the manifest's pin (40 hex).
    Returns:
        The ``before`` pin of ``.overlay/last-rebase.json`` when that run ended on
        ``pin`` and moved the pin (a sync keeps it), else ``None`` (no run recorded,
        or the manifest moved on since: the range would be wrong).
    """
    import json

    try:
        with open(
            os.path.join(root, ".overlay", "last-rebase.json"), encoding="utf-8"
        ) as fh:
            pins = json.load(fh)["pins"]
        before, after = pins["before"]["pin"], pins["after"]["pin"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return before if after == pin and before != pin else None


def attribute_log(
    store: Store, old_pin: str, new_pin: str, text: str, prefixes: Sequence[str]
) -> list[DriftItem]:
    """:func:`parse_log` then :func:`attribute` on a build log, with the source lines and
    the fork files read from the exported trees under ``prefixes``.

    Args:
        store: git store holding both pins; old_pin, new_pin: the bump (commit SHAs).
        text: compiler and linker output (``build/<backend>/build.log``).
        prefixes: exported trees whose paths become repository paths (``build/*/src``).
    Returns:
        One :class:`DriftItem` per error and undefined symbol, in log order.
    """
    diags = parse_log(text, strip_prefixes=prefixes)
    if not diags:
        return []
    readers = [source_reader(p) for p in prefixes]

    def read_source(path: str, line: int) -> str | None:
        for reader in readers:
            found = reader(path, line)
            if found is not None:
                return found
        return None

    # the backend's primitives file, where a missing eval_gpu belongs (:func:`_owner`)
    fork_paths = [
        rel
        for rel in (
            "mlx/backend/rocm/primitives.cpp",
            "mlx/backend/rocm/primitives.hip",
        )
        if any(os.path.isfile(os.path.join(p, rel)) for p in prefixes)
    ]
    items = attribute(
        store, old_pin, new_pin, diags, fork_paths=fork_paths, read_source=read_source
    )
    for prefix in prefixes:
        owners_from_tree(prefix, items)
    return items


def short(item: DriftItem) -> str:
    """One line: ``path:line: error: message -> upstream <sha12> <subject>``."""
    d = item.diagnostic
    where = f"{d.path}:{d.line}" if d.path else "link"
    what = "undefined symbol" if d.kind == "undefined" else d.kind
    cause = (
        f"upstream {item.commit[:12]} {item.subject}"
        if item.commit
        else "no upstream commit found"
    )
    return f"{where}: {what}: {d.message} -> {cause}"


def render_text(items: Sequence[DriftItem]) -> str:
    """One block per item: where, what, which upstream commit."""
    lines = []
    for item in items:
        d = item.diagnostic
        where = f"{d.path}:{d.line}" if d.path else "link"
        head = f"{where}: {d.kind}: {d.message}"
        lines.append(head)
        if item.commit:
            where = (
                f", declared in {', '.join(item.declared_in)}"
                if item.declared_in
                else ""
            )
            lines.append(
                f"    upstream {item.commit[:12]} {item.subject}  (via '{item.identifier}'{where})"
            )
        else:
            lines.append(
                "    no upstream commit in the pin range changes a name it mentions"
            )
        if item.fork_file:
            lines.append(f"    fork file to follow: {item.fork_file}")
    errors = sum(1 for i in items if i.diagnostic.kind == "error")
    undefined = len(items) - errors
    attributed = sum(1 for i in items if i.commit)
    lines.append(
        f"{errors} compile error(s), {undefined} undefined symbol(s); {attributed} attributed"
    )
    return "\n".join(lines) + "\n"


def render_markdown(items: Sequence[DriftItem]) -> str:
    """A Markdown table for the rebase report."""
    out = ["| where | diagnostic | upstream commit | fork file |", "|---|---|---|---|"]
    for item in items:
        d = item.diagnostic
        where = f"`{d.path}:{d.line}`" if d.path else "link"
        msg = d.message.replace("|", "\\|")
        commit = (
            f"`{item.commit[:12]}` {item.subject}" if item.commit else "not attributed"
        )
        out.append(
            f"| {where} | {d.kind}: {msg} | {commit} | `{item.fork_file or ''}` |"
        )
    return "\n".join(out) + "\n"
