"""Textual checks of the document's shape (no git needed): title, retarget pin,
sections, entry numbering and item kinds.

Each check takes a parsed :class:`~overlay.records.fixes.model.Document` and returns
``list[Finding]``; :func:`overlay.records.fixes.wording.check_document` runs them all.
"""

from __future__ import annotations

from overlay.checks.findings import Finding
from overlay.lazy import lazy_pattern
from overlay.records.fixes.model import (
    MAX_ENTRY_NUMBER,
    RETARGET_PREFIX,
    SECTION_HEADINGS,
    SECTION_ORDER,
    TITLE_PREFIX,
    Document,
    finding,
    sorted_findings,
)

_HEX8_RE = lazy_pattern(r"^[0-9a-f]{8}$")


def check_title(doc: Document, fork_repo: str, fork_commit: str) -> list[Finding]:
    """Title is ``# Local changes relative to <fork_repo>@<fork_commit[:8]>``.

    Args:
        doc: parsed document.
        fork_repo: ``owner/name`` of the fork (see :func:`fork_repo_from_url`).
        fork_commit: the manifest's 40-hex fork commit.

    Returns:
        FIX001 (no H1 title, or not ``Local changes relative to REPO@SHA``),
        FIX002 (repo differs), FIX003 (sha is not the commit's first 8 hex).
    """
    sha8 = fork_commit.lower()[:8]
    want = f"# {TITLE_PREFIX}{fork_repo}@{sha8}"
    if doc.title is None:
        return [
            finding(
                doc,
                "FIX001",
                1,
                "no title: the first line must be the H1 title",
                f"start the file with: {want}",
            )
        ]
    if doc.fork_repo is None or doc.fork_sha is None:
        return [
            finding(
                doc,
                "FIX001",
                doc.title_line,
                f"title {doc.title!r} is not 'Local changes relative to <fork repo>@<sha8>'",
                f"use: {want}",
            )
        ]
    out = []
    if doc.fork_repo != fork_repo:
        out.append(
            finding(
                doc,
                "FIX002",
                doc.title_line,
                f"title names fork {doc.fork_repo!r}, the manifest's fork is {fork_repo!r}",
                f"use: {want}",
            )
        )
    if doc.fork_sha.lower() != sha8 or not _HEX8_RE.match(doc.fork_sha.lower()):
        out.append(
            finding(
                doc,
                "FIX003",
                doc.title_line,
                f"title names fork commit {doc.fork_sha!r}, the manifest's fork commit is {sha8}",
                f"use: {want}",
            )
        )
    return out


def check_retarget_pin(doc: Document, pin: str) -> list[Finding]:
    """The retarget heading is ``## Retarget onto the MLX pin (<pin[:8]>)``.

    Args:
        doc: parsed document.
        pin: the manifest's 40-hex upstream pin.

    Returns:
        FIX004 for each retarget heading whose parenthesis is missing or is not
        the pin's first 8 hex. No finding when the section is absent.
    """
    pin8 = pin.lower()[:8]
    out = []
    for sec in doc.sections:
        if sec.key != "retarget":
            continue
        if (
            sec.pin is None
            or sec.pin.lower() != pin8
            or not _HEX8_RE.match(sec.pin.lower())
        ):
            got = "no pin" if sec.pin is None else repr(sec.pin)
            out.append(
                finding(
                    doc,
                    "FIX004",
                    sec.line,
                    f"retarget heading names {got}, the manifest's pin is {pin8}",
                    f"use: ## {RETARGET_PREFIX} ({pin8})",
                )
            )
    return out


def check_sections(doc: Document) -> list[Finding]:
    """Only the known sections, each at most once, in :data:`SECTION_ORDER`.

    A line that only looks like a known heading (``##Fixes to the fork's
    kernels``, ``### Fixes ...``, another case, no ``#`` at all) opened that
    section when parsed (so its entries keep their checks) and is FIX026 here.

    Returns:
        FIX005 per unknown ``##`` (or extra ``#``) heading; FIX006 per section that
        repeats an earlier one or comes after a section that must follow it;
        FIX026 per mangled heading.
    """
    out = []
    seen: dict[str, int] = {}
    highest = -1
    for sec in doc.sections:
        if sec.mangled and sec.key is not None:
            want = (
                f"## {RETARGET_PREFIX} ({sec.pin or '<pin8>'})"
                if sec.key == "retarget"
                else f"## {SECTION_HEADINGS[sec.key]}"
            )
            raw = (
                doc.lines[sec.line - 1].strip()
                if 0 < sec.line <= len(doc.lines)
                else sec.heading
            )
            out.append(
                finding(
                    doc,
                    "FIX026",
                    sec.line,
                    f"{raw[:80]!r} looks like the heading {want!r} but is not written as it",
                    f"write it exactly: {want}",
                )
            )
        if sec.key is None:
            out.append(
                finding(
                    doc,
                    "FIX005",
                    sec.line,
                    f"unknown section {sec.heading!r}",
                    "known sections: "
                    + "; ".join(
                        [f"{RETARGET_PREFIX} (<pin8>)", *SECTION_HEADINGS.values()]
                    ),
                )
            )
            continue
        idx = SECTION_ORDER.index(sec.key)
        if sec.key in seen:
            out.append(
                finding(
                    doc,
                    "FIX006",
                    sec.line,
                    f"section {sec.heading!r} repeats the one at line {seen[sec.key]}",
                    "merge the two sections",
                )
            )
        elif idx < highest:
            out.append(
                finding(
                    doc,
                    "FIX006",
                    sec.line,
                    f"section {sec.heading!r} is out of order",
                    "order: retarget, kernels, build, API, dropped",
                )
            )
        seen.setdefault(sec.key, sec.line)
        highest = max(highest, idx)
    return out


def check_numbering(doc: Document) -> list[Finding]:
    """Entry numbers are exactly ``1..N``, no gap, no duplicate (order free across sections).

    The work is proportional to the number of entries, not to the largest
    number: numbers above :data:`MAX_ENTRY_NUMBER` are reported and left out of
    the gap check, and a run of missing numbers is one finding.

    Returns:
        FIX007 per run of missing numbers (at the first entry numbered above it),
        per number below 1 and per number above :data:`MAX_ENTRY_NUMBER`; FIX008
        per repeated number (at the repeat).
    """
    out = []
    entries = doc.entries()
    first: dict[int, int] = {}
    for e in entries:
        if e.number < 1:
            out.append(
                finding(
                    doc,
                    "FIX007",
                    e.line,
                    f"entry number {e.number}: numbers start at 1",
                )
            )
        elif e.number > MAX_ENTRY_NUMBER:
            out.append(
                finding(
                    doc,
                    "FIX007",
                    e.line,
                    f"entry number {e.number} is above {MAX_ENTRY_NUMBER}",
                    "renumber it to the next free number (overlay fix list shows them)",
                )
            )
        elif e.number in first:
            out.append(
                finding(
                    doc,
                    "FIX008",
                    e.line,
                    f"entry number {e.number} is used twice (first at line {first[e.number]})",
                    "renumber one of them to the next free number",
                )
            )
        else:
            first[e.number] = e.line
    expected = 1
    for n in sorted(first):
        if n > expected:
            missing = (
                f"{expected} is missing"
                if n == expected + 1
                else f"{expected}-{n - 1} are missing"
            )
            out.append(
                finding(
                    doc,
                    "FIX007",
                    first[n],
                    f"entry numbers have a gap: {missing}",
                    f"numbers must run 1..{len(first)} with no gap",
                )
            )
        expected = n + 1
    return sorted_findings(out)


def check_items(doc: Document) -> list[Finding]:
    """Each item has the shape its section wants.

    Returns:
        FIX009 numbered entry in the Dropped section; FIX010 ``-`` bullet in a
        numbered section; FIX011 a numbered line without ``**Title.**``;
        FIX012 an entry or bullet before the first ``##`` section.
    """
    out = []
    for sec in [doc.preamble, *doc.sections]:
        for m in sec.malformed:
            out.append(
                finding(
                    doc,
                    "FIX011",
                    m.line,
                    f"malformed entry {m.text[:60]!r}",
                    "an entry is 'N. **Title.** paragraph'",
                )
            )
        if sec is doc.preamble:
            for e in sec.entries:
                out.append(
                    finding(
                        doc,
                        "FIX012",
                        e.line,
                        f"entry {e.number} is outside any section",
                        "move it under its section heading",
                    )
                )
            for b in sec.bullets:
                out.append(
                    finding(
                        doc,
                        "FIX012",
                        b.line,
                        "bullet is outside any section",
                        "move it under '## Dropped from the vendored set'",
                    )
                )
            continue
        if sec.key == "dropped":
            for e in sec.entries:
                out.append(
                    finding(
                        doc,
                        "FIX009",
                        e.line,
                        f"numbered entry {e.number} in the Dropped section",
                        "the Dropped section holds '- ' bullets; move fixes to their section",
                    )
                )
        elif sec.key is not None:
            for b in sec.bullets:
                out.append(
                    finding(
                        doc,
                        "FIX010",
                        b.line,
                        f"bullet in section {sec.heading!r}, which holds numbered entries",
                        "write it as 'N. **Title.** paragraph'",
                    )
                )
    return sorted_findings(out)
