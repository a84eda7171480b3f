"""Renderers for lists of :class:`~overlay.checks.findings.Finding` (``overlay verify --format``).

* ``text``   -- grouped by family, ``path:line: severity CODE message`` plus a hint
  line, then one summary line (docs/design.md §8);
* ``json``   -- ``{"findings": [{code, severity, path, line, message, hint}, ...],
  "summary": {...}}``;
* ``junit``  -- JUnit XML through :mod:`overlay.report.junit` (the schema Jenkins and
  pytest's ``junit_family=xunit2`` use): one ``<testsuite>`` per family, one
  ``<testcase>`` per finding (plus one passing testcase per check code that
  produced no finding, when the codes run are given); errors are ``<failure>``s,
  warnings and info are passing testcases whose text is in ``<system-out>``;
* ``github`` -- workflow command lines ``::error file=P,line=N,title=CODE::message``
  (``warning`` and ``notice`` for the other severities), escaped as
  ``@actions/core`` does (data: ``%``, ``\\r``, ``\\n``; properties also ``:`` and ``,``).

Every renderer is a pure function ``(findings, ...) -> str`` ending with a newline.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from overlay.checks.findings import SEVERITIES, Finding
from overlay.report import junit

#: Known family prefixes, in report order, with their names (docs/design.md §8).
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
    """Readable name of a family prefix (``"FIX"`` -> ``"fixes"``).

    Unknown prefixes map to themselves.
    """
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
    """JSON report: ``{"findings": [six-key dicts], "summary": {...}}``.

    The summary's keys are ``total``, ``error``, ``warning`` and ``info``.

    Args:
        findings: the findings.

    Returns:
        Indented JSON text, newline-terminated, keys in a stable order.
    """
    doc = {"findings": [f.as_dict() for f in findings], "summary": summarize(findings)}
    return json.dumps(doc, indent=2) + "\n"


def render_junit(
    findings: Sequence[Finding],
    checks: Mapping[str, Iterable[str]] | None = None,
    *,
    name: str = "overlay verify",
) -> str:
    """JUnit XML report, written by :func:`overlay.report.junit.render` (XML-safe
    whatever the text).

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
    for fam in checks or {}:
        fams.setdefault(fam, [])
    suites = []
    for fam in sorted(fams, key=_family_key):
        items = fams[fam]
        suite = junit.Suite(f"{fam} ({family_name(fam)})")
        for f in items:
            text = f"{_location(f)}: {f.severity} {f.code} {f.message}"
            if f.hint:
                text += f"\nhint: {f.hint}"
            if f.severity == "error":
                case = junit.Case(
                    f"{f.code} {_location(f)}",
                    f"overlay.{fam}",
                    "failed",
                    message=f.message,
                    failure_type=f.code,
                    text=text,
                )
            else:
                case = junit.Case(
                    f"{f.code} {_location(f)}", f"overlay.{fam}", system_out=text
                )
            suite.cases.append(case)
        seen = {f.code for f in items}
        for code in sorted(set((checks or {}).get(fam, ())) - seen):
            suite.cases.append(junit.Case(code, f"overlay.{fam}"))
        suites.append(suite)
    if not any(s.cases for s in suites):
        suites = [junit.Suite("overlay", [junit.Case("verify", "overlay")])]
    return junit.render(suites, name=name)


def escape_data(s: str) -> str:
    """Escape a workflow command's message (``@actions/core`` ``escapeData``).

    ``%``, ``\\r`` and ``\\n`` become ``%25``, ``%0D`` and ``%0A``; this is GitHub's
    annotation syntax, not XML (XML safety is :func:`overlay.report.junit.xml_safe`).
    """
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    """Escape a workflow command property value (``escapeProperty``).

    The data escapes (:func:`escape_data`) plus ``:`` and ``,``.
    """
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
        out.append(
            f"::{_GITHUB_LEVEL[f.severity]} {','.join(props)}::{escape_data(msg)}"
        )
    return "".join(line + "\n" for line in out)


def printable(text: str) -> str:
    """``text`` with lone surrogates written as ``\\udcNN``.

    A path from git or a patch decoded with ``surrogateescape`` keeps its
    undecodable bytes as lone surrogates; stdout cannot encode them, and
    printing the report would fail (``docs/fuzz.md``).
    """
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def render(findings: Sequence[Finding], fmt: str = "text", **kwargs) -> str:
    """Dispatch to ``render_<fmt>``; ``fmt`` is one of :data:`FORMATS`.

    The result is always encodable as UTF-8 (:func:`printable`).

    Raises:
        ValueError: unknown format.
    """
    fn = {
        "text": render_text,
        "json": render_json,
        "junit": render_junit,
        "github": render_github,
    }.get(fmt)
    if fn is None:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    return printable(fn(findings, **kwargs))
