"""What a finished run's output files show: marker counts and sanitizer/child reports."""

from __future__ import annotations

import re
from collections.abc import Sequence

from overlay.lazy import lazy_pattern
from overlay.suites.config import Marker

#: Bytes of a run's stderr scanned for reports (a runaway child's log is cut there).
REPORT_SCAN_BYTES = 64 << 20

_SANITIZER_RE = lazy_pattern(
    rb"^(?:==\d+==)?(?:WARNING|ERROR): "
    rb"((?:Thread|Address|Leak|Memory|UndefinedBehavior)Sanitizer): (.*)$",
    re.M,
)
_CHILD_REPORT_RE = lazy_pattern(
    rb"^overlay-suite: report ([A-Za-z0-9][A-Za-z0-9_.-]*):", re.M
)


def scan_reports(path: str, limit: int = REPORT_SCAN_BYTES) -> dict[str, int]:
    """Count the reports in a run's stderr, per kind.

    Kinds: ``<Sanitizer>: <what>`` for a sanitizer's header line (``what`` cut
    before `` (pid=``, `` on address`` and the like: ``ThreadSanitizer: data race``,
    ``AddressSanitizer: heap-use-after-free``), and ``<kind>`` for a child's
    ``overlay-suite: report <kind>: ...`` line.

    Args:
        path: the stderr file.
        limit: bytes read from its start.
    Returns:
        ``{kind: occurrences}``, kinds in order of first appearance; empty
        when the file is missing.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit)
    except OSError:
        return {}
    found: list[tuple[int, str]] = []
    for m in _SANITIZER_RE.finditer(data):
        what = m.group(2).decode("utf-8", "replace")
        what = re.split(
            r" \(| on (?:address|unknown address)\b| at pc ", what, maxsplit=1
        )[0].strip()
        found.append((m.start(), f"{m.group(1).decode()}: {what}"))
    for m in _CHILD_REPORT_RE.finditer(data):
        found.append((m.start(), m.group(1).decode()))
    counts: dict[str, int] = {}
    for _pos, kind in sorted(found):
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def _count_in_file(path: str, needles: list[bytes]) -> list[int]:
    with open(path, "rb") as fh:
        data = fh.read()
    return [data.count(n) for n in needles]


def marker_failures(
    markers: Sequence[Marker], out_path: str, err_path: str
) -> list[str]:
    """One line per marker whose count in the run's stdout/stderr is off (``[]``: all hold).

    Args:
        markers: the suite's :class:`~overlay.suites.config.Marker` expectations.
        out_path, err_path: the run's captured stdout and stderr files.
    Returns:
        :meth:`Marker.describe` of each failing marker, stdout's first.
    Raises:
        OSError: an output file cannot be read.
    """
    failures: list[str] = []
    for stream, path in (("stdout", out_path), ("stderr", err_path)):
        ms = [m for m in markers if m.stream == stream]
        if ms:
            counts = _count_in_file(path, [m.text.encode("utf-8") for m in ms])
            failures.extend(
                m.describe(c) for m, c in zip(ms, counts, strict=True) if not m.holds(c)
            )
    return failures
