"""One file's diff of a ``git format-patch`` file, read as bytes: :class:`FileChange`
and :class:`Hunk`, and :func:`parse_file_diff`, which reads a ``diff --git`` section
(names, modes, recorded blobs, hunks) the way ``git apply`` will.

python-unidiff, used before, keeps git's quoted names quoted (python-unidiff#113),
needs text in one encoding, and passes over a line that belongs to no hunk, which is
how a hunk whose header lost its ``@@`` was silently shortened; so the diffs are read
here. Applying is git's job (:mod:`overlay.engine`).
"""

import re
from typing import NamedTuple

from overlay.errors import PatchFormatError
from overlay.fs.paths import check_path
from overlay.lazy import lazy_pattern


class Hunk(NamedTuple):
    """One hunk: pre-image and post-image line ranges (1-based starts, lengths)."""

    source_start: int
    source_length: int
    target_start: int
    target_length: int
    section: str


class FileChange(NamedTuple):
    """What one patch does to one file.

    Attributes:
        source: path before (``None`` for an added file).
        target: path after (``None`` for a deleted file).
        binary: a binary change (git binary patch or "Binary files differ").
        binary_data: true when the patch carries the binary data (``GIT binary patch``).
        rename: source and target differ.
        added, removed: line counts.
        hunks: the text hunks in order.
        old_oid, new_oid: the pre-image and post-image blob names of the ``index``
            line (full 40-hex when written by ``overlay refresh``; abbreviated or
            ``None`` when the patch was made elsewhere or changes only a mode or a name).
        old_mode, new_mode: file modes from the header (``None`` when not stated).
        line: the 1-based line of the section's ``diff --git`` header in the patch file.
        nul_line: the first line of a text hunk that holds a NUL byte, else ``None``:
            git takes such a file for binary, and a refresh would write its diff as a
            ``GIT binary patch`` (SER015).
    """

    source: str | None
    target: str | None
    binary: bool
    binary_data: bool
    rename: bool
    added: int
    removed: int
    hunks: tuple[Hunk, ...]
    old_oid: str | None = None
    new_oid: str | None = None
    old_mode: str | None = None
    new_mode: str | None = None
    line: int | None = None
    nul_line: int | None = None

    @property
    def path(self) -> str:
        """The path after the change, or before it for a deletion."""
        return self.target or self.source or ""

    @property
    def mode_change(self) -> str:
        """``"100644 -> 100755"`` for a file whose mode the change moves (its ``old mode``
        and ``new mode`` header lines), else ``""``."""
        if self.old_mode and self.new_mode and self.old_mode != self.new_mode:
            return f"{self.old_mode} -> {self.new_mode}"
        return ""


def diff_pieces(diff: bytes) -> list[bytes]:
    """The sections of a patch's diff (from :func:`split_patch`), one per ``diff --``
    line, each without the line end before the next one and without format-patch's
    signature footer: exactly the pieces :func:`parse_patch` parses, in order (the
    engine re-emits their hunks, :mod:`overlay.engine`)."""
    pieces = re.split(rb"\n(?=diff --)", diff)
    for i, piece in enumerate(pieces):
        if piece.endswith(b"\n-- ") or b"\n-- \n" in piece:
            pieces[i] = piece[
                : piece.rindex(b"\n-- ")
            ]  # format-patch's signature footer
    return pieces


_C_ESCAPES = {
    ord("a"): 7,
    ord("b"): 8,
    ord("t"): 9,
    ord("n"): 10,
    ord("v"): 11,
    ord("f"): 12,
    ord("r"): 13,
    ord('"'): 34,
    ord("\\"): 92,
}


def unquote_c_style(raw: bytes) -> bytes:
    """Undo git's C-style quoting of a path (``"b/na\\303\\257ve.hip"`` -> ``b/naïve.hip``).

    git quotes a path that holds a double quote, a backslash, a control character
    or (with ``core.quotePath``, the default) a byte over 0x7f, the way
    ``quote.c:unquote_c_style`` reads it back: backslash escapes ``\\a \\b \\t \\n
    \\v \\f \\r \\" \\\\`` and three octal digits. python-unidiff keeps the quotes
    (python-unidiff#113), so headers are read here.

    Args:
        raw: the path as it stands in the header, with or without the quotes.
    Returns:
        The path's bytes (unchanged when ``raw`` is not quoted).
    Raises:
        PatchFormatError: a quoted path that git itself would not read.
    """
    if not (len(raw) >= 2 and raw.startswith(b'"') and raw.endswith(b'"')):
        return raw
    body, out, i = raw[1:-1], bytearray(), 0
    while i < len(body):
        c = body[i]
        if c != 92:  # backslash
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1] if i + 1 < len(body) else None
        if nxt in _C_ESCAPES:
            out.append(_C_ESCAPES[nxt])
            i += 2
        elif (
            nxt is not None
            and 48 <= nxt <= 51
            and len(body) >= i + 4
            and all(48 <= d <= 55 for d in body[i + 1 : i + 4])
        ):
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            raise PatchFormatError(
                f"bad quoted path {raw.decode('utf-8', 'replace')!r}"
            )
    return bytes(out)


def _header_path(raw: bytes, what: str) -> str | None:
    """A path from a ``---``/``+++``/``rename`` line: unquoted, ``a/``/``b/`` stripped,
    a trailing TAB (git adds one after a name with a space) dropped, checked."""
    raw = raw.rstrip(b"\r")
    if raw.endswith(b"\t"):
        raw = raw[:-1]
    if raw == b"/dev/null":
        return None
    name = unquote_c_style(raw)
    if what == "prefixed" and name[:2] in (b"a/", b"b/"):
        name = name[2:]
    return check_path(name.decode("utf-8", "surrogateescape"), what="patch header path")


def _diff_git_paths(line: bytes) -> tuple[str | None, str | None]:
    """Both names of a ``diff --git a/X b/Y`` line, as git reads them when no
    ``---``/``+++`` or rename line says better (mode-only and binary changes)."""
    rest = line[len(b"diff --git ") :].rstrip(b"\r")
    if rest.startswith(b'"'):
        end = rest.index(b'"', 1)
        while rest[end - 1 : end] == b"\\":
            end = rest.index(b'"', end + 1)
        first, second = rest[: end + 1], rest[end + 2 :]
        return _header_path(first, "prefixed"), _header_path(second, "prefixed")
    if rest.endswith(b'"'):
        start = rest.rindex(b' "')
        return _header_path(rest[:start], "prefixed"), _header_path(
            rest[start + 1 :], "prefixed"
        )
    # Unquoted: both names are the same path (git only omits ---/+++ then), so split
    # where the halves agree; this keeps names with spaces whole.
    for i in range(len(rest)):
        if rest[i : i + 3] == b" b/" and rest[2:i] == rest[i + 3 :]:
            return _header_path(rest[:i], "prefixed"), _header_path(
                rest[i + 1 :], "prefixed"
            )
    parts = rest.split(b" ")
    return _header_path(parts[0], "prefixed"), _header_path(parts[-1], "prefixed")


_INDEX_LINE = lazy_pattern(rb"^index ([0-9a-f]+)\.\.([0-9a-f]+)(?: (\d{6}))?\r?$")
_HUNK_HEAD = lazy_pattern(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
#: a hunk larger than this many lines is not a source patch (ValueError-free bound).
MAX_HUNK_LINES = 10_000_000


class _ExtHeaders:
    """What the extended header lines of one file's diff (before its first ``@@``) say.

    A plain class: its attributes start as the class's values below and are set as
    lines are read (a dataclass would cost every command's start-up for nothing).
    """

    src: str | None = None
    dst: str | None = None
    have_src: bool = False
    have_dst: bool = False
    old_mode: str | None = None
    new_mode: str | None = None
    old_oid: str | None = None
    new_oid: str | None = None
    added_file: bool = False
    deleted_file: bool = False
    rename: bool = False

    def read(self, ln: bytes) -> bool:
        """Take one header line (no ``\\r``); ``False`` when git writes no such line."""
        m = _INDEX_LINE.match(ln)
        if m:
            self.old_oid, self.new_oid = m.group(1).decode(), m.group(2).decode()
            if m.group(3):
                self.old_mode = self.new_mode = m.group(3).decode()
        elif ln.startswith(b"--- "):
            self.src, self.have_src = _header_path(ln[4:], "prefixed"), True
        elif ln.startswith(b"+++ "):
            self.dst, self.have_dst = _header_path(ln[4:], "prefixed"), True
        elif ln.startswith((b"rename from ", b"copy from ")):
            self.src, self.have_src = _header_path(ln.split(b" ", 2)[2], "plain"), True
            self.rename = ln.startswith(b"rename")
        elif ln.startswith((b"rename to ", b"copy to ")):
            self.dst, self.have_dst = _header_path(ln.split(b" ", 2)[2], "plain"), True
        elif ln.startswith(b"new file mode "):
            self.added_file, self.new_mode = True, ln.split()[-1].decode()
        elif ln.startswith(b"deleted file mode "):
            self.deleted_file, self.old_mode = True, ln.split()[-1].decode()
        elif ln.startswith(b"old mode "):
            self.old_mode = ln.split()[-1].decode()
        elif ln.startswith(b"new mode "):
            self.new_mode = ln.split()[-1].decode()
        else:
            return ln.startswith((b"similarity index", b"dissimilarity index"))
        return True

    def paths(self, diff_git_line: bytes) -> tuple[str | None, str | None]:
        """``(source, target)``: from the ``---``/``+++`` or rename lines, else from the
        ``diff --git`` line; ``None`` for the missing side of an added or deleted file."""
        src, dst = self.src, self.dst
        if not (self.have_src and self.have_dst):
            a, b = _diff_git_paths(diff_git_line)
            src = src if self.have_src else a
            dst = dst if self.have_dst else b
        return (None if self.added_file else src), (None if self.deleted_file else dst)


class _Body:
    """What follows the extended headers of one file's diff: hunks or a binary patch
    (a plain class, as :class:`_ExtHeaders`)."""

    hunks: list[Hunk]
    binary: bool = False
    binary_data: bool = False
    added: int = 0
    removed: int = 0
    nul_line: int | None = None

    def __init__(self) -> None:
        self.hunks = []


def parse_file_diff(section: bytes, first_line: int, name: str) -> FileChange:
    """One ``diff --git`` section: names, modes, recorded blobs, counts, hunks.

    Every line after the extended headers must belong to a hunk whose header counts
    agree with its body, or to a binary patch: a line that belongs to nothing (a hunk
    header that lost its ``@@``) would make git skip the rest of that hunk silently.

    Args:
        section: one piece of :func:`diff_pieces`, starting ``diff --git ``.
        first_line: the 1-based line of that header in the patch file.
        name: the patch's name, for messages.
    Returns:
        The :class:`FileChange`.
    Raises:
        PatchFormatError: a header line git does not write, a line outside any hunk,
            or a hunk whose header counts disagree with its body (the message names
            the patch's line).
        UnsafePath: a header path is absolute, has ``..`` or ``.git``.
    """
    lines = section.split(b"\n")
    while len(lines) > 1 and lines[-1] in (b"", b"\r"):
        lines.pop()  # the section's own line end, and blank lines mail transports add
    head, i = _read_ext_headers(lines, first_line, name)
    src, dst = head.paths(lines[0])
    body = _read_body(lines, i, first_line, name)
    return FileChange(
        source=src,
        target=dst,
        binary=body.binary,
        binary_data=body.binary_data,
        rename=bool(head.rename and src and dst and src != dst),
        added=body.added,
        removed=body.removed,
        hunks=tuple(body.hunks),
        old_oid=head.old_oid if src else None,
        new_oid=head.new_oid if dst else None,
        old_mode=head.old_mode,
        new_mode=head.new_mode,
        line=first_line,
        nul_line=body.nul_line,
    )


def _read_ext_headers(
    lines: list[bytes], first_line: int, name: str
) -> tuple[_ExtHeaders, int]:
    """The extended headers after the ``diff --git`` line, and the index of the first
    line after them (a hunk, a binary patch, or the end).

    Raises:
        PatchFormatError: a line git does not write there.
    """
    head = _ExtHeaders()
    i = 1
    while i < len(lines) and not lines[i].startswith(
        (b"@@", b"GIT binary patch", b"Binary files ")
    ):
        ln = lines[i].rstrip(b"\r")
        if not head.read(ln):
            raise PatchFormatError(
                f"{name}:{first_line + i}: unexpected line in the header of a file's "
                f"diff: {ln[:60].decode('utf-8', 'replace')!r}",
                line=first_line + i,
            )
        i += 1
    return head, i


def _read_body(lines: list[bytes], i: int, first_line: int, name: str) -> _Body:
    """The hunks (or binary patch) from line ``i`` to the end of the section.

    Raises:
        PatchFormatError: a line that belongs to no hunk, or a hunk that does not hold
            what its header says.
    """
    body = _Body()
    while i < len(lines):
        ln = lines[i]
        if ln.startswith(b"GIT binary patch"):
            body.binary = body.binary_data = True
            break
        if ln.startswith(b"Binary files "):
            body.binary = True
            i += 1
            continue
        i = _read_hunk(lines, i, first_line, name, body)
    return body


def _read_hunk(
    lines: list[bytes], i: int, first_line: int, name: str, body: _Body
) -> int:
    """Read the hunk whose ``@@`` header is line ``i`` into ``body``; the index after it.

    Raises:
        PatchFormatError: line ``i`` is no hunk header, its numbers are out of range,
            or the hunk holds fewer lines than its header says.
    """
    ln = lines[i]
    header_line = first_line + i
    m = _HUNK_HEAD.match(ln)
    if not m:
        raise PatchFormatError(
            f"{name}:{header_line}: line is not part of any hunk (a hunk header "
            f"that lost its '@@'?): {ln[:60].decode('utf-8', 'replace')!r}",
            line=header_line,
        )
    if any(len(g) > 12 for g in m.groups() if g):
        raise PatchFormatError(
            f"{name}:{header_line}: hunk header numbers out of range",
            line=header_line,
        )
    s_start, s_len = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
    t_start, t_len = int(m.group(3)), int(m.group(4) if m.group(4) is not None else 1)
    i, old_left, new_left = _count_hunk_lines(
        lines, i + 1, s_len, t_len, first_line, body
    )
    if old_left or new_left:
        raise PatchFormatError(
            f"{name}:{header_line}: hunk header says -{s_len} +{t_len} lines but "
            f"the hunk holds {s_len - old_left} and {t_len - new_left}",
            line=header_line,
        )
    section_name = ln[m.end() :].strip().decode("utf-8", "replace")
    body.hunks.append(Hunk(s_start, s_len, t_start, t_len, section_name))
    return i


def _count_hunk_lines(
    lines: list[bytes],
    i: int,
    old_left: int,
    new_left: int,
    first_line: int,
    body: _Body,
) -> tuple[int, int, int]:
    """Walk a hunk's lines from ``i`` while its header still expects some, counting
    added and removed lines (and a NUL byte) into ``body``.

    Returns:
        ``(index after the hunk and its "\\ No newline" lines, old lines still
        expected, new lines still expected)``: both 0 for a whole hunk.
    """
    # The lines of every patch pass here: locals, and a NUL looked for once the first
    # is not yet known (a hot loop of a pin bump's own work).
    end = len(lines)
    added = removed = 0
    nul = body.nul_line is None
    while i < end and (old_left or new_left):
        ln = lines[i]
        c = ln[:1]
        if nul and b"\0" in ln:
            body.nul_line = first_line + i
            nul = False
        if c == b" " or ln == b"" or ln == b"\r":
            old_left -= 1
            new_left -= 1
        elif c == b"-":
            old_left -= 1
            removed += 1
        elif c == b"+":
            new_left -= 1
            added += 1
        elif c != b"\\":
            break
        i += 1
    body.added += added
    body.removed += removed
    while i < end and lines[i][:1] == b"\\":
        i += 1  # "\ No newline at end of file"
    return i, old_left, new_left
