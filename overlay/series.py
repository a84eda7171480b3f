"""The series file and the patch files it names.

``patches-rocm/series`` is quilt's format: one patch file name a line, ``#``
starts a comment, blank lines are ignored. Patch files are ``git format-patch``
mail (DESIGN 6): a ``Subject:`` header, a description, trailers
(``Local-Fix: N``, ``Forwarded: ...``), a ``---`` line, then git diffs. The
diffs are parsed with :mod:`unidiff` for the files and hunks a patch touches;
applying is git's job (:mod:`overlay.layers`).
"""

from __future__ import annotations

import dataclasses
import email.parser
import email.policy
import io
import os
import re

import unidiff

from overlay.errors import PatchFormatError
from overlay.paths import check_path

PATCH_DIR = "patches-rocm"
SERIES_PATH = os.path.join(PATCH_DIR, "series")

_SUBJECT_TAG = re.compile(r"^\[PATCH[^\]]*\]\s*")
_TRAILER = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):\s*(.*)$")


@dataclasses.dataclass(frozen=True)
class Hunk:
    """One hunk: pre-image and post-image line ranges (1-based starts, lengths)."""

    source_start: int
    source_length: int
    target_start: int
    target_length: int
    section: str


@dataclasses.dataclass(frozen=True)
class FileChange:
    """What one patch does to one file.

    Attributes:
        source: path before (``None`` for an added file).
        target: path after (``None`` for a deleted file).
        binary: a binary change (git binary patch or "Binary files differ").
        binary_data: true when the patch carries the binary data (``GIT binary patch``).
        rename: source and target differ.
        added, removed: line counts.
        hunks: the text hunks in order.
    """

    source: str | None
    target: str | None
    binary: bool
    binary_data: bool
    rename: bool
    added: int
    removed: int
    hunks: tuple[Hunk, ...]

    @property
    def path(self) -> str:
        """The path after the change, or before it for a deletion."""
        return self.target or self.source or ""


@dataclasses.dataclass(frozen=True)
class Patch:
    """A parsed patch file.

    Attributes:
        name: file name as listed in ``series`` (relative to ``patches-rocm/``).
        path: absolute path of the file.
        data: the file's bytes, exactly.
        subject: subject without the ``[PATCH ...]`` tag (other tags kept).
        description: body text between the headers and the trailers.
        trailers: trailer key -> values, in order (``{"Local-Fix": ["12"]}``).
        trailer_lines: trailer key -> 1-based line numbers of those values.
        changes: the file changes in order.
        author: the ``From:`` header (``Name <email>``), or ``None``.
    """

    name: str
    path: str
    data: bytes
    subject: str
    description: str
    trailers: dict[str, list[str]]
    trailer_lines: dict[str, list[int]]
    changes: tuple[FileChange, ...]
    author: str | None = None

    @property
    def touched(self) -> frozenset[str]:
        """Every path the patch names, both names of a rename included."""
        return frozenset(p for c in self.changes for p in (c.source, c.target) if p)

    @property
    def deleted(self) -> frozenset[str]:
        """Paths the patch deletes (a rename's old name included)."""
        return frozenset(c.source for c in self.changes
                         if c.source and (c.target is None or c.rename))

    @property
    def local_fix(self) -> int | None:
        """The ``Local-Fix:`` number, or ``None`` when absent or not an integer."""
        values = self.trailers.get("Local-Fix")
        if not values:
            return None
        try:
            return int(values[0])
        except ValueError:
            return None

    @property
    def forwarded(self) -> str | None:
        """The ``Forwarded:`` value, or ``None``."""
        values = self.trailers.get("Forwarded")
        return values[0] if values else None


def read_series(root: str) -> list[tuple[str, int]]:
    """The patch names listed in ``<root>/patches-rocm/series``.

    Returns:
        ``[(name, line_number), ...]`` in order; an absent file is an empty series.
    Raises:
        PatchFormatError: a line has options or an unsafe name (exit 2).
    """
    path = os.path.join(root, SERIES_PATH)
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) != 1:
            raise PatchFormatError(f"{SERIES_PATH}:{number}: expected one patch file name, got {raw!r}")
        check_path(line, what=f"series entry at {SERIES_PATH}:{number}")
        out.append((line, number))
    return out


def _strip_prefix(name: str | None) -> str | None:
    if name is None or name == "/dev/null":
        return None
    if name.startswith(("a/", "b/")):
        name = name[2:]
    return check_path(name, what="patch header path")


def parse_patch(data: bytes, name: str, path: str = "", *, header_only: bool = False) -> Patch:
    """Parse one format-patch file.

    Args:
        data: the file's bytes.
        name: its name in ``series`` (for messages).
        path: its absolute path.
        header_only: skip the diff (``changes`` stays empty): enough for the subject,
            description, trailers and author, at a fraction of the cost.
    Returns:
        A :class:`Patch`.
    Raises:
        PatchFormatError: not UTF-8, no diff, or a diff unidiff cannot parse.
        UnsafePath: a header path is absolute, has ``..`` or ``.git``.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchFormatError(f"{name}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    lines = text.splitlines(keepends=True)
    diff_at = next((i for i, ln in enumerate(lines) if ln.startswith("diff --git ")), None)
    if diff_at is None:
        raise PatchFormatError(f"{name}: no 'diff --git' section found")
    head = lines[:diff_at]
    # Mail headers end at the first blank line; a leading "From <sha> <date>" line is mbox.
    start = 1 if head and head[0].startswith("From ") and not head[0].startswith("From:") else 0
    end = next((i for i in range(start, len(head)) if not head[i].strip()), len(head))
    headers = email.parser.Parser(policy=email.policy.compat32).parsestr("".join(head[start:end]))
    subject = " ".join((headers.get("Subject") or "").split())
    subject = _SUBJECT_TAG.sub("", subject, count=1)
    body = head[end:]
    sep = next((i for i, ln in enumerate(body) if ln.rstrip("\r\n") == "---"), len(body))
    body_lines = [ln.rstrip("\r\n") for ln in body[:sep]]
    while body_lines and not body_lines[0].strip():
        body_lines.pop(0)
    while body_lines and not body_lines[-1].strip():
        body_lines.pop()
    # Trailers: the last paragraph when every line of it is "Key: value".
    trailers: dict[str, list[str]] = {}
    trailer_lines: dict[str, list[int]] = {}
    para_start = max((i + 1 for i, ln in enumerate(body_lines) if not ln.strip()), default=0)
    para = body_lines[para_start:]
    if para and all(_TRAILER.match(ln) for ln in para):
        first_body_line = end + 1 + next((i for i, ln in enumerate(body) if ln.strip()), 0)
        for offset, ln in enumerate(para):
            key, value = _TRAILER.match(ln).groups()  # type: ignore[union-attr]
            trailers.setdefault(key, []).append(value.strip())
            trailer_lines.setdefault(key, []).append(first_body_line + para_start + offset)
        body_lines = body_lines[:para_start]
    description = "\n".join(body_lines).strip()
    author = " ".join((headers.get("From") or "").split()) or None
    if header_only:
        return Patch(name=name, path=path, data=data, subject=subject, description=description,
                     trailers=trailers, trailer_lines=trailer_lines, changes=(), author=author)
    try:
        patchset = unidiff.PatchSet(io.StringIO("".join(lines[diff_at:])))
    except unidiff.UnidiffParseError as exc:
        raise PatchFormatError(f"{name}: cannot parse diff: {exc}") from None
    sections = re.split(r"^(?=diff --git )", "".join(lines[diff_at:]), flags=re.M)
    sections = [sec for sec in sections if sec.startswith("diff --git ")]
    changes = []
    for number, pf in enumerate(patchset):
        source = _strip_prefix(pf.source_file)
        target = _strip_prefix(pf.target_file)
        if pf.is_added_file:
            source = None
        if pf.is_removed_file:
            target = None
        section = sections[number] if number < len(sections) else ""
        changes.append(FileChange(
            source=source, target=target, binary=pf.is_binary_file,
            binary_data="\nGIT binary patch\n" in section,
            rename=bool(source and target and source != target),
            added=pf.added, removed=pf.removed,
            hunks=tuple(Hunk(h.source_start, h.source_length, h.target_start,
                             h.target_length, h.section_header) for h in pf)))
    if not changes:
        raise PatchFormatError(f"{name}: the diff names no file")
    return Patch(name=name, path=path, data=data, subject=subject, description=description,
                 trailers=trailers, trailer_lines=trailer_lines, changes=tuple(changes), author=author)


def load_patch(root: str, name: str) -> Patch:
    """Read and parse ``<root>/patches-rocm/<name>``.

    Raises:
        PatchFormatError: the file is missing or unparsable (exit 2).
    """
    path = os.path.join(root, PATCH_DIR, name)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise PatchFormatError(f"{PATCH_DIR}/{name} is listed in series but does not exist") from None
    return parse_patch(data, name, path)


def load_series(root: str) -> list[Patch]:
    """Every patch of the series, parsed, in order (see :func:`read_series`)."""
    return [load_patch(root, name) for name, _ in read_series(root)]
