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

from overlay.lazy import lazy_pattern

_OPEN = lazy_pattern(rb"^<{7}(?: |\r?$)")
_BASE = lazy_pattern(rb"^\|{7}(?: |\r?$)")
_SEP = lazy_pattern(rb"^={7}\r?$")
_CLOSE = lazy_pattern(rb"^>{7}(?: |\r?$)")


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
    inside = False
    for number, line in enumerate(data.split(b"\n"), 1):
        if _OPEN.match(line):
            inside = True
        elif _CLOSE.match(line):
            inside = False
        elif not (_BASE.match(line) or (inside and _SEP.match(line))):
            continue
        out.append((number, line.rstrip(b"\r").decode("utf-8", "replace")))
    return out


def has_markers(data: bytes | str) -> bool:
    """True when ``data`` holds at least one conflict marker (see :func:`marker_lines`)."""
    return bool(marker_lines(data))


def conflict_regions(data: bytes) -> list[tuple[int, int]]:
    """Line spans of complete ``<<<<<<<`` ... ``>>>>>>>`` regions (1-based, markers included)."""
    spans: list[tuple[int, int]] = []
    start = None
    for number, line in enumerate(data.split(b"\n"), 1):
        if _OPEN.match(line):
            start = number
        elif _CLOSE.match(line) and start is not None:
            spans.append((start, number))
            start = None
    return spans
