"""Render the report of a rebase or sync (text, JSON, Markdown for the PR body).

The report is plain data built by :meth:`overlay.rebase.Rebase.report`:
``{kind, pins: {before, after}, merge, resolutions: [...], patches: [...],
range_diff, next_steps}``; the Markdown comes from the jinja2 template
``overlay/templates/rebase_report.md.j2``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from overlay.templating import render_report, render_template

#: A header line of ``git range-diff --no-color``: ``1:  abc1234 = 1:  def5678 subject``
#: (``-:  -------`` on the side a patch is missing from).
_RANGE_HEAD = re.compile(
    r"^\s*(\d+|-):\s+(?:[0-9a-f]+|-+)\s([<>=!])\s+(\d+|-):\s+(?:[0-9a-f]+|-+)\s(.*)$"
)


def patch_label(name: str, local_fix: int | None) -> str:
    """How reports name a patch: ``0005-foo.patch (fix 5)`` (its file and its Local-Fix number)."""
    return (
        f"{name} (fix {local_fix})"
        if local_fix is not None
        else f"{name} (no Local-Fix)"
    )


def label_range_diff(text: str, old: Sequence[str], new: Sequence[str]) -> str:
    """``git range-diff`` output with each patch named instead of numbered.

    git numbers the commits of each range by position and names the synthetic
    commits overlay made for them; neither means anything to a reader ("4: = 4" was
    fix 5). Each header line becomes ``OLD <marker> NEW`` with the patches' labels
    (:func:`patch_label`), ``-`` for a side a patch is missing from; the lines under
    a ``!`` header (git's diff of the two patches) are kept as git wrote them.

    Args:
        text: ``git range-diff --no-color`` output.
        old, new: the labels of the old and the new series, in order.
    Returns:
        The relabelled text (a header whose position is out of range keeps git's line).
    """
    out = []
    for line in text.splitlines(keepends=True):
        m = _RANGE_HEAD.match(line)
        if not m:
            out.append(line)
            continue
        a, marker, b = m.group(1), m.group(2), m.group(3)
        try:
            left = "-" if a == "-" else old[int(a) - 1]
            right = "-" if b == "-" else new[int(b) - 1]
        except IndexError:
            out.append(line)
            continue
        out.append(f"{left} {marker} {right}\n")
    return "".join(out)


def render_markdown(report: dict) -> str:
    """The report as a Markdown section (for ``.overlay/last-rebase.md`` and the PR body)."""
    return render_template("rebase_report.md.j2", r=report)


def render_text(report: dict) -> str:
    """The report as plain lines for a terminal."""
    before, after = report["pins"]["before"], report["pins"]["after"]
    out = [
        f"{report['kind']} complete: pin {before['pin'][:12]} -> {after['pin'][:12]}, "
        f"fork {before['fork'][:12]} -> {after['fork'][:12]}"
    ]
    for x in report["resolutions"]:
        out.append(
            f"  resolution {x['path']}: {x['status']}"
            + (f" ({x['note']})" if x["note"] else "")
        )
    for p in report["patches"]:
        out.append(
            f"  patch {p['name']}: {p['status']}"
            + (f" ({p['note']})" if p["note"] else "")
        )
    out.append("next: " + "; ".join(report["next_steps"]))
    return "\n".join(out) + "\n"


def render(report: dict, fmt: str) -> str:
    """Dispatch on ``fmt``: ``text``, ``json`` or ``markdown``
    (:func:`overlay.templating.render_report`)."""
    return render_report(report, fmt, text=render_text, template="rebase_report.md.j2")
