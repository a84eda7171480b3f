"""The mail head of a ``git format-patch`` file: the part before the first diff.

:func:`split_patch` cuts a patch into head and diff; :func:`parse_head` reads the head
as ``git mailinfo`` does: mail headers (``Subject:``, ``From:``, RFC 2047 encoded or
not), the description, and the trailers (``Local-Fix: N``, ``Forwarded: ...``) of its
last paragraph, or, when the author wrote them after the ``---`` line, of the notes.

Plain ``Name: value`` headers are read here without the :mod:`email` package, which is
imported only for a head it cannot read (folded or non-ASCII lines), so that no
command's start-up pays for importing it (docs/engine.md).
"""

import re
from typing import NamedTuple

from overlay.errors import PatchFormatError
from overlay.lazy import lazy_pattern

_SUBJECT_TAG = lazy_pattern(r"^\[PATCH[^\]]*\]\s*")
_TRAILER = lazy_pattern(r"^([A-Za-z][A-Za-z0-9-]*):\s*(.*)$")


class PatchHead(NamedTuple):
    """What :func:`parse_head` reads from a patch's head.

    Attributes:
        subject: the ``Subject:`` without its ``[PATCH ...]`` tag, whitespace collapsed.
        description: the message between the headers and the trailers, stripped.
        trailers: ``{name: [value, ...]}`` in file order.
        trailer_lines: ``{name: [1-based file line, ...]}``, parallel to ``trailers``.
        author: the ``From:`` header, or ``None``.
    """

    subject: str
    description: str
    trailers: dict[str, list[str]]
    trailer_lines: dict[str, list[int]]
    author: str | None


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
    matches = [m for ln in lines[start:end] if (m := _TRAILER.match(ln))]
    if len(matches) != end - start:
        return None
    trailers: dict[str, list[str]] = {}
    where: dict[str, list[int]] = {}
    for offset, m in enumerate(matches):
        key, value = m.groups()
        trailers.setdefault(key, []).append(value.strip())
        where.setdefault(key, []).append(start + offset)
    return start, trailers, where


def split_patch(data: bytes) -> tuple[bytes, bytes]:
    """``(head, diff)``: the bytes before the first ``diff --git`` line and from it on.

    The head (mail headers, message, notes after ``---``) belongs to the author;
    ``overlay refresh`` rewrites only the diff.

    Raises:
        PatchFormatError: no ``diff --git`` line: a combined diff (``diff --cc``) or
            an empty patch, each named as such (its ``kind`` says which).
    """
    at = 0 if data.startswith(b"diff --git ") else data.find(b"\ndiff --git ")
    if at < 0:
        if re.search(rb"(?m)^diff --(?:cc|combined) ", data):
            raise PatchFormatError(
                "a combined diff ('diff --cc', a merge commit's diff) cannot be applied "
                "as a patch",
                kind="combined",
            )
        raise PatchFormatError(
            "no 'diff --git' section found: an empty patch changes nothing",
            kind="empty",
        )
    at = at if at == 0 else at + 1
    return data[:at], data[at:]


def parse_head(head: bytes) -> PatchHead:
    """Read a patch head (from :func:`split_patch`) as ``git mailinfo`` does.

    Args:
        head: the bytes before the first ``diff --git`` line (UTF-8; bad bytes are
            replaced).
    Returns:
        :class:`PatchHead`. Never raises: a head without headers has an empty subject.
    """
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
    raw_subject, raw_from = _subject_and_from(lines[start:end])
    subject = " ".join(_decode_header(raw_subject or "").split())
    subject = _SUBJECT_TAG.sub("", subject, count=1)
    author = " ".join(_decode_header(raw_from or "").split()) or None
    body = [ln.rstrip("\r") for ln in lines[end + 1 :]] if end < len(lines) else []
    brk, message, notes = _message_and_notes(body)
    first_line = end + 2  # 1-based file line of body[0]
    trailers: dict[str, list[str]] = {}
    trailer_lines: dict[str, list[int]] = {}
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
    return PatchHead(subject, description, trailers, trailer_lines, author)


def _subject_and_from(block: list[str]) -> tuple[str | None, str | None]:
    """The raw ``Subject:`` and ``From:`` values of a mail header block: read here when
    every line is plain, else by :mod:`email`'s compat32 parser (imported only then)."""
    simple = _simple_headers(block)
    if simple is not None:
        return simple.get("Subject"), simple.get("From")
    # email: only a header block that is not plain, not on every verify
    import email.parser
    import email.policy

    msg = email.parser.Parser(policy=email.policy.compat32).parsestr(
        "\n".join(block) + "\n"
    )
    return msg.get("Subject"), msg.get("From")


def _message_and_notes(body: list[str]) -> tuple[int, list[str], list[str]]:
    """Where the message ends in ``body`` (as git mailinfo ends it), the message, and
    the notes between that line and the diff (trailing blanks and ``---`` dropped)."""
    brk = next(
        (
            i
            for i, ln in enumerate(body)
            if is_patch_break(ln.encode("utf-8", "surrogateescape"))
        ),
        len(body),
    )
    message, notes = body[:brk], body[brk + 1 :]
    # format-patch's own '---' before the diff comes after the author's notes.
    while notes and (
        not notes[-1].strip()
        or is_patch_break(notes[-1].encode("utf-8", "surrogateescape"))
    ):
        notes = notes[:-1]
    return brk, message, notes


_SIMPLE_HEADER = lazy_pattern(r"^([A-Za-z][A-Za-z0-9-]*):([\t\x20-\x7e]*)$")


class _Headers:
    """Mail headers by lower-cased name, first occurrence kept: what ``email``'s
    compat32 ``Message.get`` answers for them."""

    def __init__(self) -> None:
        self._by_name: dict[str, str] = {}

    def add(self, name: str, value: str) -> None:
        """Keep ``value`` unless a header of that name came earlier."""
        self._by_name.setdefault(name.lower(), value)

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of header ``name`` (any case), or ``default``."""
        return self._by_name.get(name.lower(), default)


def _simple_headers(lines: list[str]) -> _Headers | None:
    """The headers of a block of plain ``Name: value`` lines (printable ASCII, no folded
    line, no carriage return), as :mod:`email`'s compat32 parser reads them: the value
    after the colon with leading blanks dropped. ``None`` for anything else, which the
    :mod:`email` parser then reads (it is imported only for such a patch, so that the
    other commands do not pay for it at start-up)."""
    out = _Headers()
    for line in lines:
        m = _SIMPLE_HEADER.match(line)
        if m is None:
            return None
        out.add(m.group(1), m.group(2).lstrip(" \t"))
    return out


def _decode_header(value: str) -> str:
    """An RFC 2047 header (``=?utf-8?q?...?=``) decoded to text; other text as it is."""
    if "=?" not in value:
        return value
    import email.header  # only an encoded header

    parts = []
    for chunk, charset in email.header.decode_header(value):
        parts.append(
            chunk.decode(charset or "utf-8", "replace")
            if isinstance(chunk, bytes)
            else chunk
        )
    return "".join(parts)
