"""Parsing ``LOCAL_FIXES.md`` (docs/design.md §7) into a
:class:`~overlay.records.fixes.model.Document`.

:func:`parse` reads the text line by line (:class:`_Parser`): a fence, a blank line, a
heading, a numbered entry, a bullet, or a continuation of the item being built. It
never fails: what does not fit the format is kept where the checks can report it.
:func:`load` reads the file from disk first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from overlay import layout
from overlay.errors import OverlayError
from overlay.fs.reading import (
    RecordMissing,
    read_record_text,
)
from overlay.lazy import lazy_pattern
from overlay.records.fixes.model import (
    RETARGET_PREFIX,
    SECTION_HEADINGS,
    Bullet,
    Document,
    Entry,
    Malformed,
    Section,
)

_TITLE_RE = lazy_pattern(r"^Local changes relative to (?P<repo>\S+?)@(?P<sha>\S+)$")
_RETARGET_RE = lazy_pattern(r"^Retarget onto the MLX pin \((?P<pin>[^()\s]*)\)$")
_HEADING_RE = lazy_pattern(r"^(?P<hashes>#{1,6})(?:\s+(?P<text>.*?))?\s*$")
#: Any run of ``#`` then text, space or not: where a mangled heading is looked for.
_LOOSE_HEADING_RE = lazy_pattern(r"^(?P<hashes>#+)\s*(?P<text>.*?)\s*$")
#: A line of text alone, no ``#``: a heading that lost its hashes (group 1 is empty, as
#: the hashes group of :data:`_LOOSE_HEADING_RE`).
_BARE_HEADING_RE = lazy_pattern(r"^()(?P<text>[A-Za-z].*)$")
_LOOSE_PIN_RE = lazy_pattern(r"\((?P<pin>[^()\s]*)\)")
_NUMBERED_RE = lazy_pattern(r"^(?P<num>\d+)[.)]\s+(?P<rest>.*)$")
_ENTRY_TITLE_RE = lazy_pattern(
    r"^\*\*(?P<title>[^*]+?)(?P<dot1>\.?)\*\*(?P<dot2>\.?)(?:\s+(?P<text>.*))?$"
)
_BULLET_RE = lazy_pattern(r"^[-*+]\s+(?P<text>.*)$")
_FENCE_RE = lazy_pattern(r"^\s*(```|~~~)")
_BACKTICK_RE = lazy_pattern(r"`([^`\n]+)`")
_BULLET_HEAD_RE = lazy_pattern(r"^(?:`[^`]+`\s*(?:,\s*|and\s+)?)+")
# Word characters include non-ASCII letters (``naïve_gemm.hip``); a space inside a name
# counts when the token also has a directory part (git quotes such names, shared case 10).
_PATHLIKE_RE = lazy_pattern(r"^[\w.+@-]+(?:/[\w.+@ -]+)*/?$")
_EXT_RE = lazy_pattern(
    r"(?:[^./]\.[A-Za-z][A-Za-z0-9_+-]*|^\.[A-Za-z][A-Za-z0-9_.-]*)$"
)


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
    """The backticked tokens of a line, stripped."""
    return [t.strip() for t in _BACKTICK_RE.findall(line)]


def _collapse(parts: Iterable[str]) -> str:
    """The non-blank parts joined by single spaces, inner whitespace collapsed."""
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
        """Extend the item by a line (``prose=False``: fenced, kept for file names only)."""
        self.end_line = line
        self.raw.append((line, text))
        if prose:
            self.parts.append(text)

    def finish(self) -> None:
        """Turn the item into its :class:`Entry` or :class:`Bullet` in its section."""
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
    """The section an exact ``##`` heading names, and its pin for the retarget section."""
    if heading.startswith(RETARGET_PREFIX):
        m = _RETARGET_RE.match(heading)
        return "retarget", (m.group("pin") if m else None)
    for key, text in SECTION_HEADINGS.items():
        if heading == text:
            return key, None
    return None, None


def _normal(text: str) -> str:
    """Lower-case letters and digits only: the form headings are compared in loosely."""
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


class _Parser:
    """One pass over the lines: the title, the current section and the item being built."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.first_content = next((i for i, ln in enumerate(lines) if ln.strip()), None)
        self.preamble = Section(
            key=None, heading="", line=0, end_line=len(lines), level=0
        )
        self.sections: list[Section] = []
        self.current = self.preamble
        self.item: _Item | None = None
        self.in_fence = False
        self.title: str | None = None
        self.title_line: int | None = None
        self.fork_repo: str | None = None
        self.fork_sha: str | None = None

    def close(self) -> None:
        """End the item being built (it goes into its section)."""
        if self.item is not None:
            self.item.finish()
            self.item = None

    def feed(self, idx: int, raw: str) -> None:
        """Hand line ``idx`` (0-based) to the first step that takes it."""
        lineno = idx + 1
        s = raw.rstrip()
        if self._fenced(lineno, s):
            return
        if not s.strip():
            self.close()
            return
        indent = len(s) - len(s.lstrip(" "))
        body = s.strip()
        # Four spaces of indent make a continuation line, never a heading.
        if indent < 4 and self._heading(idx, body):
            return
        starts = indent == 0 or (indent < 4 and self.item is None)
        if starts and (self._numbered(lineno, body) or self._bullet(lineno, body)):
            return
        if self.item is not None:
            self.item.add(lineno, body)
        # otherwise: free prose, kept only in ``text``

    def _fenced(self, lineno: int, s: str) -> bool:
        """Whether the line is a code fence or inside one (raw text of the item, no prose)."""
        if _FENCE_RE.match(s):
            self.in_fence = not self.in_fence
        elif not self.in_fence:
            return False
        if self.item is not None:
            self.item.add(lineno, s, prose=False)
        return True

    def _heading(self, idx: int, body: str) -> bool:
        """Whether the line is a heading: the title, a section (exact or mangled), or deeper.

        A known heading written otherwise (no space after the #s, three #s, no #s on a
        line of its own, another case or punctuation) still opens its section, so its
        entries keep their checks, and is reported (FIX026) rather than moving its
        entries into the section before it. Other deeper headings only end the item.
        """
        hm = _HEADING_RE.match(body)
        if hm and len(hm.group("hashes")) == 1 and idx == self.first_content:
            self.close()
            self._set_title((hm.group("text") or "").strip(), idx + 1)
            return True
        lm = _LOOSE_HEADING_RE.match(body) or (
            None if self.item is not None else _BARE_HEADING_RE.match(body)
        )
        loose_key, loose_pin = (
            _loose_section_key(lm.group("text")) if lm else (None, None)
        )
        if hm:
            level, htext = len(hm.group("hashes")), (hm.group("text") or "").strip()
        elif lm is not None and loose_key is not None:
            level, htext = len(lm.group(1) or ""), body
        else:
            return False
        self.close()
        key, pin = _section_key(htext) if hm and level == 2 else (None, None)
        mangled = key is None and loose_key is not None
        if mangled:
            key, pin = loose_key, loose_pin
        if level <= 2 or mangled:
            self._open_section(idx + 1, key, htext, level, pin, mangled)
        return True

    def _set_title(self, title: str, lineno: int) -> None:
        """Record the H1 title and, when it has the expected shape, its repo and sha."""
        self.title, self.title_line = title, lineno
        tm = _TITLE_RE.match(title)
        if tm:
            self.fork_repo, self.fork_sha = tm.group("repo"), tm.group("sha")

    def _open_section(
        self,
        lineno: int,
        key: str | None,
        heading: str,
        level: int,
        pin: str | None,
        mangled: bool,
    ) -> None:
        """End the current section before ``lineno`` and start a new one there."""
        if self.current is not self.preamble:
            self.current.end_line = lineno - 1
        elif self.preamble.end_line == len(self.lines):
            self.preamble.end_line = lineno - 1
        self.current = Section(
            key=key,
            heading=heading,
            line=lineno,
            end_line=len(self.lines),
            level=level,
            pin=pin,
            mangled=mangled,
        )
        self.sections.append(self.current)

    def _numbered(self, lineno: int, body: str) -> bool:
        """Whether the line starts ``N.``: an entry with a ``**Title.**``, or malformed."""
        nm = _NUMBERED_RE.match(body)
        if not nm:
            return False
        self.close()
        em = _ENTRY_TITLE_RE.match(nm.group("rest"))
        # More than twelve digits is no entry number (and int() of thousands of digits
        # raises).
        if em and (em.group("dot1") or em.group("dot2")) and len(nm.group("num")) <= 12:
            self.item = _Item(
                "entry",
                lineno,
                self.current,
                em.group("text") or "",
                number=int(nm.group("num")),
                title=em.group("title").strip(),
            )
        else:
            self.current.malformed.append(
                Malformed(line=lineno, text=body, section=self.current.key)
            )
        return True

    def _bullet(self, lineno: int, body: str) -> bool:
        """Whether the line starts a ``-`` bullet (which then becomes the item)."""
        bm = _BULLET_RE.match(body)
        if not bm:
            return False
        self.close()
        self.item = _Item("bullet", lineno, self.current, bm.group("text"))
        return True

    def document(self, text: str, path: str) -> Document:
        """The :class:`Document` the pass built (call after the last line)."""
        self.close()
        return Document(
            text=text,
            path=path,
            title=self.title,
            title_line=self.title_line,
            fork_repo=self.fork_repo,
            fork_sha=self.fork_sha,
            preamble=self.preamble,
            sections=self.sections,
        )


def parse(text: str, path: str = layout.LOCAL_FIXES) -> Document:
    """Parse ``LOCAL_FIXES.md`` text into a :class:`Document` (format: docs/design.md §7).

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
    parser = _Parser(lines)
    for idx, raw in enumerate(lines):
        parser.feed(idx, raw)
    return parser.document(text, path)


def load(path: str | os.PathLike, rel_path: str = layout.LOCAL_FIXES) -> Document:
    """Read and parse ``LOCAL_FIXES.md`` from disk.

    The file is read with :func:`overlay.fs.atomic.read_record`, with the
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
