"""The reports of ``overlay ci``: JUnit XML, the PR-body Markdown, the text summary.

Each is a pure function of a :class:`CiResult` (defined here with its :class:`Stage`:
the gate's result is what its reports render, so :mod:`overlay.ci` imports both and
this module needs nothing of it); JUnit goes through the
one writer :mod:`overlay.report.junit`, the Markdown through the one jinja2 environment
(:mod:`overlay.report.templating`, template ``ci_summary.md.j2``). :mod:`overlay.ci`
re-exports them.
"""

import dataclasses
import json

from overlay.report import junit
from overlay.report.templating import render_template


@dataclasses.dataclass
class Stage:
    """One stage of the gate.

    Attributes:
        name: one of :data:`STAGES`.
        status: ``passed``, ``failed`` or ``skipped``.
        reason: why it failed or was skipped (one line), else ``""``.
        seconds: wall time.
        cases: JUnit test cases ``[{"name", "status", "message"}]``.
        data: stage-specific details for the Markdown template.
        required: the caller required it (``--require``): skipped counts as failed.
    """

    name: str
    status: str
    reason: str = ""
    seconds: float = 0.0
    cases: list[dict] = dataclasses.field(default_factory=list)
    data: dict = dataclasses.field(default_factory=dict)
    required: bool = False


@dataclasses.dataclass
class CiResult:
    """The whole gate: the overlay's state plus each stage."""

    overlay: dict
    stages: list[Stage]

    @property
    def failed(self) -> bool:
        """True when any stage failed."""
        return any(s.status == "failed" for s in self.stages)

    def as_dict(self) -> dict:
        """JSON summary."""
        return {
            "overlay": self.overlay,
            "failed": self.failed,
            "stages": [dataclasses.asdict(s) for s in self.stages],
        }


def render_junit(result: CiResult) -> str:
    """JUnit XML (:func:`overlay.report.junit.render`): a testsuite per stage, a
    testcase per check/suite.

    Counts agree with the children; stage messages may hold anything (compiler
    output, control characters): the writer makes them XML-safe. ``message``
    attributes (a failed stage's first error line) are cut at 500 characters; the
    failure's text is the case's ``text`` (a build's whole report), else its message.
    """
    suites = []
    for stage in result.stages:
        cases = stage.cases or [
            {"name": stage.name, "status": stage.status, "message": stage.reason}
        ]
        suites.append(
            junit.Suite(
                stage.name,
                [
                    junit.Case(
                        case["name"],
                        f"overlay.{stage.name}",
                        case["status"],
                        message=case["message"],
                        text=case.get("text", case["message"])
                        if case["status"] == "failed"
                        else None,
                    )
                    for case in cases
                ],
                time=stage.seconds,
            )
        )
    return junit.render(suites, name="overlay ci", message_limit=500)


def render_markdown(result: CiResult) -> str:
    """The Markdown section for the PR body."""
    return render_template(
        "ci_summary.md.j2",
        o=result.overlay,
        stages=result.stages,
        by={s.name: s for s in result.stages},
        failed=result.failed,
    )


def render_text(result: CiResult) -> str:
    """One line per stage, skipped ones spelled out; required stages marked ``*``."""
    lines = []
    for s in result.stages:
        word = s.status.upper()
        lines.append(f"{s.name:<7} {word:<8} {s.reason}".rstrip())
    required = [s.name for s in result.stages if s.required]
    if result.failed:
        lines.append("overlay ci: FAILED")
    elif required:
        lines.append(
            f"overlay ci: passed (required: {', '.join(required)}; "
            "other skipped stages are not failures)"
        )
    else:
        lines.append("overlay ci: passed (skipped stages are not failures)")
    return "\n".join(lines) + "\n"


def render_error(message: str) -> tuple[str, str, str]:
    """JUnit, JSON and Markdown for a gate that could not start (no manifest, ...):
    one failed ``overlay ci`` case, so a CI job that reads the files sees the cause."""
    xml = junit.render(
        [
            junit.Suite(
                "overlay ci",
                [
                    junit.Case(
                        "overlay ci", "overlay", "failed", message=message, text=message
                    )
                ],
            )
        ],
        name="overlay ci",
        message_limit=500,
    )
    data = (
        json.dumps(
            {"overlay": None, "failed": True, "error": message, "stages": []}, indent=2
        )
        + "\n"
    )
    md = f"## overlay ci: FAILED\n\n{message}\n"
    return xml, data, md
