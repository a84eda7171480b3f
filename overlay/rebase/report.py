"""The report of a rebase or sync, and its renderings (text, JSON, Markdown for the PR body).

The report is a :class:`RebaseReport` built by :meth:`overlay.rebase.run.Rebase.report`;
its JSON form (:meth:`RebaseReport.to_json`, ``.overlay/last-rebase.json`` and
``--format json``) is ``{kind, pins: {before, after}, merge, resolutions: [...],
patches: [...], range_diff, next_steps}``, key for key as earlier versions wrote it.
The Markdown is written by :func:`render_markdown`.
"""

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from overlay import layout
from overlay.fs.atomic import atomic_write
from overlay.lazy import lazy_pattern
from overlay.rebase.state import Bases
from overlay.report.templating import render_report


class ReportResolution(NamedTuple):
    """One line of the report's resolutions: a path and how it was settled.

    ``status`` is a :class:`overlay.rebase.state.ResolutionOutcome` status, or
    ``removed`` for a resolution whose path no longer conflicts.
    """

    path: str
    status: str
    note: str

    def to_json(self) -> dict[str, str]:
        """``{"path", "status", "note"}``."""
        return {"path": self.path, "status": self.status, "note": self.note}


class ReportPatch(NamedTuple):
    """One line of the report's series: a patch, its Local-Fix number and outcome.

    ``status`` is a :class:`overlay.rebase.state.PatchOutcome` status, with
    ``merged (bytes unchanged)`` for a merged patch whose file keeps its bytes.
    """

    name: str
    status: str
    local_fix: int | None
    note: str

    def to_json(self) -> dict[str, Any]:
        """``{"name", "status", "local_fix", "note"}``."""
        return {
            "name": self.name,
            "status": self.status,
            "local_fix": self.local_fix,
            "note": self.note,
        }


class PinChange(NamedTuple):
    """The bases before and after the run (``pins`` in the JSON form)."""

    before: Bases
    after: Bases

    def to_json(self) -> dict[str, Any]:
        """``{"before": {...}, "after": {...}}``."""
        return {"before": self.before.to_json(), "after": self.after.to_json()}


class RebaseReport(NamedTuple):
    """What a completed rebase or sync did.

    Attributes:
        kind: ``"rebase"`` or ``"sync"``.
        pins: the bases before and after.
        merge: ``{"carried": n, "conflicts": n}`` of the fork-delta merge (``{}``
            when the run did not count them).
        resolutions: one entry per resolution kept, changed or removed, by path.
        patches: one entry per patch of the series, in order.
        range_diff: ``git range-diff`` of the old series against the new one,
            patches named by :func:`patch_label`.
        next_steps: commands and checks for the user, in order.
        uncarried: what the fork changed between the two fork commits that the
            overlay does not carry: ``(path, ["<sha12> <subject>", ...])`` pairs
            (:func:`overlay.checks.pins.uncarried_changes`); empty for a rebase.
        warnings: every warning the command gave when the run started (the pin
            moved backwards or sideways and the retarget entries citing commits it
            lacks, a fork carried ahead of the pin), so that the reviewer of the
            report sees them, not only the terminal that ran it.
    """

    kind: str
    pins: PinChange
    merge: dict[str, int]
    resolutions: list[ReportResolution]
    patches: list[ReportPatch]
    range_diff: str
    next_steps: list[str]
    uncarried: Sequence[tuple[str, list[str]]] = ()
    warnings: Sequence[str] = ()

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``.overlay/last-rebase.json`` and ``--format json``."""
        return (
            {
                "kind": self.kind,
                "pins": self.pins.to_json(),
                "merge": dict(self.merge),
                "resolutions": [r.to_json() for r in self.resolutions],
                "patches": [p.to_json() for p in self.patches],
                "range_diff": self.range_diff,
                "next_steps": list(self.next_steps),
            }
            | (
                {"uncarried": [{"path": p, "commits": c} for p, c in self.uncarried]}
                if self.uncarried
                else {}
            )
            | ({"warnings": list(self.warnings)} if self.warnings else {})
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RebaseReport":
        """Read :meth:`to_json`'s form (a ``last-rebase.json``).

        Raises:
            KeyError, TypeError: a key is missing or not of its type.
        """
        return cls(
            kind=data["kind"],
            pins=PinChange(
                Bases.from_json(data["pins"]["before"]),
                Bases.from_json(data["pins"]["after"]),
            ),
            merge=dict(data.get("merge", {})),
            resolutions=[
                ReportResolution(r["path"], r["status"], r.get("note", ""))
                for r in data["resolutions"]
            ],
            patches=[
                ReportPatch(
                    p["name"], p["status"], p.get("local_fix"), p.get("note", "")
                )
                for p in data["patches"]
            ],
            range_diff=data.get("range_diff", ""),
            next_steps=list(data.get("next_steps", [])),
            uncarried=[
                (u["path"], list(u["commits"])) for u in data.get("uncarried", [])
            ],
            warnings=list(data.get("warnings", [])),
        )


def read_last_json(root: str) -> dict[str, Any] | None:
    """``.overlay/last-rebase.json`` as written (:meth:`RebaseReport.to_json`, or an
    older run's shape): the one reader of the last completed run's report; ``None``
    when there is none or it cannot be read as a JSON object.

    Args:
        root: the overlay repository.
    """
    try:
        with open(layout.under(root, layout.LAST_REBASE_JSON), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_last_report(root: str, report: RebaseReport) -> None:
    """``.overlay/last-rebase.md`` and ``.overlay/last-rebase.json`` of a completed run:
    the one writer of both. Renamed into place whole, not fsynced: the records are,
    while a report that a power loss takes is only the run's summary, not worth two
    waits for the disk.

    Args:
        root: the overlay repository; report: the run's outcome.
    """
    layout.make_state_dir(root)
    atomic_write(
        layout.under(root, layout.LAST_REBASE_MD),
        render_markdown(report).encode(),
        durable=False,
    )
    atomic_write(
        layout.under(root, layout.LAST_REBASE_JSON),
        json.dumps(report.to_json(), indent=2).encode(),
        durable=False,
    )


def last_run_pins(root: str) -> dict[str, Any] | None:
    """The ``pins`` of the last completed rebase or sync: ``{"before": {"pin", "fork",
    ...}, "after": {...}}``, or ``None`` when there is no such report or it does not
    say (:func:`read_last_json`)."""
    pins = (read_last_json(root) or {}).get("pins")
    if not isinstance(pins, dict):
        return None
    if not all(isinstance(pins.get(k), dict) for k in ("before", "after")):
        return None
    return pins


def last_rebase_pin(root: str, pin: str) -> str | None:
    """The pin the last completed rebase started from, when it moved to ``pin``.

    Args:
        root: the overlay repository (``.overlay/last-rebase.json`` under it).
        pin: the manifest's pin (40 hex).
    Returns:
        The ``before`` pin of ``.overlay/last-rebase.json`` when that run ended on
        ``pin`` and moved the pin (a sync keeps it), else ``None`` (no run recorded,
        or the manifest moved on since: the range would be wrong).
    """
    pins = last_run_pins(root)
    if pins is None:
        return None
    before, after = pins["before"].get("pin"), pins["after"].get("pin")
    return before if after == pin and before != pin else None


#: A header line of ``git range-diff --no-color``: ``1:  abc1234 = 1:  def5678 subject``
#: (``-:  -------`` on the side a patch is missing from).
_RANGE_HEAD = lazy_pattern(
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


def render_markdown(report: RebaseReport) -> str:
    """The report as a Markdown section (for ``.overlay/last-rebase.md`` and the PR body).

    Written out here rather than as a jinja2 template: every rebase and sync writes
    this report, and importing jinja2 costs a run more than all its own modules do.
    The bytes are those of the template this replaced, kept as the tests' reference
    (``tests/data/rebase_report.md.j2``): a header with the bases before and after,
    the fork delta's counts, the run's warnings (when there are any), a table of
    resolutions, one of the series, the paths not carried (a sync), the range-diff
    in a fenced block, and the next steps.
    """
    before, after = report.pins.before, report.pins.after
    forks = (
        (f" / fork {before.fork[:8]}", f" / fork {after.fork[:8]}")
        if report.kind == "sync"
        else ("", "")
    )
    merge = report.merge
    out = [
        f"## overlay {report.kind}: {before.pin[:8]}{forks[0]} → "
        f"{after.pin[:8]}{forks[1]}\n\n"
        "| | before | after |\n|---|---|---|\n"
        f"| MLX pin | `{before.pin}` | `{after.pin}` |\n"
        f"| fork commit | `{before.fork}` | `{after.fork}` |\n"
        f"| fork merge base | `{before.merge_base}` | `{after.merge_base}` |\n\n"
        f"Fork delta: {merge.get('carried', 0)} carried path(s), "
        f"{merge.get('conflicts', 0)} conflicting with the new pin.\n\n"
    ]
    if report.warnings:
        out.append("### Warnings\n\n")
        out += [f"- {w}\n" for w in report.warnings]
        out.append("\n")
    out.append("### Resolutions\n")
    if report.resolutions:
        out.append("\n| path | outcome | note |\n|---|---|---|\n")
        out += [f"| `{x.path}` | {x.status} | {x.note} |\n" for x in report.resolutions]
    else:
        out.append("\nNone needed.\n")
    out.append("\n### Series\n")
    if report.patches:
        out.append("\n| patch | Local-Fix | outcome | note |\n|---|---|---|---|\n")
        out += [
            f"| `{p.name}` | {p.local_fix if p.local_fix is not None else ''} "
            f"| {p.status} | {p.note} |\n"
            for p in report.patches
        ]
    else:
        out.append("\nThe series is empty.\n")
    out.append("\n")
    if report.uncarried:
        out.append(
            f"\n### Not carried\n\nThe fork changed {len(report.uncarried)} path(s) "
            "between the two fork commits that the overlay does not carry (`[carry]` "
            "of `patches-rocm/overlay.toml`):\n\n| path | fork commits |\n|---|---|\n"
        )
        out += [
            f"| `{path}` | {'; '.join(map(str, commits))} |\n"
            for path, commits in report.uncarried
        ]
        out.append("\n")
    if report.range_diff:
        out.append(
            "\n### Range-diff (old series → new series)\n\n"
            f"```\n{report.range_diff.rstrip()}\n```\n"
        )
    out.append("\n### Next steps\n\n")
    # A command in code format; a sentence (which may name commands) as text.
    out += [
        f"- `{s}`\n" if s.startswith("overlay ") else f"- {s}\n"
        for s in report.next_steps
    ]
    out.append("\n")
    return "".join(out)


def render_text(report: RebaseReport) -> str:
    """The report as plain lines for a terminal."""
    before, after = report.pins.before, report.pins.after
    out = [
        f"{report.kind} complete: pin {before.pin[:12]} -> {after.pin[:12]}, "
        f"fork {before.fork[:12]} -> {after.fork[:12]}"
    ]
    for x in report.resolutions:
        out.append(
            f"  resolution {x.path}: {x.status}" + (f" ({x.note})" if x.note else "")
        )
    for p in report.patches:
        out.append(f"  patch {p.name}: {p.status}" + (f" ({p.note})" if p.note else ""))
    if report.uncarried:
        shown = [
            f"{path} ({commits[0]}"
            + (f" and {len(commits) - 1} more" if commits[1:] else "")
            + ")"
            if commits
            else path
            for path, commits in report.uncarried[:5]
        ]
        more = len(report.uncarried) - len(shown)
        out.append(
            f"  not carried: the fork changed {len(report.uncarried)} path(s) outside "
            f"[carry]: {'; '.join(shown)}" + (f"; and {more} more" if more else "")
        )
    out.append("next: " + "; ".join(report.next_steps))
    return "\n".join(out) + "\n"


def render(report: RebaseReport, fmt: str) -> str:
    """The report as ``fmt``: ``text`` (:func:`render_text`), ``json``
    (:meth:`RebaseReport.to_json`, indented by two) or ``markdown``
    (:func:`render_markdown`), through :func:`overlay.report.templating.render_report`."""
    data: Any = report.to_json() if fmt == "json" else report
    return render_report(data, fmt, text=render_text, markdown=render_markdown)
