"""The one JUnit writer (overlay/report/junit.py) for verify, ci and the suites: every
character XML forbids is made safe, so a stage or case message holding a control
character still parses."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from click.testing import CliRunner

from overlay.cli import main
from overlay.report import junit

NASTY = "".join(chr(c) for c in range(32)) + "\ufffe\uffff\ud800 ok \U0001f600"


def test_writer_escapes_everything_xml_forbids():
    suites = [
        junit.Suite(
            NASTY,
            [
                junit.Case(
                    NASTY,
                    NASTY,
                    "failed",
                    message=NASTY,
                    failure_type=NASTY,
                    text=NASTY,
                ),
                junit.Case("skip", "c", "skipped", message=NASTY, system_out=NASTY),
                junit.Case("pass", "c"),
            ],
            properties=[(NASTY, NASTY)],
            timestamp=NASTY,
        )
    ]
    text = junit.render(suites, name=NASTY)
    root = ET.fromstring(text.split("\n", 1)[1])
    fail = root.find(".//failure")
    assert (
        "\\x00" in fail.get("message")
        and "\\x1b" in fail.get("message")
        and "\\ufffe" in fail.text
    )
    assert (
        "\t" in fail.text and "\U0001f600" in fail.text
    )  # allowed characters stay as they are
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == (
        "3",
        "1",
        "1",
    )
    assert junit.xml_safe("a\x1b[1mb") == "a\\x1b[1mb"


def test_ci_junit_with_a_control_character_in_a_stage_message(clean, tmp_path):  # noqa: F811
    """A series entry holding \\x01 becomes a SER001 message in the verify stage."""
    series = clean.root / "patches-rocm" / "series"
    series.write_text(series.read_text() + "0002-\x01bad.patch\n")
    out = tmp_path / "ci.xml"
    result = CliRunner().invoke(
        main, ["-C", str(clean.root), "ci", "--only", "verify", "--junit", str(out)]
    )
    assert result.exit_code == 1, result.output
    root = ET.parse(out).getroot()
    messages = [f.get("message") for f in root.iter("failure")]
    assert any("0002-\\x01bad.patch does not exist" in m for m in messages), messages
    verify = CliRunner().invoke(
        main, ["-C", str(clean.root), "verify", "--format", "junit"]
    )
    ET.fromstring(verify.output.split("\n", 1)[1])


def test_ci_render_junit_parses_with_bell_and_escape_in_stage_messages():
    """A stage reason or case message holding \\x07 or \\x1b still parses."""
    from overlay.ci import CiResult, Stage, render_error, render_junit

    bad = "cmake: \x1b[31mboom\x1b[0m\x07 done"
    result = CiResult(
        {},
        [
            Stage("verify", "failed", bad),  # no cases: the stage itself is the case
            Stage(
                "build",
                "failed",
                bad,
                1.5,
                [{"name": "build\x07 rocm", "status": "failed", "message": bad}],
            ),
            Stage("suites", "skipped", bad),
        ],
    )
    for text in (render_junit(result), render_error(bad)[0]):
        root = ET.fromstring(text.split("\n", 1)[1])
        messages = [e.get("message") for e in root.iter() if e.get("message")]
        assert messages and all(
            "\\x1b[31mboom\\x1b[0m\\x07 done" in m for m in messages
        ), messages
