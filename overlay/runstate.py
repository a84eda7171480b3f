"""What a rebase or sync run left on disk, said in words for the user.

Read-only helpers around the files :mod:`overlay.rebase` writes: the state
directory ``.overlay/rebase/state.json`` (a run in progress) and the report
``.overlay/last-rebase.json`` (the last completed run). Nothing here writes.
"""

from __future__ import annotations

import json
import os

from overlay.errors import OverlayError
from overlay.manifest import MANIFEST_PATH

STATE_FILE = os.path.join(".overlay", "rebase", "state.json")
REPORT_JSON = os.path.join(".overlay", "last-rebase.json")
#: What a completed run may change; the git commands below name these paths.
RUN_PATHS = "patches-rocm LOCAL_FIXES.md"
_DIFF = f"git diff --stat -- {RUN_PATHS}"
_UNDO = f"git checkout -- {RUN_PATHS}"


def run_in_progress(root: str) -> str | None:
    """The kind of the run in progress at ``root`` (``"rebase"`` or ``"sync"``), or ``None``.

    Args:
        root: overlay repository.
    Returns:
        The kind from ``.overlay/rebase/state.json`` (``"rebase"`` when unreadable),
        or ``None`` when no state file exists.
    """
    path = os.path.join(root, STATE_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            kind = json.load(fh).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    return kind if kind in ("rebase", "sync") else "rebase"


def refuse_if_in_progress(root: str) -> None:
    """Refuse to start a run while another one waits (before any "nothing to do").

    Args:
        root: overlay repository.
    Raises:
        OverlayError: a run is in progress; the message names it and the commands
        that finish or undo it (exit 2).
    """
    kind = run_in_progress(root)
    if kind is not None:
        raise OverlayError(f"a {kind} is in progress ({STATE_FILE}); it is not started again",
                           hint=f"see it with `overlay {kind} --status`; finish it with `overlay {kind} "
                                f"--continue` (or --skip a patch), or undo it with `overlay {kind} --abort`")


def interrupt_note(root: str | None, kind: str, since: float) -> str:
    """The line for a rebase or sync interrupted by Ctrl-C: what state is left, and
    which command continues or undoes it.

    Args:
        root: overlay repository, or ``None`` when there is none.
        kind: the command interrupted (``"rebase"`` or ``"sync"``).
        since: ``time.time()`` when the command began (a report newer than that
            means the run completed before the interrupt).
    Returns:
        One line, without the ``overlay:`` prefix.
    """
    if root is None:
        return "interrupted"
    on_disk = run_in_progress(root)
    if on_disk is not None:
        return (f"interrupted: the {on_disk} is stopped and resumable with `overlay {on_disk} --continue`, "
                f"or undone with `overlay {on_disk} --abort` (`--status` shows where it stands)")
    try:
        completed = os.path.getmtime(os.path.join(root, REPORT_JSON)) >= since
    except OSError:
        completed = False
    if completed:
        return (f"interrupted after the {kind} had completed: its report is in .overlay/last-rebase.md; "
                f"undo it with `{_UNDO}`")
    return f"interrupted before the {kind} started: nothing was changed"


def _changed_files(report: dict) -> list[str]:
    """The overlay files the reported run changed: the report's own list when it has
    one (``files``), else what its patches and resolutions say."""
    listed = report.get("files")
    if isinstance(listed, list) and all(isinstance(x, str) for x in listed):
        return list(listed)
    out = [MANIFEST_PATH.replace(os.sep, "/")]
    pins = report.get("pins", {})
    if pins.get("before") != pins.get("after"):
        out.append("LOCAL_FIXES.md (the pins in its headings)")
    dropped = []
    for p in report.get("patches", []):
        status = p.get("status", "")
        if status in ("upstream", "skipped"):
            dropped.append(f"patches-rocm/{p['name']} (deleted)")
        elif status in ("merged", "resolved", "clean (refreshed)"):
            out.append(f"patches-rocm/{p['name']}")
    if dropped:
        out.append("patches-rocm/series")
    out += dropped
    for r in report.get("resolutions", []):
        status = r.get("status", "")
        if status == "removed":
            out.append(f"patches-rocm/resolved/{r['path']} (deleted)")
        elif status != "unchanged":
            out.append(f"patches-rocm/resolved/{r['path']}")
    return out


def no_run_to_abort(root: str, action: str = "abort") -> OverlayError:
    """The error for ``--abort`` (``--continue``, ``--skip``, ``--drop``) when no run is
    in progress. For ``--abort`` it says how to undo the last completed run with git,
    naming the files it changed, while the manifest still holds that run's pin and fork
    commit; once it does not (the run was undone or superseded) the old report is not
    quoted as if it were current.

    Args:
        root: overlay repository.
        action: the option given, without ``--``.
    Returns:
        An :class:`OverlayError` (exit 2) for the caller to raise.
    """
    verb = {"abort": "restore", "continue": "continue", "skip": "skip", "drop": "drop"}.get(action, action)
    message = f"no rebase or sync in progress: there is nothing for --{action} to {verb}"
    if action != "abort":
        return OverlayError(message, hint="start one with `overlay rebase --onto SHA` or `overlay sync --fork SHA`")
    try:
        with open(os.path.join(root, REPORT_JSON), encoding="utf-8") as fh:
            report = json.load(fh)
        pins = report["pins"]
        kind = report.get("kind", "rebase")
        run = (f"the last {kind} (pin {pins['before']['pin'][:12]} -> {pins['after']['pin'][:12]}, "
               f"fork {pins['before']['fork'][:12]} -> {pins['after']['fork'][:12]})")
        current = _manifest_pins(root)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return OverlayError(message, hint=f"a completed run is not undone by --abort; review it with `{_DIFF}` "
                                          f"and undo it with `{_UNDO}`")
    if current is not None and current != (pins["after"]["pin"], pins["after"]["fork"]):
        return OverlayError(message, hint=f"{run} is not what the manifest holds now (pin {current[0][:12]}, "
                                          f"fork {current[1][:12]}): it was undone or superseded")
    return OverlayError(message,
                        hint=f"{run} completed and changed {', '.join(_changed_files(report))}; review it with "
                             f"`{_DIFF}` and undo it with `{_UNDO}` "
                             "(new files under patches-rocm/resolved/ are removed by hand, see `git status`)")


def _manifest_pins(root: str) -> tuple[str, str] | None:
    """``(pin, fork commit)`` of the manifest, or ``None`` when it cannot be read."""
    from overlay.manifest import load_manifest

    try:
        manifest = load_manifest(root)
    except OverlayError:
        return None
    return manifest.pin, manifest.fork_commit
