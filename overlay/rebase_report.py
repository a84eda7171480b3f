"""Render the report of a rebase or sync (text, JSON, Markdown for the PR body).

The report is plain data built by :meth:`overlay.rebase.Rebase.report`:
``{kind, pins: {before, after}, merge, resolutions: [...], patches: [...],
range_diff, next_steps}``; the Markdown comes from the jinja2 template
``overlay/templates/rebase_report.md.j2``.
"""

from __future__ import annotations

import json

import jinja2

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("overlay", "templates"), autoescape=False,
                          keep_trailing_newline=True, trim_blocks=False, lstrip_blocks=False,
                          undefined=jinja2.StrictUndefined)


def render_markdown(report: dict) -> str:
    """The report as a Markdown section (for ``.overlay/last-rebase.md`` and the PR body)."""
    return _ENV.get_template("rebase_report.md.j2").render(r=report)


def render_text(report: dict) -> str:
    """The report as plain lines for a terminal."""
    before, after = report["pins"]["before"], report["pins"]["after"]
    out = [f"{report['kind']} complete: pin {before['pin'][:12]} -> {after['pin'][:12]}, "
           f"fork {before['fork'][:12]} -> {after['fork'][:12]}"]
    for x in report["resolutions"]:
        out.append(f"  resolution {x['path']}: {x['status']}" + (f" ({x['note']})" if x["note"] else ""))
    for p in report["patches"]:
        out.append(f"  patch {p['name']}: {p['status']}" + (f" ({p['note']})" if p["note"] else ""))
    out.append("next: " + "; ".join(report["next_steps"]))
    return "\n".join(out) + "\n"


def render(report: dict, fmt: str) -> str:
    """Dispatch on ``fmt``: ``text``, ``json`` or ``markdown``."""
    if fmt == "json":
        return json.dumps(report, indent=2) + "\n"
    if fmt == "markdown":
        return render_markdown(report)
    return render_text(report)
