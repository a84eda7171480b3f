"""Render suite results and A/B comparisons: text, JSON, JUnit XML, Markdown.

Every format shows, per suite, ``k of n failed`` with the exact 95 %
(Clopper–Pearson) interval and the failure kinds; a skipped suite shows
``SKIPPED`` and its reason, never "passed". The A/B report puts both columns
side by side with Fisher's exact p and says plainly when the suite is a guard,
not a reproduction. Reports found in the runs' stderr (sanitizer findings, the
children's ``overlay-suite: report`` lines) are counted per kind, and a suite
that runs on a host model says so wherever it appears: it is never a GPU result.

Functions return strings; the CLI writes them.
"""

from __future__ import annotations

import json
import os

from overlay.report import junit
from overlay.suites.runner import ABResult, SuiteResult

__all__ = [
    "FORMATS",
    "AB_FORMATS",
    "render_results",
    "render_ab",
    "format_interval",
    "format_kinds",
    "format_reports",
    "status_word",
    "summary_counts",
    "HOST_MODEL_NOTE",
]

#: Said beside every host-model suite (docs/race-lab.md).
HOST_MODEL_NOTE = "host model, not a GPU result"

#: Formats of :func:`render_results`.
FORMATS = ("text", "json", "junit", "markdown")
#: Formats of :func:`render_ab`.
AB_FORMATS = ("text", "json", "markdown")
#: Bytes of a failed run's stderr quoted in JUnit ``<failure>`` text.
_JUNIT_TAIL_BYTES = 4000


def format_interval(lo_hi: tuple[float, float]) -> str:
    """``[0.0000, 0.3085]``: an interval with four decimals."""
    return f"[{lo_hi[0]:.4f}, {lo_hi[1]:.4f}]"


def format_kinds(result: SuiteResult) -> str:
    """``"fail 2, crash 1"``, or ``"-"`` when no run failed."""
    kinds = result.kinds()
    return ", ".join(f"{k} {v}" for k, v in kinds.items()) or "-"


def format_reports(result: SuiteResult) -> str:
    """``"ThreadSanitizer: data race in 20 runs (31 in all); ..."``, or ``""`` without reports."""
    return "; ".join(
        f"{kind} in {runs} run{'s' if runs != 1 else ''} ({total} in all)"
        for kind, (runs, total) in result.report_kinds().items()
    )


def _model(r: SuiteResult) -> str | None:
    return r.settings.get("model")


def status_word(result: SuiteResult) -> str:
    """``PASSED`` / ``FAILED`` / ``SKIPPED`` / ``INTERRUPTED`` for one suite."""
    if result.status == "skipped":
        return "SKIPPED"
    if result.status == "interrupted":
        return "INTERRUPTED"
    return "FAILED" if result.failed else "PASSED"


def summary_counts(results) -> dict:
    """``{"suites", "passed", "failed", "skipped", "interrupted", "runs", "failed_runs"}``."""
    words = [status_word(r) for r in results]
    return {
        "suites": len(results),
        "passed": words.count("PASSED"),
        "failed": words.count("FAILED"),
        "skipped": words.count("SKIPPED"),
        "interrupted": words.count("INTERRUPTED"),
        "runs": sum(r.n for r in results),
        "failed_runs": sum(r.failed for r in results),
    }


def _k_of_n(r: SuiteResult) -> str:
    return f"{r.failed} of {r.n} failed"


def _file(r: SuiteResult, name: str) -> str:
    return os.path.join(r.directory, name) if r.directory else name


# --------------------------------------------------------------------------- runs


def _text(results) -> str:
    lines = []
    width = max([len(r.suite) for r in results] + [5])
    for r in results:
        word = status_word(r)
        if r.skipped:
            lines.append(f"{r.suite:<{width}}  {word:<7}  {r.skip_reason}")
            continue
        interval = format_interval(r.interval())
        line = f"{r.suite:<{width}}  {word:<7}  {_k_of_n(r)}, 95% interval {interval}"
        kinds = format_kinds(r)
        if kinds != "-":
            line += f"; {kinds}"
        if r.status == "interrupted":
            line += f" (stopped after {r.n} of {r.planned_runs} runs)"
        lines.append(line)
        if _model(r):
            lines.append(f"    {_model(r)}: {HOST_MODEL_NOTE} (docs/race-lab.md)")
        if format_reports(r):
            lines.append(f"    reports: {format_reports(r)}")
        for run in r.runs:
            if run.failed:
                lines.append(
                    f"    run {run.index:03d}  {run.kind:<6}  {run.detail(r.deadline_s)}  "
                    f"({_file(r, run.stderr)})"
                )
        if r.directory:
            lines.append(f"    results: {r.directory}")
    s = summary_counts(results)
    lines.append(
        f"{s['suites']} suite(s): {s['passed']} passed, {s['failed']} failed, "
        f"{s['skipped']} skipped; {s['failed_runs']} of {s['runs']} runs failed"
    )
    return "\n".join(lines) + "\n"


def _json(results) -> str:
    return (
        json.dumps(
            {
                "format": 1,
                "summary": summary_counts(results),
                "suites": [dict(r.to_dict(), directory=r.directory) for r in results],
            },
            indent=2,
        )
        + "\n"
    )


def _tail(path: str | None) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - _JUNIT_TAIL_BYTES))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _junit(results) -> str:
    """One testsuite per suite, one testcase per run
    (:func:`overlay.report.junit.render`, XML-safe)."""
    suites = []
    for r in results:
        lo, hi = r.interval()
        suite = junit.Suite(
            r.suite,
            timestamp=r.started or None,
            properties=[
                ("failed", f"{r.failed} of {r.n}"),
                ("interval95", format_interval((lo, hi))),
                ("kinds", format_kinds(r)),
                ("proves", str(r.settings.get("proves") or "-")),
                ("model", _model(r) or "-"),
                ("reports", format_reports(r) or "-"),
            ],
        )
        if r.skipped:
            suite.cases.append(
                junit.Case(
                    r.suite,
                    f"suite.{r.suite}",
                    "skipped",
                    message=r.skip_reason,
                    time=0.0,
                )
            )
        for run in r.runs:
            case = junit.Case(
                f"run-{run.index:03d}", f"suite.{r.suite}", time=run.duration_s
            )
            if run.failed:
                case.status = "failed"
                case.failure_type = run.kind
                case.message = f"{run.kind}: {run.detail(r.deadline_s)}"
                case.text = _tail(_file(r, run.stderr) if r.directory else None)
            suite.cases.append(case)
        suite.time = sum(run.duration_s for run in r.runs)
        suites.append(suite)
    return junit.render(suites, name="overlay suites", total_time=True)


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _markdown(results) -> str:
    out = [
        "### Concurrency suites",
        "",
        "| suite | proves | result | failed | 95% interval | kinds / reason |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        proves = r.settings.get("proves")
        proves = f"#{proves}" if proves else "-"
        word = status_word(r)
        if r.skipped:
            out.append(
                f"| `{r.suite}` | {proves} | **SKIPPED** | - | - | {_md_cell(r.skip_reason)} |"
            )
        else:
            shown = f"**{word}**" if word != "PASSED" else "passed"
            if _model(r):
                shown += f" ({HOST_MODEL_NOTE})"
            detail = format_kinds(r) + (
                f"; reports: {format_reports(r)}" if format_reports(r) else ""
            )
            out.append(
                f"| `{r.suite}` | {proves} | {shown} | {r.failed} of {r.n} | "
                f"{format_interval(r.interval())} | {_md_cell(detail)} |"
            )
    s = summary_counts(results)
    out += [
        "",
        f"{s['failed_runs']} of {s['runs']} runs failed; {s['passed']} suite(s) passed, "
        f"{s['failed']} failed, {s['skipped']} skipped (skipped is not passed). "
        "Intervals are exact (Clopper–Pearson) 95% intervals of the failure rate.",
    ]
    failed_runs = [(r, run) for r in results for run in r.runs if run.failed]
    if failed_runs:
        out += ["", "<details><summary>Failed runs</summary>", ""]
        for r, run in failed_runs:
            detail = _md_cell(run.detail(r.deadline_s))
            out.append(f"- `{r.suite}` run {run.index:03d}: {run.kind}: {detail}")
        out += ["", "</details>"]
    return "\n".join(out) + "\n"


def render_results(results, fmt: str = "text") -> str:
    """Render a list of :class:`~overlay.suites.runner.SuiteResult`.

    Args:
        results: suite results, in the order to show.
        fmt: one of :data:`FORMATS`.

    Returns:
        The report text (ends with a newline). JUnit: one ``<testsuite>`` per
        suite, one ``<testcase>`` per run (a skipped suite has one skipped
        testcase), each failed run a ``<failure type="<kind>">`` with the tail
        of its stderr; ``tests``/``failures``/``skipped`` attributes equal the
        element counts.

    Raises:
        ValueError: unknown format.
    """
    results = list(results)
    if fmt == "text":
        return _text(results)
    if fmt == "json":
        return _json(results)
    if fmt == "junit":
        return _junit(results)
    if fmt == "markdown":
        return _markdown(results)
    raise ValueError(f"unknown format {fmt!r} (use {', '.join(FORMATS)})")


# --------------------------------------------------------------------------- A/B


def _p(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.4g}"


def _short_path(word: str, root: str | None) -> str:
    """``word`` relative to ``root`` when it is an absolute path under it."""
    if not root or not os.path.isabs(word):
        return word
    rel = os.path.relpath(word, root)
    return word if rel.startswith("..") else rel


def _ab_rows(ab: ABResult, root: str | None = None) -> list[tuple[str, str, str]]:
    """The side-by-side rows; the children's paths relative to ``root`` when under it."""
    a, b = ab.with_fix, ab.without_fix

    def col(r: SuiteResult, what: str) -> str:
        if r.skipped:
            return "SKIPPED" if what == "failed" else "-"
        if what == "failed":
            return f"{r.failed} of {r.n}"
        if what == "interval":
            return format_interval(r.interval())
        if what == "kinds":
            return format_kinds(r)
        return " ".join(_short_path(w, root) for w in r.argv)

    return [
        (label, col(a, key), col(b, key))
        for label, key in (
            ("failed", "failed"),
            ("95% interval", "interval"),
            ("kinds", "kinds"),
            ("child", "child"),
        )
    ]


def _ab_report_rows(ab: ABResult) -> list[tuple[str, str, str]]:
    """One row per report kind: runs with it (occurrences) in each column."""
    a, b = ab.with_fix.report_kinds(), ab.without_fix.report_kinds()
    kinds = list(b) + [k for k in a if k not in b]

    def cell(r: SuiteResult, d: dict, kind: str) -> str:
        if r.skipped:
            return "-"
        runs, total = d.get(kind, (0, 0))
        return f"{runs} of {r.n} runs ({total})"

    return [(k, cell(ab.with_fix, a, k), cell(ab.without_fix, b, k)) for k in kinds]


def _acquit_line(ab: ABResult) -> str:
    plan = ab.acquit_plan()
    if not plan:
        return ""
    b = ab.without_fix
    return (
        "Runs to acquit at 99% (seed 003, overlay suite plan): "
        f"{plan['runs']} at the fix-removed rate {b.failed}/{b.n}; "
        f"{plan['runs_at_lower95']} at its 95% lower bound {plan['baseline_lower95']:.4f}."
    )


def render_ab(ab: ABResult, fmt: str = "text", root: str | None = None) -> str:
    """Render an A/B comparison with both columns side by side.

    Args:
        ab: the comparison.
        fmt: one of :data:`AB_FORMATS`.
        root: the repository root: the children's paths under it are shown relative
            to it (text and markdown), so the columns stay aligned.

    Returns:
        The report; it always carries Fisher's two-sided p and the verdict
        sentences of :meth:`ABResult.verdicts` (among them "guard, not a
        reproduction" whenever the fix-removed column never failed).

    Raises:
        ValueError: unknown format.
    """
    a = ab.with_fix
    proves = a.settings.get("proves")
    head = f"A/B: {ab.suite}" + (
        f" (proves LOCAL_FIXES.md entry {proves})" if proves else ""
    )
    head += f", {a.planned_runs} runs each"
    if ab.model:
        head += f" [{ab.model}: {HOST_MODEL_NOTE}]"
    verdicts = ab.verdicts()
    reports = _ab_report_rows(ab)
    acquit = _acquit_line(ab)
    if fmt == "json":
        return json.dumps(dict(ab.to_dict(), directory=ab.directory), indent=2) + "\n"
    if fmt == "text":
        rows = _ab_rows(ab, root)
        w0 = max(len(r[0]) for r in rows + [("", "", "")])
        w1 = max([len(r[1]) for r in rows] + [len("with fix")])
        lines = [head, f"{'':<{w0}}  {'with fix':<{w1}}  fix removed"]
        lines += [f"{r[0]:<{w0}}  {r[1]:<{w1}}  {r[2]}" for r in rows]
        if reports:
            wk = max(len(k) for k, _x, _y in reports)
            wx = max([len(x) for _k, x, _y in reports] + [len("with fix")])
            lines.append("reports: runs with each kind (occurrences in all)")
            lines += [f"  {k:<{wk}}  {x:<{wx}}  {y}" for k, x, y in reports]
        lines.append(f"Fisher's exact test, two-sided: p = {_p(ab.fisher_p)}")
        if acquit:
            lines.append(acquit)
        lines.append("")
        lines += [f"{code.upper()}: {text}" for code, text in verdicts]
        if ab.directory:
            lines.append(f"results: {ab.directory}")
        return "\n".join(lines) + "\n"
    if fmt == "markdown":
        out = [f"### {head}", "", "| | with fix | fix removed |", "|---|---|---|"]
        for label, x, y in _ab_rows(ab, root):
            if label == "child":
                x, y = f"`{x}`" if x != "-" else x, f"`{y}`" if y != "-" else y
            out.append(f"| {label} | {_md_cell(x)} | {_md_cell(y)} |")
        for kind, x, y in reports:
            out.append(f"| report: {_md_cell(kind)} | {x} | {y} |")
        out += ["", f"Fisher's exact test, two-sided: p = {_p(ab.fisher_p)}", ""]
        if acquit:
            out += [acquit, ""]
        out += [f"**{code}**: {text}" for code, text in verdicts]
        return "\n".join(out) + "\n"
    raise ValueError(f"unknown format {fmt!r} (use {', '.join(AB_FORMATS)})")
