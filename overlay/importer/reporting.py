"""The import report: plain data, and its text, JSON and Markdown renderings."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from overlay.checks.render import summary_line
from overlay.importer.planning import ImportPlan, record_of
from overlay.report.templating import render_report, render_template


def report_data(
    plan: ImportPlan,
    *,
    directory: str,
    findings: Sequence | None = None,
    backup: str | None = None,
) -> dict:
    """The import report as plain data (text, JSON and Markdown are rendered from it).

    Args:
        plan: the import.
        directory: the overlay directory as the user named it.
        findings: ``overlay verify``'s findings on the written records, or ``None``.
        backup: where ``--force`` moved the previous records.
    Returns:
        ``{directory, upstream, closing_sentence, carry, files, patches, resolutions,
        uncarried, round_trip, removed, findings, summary, counts, backup, notes}``;
        ``round_trip`` holds the target (the overlay's changes carried onto the pin),
        the overlay's files written over the pin as they are (``whole``), the paths
        where the two differ (``carried``) and those whose carry conflicted;
        ``removed`` the upstream lines each patch removes.
    """
    up = plan.upstream
    counts: dict[str, int] = {}
    for row in plan.rows:
        counts[row.kind] = counts.get(row.kind, 0) + 1
    return {
        "directory": directory,
        "upstream": {
            "source": up.source,
            "branch": up.branch,
            "commit": up.commit,
            "merge_base": up.merge_base,
            "pin": up.pin,
        },
        "closing_sentence": {
            "text": plan.manifest.closing_sentence,
            "from": plan.closing_from,
        },
        "carry": {
            "include": list(plan.manifest.include),
            "exclude": list(plan.manifest.exclude),
        },
        "files": [
            dataclasses.asdict(r) | {"entries": list(r.entries)} for r in plan.rows
        ],
        "patches": [
            {
                "name": p.name,
                "local_fix": list(p.local_fix),
                "files": p.files,
                "created": p.created,
            }
            for p in plan.patches
        ],
        "resolutions": sorted(plan.resolutions),
        "uncarried": plan.uncarried,
        "round_trip": {
            "target": plan.target,
            "forked": plan.forked,
            "patched": plan.patched,
            "equal": plan.patched == plan.target,
            "whole": plan.whole,
            "carried": [
                {"path": p, "from": words} for p, words in sorted(plan.carried.items())
            ],
            "conflicts": list(plan.conflicts),
        },
        "removed": [
            {
                "path": r.path,
                "kind": r.kind,
                "record": record_of(r, plan.patches),
                "from": r.source,
                "conflict": r.conflict,
                "lines": [{"line": n, "text": text} for n, text in r.lines],
            }
            for r in plan.removed
        ],
        "findings": None if findings is None else [f.as_dict() for f in findings],
        "summary": None if findings is None else summary_line(list(findings)),
        "counts": counts,
        "backup": backup,
        "notes": plan.notes,
    }


def render_text(report: dict) -> str:
    """The report as plain lines for a terminal: one line per file, then the findings."""
    up = report["upstream"]
    closing = report["closing_sentence"]
    out = [
        f"import of {report['directory']}: pin {up['pin'][:12]}, fork {up['commit'][:12]} "
        f"(merge base {up['merge_base'][:12]})",
        f"  closing sentence from {closing['from']}: {closing['text']}",
    ]
    width = max((len(r["path"]) for r in report["files"]), default=0)
    for r in report["files"]:
        entries = (
            f"  [entries {', '.join(map(str, r['entries']))}]" if r["entries"] else ""
        )
        note = f"  ({r['note']})" if r["note"] else ""
        out.append(
            f"  {r['path']:<{width}}  {r['kind']:<10} {r['result']}{entries}{note}"
        )
    counts = ", ".join(f"{n} {k}" for k, n in sorted(report["counts"].items()))
    out.append(
        f"{len(report['files'])} file(s): {counts}; {len(report['patches'])} patch(es), "
        f"{len(report['resolutions'])} resolution(s)"
    )
    if report["uncarried"]:
        out.append(
            f"{len(report['uncarried'])} other fork change(s) are outside [carry] (list them under "
            "'Dropped from the vendored set', or verify reports FIX022)"
        )
    rt = report["round_trip"]
    out.append(
        f"round trip: patched {rt['patched'][:12]} {'==' if rt['equal'] else '!='} "
        f"target {rt['target'][:12]}"
        + (
            f" (pin + overlay {rt['whole'][:12]} with {len(rt['carried'])} file(s) "
            "carried onto the pin, upstream's later lines kept: "
            + ", ".join(c["path"] for c in rt["carried"])
            + ")"
            if rt["carried"]
            else " (pin + overlay)"
        )
    )
    for r in report["removed"]:
        out.append(
            f"{'removes' if r['kind'] == 'patch' else 'changes or drops'} upstream "
            f"lines: {r['path']} ({r['record']}): "
            + ", ".join(
                f"line {x['line']}" if x["line"] else "the binary file"
                for x in r["lines"]
            )
        )
    for note in report["notes"]:
        out.append(f"note: {note}")
    if report["backup"]:
        out.append(f"the previous records were moved to {report['backup']}")
    if report["findings"] is not None:
        out.append(f"verify: {report['summary']}")
        for f in report["findings"]:
            where = (
                f"{f['path']}:{f['line']}"
                if f.get("line")
                else (f["path"] or "<overlay>")
            )
            out.append(f"  {where}: {f['severity']} {f['code']} {f['message']}")
    return "\n".join(out) + "\n"


def render_markdown(report: dict) -> str:
    """The report as a Markdown section (``.overlay/last-import.md``, a PR body)."""
    return render_template("import_report.md.j2", r=report)


def render(report: dict, fmt: str) -> str:
    """Dispatch on ``fmt``: ``text``, ``json`` or ``markdown``
    (:func:`overlay.report.templating.render_report`)."""
    return render_report(report, fmt, text=render_text, markdown=render_markdown)
