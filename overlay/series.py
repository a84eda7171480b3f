"""The series file and the patch files it names.

``patches-rocm/series`` is quilt's format: one patch file name a line, ``#``
starts a comment, blank lines are ignored. Patch files are ``git format-patch``
mail (DESIGN 6): a ``Subject:`` header, a description, trailers
(``Local-Fix: N``, ``Forwarded: ...``), a ``---`` line, then git diffs.

The diffs are read here, as bytes, for the files, modes, recorded blobs and
hunks a patch touches: python-unidiff, used before, keeps git's quoted names
quoted (python-unidiff#113), needs text in one encoding, and passes over a line
that belongs to no hunk, which is how a hunk whose header lost its ``@@`` was
silently shortened. Applying is git's job (:mod:`overlay.engine`).
"""

from __future__ import annotations

import dataclasses
import os
import re

from overlay.errors import PatchFormatError
from overlay.fsutil import RecordMissing, read_record, read_record_text
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
        return frozenset(
            c.source
            for c in self.changes
            if c.source and (c.target is None or c.rename)
        )

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


#: Most patches a series may list (a bound on the work a hostile ``series`` can
#: cause; the real series has a dozen, the long-series benchmark 300).
MAX_SERIES_ENTRIES = 10_000


def read_series(root: str) -> list[tuple[str, int]]:
    """The patch names listed in ``<root>/patches-rocm/series``.

    The file is read with :func:`overlay.fsutil.read_record` (a regular file
    inside the repository, a symlink to one followed, at most 16 MiB, UTF-8).

    Returns:
        ``[(name, line_number), ...]`` in order; an absent file is an empty series.
    Raises:
        RecordError: the file is refused (symlink out of the repository, FIFO,
            directory, too big) or not UTF-8 (the byte offset is named) (exit 2).
        PatchFormatError: a line has options or an unsafe name, or the series
            lists more than :data:`MAX_SERIES_ENTRIES` patches (exit 2).
    """
    try:
        text = read_record_text(root, SERIES_PATH.replace(os.sep, "/"), what="series")
    except RecordMissing:
        return []
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) != 1:
            raise PatchFormatError(
                f"{SERIES_PATH}:{number}: expected one patch file name, got {raw[:80]!r}"
            )
        check_path(line, what=f"series entry at {SERIES_PATH}:{number}")
        out.append((line, number))
        if len(out) > MAX_SERIES_ENTRIES:
            raise PatchFormatError(
                f"{SERIES_PATH}:{number}: more than {MAX_SERIES_ENTRIES} patches listed"
            )
    return out


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


_INDEX_LINE = re.compile(rb"^index ([0-9a-f]+)\.\.([0-9a-f]+)(?: (\d{6}))?\r?$")
_HUNK_HEAD = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
#: a hunk larger than this many lines is not a source patch (ValueError-free bound).
MAX_HUNK_LINES = 10_000_000


def is_patch_break(line: bytes) -> bool:
    """git mailinfo's end of the message: ``---`` then whitespace, ``diff -``, ``Index: ``."""
    return (
        line.startswith(b"---") and (len(line) == 3 or line[3:4].isspace())
    ) or line.startswith((b"diff -", b"Index: "))


def _trailer_block(
    lines: list[str],
) -> tuple[int, dict[str, list[str]], dict[str, list[int]]] | None:
    """The trailers of ``lines`` (their last paragraph when every line is ``Key: value``).

    Returns:
        ``(index of the paragraph's first line, trailers, their 0-based line indexes)``,
        or ``None`` when the last paragraph is not a trailer block.
    """
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    if not end:
        return None
    start = max((i + 1 for i in range(end) if not lines[i].strip()), default=0)
    para = lines[start:end]
    if not all(_TRAILER.match(ln) for ln in para):
        return None
    trailers: dict[str, list[str]] = {}
    where: dict[str, list[int]] = {}
    for offset, ln in enumerate(para):
        key, value = _TRAILER.match(ln).groups()  # type: ignore[union-attr]
        trailers.setdefault(key, []).append(value.strip())
        where.setdefault(key, []).append(start + offset)
    return start, trailers, where


def split_patch(data: bytes) -> tuple[bytes, bytes]:
    """``(head, diff)``: the bytes before the first ``diff --git`` line and from it on.

    The head (mail headers, message, notes after ``---``) belongs to the author;
    ``overlay refresh`` rewrites only the diff (issue 12, item 9).

    Raises:
        PatchFormatError: no ``diff --git`` line.
    """
    at = 0 if data.startswith(b"diff --git ") else data.find(b"\ndiff --git ")
    if at < 0:
        raise PatchFormatError("no 'diff --git' section found")
    at = at if at == 0 else at + 1
    return data[:at], data[at:]


def _parse_head(
    head: bytes,
) -> tuple[str, str, dict[str, list[str]], dict[str, list[int]], str | None]:
    """Subject, description, trailers, trailer line numbers and author of a patch head."""
    lines = head.decode("utf-8", "replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    # Mail headers end at the first blank line; a leading "From <sha> <date>" line is mbox.
    start = (
        1
        if lines and lines[0].startswith("From ") and not lines[0].startswith("From:")
        else 0
    )
    end = next(
        (i for i in range(start, len(lines)) if not lines[i].strip()), len(lines)
    )
    headers = _simple_headers(lines[start:end])
    if headers is None:
        import email.parser
        import email.policy

        headers = email.parser.Parser(policy=email.policy.compat32).parsestr(
            "\n".join(lines[start:end]) + "\n"
        )
    subject = " ".join(_decode_header(headers.get("Subject") or "").split())
    subject = _SUBJECT_TAG.sub("", subject, count=1)
    author = " ".join(_decode_header(headers.get("From") or "").split()) or None
    body = [ln.rstrip("\r") for ln in lines[end + 1 :]] if end < len(lines) else []
    # The message ends where git mailinfo ends it; what follows up to the diff are notes.
    brk = next(
        (
            i
            for i, ln in enumerate(body)
            if is_patch_break(ln.encode("utf-8", "surrogateescape"))
        ),
        len(body),
    )
    message, notes = body[:brk], body[brk + 1 :]
    while notes and (
        not notes[-1].strip()
        or is_patch_break(notes[-1].encode("utf-8", "surrogateescape"))
    ):
        notes = notes[
            :-1
        ]  # format-patch's own '---' before the diff, after the author's notes
    trailers: dict[str, list[str]] = {}
    trailer_lines: dict[str, list[int]] = {}
    first_line = end + 2  # 1-based file line of body[0]
    found = _trailer_block(message)
    if found is not None:
        para_start, trailers, where = found
        trailer_lines = {k: [first_line + i for i in v] for k, v in where.items()}
        message = message[:para_start]
    else:
        # Trailers written after the '---' line (shared case 16): git am would drop
        # them from the message, but they are the author's words; read them there.
        late = _trailer_block(notes)
        if late is not None:
            _start, trailers, where = late
            trailer_lines = {
                k: [first_line + brk + 1 + i for i in v] for k, v in where.items()
            }
    description = "\n".join(message).strip()
    return subject, description, trailers, trailer_lines, author


_SIMPLE_HEADER = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):([\t\x20-\x7e]*)$")


class _Headers(dict):
    """Mail headers by lower-cased name, first occurrence kept: what ``email``'s
    compat32 ``Message.get`` answers for them."""

    def get(self, name: str, default=None):  # type: ignore[override]
        return super().get(name.lower(), default)


def _simple_headers(lines: list[str]) -> _Headers | None:
    """The headers of a block of plain ``Name: value`` lines (printable ASCII, no folded
    line, no carriage return), as :mod:`email`'s compat32 parser reads them: the value
    after the colon with leading blanks dropped. ``None`` for anything else, which the
    :mod:`email` parser then reads (it is imported only for such a patch: 6 ms of every
    command's start-up, issue 14)."""
    out = _Headers()
    for line in lines:
        m = _SIMPLE_HEADER.match(line)
        if m is None:
            return None
        out.setdefault(m.group(1).lower(), m.group(2).lstrip(" \t"))
    return out


def _decode_header(value: str) -> str:
    """An RFC 2047 header (``=?utf-8?q?...?=``) decoded to text; other text as it is."""
    if "=?" not in value:
        return value
    import email.header

    parts = []
    for chunk, charset in email.header.decode_header(value):
        parts.append(
            chunk.decode(charset or "utf-8", "replace")
            if isinstance(chunk, bytes)
            else chunk
        )
    return "".join(parts)


def _parse_section(
    section: bytes, first_line: int, name: str, hunks_by_file: list | None
) -> FileChange:
    """One ``diff --git`` section: names, modes, recorded blobs, counts, hunks.

    Every line after the extended headers must belong to a hunk whose header counts
    agree with its body, or to a binary patch: a line that belongs to nothing (a hunk
    header that lost its ``@@``) would make git skip the rest of that hunk silently.
    """
    lines = section.split(b"\n")
    while len(lines) > 1 and lines[-1] in (b"", b"\r"):
        lines.pop()  # the section's own line end, and blank lines mail transports add
    src = dst = None
    have_src = have_dst = False
    old_mode = new_mode = old_oid = new_oid = None
    added_file = deleted_file = rename = False
    binary = binary_data = False
    hunks: list[Hunk] = []
    n_add = n_del = 0
    nul_line = None
    i = 1
    while i < len(lines) and not lines[i].startswith(
        (b"@@", b"GIT binary patch", b"Binary files ")
    ):
        ln = lines[i].rstrip(b"\r")
        m = _INDEX_LINE.match(ln)
        if m:
            old_oid, new_oid = m.group(1).decode(), m.group(2).decode()
            if m.group(3):
                old_mode = new_mode = m.group(3).decode()
        elif ln.startswith(b"--- "):
            src, have_src = _header_path(ln[4:], "prefixed"), True
        elif ln.startswith(b"+++ "):
            dst, have_dst = _header_path(ln[4:], "prefixed"), True
        elif ln.startswith((b"rename from ", b"copy from ")):
            src, have_src = _header_path(ln.split(b" ", 2)[2], "plain"), True
            rename = ln.startswith(b"rename")
        elif ln.startswith((b"rename to ", b"copy to ")):
            dst, have_dst = _header_path(ln.split(b" ", 2)[2], "plain"), True
        elif ln.startswith(b"new file mode "):
            added_file, new_mode = True, ln.split()[-1].decode()
        elif ln.startswith(b"deleted file mode "):
            deleted_file, old_mode = True, ln.split()[-1].decode()
        elif ln.startswith(b"old mode "):
            old_mode = ln.split()[-1].decode()
        elif ln.startswith(b"new mode "):
            new_mode = ln.split()[-1].decode()
        elif not ln.startswith((b"similarity index", b"dissimilarity index")):
            raise PatchFormatError(
                f"{name}:{first_line + i}: unexpected line in the header of a file's diff: "
                f"{ln[:60].decode('utf-8', 'replace')!r}",
                line=first_line + i,
            )
        i += 1
    if not (have_src and have_dst):
        a, b = _diff_git_paths(lines[0])
        src = src if have_src else a
        dst = dst if have_dst else b
    if added_file:
        src = None
    if deleted_file:
        dst = None
    while i < len(lines):
        ln = lines[i]
        if ln.startswith(b"GIT binary patch"):
            binary = binary_data = True
            break
        if ln.startswith(b"Binary files "):
            binary = True
            i += 1
            continue
        m = _HUNK_HEAD.match(ln)
        if not m:
            raise PatchFormatError(
                f"{name}:{first_line + i}: line is not part of any hunk (a hunk header "
                f"that lost its '@@'?): {ln[:60].decode('utf-8', 'replace')!r}",
                line=first_line + i,
            )
        counts = [len(g) > 12 for g in m.groups() if g]
        if any(counts):
            raise PatchFormatError(
                f"{name}:{first_line + i}: hunk header numbers out of range",
                line=first_line + i,
            )
        s_start, s_len = (
            int(m.group(1)),
            int(m.group(2) if m.group(2) is not None else 1),
        )
        t_start, t_len = (
            int(m.group(3)),
            int(m.group(4) if m.group(4) is not None else 1),
        )
        header_line = first_line + i
        old_left, new_left = s_len, t_len
        i += 1
        while i < len(lines) and (old_left or new_left):
            c = lines[i][:1]
            if nul_line is None and b"\0" in lines[i]:
                nul_line = first_line + i
            if c == b" " or lines[i] in (b"", b"\r"):
                old_left, new_left = old_left - 1, new_left - 1
            elif c == b"-":
                old_left -= 1
                n_del += 1
            elif c == b"+":
                new_left -= 1
                n_add += 1
            elif c != b"\\":
                break
            i += 1
        while i < len(lines) and lines[i][:1] == b"\\":
            i += 1  # "\ No newline at end of file"
        if old_left or new_left:
            raise PatchFormatError(
                f"{name}:{header_line}: hunk header says -{s_len} +{t_len} lines but "
                f"the hunk holds {s_len - old_left} and {t_len - new_left}",
                line=header_line,
            )
        section_name = ln[m.end() :].strip().decode("utf-8", "replace")
        hunks.append(Hunk(s_start, s_len, t_start, t_len, section_name))
    return FileChange(
        source=src,
        target=dst,
        binary=binary,
        binary_data=binary_data,
        rename=bool(rename and src and dst and src != dst),
        added=n_add,
        removed=n_del,
        hunks=tuple(hunks),
        old_oid=old_oid if src else None,
        new_oid=new_oid if dst else None,
        old_mode=old_mode,
        new_mode=new_mode,
        line=first_line,
        nul_line=nul_line,
    )


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


def parse_patch(
    data: bytes, name: str, path: str = "", *, header_only: bool = False
) -> Patch:
    """Parse one format-patch file, as bytes end to end.

    Context lines in any encoding survive (Latin-1 after a pin bump, shared case 12);
    only the subject, description and trailers are decoded (UTF-8, bad bytes
    replaced) for display. Quoted paths are unquoted as git does (case 10); the
    message ends where ``git mailinfo`` ends it (case 16).

    Args:
        data: the file's bytes.
        name: its name in ``series`` (for messages).
        path: its absolute path.
        header_only: skip the diff (``changes`` stays empty): enough for the subject,
            description, trailers and author, at a fraction of the cost.
    Returns:
        A :class:`Patch`.
    Raises:
        PatchFormatError: no diff, a header or hunk that does not hold together
            (the message names the patch's line), an empty diff or a combined
            ``diff --cc`` section.
        UnsafePath: a header path is absolute, has ``..`` or ``.git``.
    """
    try:
        head, diff = split_patch(data)
    except PatchFormatError as exc:
        raise PatchFormatError(f"{name}: {exc.message}") from None
    subject, description, trailers, trailer_lines, author = _parse_head(head)
    if header_only:
        return Patch(
            name=name,
            path=path,
            data=data,
            subject=subject,
            description=description,
            trailers=trailers,
            trailer_lines=trailer_lines,
            changes=(),
            author=author,
        )
    first_line = head.count(b"\n") + 1
    changes = []
    line = first_line
    for piece in diff_pieces(diff):
        if piece.startswith(b"diff --cc ") or piece.startswith(b"diff --combined "):
            raise PatchFormatError(
                f"{name}:{line}: a combined diff ('diff --cc', a merge commit's diff) "
                "cannot be applied as a patch",
                line=line,
            )
        if not piece.startswith(b"diff --git "):
            raise PatchFormatError(f"{name}:{line}: expected 'diff --git'", line=line)
        changes.append(_parse_section(piece, line, name, None))
        line += piece.count(b"\n") + 1
    if not changes:
        raise PatchFormatError(f"{name}: the diff names no file")
    return Patch(
        name=name,
        path=path,
        data=data,
        subject=subject,
        description=description,
        trailers=trailers,
        trailer_lines=trailer_lines,
        changes=tuple(changes),
        author=author,
    )


def load_patch(root: str, name: str) -> Patch:
    """Read and parse ``<root>/patches-rocm/<name>``.

    The file is read with :func:`overlay.fsutil.read_record`: a regular file
    inside the repository, not a symlink (``refresh`` rewrites patches in place,
    which would replace a link by a file), at most 16 MiB.

    Raises:
        PatchFormatError: the file is missing or unparsable; a diff whose numbers
            overflow the parser (``ValueError``) or that nests too deep
            (``RecursionError``) is unparsable too (exit 2).
        RecordError: the file is refused (symlink, FIFO, directory, too big,
            a name too long) (exit 2).
        UnsafePath: a header path is absolute, has ``..`` or ``.git`` (exit 2).
    """
    rel = f"{PATCH_DIR}/{name}"
    try:
        data = read_record(root, rel, what="patch", allow_symlink=False)
    except RecordMissing:
        raise PatchFormatError(
            f"{PATCH_DIR}/{name} is listed in series but does not exist"
        ) from None
    path = os.path.join(root, PATCH_DIR, name)
    try:
        return parse_patch(data, name, path)
    except (ValueError, RecursionError) as exc:
        # unidiff converts hunk-header numbers with int(): more than 4,300 digits raise ValueError.
        raise PatchFormatError(
            f"{name}: cannot parse diff: {type(exc).__name__}: "
            f"{str(exc).split(';')[0][:120]}"
        ) from None


def load_series(root: str) -> list[Patch]:
    """Every patch of the series, parsed, in order (see :func:`read_series`)."""
    return [load_patch(root, name) for name, _ in read_series(root)]
