"""The one JUnit XML writer and its one XML-safety rule.

Used by ``verify --format junit``, ``ci --junit`` and ``suite run --format junit``.

The schema is the one Jenkins, GitLab and pytest's ``junit_family=xunit2``
read: ``<testsuites>`` holding ``<testsuite>`` elements holding ``<testcase>``
elements; a case may carry ``<failure>``, ``<skipped>`` or ``<system-out>``. The
``tests``/``failures``/``errors``/``skipped`` attributes of each suite and of
the root are counted from the children, so they always agree.

Every text and attribute value goes through :func:`xml_safe`: XML 1.0 allows
only TAB, LF, CR and the characters from U+0020 up (less the surrogates and
U+FFFE/U+FFFF); anything else (NUL, ANSI ESC from compiler output, a stray
control byte in a stage message) is written as the visible text ``\\xNN``
(``\\uNNNN`` above U+00FF), so the file always parses and the reader still sees
what was there.
"""

import dataclasses
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence

from overlay.lazy import lazy_pattern

#: Characters XML 1.0 does not allow (its ``Char`` production, inverted).
_XML_INVALID = lazy_pattern("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

STATUSES = ("passed", "failed", "skipped")


def xml_safe(s: str) -> str:
    """``s`` with every character XML 1.0 forbids written as ``\\xNN`` (or ``\\uNNNN``).

    Args:
        s: any text (a finding message, a stage reason, a child's stderr tail).
    Returns:
        Text an XML 1.0 parser accepts in element text and attribute values.
    """

    def esc(m: re.Match[str]) -> str:
        code = ord(m.group(0))
        return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"

    return _XML_INVALID.sub(esc, s)


@dataclasses.dataclass
class Case:
    """One ``<testcase>``.

    Attributes:
        name, classname: the case's names (``classname`` groups cases in CI views).
        status: ``passed``, ``failed`` (a ``<failure>``) or ``skipped`` (a ``<skipped>``).
        message: the ``message`` attribute of ``<failure>``/``<skipped>``.
        failure_type: the ``type`` attribute of ``<failure>`` (a finding code, a run's kind).
        text: the text of ``<failure>`` (a hint, a stderr tail).
        system_out: text of a ``<system-out>`` child (warnings, info), if any.
        time: seconds, written as ``time="%.3f"`` when given.
    """

    name: str
    classname: str
    status: str = "passed"
    message: str = ""
    failure_type: str | None = None
    text: str | None = None
    system_out: str | None = None
    time: float | None = None


@dataclasses.dataclass
class Suite:
    """One ``<testsuite>``.

    Attributes:
        name: the suite's name.
        cases: its cases, in order.
        time: seconds (``time`` attribute) when given.
        timestamp: ISO 8601 start time when given.
        properties: ``(name, value)`` pairs written as ``<properties>``.
    """

    name: str
    cases: list[Case] = dataclasses.field(default_factory=list)
    time: float | None = None
    timestamp: str | None = None
    properties: Sequence[tuple[str, str]] = ()


def render(
    suites: Iterable[Suite],
    *,
    name: str,
    message_limit: int | None = None,
    total_time: bool = False,
) -> str:
    """JUnit XML text for ``suites``.

    Args:
        suites: the test suites, in order.
        name: the ``<testsuites name>``.
        message_limit: cut ``message`` attributes to this many characters (the
            full text stays in the element's text); ``None``: no cut.
        total_time: write the summed suite times on ``<testsuites>``.
    Returns:
        ``<?xml version="1.0" encoding="utf-8"?>`` and the indented document,
        newline-terminated; parses with any XML 1.0 parser whatever the input text.
    Raises:
        ValueError: a case's ``status`` is not one of :data:`STATUSES`.
    """
    root = ET.Element("testsuites", name=xml_safe(name))
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    seconds = 0.0
    for suite in suites:
        counts = _suite_element(root, suite, message_limit)
        for key, value in counts.items():
            totals[key] += value
        seconds += suite.time or 0.0
    _set_counts(root, totals)
    if total_time:
        root.set("time", f"{seconds:.3f}")
    ET.indent(root)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        + ET.tostring(root, encoding="unicode")
        + "\n"
    )


def _set_counts(element: ET.Element, counts: dict[str, int]) -> None:
    """Write ``tests``/``failures``/``errors``/``skipped`` on ``element`` (errors is always 0)."""
    element.set("tests", str(counts["tests"]))
    element.set("failures", str(counts["failures"]))
    element.set("errors", "0")
    element.set("skipped", str(counts["skipped"]))


def _suite_element(
    root: ET.Element, suite: Suite, message_limit: int | None
) -> dict[str, int]:
    """Append ``suite`` to ``root`` as a ``<testsuite>``; return its counts by kind."""
    ts = ET.SubElement(root, "testsuite", name=xml_safe(suite.name))
    if suite.timestamp:
        ts.set("timestamp", xml_safe(suite.timestamp))
    if suite.properties:
        props = ET.SubElement(ts, "properties")
        for key, value in suite.properties:
            ET.SubElement(props, "property", name=xml_safe(key), value=xml_safe(value))
    counts = {"tests": 0, "failures": 0, "skipped": 0}
    for case in suite.cases:
        _case_element(ts, case, message_limit)
        counts["tests"] += 1
        if case.status == "failed":
            counts["failures"] += 1
        elif case.status == "skipped":
            counts["skipped"] += 1
    _set_counts(ts, counts)
    if suite.time is not None:
        ts.set("time", f"{suite.time:.3f}")
    return counts


def _case_element(ts: ET.Element, case: Case, message_limit: int | None) -> None:
    """Append ``case`` to ``ts`` as a ``<testcase>`` with its failure/skip/output children.

    Raises:
        ValueError: ``case.status`` is not one of :data:`STATUSES`.
    """
    if case.status not in STATUSES:
        raise ValueError(f"unknown JUnit case status {case.status!r}")
    tc = ET.SubElement(
        ts, "testcase", classname=xml_safe(case.classname), name=xml_safe(case.name)
    )
    if case.time is not None:
        tc.set("time", f"{case.time:.3f}")
    message = xml_safe(
        case.message if message_limit is None else case.message[:message_limit]
    )
    if case.status == "failed":
        fail = ET.SubElement(tc, "failure", message=message)
        if case.failure_type is not None:
            fail.set("type", xml_safe(case.failure_type))
        if case.text is not None:
            fail.text = xml_safe(case.text)
    elif case.status == "skipped":
        ET.SubElement(tc, "skipped", message=message)
    if case.system_out is not None:
        ET.SubElement(tc, "system-out").text = xml_safe(case.system_out)
