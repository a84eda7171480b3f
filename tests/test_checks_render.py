"""Renderers: text grouping, JSON round trip, JUnit well-formedness and counts, GitHub escaping."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from overlay.checks import render
from overlay.checks.findings import Finding

FINDINGS = [
    Finding(
        "FIX007",
        "error",
        "LOCAL_FIXES.md",
        12,
        "entry numbers have a gap: 3 is missing",
        "renumber",
    ),
    Finding("SER002", "error", "patches-rocm/series", 3, "patch listed twice", None),
    Finding(
        "FIX024",
        "warning",
        "LOCAL_FIXES.md",
        20,
        "entry 4 has no patch in the series",
        None,
    ),
    Finding("MAN001", "info", None, None, "pins are well formed (offline)", None),
    Finding(
        "ZZZ001",
        "error",
        "a,b:c%.txt",
        1,
        "100% bad\r\nsecond: line, really",
        "fix: it",
    ),
]


def test_text_groups_by_family_in_order_with_hints_and_summary():
    out = render.render_text(FINDINGS)
    lines = out.splitlines()
    headers = [
        ln
        for ln in lines
        if ln
        and not ln.startswith((" ", "<"))
        and ": " in ln
        and "(" in ln.split(":")[0]
    ]
    assert [h.split()[0] for h in headers] == ["MAN", "SER", "FIX", "ZZZ"]
    assert (
        "LOCAL_FIXES.md:12: error FIX007 entry numbers have a gap: 3 is missing"
        in lines
    )
    assert (
        lines[
            lines.index(
                "LOCAL_FIXES.md:12: error FIX007 entry numbers have a gap: 3 is missing"
            )
            + 1
        ]
        == "    hint: renumber"
    )
    assert "<overlay>: info MAN001 pins are well formed (offline)" in lines
    assert "FIX (fixes): 2 findings" in lines
    assert lines[-1] == "3 errors, 1 warning, 1 info"
    assert out.endswith("\n")


def test_text_empty():
    assert render.render_text([]) == "no findings\n"


def test_json_round_trip():
    data = json.loads(render.render_json(FINDINGS))
    assert data["summary"] == {"total": 5, "error": 3, "warning": 1, "info": 1}
    assert [Finding(**d) for d in data["findings"]] == FINDINGS
    assert all(
        set(d) == {"code", "severity", "path", "line", "message", "hint"}
        for d in data["findings"]
    )
    assert json.loads(render.render_json([])) == {
        "findings": [],
        "summary": {"total": 0, "error": 0, "warning": 0, "info": 0},
    }


def _junit(findings, **kw):
    text = render.render_junit(findings, **kw)
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>\n')
    return ET.fromstring(text.split("\n", 1)[1])


def test_junit_counts_match():
    root = _junit(FINDINGS)
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [
        "MAN (manifest)",
        "SER (series)",
        "FIX (fixes)",
        "ZZZ (ZZZ)",
    ]
    total = fails = 0
    for s in suites:
        cases = s.findall("testcase")
        f = sum(1 for c in cases if c.find("failure") is not None)
        assert int(s.get("tests")) == len(cases)
        assert int(s.get("failures")) == f
        assert s.get("errors") == "0" and s.get("skipped") == "0"
        total += len(cases)
        fails += f
    assert (
        (int(root.get("tests")), int(root.get("failures"))) == (total, fails) == (5, 3)
    )
    fix = suites[2]
    fail = fix.find("testcase/failure")
    assert fail.get("type") == "FIX007" and "hint: renumber" in fail.text
    assert (
        fix.findall("testcase")[1]
        .find("system-out")
        .text.startswith("LOCAL_FIXES.md:20: warning FIX024")
    )
    assert (
        ET.fromstring(render.render_junit(FINDINGS).split("\n", 1)[1]).find(
            ".//failure[@type='ZZZ001']"
        )
        is not None
    )


def test_junit_lists_clean_checks_as_passing_cases():
    root = _junit(FINDINGS[:1], checks={"FIX": ["FIX001", "FIX007"], "SER": ["SER001"]})
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert [c.get("name") for c in suites["FIX (fixes)"].findall("testcase")] == [
        "FIX007 LOCAL_FIXES.md:12",
        "FIX001",
    ]
    assert (
        suites["SER (series)"].get("tests") == "1"
        and suites["SER (series)"].get("failures") == "0"
    )
    assert (root.get("tests"), root.get("failures")) == ("3", "1")


def test_junit_empty_has_one_passing_case():
    root = _junit([])
    assert (root.get("tests"), root.get("failures")) == ("1", "0")
    assert root.find("testsuite/testcase").get("name") == "verify"


def test_github_lines_and_escaping():
    lines = render.render_github(FINDINGS).splitlines()
    assert len(lines) == 5
    assert lines[0] == (
        "::error file=LOCAL_FIXES.md,line=12,title=FIX007::"
        "entry numbers have a gap: 3 is missing%0Ahint: renumber"
    )
    assert lines[2].startswith("::warning file=LOCAL_FIXES.md,line=20,title=FIX024::")
    assert lines[3] == "::notice title=MAN001::pins are well formed (offline)"
    assert lines[4] == (
        "::error file=a%2Cb%3Ac%25.txt,line=1,title=ZZZ001::"
        "100%25 bad%0D%0Asecond: line, really%0Ahint: fix: it"
    )
    assert render.render_github([]) == ""


@pytest.mark.parametrize(
    "raw,data,prop",
    [
        ("a%b", "a%25b", "a%25b"),
        ("a\nb", "a%0Ab", "a%0Ab"),
        ("a\rb", "a%0Db", "a%0Db"),
        ("a:b,c", "a:b,c", "a%3Ab%2Cc"),
        ("%3A", "%253A", "%253A"),
    ],
)
def test_escape_rules(raw, data, prop):
    assert render.escape_data(raw) == data
    assert render.escape_property(raw) == prop


def test_dispatch():
    assert render.render(FINDINGS, "github") == render.render_github(FINDINGS)
    with pytest.raises(ValueError):
        render.render(FINDINGS, "xml")


def test_junit_file_parses_and_control_characters_are_made_safe(tmp_path):
    f = Finding(
        "BLD001", "error", "mlx/x.cpp", 3, "error: \x1b[1mboom\x1b[0m\x00", "rebuild"
    )
    path = tmp_path / "report.xml"
    path.write_text(render.render_junit([f]), encoding="utf-8")
    root = ET.parse(path).getroot()
    assert root.find(".//failure").get("message") == "error: \\x1b[1mboom\\x1b[0m\\x00"
