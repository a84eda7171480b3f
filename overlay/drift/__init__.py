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

The log is read by :func:`overlay.build.diagnostics.parse_log`, the parser ``overlay
build`` uses too (``note:`` and bullet lines belong to their error, an error inside
a system header lands on the tree line that instantiated it, linker undefined
references become ``undefined`` diagnostics). The declaration search lives in
:mod:`overlay.drift.declarations`.
"""

import dataclasses
import os
import re
from collections.abc import Iterable, Sequence

from overlay.build.diagnostics import (
    Diagnostic,
    merge_same_place,
    parse_log,
    prefix_locator,
)
from overlay.drift.declarations import (
    HEADER_GLOBS,
    MAX_DECL_HEADERS,
    commits_naming,
    declaration_commits,
    declaration_spans,
    declaring_headers,
    member_reference,
)
from overlay.drift.owners import free_function_owner, is_namespace
from overlay.git.store import Store
from overlay.lazy import lazy_pattern

_QUOTED = lazy_pattern(r"[`'\u2018\"]([^`'\u2019\"]+)[`'\u2019\"]")
_IDENT = lazy_pattern(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMON = frozenset(
    """
int void char bool float double long short unsigned signed const constexpr static inline auto
virtual override final class struct enum union namespace template typename using return operator
new delete
this true false nullptr std mlx core array vector string size_t int32_t int64_t uint32_t uint64_t
shared_ptr unique_ptr tuple pair map set optional variant function type value values in of for to
the a an is not no declared scope member named candidate expects argument arguments provided
error note warning within following because pure abstract object""".split()
)


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
        """JSON-ready form (the diagnostic as :meth:`Diagnostic.as_dict`)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["diagnostic"] = self.diagnostic.as_dict()
        out["also"] = list(self.also)
        out["declared_in"] = list(self.declared_in)
        return out


def log_errors(text: str, strip_prefixes: Sequence[str] = ()) -> list[Diagnostic]:
    """Every error (with notes) and undefined symbol in a build log, deduplicated
    (:func:`overlay.build.diagnostics.parse_log`, one diagnostic per tree line).

    Args:
        text: compiler and linker output.
        strip_prefixes: directory prefixes to remove from paths (the export dir),
            so paths come out repository-relative.
    Returns:
        Diagnostics in log order; the same error printed twice (two objects
        including one header) is reported once, and a second error at the same
        line (one instantiation) joins the first one's notes.
    """
    parsed = parse_log(text, prefix_locator(strip_prefixes))
    return merge_same_place(parsed.diagnostics)


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
        diagnostics: from :func:`log_errors`.
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
            cache[(ident, headers)] = commits_naming(
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
                declaration_commits(store, old_pin, new_pin, member, cls, declared)
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

    For a free function ``mlx::core::[ns::]name`` (its qualifier opens a ``namespace``
    somewhere in the tree): the backend source that defines the most functions declared
    in the header that declares ``name`` (:func:`overlay.drift.owners.free_function_owner`).
    For ``mlx::core::Cls::member``: the backend file that defines most other members of
    ``Cls`` (``Cls::name(`` at the start of a definition); for a primitive no backend
    file mentions, the file defining the most ``::eval_gpu`` (where the backend keeps its
    primitives). Items that already name a file are left alone.

    Args:
        root: the exported tree; items: from :func:`attribute` (changed in place);
        backend: the backend's directory in the tree.
    """
    files = _tree_texts(root, backend, (".cpp", ".hip", ".cu", ".h", ".hpp"))
    headers: dict[str, str] | None = None  # the tree's headers, read on first need
    for item in items:
        d = item.diagnostic
        if d.kind != "undefined" or item.fork_file:
            continue
        parts = d.message.split("(", 1)[0].split("::")
        if len(parts) < 2:
            continue
        cls = parts[-2]
        if headers is None:
            headers = _tree_headers(root)
        if is_namespace(cls, headers):
            # a free function: counting ``ns::`` mentions would pick whichever file
            # calls into the namespace most; its header's siblings say where it belongs
            owner = free_function_owner(parts[-1], headers, files)
            if owner:
                item.fork_file = owner
                continue
        pattern = re.compile(rf"(?m)^[^\n;]*\b{re.escape(cls)}::\w+\s*\(")
        counts = {p: len(pattern.findall(t)) for p, t in files.items()}
        best = max(counts, key=lambda p: counts[p], default=None) if counts else None
        if best and counts[best]:
            item.fork_file = best
        elif parts[-1] == "eval_gpu":
            evals = {p: t.count("::eval_gpu(") for p, t in files.items()}
            best = max(evals, key=lambda p: evals[p], default=None)
            item.fork_file = best if best and evals[best] else None


def _tree_headers(root: str) -> dict[str, str]:
    """``{repository path: text}`` of every header under ``root/mlx``."""
    return _tree_texts(root, "mlx", (".h", ".hpp", ".cuh"))


def _tree_texts(root: str, top: str, suffixes: tuple[str, ...]) -> dict[str, str]:
    """``{repository path: text}`` of every file under ``root/top`` whose name ends in
    one of ``suffixes`` (bad bytes replaced; an unreadable file left out)."""
    out: dict[str, str] = {}
    for dirpath, _dirs, names in os.walk(os.path.join(root, top)):
        for name in names:
            if name.endswith(suffixes):
                full = os.path.join(dirpath, name)
                try:
                    with open(full, encoding="utf-8", errors="replace") as fh:
                        out[os.path.relpath(full, root).replace(os.sep, "/")] = (
                            fh.read()
                        )
                except OSError:
                    continue
    return out


def attribute_log(
    store: Store, old_pin: str, new_pin: str, text: str, prefixes: Sequence[str]
) -> list[DriftItem]:
    """:func:`log_errors` then :func:`attribute` on a build log, with the source lines and
    the fork files read from the exported trees under ``prefixes``.

    Args:
        store: git store holding both pins; old_pin, new_pin: the bump (commit SHAs).
        text: compiler and linker output (``build/<backend>/build.log``).
        prefixes: exported trees whose paths become repository paths (``build/*/src``).
    Returns:
        One :class:`DriftItem` per error and undefined symbol, in log order.
    """
    diags = log_errors(text, strip_prefixes=prefixes)
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


__all__ = [
    "HEADER_GLOBS",
    "MAX_DECL_HEADERS",
    "MAX_HITS",
    "Diagnostic",
    "DriftItem",
    "attribute",
    "attribute_log",
    "declaration_spans",
    "declaring_headers",
    "identifiers",
    "log_errors",
    "member_reference",
    "owners_from_tree",
    "ranked_identifiers",
    "render_markdown",
    "render_text",
    "short",
    "source_reader",
]
