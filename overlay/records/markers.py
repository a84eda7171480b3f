"""The one definition of a merge conflict marker, used by verify, rebase and layers.

git writes a conflict as::

    <<<<<<< LABEL
    ours
    ||||||| LABEL        (diff3 style only)
    base
    =======
    theirs
    >>>>>>> LABEL

A marker is seven ``<``, ``|``, ``=`` or ``>`` at the start of a line, followed by
a space or the end of the line (a ``\\r`` before the end counts as the end).
``<<<<<<<``, ``|||||||`` and ``>>>>>>>`` lines are markers wherever they stand: no
source or Markdown file has a reason to hold one, and a half-deleted conflict
must still be caught. ``=======`` alone is a marker only between a ``<<<<<<<``
line and its ``>>>>>>>`` line: elsewhere it is a Markdown or reStructuredText
setext heading underline (``Caveats`` over ``=======``), and reporting it made
verify and ``--continue`` refuse honest documents (shared case 11).
"""

from __future__ import annotations

#: The first seven bytes of every marker line.
_OPEN, _BASE, _SEP, _CLOSE = b"<<<<<<<", b"|||||||", b"=======", b">>>>>>>"
_HEADS = frozenset({_OPEN, _BASE, _SEP, _CLOSE})


def _marker(line: bytes) -> bytes | None:
    """The head of ``line`` (:data:`_OPEN` ...) when it is a marker line as the module
    says (seven characters, then a space or the end of the line, a ``\\r`` before the
    end counting as the end; ``=======`` with nothing after it), else ``None``."""
    head = line[:7]
    if head not in _HEADS:
        return None
    rest = line[7:]
    if rest in (b"", b"\r") or (rest[:1] == b" " and head != _SEP):
        return head
    return None


def marker_lines(data: bytes | str) -> list[tuple[int, str]]:
    """Every conflict marker line of ``data``.

    Args:
        data: file content (bytes, or text).
    Returns:
        ``[(1-based line number, the line without its end), ...]`` in order.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    out: list[tuple[int, str]] = []
    if _OPEN not in data and _BASE not in data and _CLOSE not in data:
        return out  # none can stand alone, and ======= only after a <<<<<<<
    inside = False
    for number, line in enumerate(data.split(b"\n"), 1):
        if line[:7] not in _HEADS:
            continue  # most lines: no call
        head = _marker(line)
        if head is None or (head == _SEP and not inside):
            continue
        if head == _OPEN:
            inside = True
        elif head == _CLOSE:
            inside = False
        out.append((number, line.rstrip(b"\r").decode("utf-8", "replace")))
    return out


def has_markers(data: bytes | str) -> bool:
    """True when ``data`` holds at least one conflict marker (see :func:`marker_lines`)."""
    return bool(marker_lines(data))


def conflict_regions(data: bytes) -> list[tuple[int, int]]:
    """Line spans of complete ``<<<<<<<`` ... ``>>>>>>>`` regions (1-based, markers included)."""
    spans: list[tuple[int, int]] = []
    if _OPEN not in data:
        return spans
    start = None
    for number, line in enumerate(data.split(b"\n"), 1):
        if line[:7] not in _HEADS:
            continue
        head = _marker(line)
        if head == _OPEN:
            start = number
        elif head == _CLOSE and start is not None:
            spans.append((start, number))
            start = None
    return spans
