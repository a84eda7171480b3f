"""The ``LOCAL_FIXES.md`` model: format constants, finding codes and the parsed shapes.

Everything here is plain data: :class:`Document` (what :func:`overlay.records.fixes.parse`
returns) with its :class:`Section`, :class:`Entry`, :class:`Bullet` and
:class:`Malformed` items; :class:`PatchRecord` (what the cross-checks know about one
patch); :data:`CODES` (every ``FIXnnn`` code with its severity); and the two helpers
every check uses to build and order its findings.
"""

import dataclasses
from typing import NamedTuple

from overlay.checks.findings import Finding

BACKEND_PREFIX = "mlx/backend/rocm/"
#: Names with a directory part may also be written relative to ``mlx/``
#: (``backend/metal/indexing.cpp``).
MLX_PREFIX = "mlx/"

#: Section keys, in the order the sections must appear.
SECTION_ORDER = ("retarget", "kernels", "build", "api", "dropped")
#: Sections whose entries must end with the manifest's closing sentence.
POLICY_SECTIONS = ("kernels", "build", "api")
#: Highest entry number accepted (FIX007 above it). A real file has tens of
#: entries; the bound keeps the numbering check from looping to a typo like
#: 20261201 (a date), which would take minutes and gigabytes.
MAX_ENTRY_NUMBER = 9999

#: Sections ``overlay fix new`` can add an entry to.
ENTRY_SECTIONS = ("retarget", "kernels", "build", "api")

RETARGET_PREFIX = "Retarget onto the MLX pin"
SECTION_HEADINGS = {
    "kernels": "Fixes to the fork's kernels",
    "build": "Fixes to the fork's build",
    "api": "Additions to the fork's API",
    "dropped": "Dropped from the vendored set",
}

TITLE_PREFIX = "Local changes relative to "


#: Every code the fixes package emits -> (severity, one-line meaning); documented in
#: docs/findings.md.
CODES = {
    "FIX001": (
        "error",
        "title missing or not 'Local changes relative to <fork repo>@<sha8>'",
    ),
    "FIX002": ("error", "title names another fork repository"),
    "FIX003": ("error", "title commit is not the manifest fork commit's first 8 hex"),
    "FIX004": (
        "error",
        "retarget heading does not name the manifest pin's first 8 hex",
    ),
    "FIX005": ("error", "unknown section"),
    "FIX006": ("error", "section repeated or out of order"),
    "FIX007": (
        "error",
        "entry numbering has a gap (or a number below 1 or above 9999)",
    ),
    "FIX008": ("error", "duplicate entry number"),
    "FIX009": ("error", "numbered entry in the Dropped section"),
    "FIX010": ("error", "bullet in a numbered section"),
    "FIX011": ("error", "malformed entry (no **Title.**)"),
    "FIX012": ("error", "entry or bullet outside any section"),
    "FIX013": ("error", "entry does not end with the policy closing sentence"),
    "FIX014": ("error", "upstream marking"),
    "FIX015": ("error", "patch package under docs/**/upstream/"),
    "FIX016": ("error", "conflict marker"),
    "FIX017": ("error", "patch has no Local-Fix trailer (or not a number)"),
    "FIX018": ("error", "patch has no Forwarded trailer"),
    "FIX019": ("error", "Local-Fix names no entry"),
    "FIX020": ("error", "entry does not name a file its patch touches"),
    "FIX021": ("error", "entry names a file that does not exist"),
    "FIX022": ("error", "uncarried fork-changed path not listed as dropped"),
    "FIX023": ("error", "resolution not named by a retarget entry"),
    "FIX024": ("warning", "policy-section entry has no patch"),
    "FIX025": ("warning", "stale name in the Dropped section"),
    "FIX026": (
        "error",
        "a line looks like a known section heading but is not written as it",
    ),
    "FIX027": ("error", "a patch follows an upstream commit the pin lacks"),
}

#: Retired ``FIXnnn`` codes -> what each meant (none yet). A code, once released, never
#: changes meaning: none of these may be declared in :data:`CODES` again.
RETIRED: dict[str, str] = {}


@dataclasses.dataclass(frozen=True)
class Entry:
    """A numbered entry ``N. **Title.** paragraph``.

    Attributes:
        number: ``N``.
        title: the bold title without its final period.
        text: the paragraph after the title, whitespace collapsed to single spaces.
        line: 1-based line of ``N.``.
        end_line: 1-based last line of the paragraph.
        section: key of the enclosing section (``"retarget"``, ``"kernels"``,
            ``"build"``, ``"api"``, ``"dropped"``), or ``None`` (unknown section or
            before the first ``##``).
        files: backticked tokens that look like paths (contain ``/`` or end in a
            file extension), first occurrence order, no duplicates.
        file_lines: for each of ``files``, the 1-based line it is first named on.
    """

    number: int
    title: str
    text: str
    line: int
    end_line: int
    section: str | None
    files: tuple[str, ...]
    file_lines: dict[str, int] = dataclasses.field(
        compare=False, hash=False, repr=False, default_factory=dict
    )


class Bullet(NamedTuple):
    """An unnumbered ``- text`` bullet (the Dropped section's items).

    Attributes:
        text: text after the marker, whitespace collapsed.
        line: 1-based line of the marker.
        end_line: 1-based last line.
        section: key of the enclosing section, or ``None``.
        names: the backticked tokens the bullet starts with (``- `a`, `b/`: reason``):
            paths, or directory prefixes ending in ``/``; backticks in the reason
            are not names.
    """

    text: str
    line: int
    end_line: int
    section: str | None
    names: tuple[str, ...]


class Malformed(NamedTuple):
    """A line that starts like an entry (``N.``) but has no ``**Title.**``."""

    line: int
    text: str
    section: str | None


@dataclasses.dataclass
class Section:
    """One ``## heading`` and what it holds.

    Attributes:
        key: one of :data:`SECTION_ORDER`, or ``None`` for an unknown heading.
        heading: heading text without the ``##``.
        line: 1-based heading line (0 for the pseudo-section before any heading).
        end_line: last line before the next ``#``/``##`` heading (or end of file).
        level: number of ``#`` in the heading (0 for a heading line that lost its ``#``).
        pin: for ``retarget``, the text inside the parentheses (``None`` if absent).
        mangled: the line only looks like a known heading (``##Fixes ...``,
            ``### Fixes ...``, another case or punctuation): ``key`` is that
            section's, so its entries are still checked, and FIX026 reports the line.
        entries, bullets, malformed: the items in document order.
    """

    key: str | None
    heading: str
    line: int
    end_line: int
    level: int = 2
    pin: str | None = None
    mangled: bool = False
    entries: list[Entry] = dataclasses.field(default_factory=list)
    bullets: list[Bullet] = dataclasses.field(default_factory=list)
    malformed: list[Malformed] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Document:
    """A parsed ``LOCAL_FIXES.md``.

    Attributes:
        text: the source text.
        path: repo-relative path used in findings (default ``LOCAL_FIXES.md``).
        title: the H1 text, or ``None`` when the first non-blank line is no H1.
        title_line: its 1-based line (``None`` when absent).
        fork_repo, fork_sha: parsed from ``Local changes relative to REPO@SHA``
            (``None`` when the title does not have that shape).
        preamble: pseudo-section (``key=None``, ``line=0``) holding items that come
            before the first ``##`` heading.
        sections: the ``##`` (and any later ``#``) sections in document order.
    """

    text: str
    path: str
    title: str | None
    title_line: int | None
    fork_repo: str | None
    fork_sha: str | None
    preamble: Section
    sections: list[Section]

    @property
    def lines(self) -> list[str]:
        """The source split into lines (no line ends)."""
        return self.text.splitlines()

    def entries(self) -> list[Entry]:
        """Every numbered entry in document order (preamble and unknown sections included)."""
        out = list(self.preamble.entries)
        for sec in self.sections:
            out.extend(sec.entries)
        return out

    def section(self, key: str) -> Section | None:
        """The first section with ``key`` (one of :data:`SECTION_ORDER`), or ``None``."""
        for sec in self.sections:
            if sec.key == key:
                return sec
        return None

    def entry(self, number: int) -> Entry | None:
        """The first entry numbered ``number``, or ``None``."""
        for e in self.entries():
            if e.number == number:
                return e
        return None


class PatchRecord(NamedTuple):
    """What the cross-checks need to know about one patch of the series.

    A plain 5-tuple ``(path, local_fix, forwarded, touched, deleted)`` is accepted
    wherever a ``PatchRecord`` is.

    Attributes:
        path: repo-relative patch path, e.g. ``patches-rocm/0001-x.patch``.
        local_fix: the ``Local-Fix:`` trailer value (int or its string), every value
            when the trailer repeats (a tuple), or ``None``.
        forwarded: the ``Forwarded:`` trailer value, or ``None``.
        touched: every tree path the patch touches (old and new names of a rename).
        deleted: the tree paths the patch deletes.
        text: optional patch text; when given, findings point at the trailer lines.
    """

    path: str
    local_fix: int | str | tuple[str, ...] | None
    forwarded: str | None
    touched: frozenset | set
    deleted: frozenset | set
    text: str | None = None


def finding(
    doc_or_path: Document | str,
    code: str,
    line: int | None,
    message: str,
    hint: str | None = None,
    severity: str = "error",
) -> Finding:
    """A :class:`~overlay.checks.findings.Finding` of ``code`` at ``line`` of a document.

    Args:
        doc_or_path: the :class:`Document` (its ``path`` is reported) or a repo-relative
            path (a patch's, for the cross-checks).
        code: ``FIXnnn`` (one of :data:`CODES`).
        line: 1-based line, or ``None``.
        message, hint: the finding's text.
        severity: ``"error"`` or ``"warning"``.
    """
    path = doc_or_path.path if isinstance(doc_or_path, Document) else doc_or_path
    return Finding(
        code=code, severity=severity, path=path, line=line, message=message, hint=hint
    )


def sorted_findings(findings: list[Finding]) -> list[Finding]:
    """``findings`` ordered by line, then code, then message (a stable report order)."""
    return sorted(findings, key=lambda f: (f.line or 0, f.code, f.message))
