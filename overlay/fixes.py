"""``LOCAL_FIXES.md``: model, parser, validator and new-entry rendering.

The format is DESIGN 7::

    # Local changes relative to NripeshN/mlx@75915908

    ## Retarget onto the MLX pin (39886de4)

    1. **Title.** Paragraph naming `mlx/backend/rocm/device.cpp`, possibly
       wrapped over several lines.

    ## Fixes to the fork's kernels
    ## Fixes to the fork's build
    ## Additions to the fork's API

    2. **Title.** ... <closing sentence from the manifest's [policy]>

    ## Dropped from the vendored set

    - `docs/some-dir/`, `setup.py`: why they are not carried.

Sections come in that order, each optional. Entries are numbered ``1..N``
across the whole file (order free across sections); the Dropped section holds
``- `` bullets only. An entry's paragraph ends at a blank line, a heading, or
the next entry or bullet; continuation lines may be indented or not.

Every check is a plain function returning ``list[Finding]`` (codes ``FIXnnn``,
documented in ``docs/findings.md``); they take plain inputs (strings, sets of
paths, :class:`PatchRecord` tuples), so ``overlay verify`` can feed them from git
and tests can feed them literals.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from overlay.errors import OverlayError
from overlay.findings import Finding
from overlay.fsutil import RecordMissing, atomic_write, read_record_text
from overlay.templating import render_template

FILE_NAME = "LOCAL_FIXES.md"
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
#: 20261201 (a date), which once took minutes and gigabytes.
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

_TITLE_RE = re.compile(r"^Local changes relative to (?P<repo>\S+?)@(?P<sha>\S+)$")
_RETARGET_RE = re.compile(r"^Retarget onto the MLX pin \((?P<pin>[^()\s]*)\)$")
_HEADING_RE = re.compile(r"^(?P<hashes>#{1,6})(?:\s+(?P<text>.*?))?\s*$")
#: Any run of ``#`` then text, space or not: where a mangled heading is looked for.
_LOOSE_HEADING_RE = re.compile(r"^(?P<hashes>#+)\s*(?P<text>.*?)\s*$")
_LOOSE_PIN_RE = re.compile(r"\((?P<pin>[^()\s]*)\)")
_NUMBERED_RE = re.compile(r"^(?P<num>\d+)[.)]\s+(?P<rest>.*)$")
_ENTRY_TITLE_RE = re.compile(
    r"^\*\*(?P<title>[^*]+?)(?P<dot1>\.?)\*\*(?P<dot2>\.?)(?:\s+(?P<text>.*))?$"
)
_BULLET_RE = re.compile(r"^[-*+]\s+(?P<text>.*)$")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_BACKTICK_RE = re.compile(r"`([^`\n]+)`")
_BULLET_HEAD_RE = re.compile(r"^(?:`[^`]+`\s*(?:,\s*|and\s+)?)+")
# Word characters include non-ASCII letters (``naïve_gemm.hip``); a space inside a name
# counts when the token also has a directory part (git quotes such names, shared case 10).
_PATHLIKE_RE = re.compile(r"^[\w.+@-]+(?:/[\w.+@ -]+)*/?$")
_EXT_RE = re.compile(r"(?:[^./]\.[A-Za-z][A-Za-z0-9_+-]*|^\.[A-Za-z][A-Za-z0-9_.-]*)$")
_HEX8_RE = re.compile(r"^[0-9a-f]{8}$")

#: Case-insensitive phrases that mark an entry as meant for upstream (DESIGN 7 forbids them).
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
_UPSTREAM_RE = re.compile(
    "|".join(f"(?:{p})" for p in UPSTREAM_PATTERNS), re.IGNORECASE
)

#: An issue reference that may follow the closing sentence: ``owner/repo#N`` or ``#N``
#: (several separated by commas or semicolons), in parentheses, after the sentence's
#: final period or just before it.
_ISSUE_REF = r"(?:[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)?#\d+"
_TRAILING_REF_RE = re.compile(
    rf"\s+\((?:{_ISSUE_REF})(?:\s*[,;]\s*{_ISSUE_REF})*\)(?P<dot>\.?)$"
)

#: Extensions of the files a source tree holds (sources, headers, build and config files,
#: docs). For FIX021 a backticked name is a repository path only with one of these:
#: ``state.mutex``, ``blockIdx.y``, ``event.o`` and a model id are not.
SOURCE_EXTENSIONS = frozenset(
    {
        "c",
        "cc",
        "cpp",
        "cxx",
        "c++",
        "h",
        "hh",
        "hpp",
        "hxx",
        "h++",
        "inc",
        "inl",
        "ipp",
        "tpp",
        "cu",
        "cuh",
        "hip",
        "metal",
        "m",
        "mm",
        "s",
        "asm",
        "cmake",
        "txt",
        "in",
        "py",
        "pyi",
        "pyx",
        "sh",
        "bash",
        "ps1",
        "bat",
        "toml",
        "json",
        "yml",
        "yaml",
        "cfg",
        "ini",
        "md",
        "rst",
        "rs",
        "go",
        "java",
        "swift",
        "patch",
        "diff",
        "j2",
        "mk",
    }
)
#: Directories only a build holds: a name under one is an artefact, not a repository path.
ARTEFACT_DIRS = frozenset({"_deps", "CMakeFiles", "build"})

_CONFLICT_RE = re.compile(
    r"^(?:<<<<<<<(?:[ \t].*)?|\|\|\|\|\|\|\|(?:[ \t].*)?|=======|>>>>>>>(?:[ \t].*)?)$"
)

#: Every code this module emits -> (severity, one-line meaning); documented in docs/findings.md.
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
}

PLACEHOLDER_BODY = (
    "TODO: say what was wrong, what this fix changes, and which suite "
    "or test proves it."
)


# --------------------------------------------------------------------------- model


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
    file_lines: dict = dataclasses.field(
        compare=False, hash=False, repr=False, default_factory=dict
    )


@dataclasses.dataclass(frozen=True)
class Bullet:
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


@dataclasses.dataclass(frozen=True)
class Malformed:
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
    entries: list = dataclasses.field(default_factory=list)
    bullets: list = dataclasses.field(default_factory=list)
    malformed: list = dataclasses.field(default_factory=list)


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
    sections: list

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
        local_fix: the ``Local-Fix:`` trailer value (int or its string), or ``None``.
        forwarded: the ``Forwarded:`` trailer value, or ``None``.
        touched: every tree path the patch touches (old and new names of a rename).
        deleted: the tree paths the patch deletes.
        text: optional patch text; when given, findings point at the trailer lines.
    """

    path: str
    local_fix: int | str | None
    forwarded: str | None
    touched: frozenset | set
    deleted: frozenset | set
    text: str | None = None


# --------------------------------------------------------------------------- parsing


def looks_like_path(token: str) -> bool:
    """True when a backticked token counts as a file: path-shaped, with a ``/`` or an extension.

    ``mlx/backend/rocm/device.cpp``, ``gemms/x.cpp``, ``pinned.cu``, ``CMakeLists.txt``
    and ``.gitignore`` count; ``std::mutex``, ``hipblasLtMatmul()``, ``MLX_BUILD_ROCM``
    and ``0.5`` do not.
    """
    token = token.strip()
    if not token or not _PATHLIKE_RE.match(token):
        return False
    if "/" in token:
        return True
    return bool(_EXT_RE.search(token))


def _backticked(line: str) -> list[str]:
    return [t.strip() for t in _BACKTICK_RE.findall(line)]


def _collapse(parts: Iterable[str]) -> str:
    return " ".join(" ".join(p.split()) for p in parts if p.strip()).strip()


class _Item:
    """Builder for an entry or bullet while parsing."""

    def __init__(self, kind: str, line: int, section: Section, first: str, **extra):
        self.kind = kind
        self.line = line
        self.end_line = line
        self.section = section
        self.parts = [first]
        self.raw = [(line, first)]
        self.extra = extra

    def add(self, line: int, text: str, *, prose: bool = True) -> None:
        self.end_line = line
        self.raw.append((line, text))
        if prose:
            self.parts.append(text)

    def finish(self) -> None:
        text = _collapse(self.parts)
        if self.kind == "entry":
            files: list[str] = []
            file_lines: dict[str, int] = {}
            for lineno, raw in self.raw:
                for tok in _backticked(raw):
                    if looks_like_path(tok) and tok not in file_lines:
                        files.append(tok)
                        file_lines[tok] = lineno
            self.section.entries.append(
                Entry(
                    number=self.extra["number"],
                    title=self.extra["title"],
                    text=text,
                    line=self.line,
                    end_line=self.end_line,
                    section=self.section.key,
                    files=tuple(files),
                    file_lines=file_lines,
                )
            )
        else:
            names: list[str] = []
            head = _BULLET_HEAD_RE.match(text)
            for tok in _backticked(head.group(0) if head else ""):
                if tok not in names:
                    names.append(tok)
            self.section.bullets.append(
                Bullet(
                    text=text,
                    line=self.line,
                    end_line=self.end_line,
                    section=self.section.key,
                    names=tuple(names),
                )
            )


def _section_key(heading: str) -> tuple[str | None, str | None]:
    if heading.startswith(RETARGET_PREFIX):
        m = _RETARGET_RE.match(heading)
        return "retarget", (m.group("pin") if m else None)
    for key, text in SECTION_HEADINGS.items():
        if heading == text:
            return key, None
    return None, None


def _normal(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.casefold())


_NORMAL_HEADINGS = {_normal(text): key for key, text in SECTION_HEADINGS.items()}
_NORMAL_RETARGET = _normal(RETARGET_PREFIX)


def _loose_section_key(heading: str) -> tuple[str | None, str | None]:
    """The section a heading-like text names when case, spacing and punctuation are ignored."""
    normal = _normal(heading)
    if normal in _NORMAL_HEADINGS:
        return _NORMAL_HEADINGS[normal], None
    if normal.startswith(_NORMAL_RETARGET):
        m = _LOOSE_PIN_RE.search(heading)
        return "retarget", (m.group("pin") if m else None)
    return None, None


def parse(text: str, path: str = FILE_NAME) -> Document:
    """Parse ``LOCAL_FIXES.md`` text into a :class:`Document` (format: DESIGN 7).

    Parsing never fails: whatever does not fit the format is kept where the
    checks can report it (unknown sections, malformed numbered lines, items
    before the first section).

    Args:
        text: the file's content (``str``; ``\\r\\n`` line ends are fine).
        path: repo-relative path to report in findings.

    Returns:
        The :class:`Document`.
    """
    lines = text.splitlines()
    title = title_line = fork_repo = fork_sha = None
    first_content = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    preamble = Section(key=None, heading="", line=0, end_line=len(lines), level=0)
    sections: list[Section] = []
    current = preamble
    item: _Item | None = None
    in_fence = False

    def close() -> None:
        nonlocal item
        if item is not None:
            item.finish()
            item = None

    for idx, raw in enumerate(lines):
        lineno = idx + 1
        s = raw.rstrip()
        if _FENCE_RE.match(s):
            in_fence = not in_fence
            if item is not None:
                item.add(lineno, s, prose=False)
            continue
        if in_fence:
            if item is not None:
                item.add(lineno, s, prose=False)
            continue
        if not s.strip():
            close()
            continue
        indent = len(s) - len(s.lstrip(" "))
        body = s.strip()
        hm = _HEADING_RE.match(body) if indent < 4 else None
        if hm and len(hm.group("hashes")) == 1 and idx == first_content:
            close()
            title, title_line = (hm.group("text") or "").strip(), lineno
            tm = _TITLE_RE.match(title)
            if tm:
                fork_repo, fork_sha = tm.group("repo"), tm.group("sha")
            continue
        # A known heading written otherwise (no space after the #s, three #s, no #s
        # on a line of its own, another case or punctuation) still opens its section,
        # so its entries keep their checks, and is reported (FIX026) rather than
        # moving its entries into the section before it.
        lm = None
        if indent < 4:
            lm = _LOOSE_HEADING_RE.match(body) or (
                None
                if item is not None
                else re.match(r"^()(?P<text>[A-Za-z].*)$", body)
            )
        loose_key, loose_pin = (
            _loose_section_key(lm.group("text")) if lm else (None, None)
        )
        if hm or loose_key:
            close()
            level = len(hm.group("hashes")) if hm else len(lm.group(1) or "")
            htext = (hm.group("text") or "").strip() if hm else body
            key, pin = _section_key(htext) if hm and level == 2 else (None, None)
            mangled = key is None and loose_key is not None
            if mangled:
                key, pin = loose_key, loose_pin
            if level <= 2 or mangled:
                if current is not preamble:
                    current.end_line = lineno - 1
                elif preamble.end_line == len(lines):
                    preamble.end_line = lineno - 1
                current = Section(
                    key=key,
                    heading=htext,
                    line=lineno,
                    end_line=len(lines),
                    level=level,
                    pin=pin,
                    mangled=mangled,
                )
                sections.append(current)
            # other deeper headings only end the current item
            continue
        starts = indent == 0 or (indent < 4 and item is None)
        nm = _NUMBERED_RE.match(body) if starts else None
        if nm:
            close()
            em = _ENTRY_TITLE_RE.match(nm.group("rest"))
            # More than twelve digits is no entry number (and int() of thousands of digits raises).
            if (
                em
                and (em.group("dot1") or em.group("dot2"))
                and len(nm.group("num")) <= 12
            ):
                item = _Item(
                    "entry",
                    lineno,
                    current,
                    em.group("text") or "",
                    number=int(nm.group("num")),
                    title=em.group("title").strip(),
                )
            else:
                current.malformed.append(
                    Malformed(line=lineno, text=body, section=current.key)
                )
            continue
        bm = _BULLET_RE.match(body) if starts else None
        if bm:
            close()
            item = _Item("bullet", lineno, current, bm.group("text"))
            continue
        if item is not None:
            item.add(lineno, body)
        # otherwise: free prose, kept only in ``text``
    close()
    return Document(
        text=text,
        path=path,
        title=title,
        title_line=title_line,
        fork_repo=fork_repo,
        fork_sha=fork_sha,
        preamble=preamble,
        sections=sections,
    )


def load(path: str | os.PathLike, rel_path: str = FILE_NAME) -> Document:
    """Read and parse ``LOCAL_FIXES.md`` from disk.

    The file is read with :func:`overlay.fsutil.read_record`, with the
    directory holding it as the repository: a regular file (a symlink to a
    file in that directory tree is followed), at most 16 MiB, UTF-8.

    Args:
        path: file to read (UTF-8), normally ``<repository>/LOCAL_FIXES.md``.
        rel_path: repo-relative path reported in findings and messages.

    Returns:
        The parsed :class:`Document`.

    Raises:
        OverlayError: the file is missing (with a hint); RecordError (an
            OverlayError) when it is refused (symlink out of the repository,
            FIFO, directory, too big), unreadable or not UTF-8 (the byte offset
            is named) (exit 2).
    """
    full = os.path.abspath(os.fspath(path))
    try:
        text = read_record_text(
            os.path.dirname(full), os.path.basename(full), what="file"
        )
    except RecordMissing:
        raise OverlayError(
            f"{rel_path} not found at {os.fspath(path)}",
            hint="create it (overlay fix new adds entries) or pass --root",
        ) from None
    # A byte-order mark is not part of the title line (line numbers keep).
    text = text.removeprefix("\ufeff")
    return parse(text, rel_path)


def fork_repo_from_url(url: str) -> str:
    """``owner/name`` from a fork URL (``https://github.com/NripeshN/mlx.git`` -> ``NripeshN/mlx``).

    Works for https, ``git@host:owner/name.git`` and local paths (last two components).
    """
    u = url.rstrip("/")
    if u.endswith(".git"):
        u = u[:-4]
    u = u.replace(":", "/")
    parts = [p for p in u.split("/") if p]
    return "/".join(parts[-2:])


# --------------------------------------------------------------------------- helpers


def _f(
    doc_or_path,
    code: str,
    line: int | None,
    message: str,
    hint: str | None = None,
    severity: str = "error",
) -> Finding:
    path = doc_or_path.path if isinstance(doc_or_path, Document) else doc_or_path
    return Finding(
        code=code, severity=severity, path=path, line=line, message=message, hint=hint
    )


def _sorted(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.line or 0, f.code, f.message))


def _blocks(lines: Sequence[str]):
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


def _join_block(cur):
    text = ""
    offsets = []
    for lineno, s in cur:
        if text:
            text += " "
        offsets.append((len(text), lineno))
        text += " ".join(s.split())
    return text, offsets


def _line_at(offsets, pos: int) -> int:
    line = offsets[0][1]
    for off, ln in offsets:
        if off <= pos:
            line = ln
        else:
            break
    return line


# --------------------------------------------------------------------------- textual checks


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
            _f(
                doc,
                "FIX001",
                1,
                "no title: the first line must be the H1 title",
                f"start the file with: {want}",
            )
        ]
    if doc.fork_repo is None:
        return [
            _f(
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
            _f(
                doc,
                "FIX002",
                doc.title_line,
                f"title names fork {doc.fork_repo!r}, the manifest's fork is {fork_repo!r}",
                f"use: {want}",
            )
        )
    if doc.fork_sha.lower() != sha8 or not _HEX8_RE.match(doc.fork_sha.lower()):
        out.append(
            _f(
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
                _f(
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
        if sec.mangled:
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
                _f(
                    doc,
                    "FIX026",
                    sec.line,
                    f"{raw[:80]!r} looks like the heading {want!r} but is not written as it",
                    f"write it exactly: {want}",
                )
            )
        if sec.key is None:
            out.append(
                _f(
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
                _f(
                    doc,
                    "FIX006",
                    sec.line,
                    f"section {sec.heading!r} repeats the one at line {seen[sec.key]}",
                    "merge the two sections",
                )
            )
        elif idx < highest:
            out.append(
                _f(
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
                _f(
                    doc,
                    "FIX007",
                    e.line,
                    f"entry number {e.number}: numbers start at 1",
                )
            )
        elif e.number > MAX_ENTRY_NUMBER:
            out.append(
                _f(
                    doc,
                    "FIX007",
                    e.line,
                    f"entry number {e.number} is above {MAX_ENTRY_NUMBER}",
                    "renumber it to the next free number (overlay fix list shows them)",
                )
            )
        elif e.number in first:
            out.append(
                _f(
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
                _f(
                    doc,
                    "FIX007",
                    first[n],
                    f"entry numbers have a gap: {missing}",
                    f"numbers must run 1..{len(first)} with no gap",
                )
            )
        expected = n + 1
    return _sorted(out)


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
                _f(
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
                    _f(
                        doc,
                        "FIX012",
                        e.line,
                        f"entry {e.number} is outside any section",
                        "move it under its section heading",
                    )
                )
            for b in sec.bullets:
                out.append(
                    _f(
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
                    _f(
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
                    _f(
                        doc,
                        "FIX010",
                        b.line,
                        f"bullet in section {sec.heading!r}, which holds numbered entries",
                        "write it as 'N. **Title.** paragraph'",
                    )
                )
    return _sorted(out)


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
                _f(doc, "FIX013", e.end_line, message, f"end it with: {sentence}")
            )
    return out


def check_upstream_marking(doc: Document) -> list[Finding]:
    """No upstream marking anywhere in the file (DESIGN 7; phrases in :data:`UPSTREAM_PATTERNS`).

    Phrases wrapped across lines are found; the finding points at the line where
    the phrase starts.

    Returns:
        FIX014 per occurrence.
    """
    out = []
    for text, offsets in _blocks(doc.lines):
        for m in _UPSTREAM_RE.finditer(text):
            out.append(
                _f(
                    doc,
                    "FIX014",
                    _line_at(offsets, m.start()),
                    f"upstream marking {m.group(0)!r}",
                    "fork-policy fixes are not proposed upstream; remove the marking",
                )
            )
    return out


def check_upstream_packages(doc: Document, repo_paths: Iterable[str]) -> list[Finding]:
    """No patch package under ``docs/**/upstream/`` (DESIGN 7).

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
        _f(
            first,
            "FIX015",
            1,
            f"upstream patch package {d} exists",
            "fork-policy fixes are not proposed upstream; remove the package",
        )
        for d, first in sorted(dirs.items())
    ]


def find_conflict_markers(text: str) -> list[tuple[int, str]]:
    """Lines that are merge conflict markers, by the one definition of :mod:`overlay.markers`
    (a setext heading underline ``=======`` outside a conflict is not one).

    Returns:
        ``[(1-based line, marker line), ...]``.
    """
    from overlay.markers import marker_lines

    return marker_lines(text)


def check_conflict_markers(doc: Document) -> list[Finding]:
    """No conflict markers in the file.

    Returns:
        FIX016 per marker line.
    """
    return [
        _f(
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
    out = _sorted(out)
    if repo_paths is not None:
        out += check_upstream_packages(doc, repo_paths)
    return out


# --------------------------------------------------------------------------- cross-checks


def _basenames(paths: Iterable[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in paths:
        out.setdefault(p.rsplit("/", 1)[-1], []).append(p)
    return out


def resolve_name(
    name: str, paths: set | frozenset, basenames: dict | None = None
) -> list[str]:
    """The tree paths a name from an entry can mean.

    Rules (DESIGN 7 / issue 3): a full path names itself; a path with a ``/`` is
    also tried relative to ``mlx/backend/rocm/``, then relative to ``mlx/``; a bare
    file name names every path with that base name (it counts as naming a file
    only when exactly one).

    Args:
        name: the backticked token.
        paths: the set of tree paths to resolve against.
        basenames: optional precomputed ``{base name: [paths]}`` for ``paths``.

    Returns:
        Candidate paths (empty when none).
    """
    if name.startswith("./"):
        name = name[2:]
    if name in paths:
        return [name]
    if "/" in name:
        for cand in (BACKEND_PREFIX + name, MLX_PREFIX + name):
            if cand in paths:
                return [cand]
        return []
    if basenames is None:
        basenames = _basenames(paths)
    return list(basenames.get(name, []))


def _dir_exists(name: str, paths: Iterable[str]) -> bool:
    prefix = name if name.endswith("/") else name + "/"
    alts = (prefix, BACKEND_PREFIX + prefix, MLX_PREFIX + prefix)
    return any(p.startswith(alts) for p in paths)


def names_repository_path(name: str, outside_tree: Sequence[str] = ()) -> bool:
    """Whether a backticked name counts as a repository path that must exist (FIX021).

    It counts when it has a directory part and a known source extension
    (:data:`SOURCE_EXTENSIONS`), or ends in ``/`` (a directory). It does not count
    when it is a bare file name (one that resolves is found anyway, and one that does
    not is prose: ``rocvirtual.cpp``, ``.hip``), an expression (``state.mutex``), a
    build artefact (``event.o``, anything under ``_deps/``, ``CMakeFiles/``,
    ``build/``), or when it matches a ``[policy] outside-tree`` glob (the team's own
    repository paths, third-party sources).

    Args:
        name: the backticked token.
        outside_tree: the manifest's ``[policy] outside-tree`` globs.
    Returns:
        True when FIX021 should look the name up.
    """
    from overlay.paths import glob_match

    name = name.removeprefix("./")
    if any(
        glob_match(name, g) or glob_match(name.rstrip("/"), g) for g in outside_tree
    ):
        return False
    parts = name.rstrip("/").split("/")
    if any(part in ARTEFACT_DIRS for part in parts):
        return False
    if name.endswith("/"):
        return True
    base = parts[-1]
    ext = base.rsplit(".", 1)[1].lower() if "." in base.lstrip(".") else ""
    return len(parts) > 1 and ext in SOURCE_EXTENSIONS


def patch_trailers(text: str) -> dict[str, tuple[str, int]]:
    """Trailers of a format-patch message: ``{name: (value, 1-based line)}``.

    Only lines before the first ``---`` separator count; the last occurrence wins.
    Also records ``"---"`` -> ``("", line)`` for the separator when present.
    """
    out: dict[str, tuple[str, int]] = {}
    for i, ln in enumerate(text.splitlines(), 1):
        if ln == "---" or ln.startswith("diff --git "):
            out["---"] = ("", i)
            break
        m = re.match(r"^([A-Za-z][A-Za-z0-9-]*):\s*(.*)$", ln)
        if m and m.group(1) in ("Local-Fix", "Forwarded"):
            out[m.group(1)] = (m.group(2).strip(), i)
    return out


def check_patch_entries(
    doc: Document,
    patches: Iterable[PatchRecord | tuple],
    patched_paths: Iterable[str],
    *,
    repo_paths: Iterable[str] = (),
    unparsed: Iterable[int] = (),
    outside_tree: Sequence[str] = (),
) -> list[Finding]:
    """Patches and entries agree (DESIGN 8, issue 3).

    For each patch: it has ``Local-Fix:`` and ``Forwarded:`` trailers; ``N`` is an
    entry; that entry names every file the patch touches (full path, path relative
    to ``mlx/backend/rocm/`` or to ``mlx/`` with a directory, or a bare file name
    unambiguous among all paths of the patched tree plus deleted paths). A patch
    may carry several ``Local-Fix:`` trailers (a file several entries change, as
    ``overlay import whole-file`` writes it): each is checked, and each entry counts
    as having a patch. For each entry: every name that counts as a repository path
    (:func:`names_repository_path`) exists in the patched tree, is deleted by one of
    its patches, or is a repo path (``repo_paths``, e.g.
    ``patches-rocm/resolved/...``); a directory name ending in ``/`` exists when some
    path is under it. Entries of the kernels/build/API sections that no patch points
    at get a warning.

    Args:
        doc: parsed document.
        patches: :class:`PatchRecord` or 5-tuples ``(path, local_fix, forwarded,
            touched, deleted)`` for every patch in the series; ``local_fix`` may be a
            list or tuple of the values of several ``Local-Fix:`` trailers.
        patched_paths: every path of the ``patched`` tree.
        repo_paths: overlay repository paths that entries may also name.
        unparsed: ``Local-Fix`` numbers of series patches whose diff does not parse
            (SER004 reports them): their entries do have a patch, so no FIX024.
        outside_tree: ``[policy] outside-tree`` globs: names FIX021 never reports.

    Returns:
        FIX017 (no ``Local-Fix`` or not a number), FIX018 (no ``Forwarded``),
        FIX019 (``N`` is not an entry), FIX020 (entry does not name a touched
        file), FIX021 (entry names a file that does not exist), FIX024 (warning:
        policy-section entry with no patch). Patch findings carry the patch path.
    """
    patched = set(patched_paths)
    records = [
        PatchRecord(*p) if not isinstance(p, PatchRecord) else p for p in patches
    ]
    all_deleted = set().union(*[set(p.deleted) for p in records]) if records else set()
    universe = patched | all_deleted
    base_u = _basenames(universe)
    repo = set(repo_paths)
    skip_fix024 = set(unparsed)
    by_entry: dict[int, list[PatchRecord]] = {}
    out: list[Finding] = []
    entries = {}
    for e in doc.entries():
        entries.setdefault(e.number, e)

    for p in records:
        tr = patch_trailers(p.text) if p.text else {}
        sep_line = tr.get("---", ("", 1))[1]
        lf_line = tr.get("Local-Fix", ("", sep_line))[1]
        fw_line = tr.get("Forwarded", ("", sep_line))[1]
        if p.forwarded is None or not str(p.forwarded).strip():
            out.append(
                _f(
                    p.path,
                    "FIX018",
                    fw_line,
                    "patch has no 'Forwarded:' trailer",
                    "add 'Forwarded: not-needed' above the '---' line",
                )
            )
        values = (
            list(p.local_fix)
            if isinstance(p.local_fix, (list, tuple))
            else [p.local_fix]
        )
        values = [v for v in values if v is not None and str(v).strip()]
        if not values:
            out.append(
                _f(
                    p.path,
                    "FIX017",
                    lf_line,
                    "patch has no 'Local-Fix:' trailer",
                    "add 'Local-Fix: N' naming its LOCAL_FIXES.md entry",
                )
            )
            continue
        for value in values:
            try:
                n = int(str(value).strip())
            except ValueError:
                out.append(
                    _f(
                        p.path,
                        "FIX017",
                        lf_line,
                        f"'Local-Fix: {str(value)[:40]}' is not an entry number",
                        "use 'Local-Fix: N' with N a LOCAL_FIXES.md entry number",
                    )
                )
                continue
            e = entries.get(n)
            if e is None:
                out.append(
                    _f(
                        p.path,
                        "FIX019",
                        lf_line,
                        f"'Local-Fix: {n}' names no LOCAL_FIXES.md entry",
                        "add the entry (overlay fix new) or fix the number",
                    )
                )
                continue
            by_entry.setdefault(n, []).append(p)
            out += _unnamed_touched(doc, e, p, universe, base_u)

    for e in doc.entries():
        own_deleted = (
            set().union(*[set(p.deleted) for p in by_entry.get(e.number, [])])
            if by_entry.get(e.number)
            else set()
        )
        exists_in = patched | own_deleted
        base_e = _basenames(exists_in)
        for name in e.files:
            if not names_repository_path(name, outside_tree):
                continue
            if resolve_name(name, exists_in, base_e) or name in repo:
                continue
            if _dir_exists(name, exists_in) or _dir_exists(name, repo):
                continue
            out.append(
                _f(
                    doc,
                    "FIX021",
                    e.file_lines.get(name, e.line),
                    f"entry {e.number} names `{name}`, which is not in the patched tree",
                    "fix the path, or drop it if the file is gone; a name outside the MLX tree "
                    "by design goes in [policy] outside-tree",
                )
            )
        if (
            e.section in POLICY_SECTIONS
            and e.number not in by_entry
            and e.number not in skip_fix024
        ):
            out.append(
                _f(
                    doc,
                    "FIX024",
                    e.line,
                    f"entry {e.number} has no patch in the series",
                    "add 'Local-Fix: N' to its patch, or remove the entry",
                    severity="warning",
                )
            )
    return out


def _unnamed_touched(
    doc: Document,
    e: Entry,
    p: PatchRecord,
    universe: set[str],
    base_u: dict[str, list[str]],
) -> list[Finding]:
    """FIX020 for each path ``p`` touches that entry ``e`` does not name."""
    out = []
    named: set[str] = set()
    ambiguous: dict[str, list[str]] = {}
    for name in e.files:
        cands = resolve_name(name, universe, base_u)
        if len(cands) == 1:
            named.add(cands[0])
        elif len(cands) > 1:
            for c in cands:
                ambiguous.setdefault(c, []).append(name)
    for t in sorted(p.touched):
        if t in named:
            continue
        if t in ambiguous:
            msg = (
                f"entry {e.number} names {ambiguous[t][0]!r}, ambiguous in the tree, "
                f"not {t} which {p.path} touches"
            )
        else:
            msg = f"entry {e.number} does not name {t}, which {p.path} touches"
        rel = t[len(BACKEND_PREFIX) :] if t.startswith(BACKEND_PREFIX) else ""
        out.append(
            _f(
                doc,
                "FIX020",
                e.line,
                msg,
                f"name it in backticks: `{t}` (or `{rel}`)"
                if "/" in rel
                else f"name it in backticks: `{t}`",
            )
        )
    return out


def _covers(name: str, path: str) -> bool:
    if name.endswith("/"):
        return path.startswith(name)
    return path == name


def check_dropped(
    doc: Document, fork_changed_not_carried: Iterable[str]
) -> list[Finding]:
    """Every fork-changed path the manifest does not carry is listed under Dropped.

    A path is listed when a Dropped bullet starts with it in backticks, or with a
    directory prefix ending in ``/`` that covers it.

    Args:
        doc: parsed document.
        fork_changed_not_carried: paths changed by the fork delta (merge base ..
            fork commit) that the manifest's carry globs exclude.

    Returns:
        FIX022 per unlisted path (at the Dropped heading, or line 1 when the
        section is absent); FIX025 (warning) per bullet name that covers none of
        the paths (stale).
    """
    paths = sorted(set(fork_changed_not_carried))
    sec = doc.section("dropped")
    bullets = list(sec.bullets) if sec else []
    names = [(n, b) for b in bullets for n in b.names]
    out = []
    line = sec.line if sec else 1
    for p in paths:
        if not any(_covers(n, p) for n, _ in names):
            out.append(
                _f(
                    doc,
                    "FIX022",
                    line,
                    f"fork-changed path {p} is not carried and not listed as dropped",
                    f"add under '## Dropped from the vendored set': - `{p}`: <why>",
                )
            )
    for n, b in names:
        if not any(_covers(n, p) for p in paths):
            out.append(
                _f(
                    doc,
                    "FIX025",
                    b.line,
                    f"dropped `{n}` matches no fork-changed path left uncarried",
                    "remove the stale name (the fork no longer changes it, or it is now carried)",
                    severity="warning",
                )
            )
    return out


RESOLVED_PREFIX = "patches-rocm/resolved/"


def check_resolutions(doc: Document, resolved_paths: Iterable[str]) -> list[Finding]:
    """Each ``patches-rocm/resolved/<path>`` file is named by an entry of the retarget section.

    An entry names a resolution when it names ``<path>`` or
    ``patches-rocm/resolved/<path>`` (full, backend-relative, or an unambiguous bare
    name among the resolutions).

    Args:
        doc: parsed document.
        resolved_paths: the resolution files, as ``patches-rocm/resolved/<path>`` or ``<path>``.

    Returns:
        FIX023 per resolution no retarget entry names (at the retarget heading, or
        line 1 when the section is absent).
    """
    targets = {}
    for rp in resolved_paths:
        t = rp[len(RESOLVED_PREFIX) :] if rp.startswith(RESOLVED_PREFIX) else rp
        targets[t] = rp if rp.startswith(RESOLVED_PREFIX) else RESOLVED_PREFIX + rp
    sec = doc.section("retarget")
    tset = set(targets)
    base = _basenames(tset)
    named: set[str] = set()
    for s in doc.sections:
        if s.key != "retarget":
            continue
        for e in s.entries:
            for name in e.files:
                if name.startswith(RESOLVED_PREFIX):
                    name = name[len(RESOLVED_PREFIX) :]
                cands = resolve_name(name, tset, base)
                if len(cands) == 1:
                    named.add(cands[0])
    line = sec.line if sec else 1
    return [
        _f(
            doc,
            "FIX023",
            line,
            f"resolution {targets[t]} is named by no retarget entry",
            f"add a retarget entry naming `{t}`",
        )
        for t in sorted(tset - named)
    ]


# --------------------------------------------------------------------------- fix list / fix new


def list_entries(
    doc: Document, patches: Iterable[PatchRecord | tuple] = ()
) -> list[dict]:
    """Entries as rows for ``overlay fix list``.

    Args:
        doc: parsed document.
        patches: optional patch records; each entry gets the paths of the
            patches whose ``Local-Fix`` is its number.

    Returns:
        ``[{"number", "title", "section", "line", "files": [..], "patches": [..]}]``
        in document order.
    """
    by_n: dict[int, list[str]] = {}
    for p in patches:
        p = p if isinstance(p, PatchRecord) else PatchRecord(*p)
        for value in (
            p.local_fix if isinstance(p.local_fix, (list, tuple)) else [p.local_fix]
        ):
            try:
                by_n.setdefault(int(str(value)), []).append(p.path)
            except ValueError:
                continue
    return [
        {
            "number": e.number,
            "title": e.title,
            "section": e.section,
            "line": e.line,
            "files": list(e.files),
            "patches": by_n.get(e.number, []),
        }
        for e in doc.entries()
    ]


def next_number(doc: Document) -> int:
    """The next free entry number: highest number + 1 (1 for an empty file).

    Numbers above :data:`MAX_ENTRY_NUMBER` (a FIX007 typo) are not counted.
    """
    return (
        max(
            (e.number for e in doc.entries() if e.number <= MAX_ENTRY_NUMBER), default=0
        )
        + 1
    )


def _heading_for(section: str, pin: str | None) -> str:
    if section == "retarget":
        if not pin:
            raise OverlayError(
                "the retarget section is missing and no pin was given to name it"
            )
        return f"## {RETARGET_PREFIX} ({pin.lower()[:8]})"
    return "## " + SECTION_HEADINGS[section]


def render_new_entry(
    doc: Document,
    section: str,
    title: str,
    files: Sequence[str],
    body: str | None = None,
    *,
    closing_sentence: str | None = None,
    pin: str | None = None,
) -> tuple[str, int]:
    """Render ``doc`` with a new entry appended to ``section`` (for ``overlay fix new``).

    The entry comes from ``overlay/templates/fix_entry.md.j2``: ``N. **Title.**``,
    the body (or a TODO placeholder sentence), the files in backticks, and for the
    kernels/build/API sections the closing sentence, wrapped to 88 columns with a
    3-space continuation indent. It goes after the last item of its section; a
    missing section is created in :data:`SECTION_ORDER` position.

    Args:
        doc: the parsed current document.
        section: ``"retarget"``, ``"kernels"``, ``"build"`` or ``"api"``.
        title: entry title (a final period is added if missing).
        files: paths the entry names (repo-relative or backend-relative).
        body: the paragraph; default a placeholder sentence to replace.
        closing_sentence: the manifest's ``[policy] closing-sentence`` (required
            for kernels/build/API).
        pin: the manifest's pin, needed only to create a missing retarget section.

    Returns:
        ``(new document text, entry number)``.

    Raises:
        OverlayError: unknown section, empty title, title or file with a backtick
            or newline, missing closing sentence, or a retarget section to create
            without a pin.
    """
    if section not in ENTRY_SECTIONS:
        raise OverlayError(
            f"unknown section {section!r}",
            hint="use one of: " + ", ".join(ENTRY_SECTIONS),
        )
    title = " ".join(title.split()).rstrip(".")
    if not title or "*" in title:
        raise OverlayError("the title must be non-empty and contain no '*'")
    for f in files:
        if not f or "`" in f or any(c.isspace() for c in f):
            raise OverlayError(f"bad file name {f!r}")
    if section in POLICY_SECTIONS and not closing_sentence:
        raise OverlayError(
            "no closing sentence: [policy] closing-sentence is missing from the manifest"
        )
    number = next_number(doc)
    entry = render_template(
        "fix_entry.md.j2",
        number=number,
        title=title,
        files=list(files),
        body=" ".join((body or PLACEHOLDER_BODY).split()),
        closing=closing_sentence if section in POLICY_SECTIONS else None,
    ).rstrip("\n")

    lines = doc.text.splitlines()
    nl = "\r\n" if "\r\n" in doc.text else "\n"
    sec = doc.section(section)
    if sec is not None:
        end = sec.end_line
        while end > sec.line and not lines[end - 1].strip():
            end -= 1
        rest = lines[end:]
        new_lines = (
            lines[:end]
            + [""]
            + entry.split("\n")
            + ([""] if rest and rest[0].strip() else [])
            + rest
        )
    else:
        idx = SECTION_ORDER.index(section)
        block = [_heading_for(section, pin), ""] + entry.split("\n")
        after = next(
            (
                s
                for s in doc.sections
                if s.key in SECTION_ORDER and SECTION_ORDER.index(s.key) > idx
            ),
            None,
        )
        if after is not None:
            at = after.line - 1
            new_lines = lines[:at] + block + [""] + lines[at:]
        else:
            end = len(lines)
            while end > 0 and not lines[end - 1].strip():
                end -= 1
            new_lines = lines[:end] + ([""] if end else []) + block
    text = nl.join(new_lines)
    if not text.endswith(nl):
        text += nl
    check = parse(text, doc.path)
    found = [e for e in check.entries() if e.number == number]
    if len(found) != 1 or found[0].section != section:
        raise OverlayError(
            f"internal: the rendered entry {number} does not parse back into {section}"
        )
    return text, number


@dataclasses.dataclass(frozen=True)
class PlannedEntry:
    """A new entry rendered into the whole file, not yet written (see :func:`plan_entry`).

    Attributes:
        path: the file to write (a symlink resolved, so the link stays a link).
        text: the file's new content.
        number: the new entry's number.
    """

    path: str
    text: str
    number: int

    def write(self) -> None:
        """Write :attr:`text` to :attr:`path` (temp + rename).

        Raises:
            OverlayError: the file cannot be written (exit 2).
        """
        try:
            atomic_write(self.path, self.text.encode("utf-8"))
        except OSError as exc:
            raise OverlayError(
                f"cannot write {os.path.basename(self.path)}: {exc.strerror or exc}"
            ) from None


def entry_policy(manifest) -> dict:
    """The manifest's values a new entry needs, as keyword arguments of :func:`plan_entry`
    and :func:`add_entry` (``overlay fix new`` and ``overlay record`` both pass these).

    Args:
        manifest: the :class:`overlay.manifest.Manifest`.
    Returns:
        ``{"closing_sentence", "pin", "fork_repo", "fork_commit"}``.
    """
    return {
        "closing_sentence": manifest.closing_sentence,
        "pin": manifest.pin,
        "fork_repo": fork_repo_from_url(manifest.fork_url),
        "fork_commit": manifest.fork_commit,
    }


def plan_entry(
    path: str | os.PathLike,
    section: str,
    title: str,
    files: Sequence[str],
    body: str | None = None,
    *,
    closing_sentence: str | None = None,
    pin: str | None = None,
    fork_repo: str | None = None,
    fork_commit: str | None = None,
) -> PlannedEntry:
    """The file at ``path`` with a new entry, rendered but not written.

    ``overlay record`` plans the entry with every other record it writes, so a
    failure before the first write leaves ``LOCAL_FIXES.md`` untouched; ``overlay
    fix new`` (:func:`add_entry`) writes it at once. A missing file is started with
    the title (needs ``fork_repo`` and ``fork_commit``).

    Args:
        path: the ``LOCAL_FIXES.md`` to update.
        section, title, files, body, closing_sentence, pin: as :func:`render_new_entry`.
        fork_repo, fork_commit: title parts for a new file.

    Returns:
        :class:`PlannedEntry`.

    Raises:
        OverlayError: as :func:`render_new_entry`, or the file cannot be read.
    """
    p = Path(path)
    if p.exists():
        doc = load(p)
    else:
        if not (fork_repo and fork_commit):
            raise OverlayError(
                f"{p.name} does not exist and no fork repo/commit was given for its title"
            )
        doc = parse(f"# {TITLE_PREFIX}{fork_repo}@{fork_commit.lower()[:8]}\n")
    text, number = render_new_entry(
        doc, section, title, files, body, closing_sentence=closing_sentence, pin=pin
    )
    # Through a symlink (load refused one that leaves the repository), so the link stays a link.
    return PlannedEntry(os.path.realpath(p), text, number)


def add_entry(
    path: str | os.PathLike,
    section: str,
    title: str,
    files: Sequence[str],
    body: str | None = None,
    *,
    closing_sentence: str | None = None,
    pin: str | None = None,
    fork_repo: str | None = None,
    fork_commit: str | None = None,
) -> int:
    """``overlay fix new``: add an entry to the file at ``path`` (temp + rename).

    A missing file is started with the title (needs ``fork_repo`` and ``fork_commit``).

    Args:
        path: the ``LOCAL_FIXES.md`` to update.
        section, title, files, body, closing_sentence, pin: as :func:`render_new_entry`.
        fork_repo, fork_commit: title parts for a new file.

    Returns:
        The new entry's number.

    Raises:
        OverlayError: as :func:`render_new_entry`, or the file cannot be read/written.
    """
    planned = plan_entry(
        path,
        section,
        title,
        files,
        body,
        closing_sentence=closing_sentence,
        pin=pin,
        fork_repo=fork_repo,
        fork_commit=fork_commit,
    )
    planned.write()
    return planned.number
