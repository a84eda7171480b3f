"""Textual checks of what the document says (no git needed): the policy closing
sentence, upstream marking, upstream patch packages and conflict markers; and
:func:`check_document`, which runs every textual check.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

from overlay.checks.findings import Finding
from overlay.lazy import lazy_pattern
from overlay.records.fixes.model import (
    POLICY_SECTIONS,
    Document,
    finding,
    sorted_findings,
)
from overlay.records.fixes.structure import (
    check_items,
    check_numbering,
    check_retarget_pin,
    check_sections,
    check_title,
)
from overlay.records.markers import marker_lines

#: Case-insensitive phrases that mark an entry as meant for upstream
#: (docs/design.md §7 forbids them).
UPSTREAM_PATTERNS = (
    r"upstream(?:ing)?[\s-]+candidates?",
    r"candidates?\s+for\s+upstream(?:ing)?",
    r"to\s+be\s+(?:proposed|upstreamed|sent\s+upstream|submitted\s+upstream)",
    r"propos(?:e|ed|es|ing)\s+(?:(?:it|this|them)\s+)?(?:for\s+|to\s+)?upstream",
    r"send(?:s|ing)?\s+(?:(?:it|this|them)\s+)?upstream",
    r"sent\s+upstream",
    r"submit(?:s|ted|ting)?\s+(?:(?:it|this|them)\s+)?upstream",
    r"will\s+be\s+upstreamed",
    # "should also be proposed there", "could be sent upstream": a wish, in any modal
    # (a negation such as "should not be proposed there" is the policy, not a mark).
    r"(?:should|could|would|can|may|might|must|will)\s+(?:also\s+)?be\s+"
    r"(?:proposed|upstreamed|submitted|sent)\s+(?:there|upstream)",
    r"also\s+be\s+(?:proposed|upstreamed|submitted)\b",
)
_UPSTREAM_RE = lazy_pattern(
    "|".join(f"(?:{p})" for p in UPSTREAM_PATTERNS), re.IGNORECASE
)

#: An issue reference that may follow the closing sentence: ``owner/repo#N`` or ``#N``
#: (several separated by commas or semicolons), in parentheses, after the sentence's
#: final period or just before it.
_ISSUE_REF = r"(?:[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)?#\d+"
_TRAILING_REF_RE = lazy_pattern(
    rf"\s+\((?:{_ISSUE_REF})(?:\s*[,;]\s*{_ISSUE_REF})*\)(?P<dot>\.?)$"
)


_Offsets = list[tuple[int, int]]


def _blocks(lines: Sequence[str]) -> Iterator[tuple[str, _Offsets]]:
    """Yield (joined text, [(offset, lineno)]) for each run of non-blank lines."""
    cur: list[tuple[int, str]] = []
    for i, ln in enumerate(lines, 1):
        if ln.strip():
            cur.append((i, ln.strip()))
            continue
        if cur:
            yield _join_block(cur)
            cur = []
    if cur:
        yield _join_block(cur)


def _join_block(cur: list[tuple[int, str]]) -> tuple[str, _Offsets]:
    """One block's lines joined by single spaces, with where each line starts in it."""
    text = ""
    offsets: _Offsets = []
    for lineno, s in cur:
        if text:
            text += " "
        offsets.append((len(text), lineno))
        text += " ".join(s.split())
    return text, offsets


def _line_at(offsets: _Offsets, pos: int) -> int:
    """The line a position of a joined block falls on."""
    line = offsets[0][1]
    for off, ln in offsets:
        if off <= pos:
            line = ln
        else:
            break
    return line


def ends_with_closing(text: str, sentence: str) -> bool:
    """True when ``text`` ends with ``sentence``, optionally followed by an issue reference.

    The reference is ``(owner/repo#N)`` or ``(#N)`` (several separated by commas or
    semicolons), after the sentence's final period (``... not proposed there.
    (acme/mlx#12)``) or just before it (``... not proposed there (#12).``).
    Whitespace is compared collapsed (wrapped lines join with one space).
    """
    text = " ".join(text.split())
    sentence = " ".join(sentence.split())
    return text.endswith(sentence) or without_reference(text).endswith(sentence)


def without_reference(text: str) -> str:
    """``text`` (whitespace collapsed) without a trailing issue reference in parentheses.

    ``... there. (acme/mlx#12)`` and ``... there (#12).`` both become ``... there.``;
    text without such a reference is returned collapsed and otherwise as it is.
    """
    text = " ".join(text.split())
    m = _TRAILING_REF_RE.search(text)
    return text[: m.start()] + m.group("dot") if m else text


def check_closing_sentence(
    doc: Document,
    sentence: str,
    *,
    older: Sequence[str] = (),
    required_from: int | None = None,
) -> list[Finding]:
    """Entries of the kernels/build/API sections end with the manifest's closing sentence.

    Args:
        doc: parsed document.
        sentence: ``[policy] closing-sentence`` from the manifest.
        older: ``[policy] older-closing-sentences``: forms an entry numbered below
            ``required_from`` may end with instead.
        required_from: ``[policy] closing-sentence-required-from``; ``None`` accepts no
            older form.

    Returns:
        FIX013 per entry that ends with neither the sentence nor (below
        ``required_from``) an older form; an issue reference may follow any of them
        (:func:`ends_with_closing`). Line: the entry's last line.
    """
    out = []
    for sec in doc.sections:
        if sec.key not in POLICY_SECTIONS:
            continue
        for e in sec.entries:
            if ends_with_closing(e.text, sentence):
                continue
            old = next((o for o in older if ends_with_closing(e.text, o)), None)
            if (
                old is not None
                and required_from is not None
                and e.number < required_from
            ):
                continue
            if old is not None and required_from is not None:
                message = (
                    f"entry {e.number} ends with the older form {old!r}; entries from "
                    f"{required_from} on end with the policy closing sentence"
                )
            else:
                message = (
                    f"entry {e.number} does not end with the policy closing sentence"
                )
            out.append(
                finding(doc, "FIX013", e.end_line, message, f"end it with: {sentence}")
            )
    return out


def check_upstream_marking(doc: Document) -> list[Finding]:
    """No upstream marking anywhere in the file (docs/design.md §7; phrases in
    :data:`UPSTREAM_PATTERNS`).

    Phrases wrapped across lines are found; the finding points at the line where
    the phrase starts.

    Returns:
        FIX014 per occurrence.
    """
    out = []
    for text, offsets in _blocks(doc.lines):
        for m in _UPSTREAM_RE.finditer(text):
            out.append(
                finding(
                    doc,
                    "FIX014",
                    _line_at(offsets, m.start()),
                    f"upstream marking {m.group(0)!r}",
                    "fork-policy fixes are not proposed upstream; remove the marking",
                )
            )
    return out


def check_upstream_packages(doc: Document, repo_paths: Iterable[str]) -> list[Finding]:
    """No patch package under ``docs/**/upstream/`` (docs/design.md §7).

    Args:
        doc: parsed document (unused but for symmetry; findings name the package file).
        repo_paths: every repo-relative path of the overlay repository (e.g. ``git ls-files``).

    Returns:
        FIX015 per ``upstream/`` directory under ``docs/``, at line 1 of its first file.
    """
    dirs: dict[str, str] = {}
    for p in sorted(repo_paths):
        parts = p.split("/")
        if parts[0] != "docs":
            continue
        for i in range(1, len(parts) - 1):
            if parts[i] == "upstream":
                d = "/".join(parts[: i + 1]) + "/"
                dirs.setdefault(d, p)
                break
    return [
        finding(
            first,
            "FIX015",
            1,
            f"upstream patch package {d} exists",
            "fork-policy fixes are not proposed upstream; remove the package",
        )
        for d, first in sorted(dirs.items())
    ]


def find_conflict_markers(text: str) -> list[tuple[int, str]]:
    """Lines that are merge conflict markers, by the one definition of
    :mod:`overlay.records.markers` (a setext heading underline ``=======`` outside a
    conflict is not one).

    Returns:
        ``[(1-based line, marker line), ...]``.
    """
    return marker_lines(text)


def check_conflict_markers(doc: Document) -> list[Finding]:
    """No conflict markers in the file.

    Returns:
        FIX016 per marker line.
    """
    return [
        finding(
            doc,
            "FIX016",
            line,
            f"conflict marker {marker[:20]!r}",
            "finish the merge: keep the right text and delete the markers",
        )
        for line, marker in find_conflict_markers(doc.text)
    ]


def check_document(
    doc: Document,
    *,
    fork_repo: str,
    fork_commit: str,
    pin: str,
    closing_sentence: str,
    repo_paths: Iterable[str] | None = None,
    older_closing: Sequence[str] = (),
    closing_required_from: int | None = None,
) -> list[Finding]:
    """All textual checks (no git needed): title, pin, sections, numbering, items,
    closing sentence, upstream marking, conflict markers, and upstream packages
    when ``repo_paths`` is given.

    Args:
        doc: parsed document.
        fork_repo: ``owner/name`` of the fork.
        fork_commit: manifest fork commit (40 hex).
        pin: manifest upstream pin (40 hex).
        closing_sentence: manifest ``[policy] closing-sentence``.
        repo_paths: overlay repo paths for :func:`check_upstream_packages`, or ``None`` to skip.
        older_closing, closing_required_from: the older accepted closing sentences and
            the entry number from which the current one is required (see
            :func:`check_closing_sentence`).

    Returns:
        Findings of codes FIX001..FIX016, ordered by line.
    """
    out = []
    out += check_title(doc, fork_repo, fork_commit)
    out += check_retarget_pin(doc, pin)
    out += check_sections(doc)
    out += check_numbering(doc)
    out += check_items(doc)
    out += check_closing_sentence(
        doc, closing_sentence, older=older_closing, required_from=closing_required_from
    )
    out += check_upstream_marking(doc)
    out += check_conflict_markers(doc)
    out = sorted_findings(out)
    if repo_paths is not None:
        out += check_upstream_packages(doc, repo_paths)
    return out
