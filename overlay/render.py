"""Renderers for lists of :class:`~overlay.findings.Finding` (``overlay verify --format``).

* ``text``   -- grouped by family, ``path:line: severity CODE message`` plus a hint
  line, then one summary line (DESIGN 8);
* ``json``   -- ``{"findings": [{code, severity, path, line, message, hint}, ...],
  "summary": {...}}``;
* ``junit``  -- JUnit XML (the schema Jenkins and pytest's ``junit_family=xunit2``
  use): one ``<testsuite>`` per family, one ``<testcase>`` per finding (plus one
  passing testcase per check code that produced no finding, when the codes run
  are given); errors are ``<failure>``s, warnings and info are passing testcases
  whose text is in ``<system-out>``;
* ``github`` -- workflow command lines ``::error file=P,line=N,title=CODE::message``
  (``warning`` and ``notice`` for the other severities), escaped as
  ``@actions/core`` does (data: ``%``, ``\\r``, ``\\n``; properties also ``:`` and ``,``).

Every renderer is a pure function ``(findings, ...) -> str`` ending with a newline.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Iterable, Mapping, Sequence

from overlay.findings import SEVERITIES, Finding

#: Known family prefixes, in report order, with their names (DESIGN 8).
FAMILIES = {
    "MAN": "manifest",
    "SER": "series",
    "FIX": "fixes",
    "LAY": "layers",
    "BLD": "build",
    "SUI": "suites",
}

FORMATS = ("text", "json", "junit", "github")


def _family_key(family: str) -> tuple[int, str]:
    order = list(FAMILIES)
    return (order.index(family) if family in order else len(order), family)


def family_name(family: str) -> str:
    """Readable name of a family prefix (``"FIX"`` -> ``"fixes"``); unknown prefixes map to themselves."""
    return FAMILIES.get(family, family)


def group_by_family(findings: Iterable[Finding]) -> dict[str, list[Finding]]:
    """``{family: [findings]}`` in :data:`FAMILIES` order (unknown families after, alphabetically);
    findings keep their order within a family."""
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.family, []).append(f)
    return {k: groups[k] for k in sorted(groups, key=_family_key)}


def summarize(findings: Iterable[Finding]) -> dict[str, int]:
    """Counts: ``{"total": n, "error": n, "warning": n, "info": n}``."""
    counts = {"total": 0, **{s: 0 for s in SEVERITIES}}
    for f in findings:
        counts["total"] += 1
        counts[f.severity] += 1
    return counts


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def summary_line(findings: Sequence[Finding]) -> str:
    """One line: ``"2 errors, 1 warning, 0 info"`` or ``"no findings"``."""
    c = summarize(findings)
    if not c["total"]:
        return "no findings"
    return f"{_plural(c['error'], 'error')}, {_plural(c['warning'], 'warning')}, {c['info']} info"


def _location(f: Finding) -> str:
    if f.path is None:
        return "<overlay>"
    return f"{f.path}:{f.line}" if f.line is not None else f.path


def render_text(findings: Sequence[Finding]) -> str:
    """Human-readable report, grouped by family.

    Layout per family: a header ``FIX (fixes): 2 findings``, then for each finding
    ``path:line: severity CODE message`` and, when it has a hint, an indented
    ``hint: ...`` line; a blank line between families; a final summary line
    (:func:`summary_line`).

    Args:
        findings: the findings, in the order checks produced them.

    Returns:
        The report text, newline-terminated.
    """
    out: list[str] = []
    for fam, items in group_by_family(findings).items():
        out.append(f"{fam} ({family_name(fam)}): {_plural(len(items), 'finding')}")
        for f in items:
            out.append(f"{_location(f)}: {f.severity} {f.code} {f.message}")
            if f.hint:
                out.append(f"    hint: {f.hint}")
        out.append("")
    out.append(summary_line(findings))
    return "\n".join(out) + "\n"


def render_json(findings: Sequence[Finding]) -> str:
    """JSON report: ``{"findings": [six-key dicts], "summary": {"total", "error", "warning", "info"}}``.

    Args:
        findings: the findings.

    Returns:
        Indented JSON text, newline-terminated, keys in a stable order.
    """
    doc = {"findings": [f.as_dict() for f in findings], "summary": summarize(findings)}
    return json.dumps(doc, indent=2) + "\n"


_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def xml_safe(s: str) -> str:
    """``s`` with characters XML 1.0 forbids (NUL, ANSI ESC, other C0 controls) shown as ``\\xNN``."""
    return _XML_INVALID.sub(lambda m: f"\\x{ord(m.group(0)):02x}", s)


def render_junit(findings: Sequence[Finding], checks: Mapping[str, Iterable[str]] | None = None,
                 *, name: str = "overlay verify") -> str:
    """JUnit XML report, built with :mod:`xml.etree.ElementTree`.

    One ``<testsuite name="FIX (fixes)">`` per family; one ``<testcase
    classname="overlay.FIX" name="FIX003 LOCAL_FIXES.md:1">`` per finding: an
    error carries ``<failure type="FIX003" message=...>`` with the hint in its
    text, a warning or info passes with its text in ``<system-out>``. When
    ``checks`` is given (``{family: [codes run]}``), each code that produced no
    finding adds one passing testcase named by the code, so a clean run still
    lists what was checked. With nothing to report at all, one passing testcase
    ``verify`` is emitted (some CI readers reject reports with no test).
    ``tests``/``failures``/``errors``/``skipped`` attributes match the children.

    Args:
        findings: the findings.
        checks: optional ``{family: codes}`` of the checks that ran.
        name: the ``<testsuites name>``.

    Returns:
        XML text with an XML declaration, newline-terminated.
    """
    groups = group_by_family(findings)
    fams = dict(groups)
    for fam in (checks or {}):
        fams.setdefault(fam, [])
    root = ET.Element("testsuites", name=xml_safe(name))
    total_tests = total_fail = 0
    for fam in sorted(fams, key=_family_key):
        items = fams[fam]
        suite = ET.SubElement(root, "testsuite", name=f"{fam} ({family_name(fam)})")
        tests = fails = 0
        for f in items:
            case = ET.SubElement(suite, "testcase", classname=f"overlay.{fam}",
                                 name=xml_safe(f"{f.code} {_location(f)}"))
            text = f"{_location(f)}: {f.severity} {f.code} {f.message}"
            if f.hint:
                text += f"\nhint: {f.hint}"
            text = xml_safe(text)
            if f.severity == "error":
                fail = ET.SubElement(case, "failure", type=xml_safe(f.code), message=xml_safe(f.message))
                fail.text = text
                fails += 1
            else:
                ET.SubElement(case, "system-out").text = text
            tests += 1
        seen = {f.code for f in items}
        for code in sorted(set((checks or {}).get(fam, ())) - seen):
            ET.SubElement(suite, "testcase", classname=f"overlay.{fam}", name=code)
            tests += 1
        suite.set("tests", str(tests))
        suite.set("failures", str(fails))
        suite.set("errors", "0")
        suite.set("skipped", "0")
        total_tests += tests
        total_fail += fails
    if not total_tests:
        suite = ET.SubElement(root, "testsuite", name="overlay", tests="1", failures="0",
                              errors="0", skipped="0")
        ET.SubElement(suite, "testcase", classname="overlay", name="verify")
        total_tests = 1
    root.set("tests", str(total_tests))
    root.set("failures", str(total_fail))
    root.set("errors", "0")
    root.set("skipped", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def escape_data(s: str) -> str:
    """Escape a workflow command's message (``@actions/core`` ``escapeData``): ``%``, ``\\r``, ``\\n``."""
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    """Escape a workflow command property value (``escapeProperty``): data escapes plus ``:`` and ``,``."""
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


_GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def render_github(findings: Sequence[Finding]) -> str:
    """GitHub Actions annotation lines, one per finding.

    ``::error file=PATH,line=N,title=CODE::message`` (``::warning``/``::notice``
    for warnings/info); ``file``/``line`` are left out when unknown; the hint
    follows the message on a second (escaped) line.

    Args:
        findings: the findings.

    Returns:
        The lines, newline-terminated (empty string for no findings).
    """
    out = []
    for f in findings:
        props = []
        if f.path is not None:
            props.append(f"file={escape_property(f.path)}")
            if f.line is not None:
                props.append(f"line={f.line}")
        props.append(f"title={escape_property(f.code)}")
        msg = f.message + (f"\nhint: {f.hint}" if f.hint else "")
        out.append(f"::{_GITHUB_LEVEL[f.severity]} {','.join(props)}::{escape_data(msg)}")
    return "".join(line + "\n" for line in out)


def render(findings: Sequence[Finding], fmt: str = "text", **kwargs) -> str:
    """Dispatch to ``render_<fmt>``; ``fmt`` is one of :data:`FORMATS`.

    Raises:
        ValueError: unknown format.
    """
    fn = {"text": render_text, "json": render_json, "junit": render_junit,
          "github": render_github}.get(fmt)
    if fn is None:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    return fn(findings, **kwargs)
