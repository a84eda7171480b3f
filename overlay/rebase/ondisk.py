"""What a rebase or sync run left on disk.

The files :mod:`overlay.rebase` writes: the state directory ``.overlay/rebase/``
(``state.json`` and ``backup.json``: a run in progress) and the report
``.overlay/last-rebase.json`` (the last completed run). A run's state
directory appears and disappears whole (it is built beside its place and
renamed), so a state that is there only in part (``state.json`` without its
backup, a backup without ``state.json``, a ``state.json`` that is not valid)
was not left by a kill: :func:`inspect_state` calls it *wedged*, and ``--abort``
recovers it (:meth:`overlay.rebase.run.Rebase.recover_wedged`).

Every command that reads or writes the rebase state or the records takes
:func:`overlay.fs.records_lock.state_lock` (``flock`` on ``.overlay/rebase.lock``): the rebase and
sync commands, ``refresh`` and ``fix new`` exclusively, ``verify``, ``status``
and ``--status`` shared. A command that finds the lock taken is refused at once
with one ``overlay:`` line naming the holder (exit 2): nobody waits, nobody
sees a half-changed state. Only a holder of the exclusive lock may call
:func:`overlay.fs.sweep.sweep_killed_runs`.
"""

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from overlay import layout
from overlay.errors import GitError, OverlayError, UnsafePath
from overlay.fs.paths import check_path
from overlay.fs.reading import RecordError
from overlay.rebase.backup import Backup, read_backup
from overlay.rebase.state import Fields, RunState, read_state_json

if TYPE_CHECKING:
    import subprocess

    from overlay.workspace import Workspace


def _git_on_run_paths(verb: str) -> str:
    """``git <verb> -- patches-rocm LOCAL_FIXES.md``: a git command on what a completed
    run may change (``diff --stat`` reviews it, ``checkout`` undoes it)."""
    return f"git {verb} -- {layout.PATCH_DIR} {layout.LOCAL_FIXES}"


class StateOnDisk(Fields):
    """What ``.overlay/rebase/`` holds.

    Attributes:
        present: a run is in progress, or its state is wedged (the directory is
            not empty); ``False`` when there is no directory or an empty one.
        kind: ``"rebase"`` or ``"sync"`` (``"rebase"`` when ``state.json`` cannot say).
        state: the parsed ``state.json`` when it is there and well formed, else ``None``.
        problem: why the state is wedged, in words; ``None`` when it is whole.
        missing: files of ``state.backup`` that have no copy in the backup.
        backup: the run's backup (:mod:`overlay.rebase.backup`) when it is there.
    """

    __slots__ = ("present", "kind", "state", "problem", "missing", "backup")
    present: bool
    kind: str
    state: RunState | None
    problem: str | None
    missing: list[str]
    backup: Backup | None

    def __init__(
        self,
        present: bool,
        kind: str = "rebase",
        state: RunState | None = None,
        problem: str | None = None,
        missing: list[str] | None = None,
        backup: Backup | None = None,
    ) -> None:
        self.present, self.kind, self.state = present, kind, state
        self.problem, self.backup = problem, backup
        self.missing = [] if missing is None else missing


def _state_shape_error(state: Any) -> str | None:
    """Why ``state`` is not a usable run state (``None`` when it is)."""
    if not isinstance(state, dict):
        return "state.json does not hold an object"
    if state.get("kind") not in ("rebase", "sync"):
        return "state.json names no run kind"
    for key in ("old", "new"):
        bases = state.get(key)
        if not isinstance(bases, dict) or not all(
            isinstance(bases.get(k), str) for k in ("pin", "fork", "merge_base")
        ):
            return f"state.json lacks the {key} pins"
    backup = state.get("backup")
    if not isinstance(backup, list) or not all(isinstance(rel, str) for rel in backup):
        return "state.json lacks the list of backed-up files"
    for rel in backup:
        try:
            check_path(rel, what="backed-up file")
        except UnsafePath:
            # A hostile name here would make --abort write outside the repository.
            return f"state.json names an unsafe backed-up file {rel!r}"
    if not isinstance(state.get("patches"), list) or not isinstance(
        state.get("resolutions"), dict
    ):
        return "state.json lacks the patches or the resolutions"
    recorded = state.get("rr_recorded", [])
    if not isinstance(recorded, list) or not all(
        isinstance(k, str) and len(k) == 64 and all(c in "0123456789abcdef" for c in k)
        for k in recorded
    ):
        # --abort removes these names from the rr-cache: nothing else may be named.
        return "state.json names rr-cache entries that are not sha256 keys"
    return None


def inspect_state(root: str) -> StateOnDisk:
    """Read ``.overlay/rebase/``: is a run in progress, and is its state whole?

    A whole state is a valid ``state.json`` (read as a record: a regular file
    inside the repository, size-capped) with a backup (``backup.json``, or an older
    overlay's ``backup/``) holding a copy of every file it lists. Anything else in a
    non-empty directory is wedged.

    Args:
        root: overlay repository.
    Returns:
        :class:`StateOnDisk`. Never raises for what the directory holds.
    """
    sdir = os.path.join(root, layout.REBASE_STATE_DIR)
    try:
        names = os.listdir(sdir)
    except OSError:
        return StateOnDisk(False)
    if not names:
        return StateOnDisk(False)
    backup = read_backup(sdir)
    if not os.path.lexists(os.path.join(sdir, layout.STATE_JSON)):
        left = (
            "its backup"
            if backup is not None
            else "leftover files (" + ", ".join(sorted(names)[:3]) + ")"
        )
        return StateOnDisk(
            True,
            problem=f"{layout.REBASE_STATE_DIR} holds {left} but no state.json",
            backup=backup,
        )
    try:
        data = read_state_json(root)
    except RecordError as exc:
        return StateOnDisk(True, problem=exc.message)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return StateOnDisk(
            True,
            problem=f"{layout.REBASE_STATE} is not valid JSON (half-written or damaged)",
        )
    shape = _state_shape_error(data)
    if shape is not None:
        return StateOnDisk(True, problem=shape)
    try:
        state = RunState.from_json(data)
    except ValueError as exc:
        return StateOnDisk(
            True, problem=f"{layout.REBASE_STATE} is not a run state: {exc}"
        )
    return _backup_state(backup, state)


def _backup_state(backup: Backup | None, state: RunState) -> StateOnDisk:
    """A run with a valid ``state``: whole when ``backup`` (``None``: not there) holds
    a copy of every file the state lists, else wedged."""
    if backup is None:
        return StateOnDisk(
            True,
            state.kind,
            state,
            f"{layout.REBASE_STATE} is there but its backup "
            f"({layout.REBASE_STATE_DIR}/{layout.BACKUP_JSON}) is not",
            list(state.backup),
        )
    missing = [rel for rel in state.backup if rel not in backup.copies]
    if missing:
        return StateOnDisk(
            True,
            state.kind,
            state,
            f"the backup lacks {len(missing)} of the {len(state.backup)} "
            f"file(s) it should hold ({', '.join(missing[:3])}"
            f"{' ...' if len(missing) > 3 else ''})",
            missing,
            backup,
        )
    return StateOnDisk(True, state.kind, state, backup=backup)


def run_in_progress(root: str) -> str | None:
    """The kind of the run in progress at ``root`` (``"rebase"`` or ``"sync"``), or ``None``.

    Args:
        root: overlay repository.
    Returns:
        The kind from ``.overlay/rebase/state.json`` (``"rebase"`` when it cannot
        say, e.g. a wedged state), or ``None`` when no run is in progress.
    """
    info = inspect_state(root)
    return info.kind if info.present else None


def wedged_hint(kind: str) -> str:
    """What to do about a wedged state (the ``hint:`` line)."""
    return (
        f"`overlay {kind} --abort` recovers it: it restores the records from the "
        "backup that is left, keeps what it cannot restore, and removes the state"
    )


def refuse_if_in_progress(root: str) -> StateOnDisk:
    """Refuse to start a run while another one waits (before any "nothing to do").

    Args:
        root: overlay repository.
    Returns:
        What the state directory holds (no run): for :meth:`Rebase.start
        <overlay.rebase.base.RunBase.start>` under the same lock, which then does not
        inspect it again.
    Raises:
        OverlayError: a run is in progress, or its state is wedged; the message
        names it and the commands that finish, undo or recover it (exit 2).
    """
    info = inspect_state(root)
    if not info.present:
        return info
    kind = info.kind
    if info.problem:
        raise OverlayError(
            f"the {kind} state is wedged: {info.problem}; no run is started over it",
            hint=wedged_hint(kind),
        )
    raise OverlayError(
        f"a {kind} is in progress ({layout.REBASE_STATE}); it is not started again",
        hint=f"see it with `overlay {kind} --status`; finish it with `overlay {kind} "
        f"--continue` (or --skip a patch), or undo it with `overlay {kind} --abort`",
    )


def in_progress_note(root: str) -> str | None:
    """One line for a command that reads the records while a run is in progress
    (``verify``, ``status``), or ``None`` when none is.

    The records change only when a run completes (or ``--abort`` restores them),
    so while a run is stopped they are as they were before it.

    Args:
        root: overlay repository.
    Returns:
        The note, without a prefix.
    """
    info = inspect_state(root)
    if not info.present:
        return None
    kind = info.kind
    if info.problem:
        return (
            f"the {kind} state in {layout.REBASE_STATE_DIR} is wedged ({info.problem}); "
            f"{wedged_hint(kind)}"
        )
    if info.state is not None and info.state.commit_started:
        # Only a kill can leave this (Ctrl-C is held back while the records are written).
        return (
            f"a {kind} was ended while it wrote the records: some are new, some as "
            f"before; `overlay {kind} --continue` finishes writing them, "
            f"`overlay {kind} --abort` restores them"
        )
    return (
        f"a {kind} is in progress (`overlay {kind} --status`): these are the records "
        f"as they were before it; `overlay {kind} --continue` finishes it, "
        f"`overlay {kind} --abort` undoes it"
    )


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C back for a block that must finish once begun (a run writing the
    records, ``--abort`` restoring them): an interrupt that arrives meanwhile is
    raised when the block ends, so the records are never left half-written by it
    and the line the user then reads ("had completed", "is as before") is true.

    SIGINT is blocked with ``pthread_sigmask`` (git children started meanwhile
    inherit the mask and finish too); a kill still can stop the block, which is
    what the state's ``commit_started`` flag and ``--continue`` are for. Outside the
    main thread (no signal handling there) the block runs as is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    failed = True
    try:
        yield
        failed = False
    finally:
        # Take a held-back interrupt off the kernel's pending set and raise it here:
        # once unblocked, Python would run its handler only at some later bytecode.
        pending = signal.SIGINT not in old and signal.SIGINT in signal.sigpending()
        if pending:
            signal.sigwait({signal.SIGINT})
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        if pending and not failed:
            raise KeyboardInterrupt


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
        return (
            f"interrupted: the {on_disk} is stopped and resumable with "
            f"`overlay {on_disk} --continue`, or undone with `overlay {on_disk} --abort` "
            "(`--status` shows where it stands)"
        )
    try:
        completed = (
            os.path.getmtime(os.path.join(root, layout.LAST_REBASE_JSON)) >= since
        )
    except OSError:
        completed = False
    if completed:
        return (
            f"interrupted after the {kind} had completed: its report is in "
            f"{layout.LAST_REBASE_MD}; undo it with `{_git_on_run_paths('checkout')}`"
        )
    return f"interrupted before the {kind} started: nothing was changed"


def _changed_files(report: dict) -> list[str]:
    """The overlay files the reported run changed: the report's own list when it has
    one (``files``), else what its patches and resolutions say."""
    listed = report.get("files")
    if isinstance(listed, list) and all(isinstance(x, str) for x in listed):
        return list(listed)
    out = [layout.MANIFEST]
    pins = report.get("pins", {})
    if pins.get("before") != pins.get("after"):
        out.append(f"{layout.LOCAL_FIXES} (the pins in its headings)")
    dropped = []
    for p in report.get("patches", []):
        status = p.get("status", "")
        if status in ("upstream", "skipped"):
            dropped.append(f"{layout.PATCH_DIR}/{p['name']} (deleted)")
        elif status in ("merged", "resolved", "clean (refreshed)"):
            out.append(f"{layout.PATCH_DIR}/{p['name']}")
    if dropped:
        out.append(layout.SERIES)
    out += dropped
    for r in report.get("resolutions", []):
        status = r.get("status", "")
        if status == "removed":
            out.append(f"{layout.RESOLVED_DIR}/{r['path']} (deleted)")
        elif status != "unchanged":
            out.append(f"{layout.RESOLVED_DIR}/{r['path']}")
    return out


def no_run_to_abort(ws: "Workspace", action: str = "abort") -> OverlayError:
    """The error for ``--abort`` (``--continue``, ``--skip``, ``--drop``) when no run is
    in progress. For ``--abort`` it says how to undo the last completed run with git,
    naming the files it changed, while the manifest still holds that run's pin and fork
    commit; once it does not (the run was undone or superseded) the old report is not
    quoted as if it were current.

    Args:
        ws: the workspace (its root; its manifest, when it can be read).
        action: the option given, without ``--``.
    Returns:
        An :class:`OverlayError` (exit 2) for the caller to raise.
    """
    verb = {
        "abort": "restore",
        "continue": "continue",
        "skip": "skip",
        "drop": "drop",
    }.get(action, action)
    message = (
        f"no rebase or sync in progress: there is nothing for --{action} to {verb}"
    )
    if action != "abort":
        return OverlayError(
            message,
            hint="start one with `overlay rebase --onto SHA` or `overlay sync --fork SHA`",
        )
    if not os.path.lexists(layout.under(ws.root, layout.LAST_REBASE_JSON)):
        return OverlayError(
            message,
            hint=f"no completed run is recorded here either ({layout.LAST_REBASE_JSON}); "
            "start one with `overlay rebase --onto SHA` or `overlay sync --fork SHA`",
        )
    # rebase.report: only `--abort` without a run; verify imports this module
    from overlay.rebase.report import read_last_json

    try:
        report = read_last_json(ws.root)
        if report is None:
            raise ValueError("no report")
        pins = report["pins"]
        kind = report.get("kind", "rebase")
        run = (
            f"the last {kind} (pin {pins['before']['pin'][:12]} -> {pins['after']['pin'][:12]}, "
            f"fork {pins['before']['fork'][:12]} -> {pins['after']['fork'][:12]})"
        )
        current = _manifest_pins(ws)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return OverlayError(
            message,
            hint="a completed run is not undone by --abort; review it with "
            f"`{_git_on_run_paths('diff --stat')}` and undo it with "
            f"`{_git_on_run_paths('checkout')}`",
        )
    if current is not None and current != (pins["after"]["pin"], pins["after"]["fork"]):
        return OverlayError(
            message,
            hint=f"{run} is not what the manifest holds now (pin {current[0][:12]}, "
            f"fork {current[1][:12]}): it was undone or superseded",
        )
    if _committed(ws.root):
        return OverlayError(
            message,
            hint=f"{run} completed and is committed (its {layout.MANIFEST} is as in "
            f"HEAD); undo it with `git revert` of the commit that holds it (`git log -- "
            f"{layout.MANIFEST}`), once other changes are committed or stashed",
        )
    new = _untracked(ws.root, _written_resolutions(report))
    if new is None:  # git could not say which are new
        by_hand = f" (new files under {layout.RESOLVED_DIR}/ are removed by hand, see `git status`)"
    elif new:
        by_hand = f", then remove by hand what it added, which git does not track: {', '.join(new)}"
    else:
        by_hand = ""
    return OverlayError(
        message,
        hint=f"{run} completed and changed {', '.join(_changed_files(report))}; review it with "
        f"`{_git_on_run_paths('diff --stat')}` and undo it with `{_git_on_run_paths('checkout')}`"
        f"{by_hand}",
    )


def _written_resolutions(report: dict) -> list[str]:
    """The resolution files the reported run wrote (every status but ``unchanged`` and
    ``removed``), as repository paths."""
    return [
        f"{layout.RESOLVED_DIR}/{r['path']}"
        for r in report.get("resolutions", [])
        if isinstance(r, dict)
        and isinstance(r.get("path"), str)
        and r.get("status") not in ("unchanged", "removed")
    ]


def _untracked(root: str, paths: list[str]) -> list[str] | None:
    """Those of ``paths`` (repository paths) that git does not track at ``root`` (one
    ``git ls-files --others``): files `git checkout` leaves in place. ``None`` where
    git cannot say (no repository, git missing)."""
    if not paths:
        return []
    from overlay.git.run import zsplit  # only for --abort without a run

    proc = _git_at(
        root, "--literal-pathspecs", "ls-files", "-z", "--others", "--", *paths
    )
    if proc is None or proc.returncode != 0:
        return None
    return sorted(zsplit(proc.stdout))


def _committed(root: str) -> bool:
    """Whether the manifest at ``root`` is as in its ``HEAD`` (one ``git diff --quiet
    HEAD``). Asked once the manifest holds a completed run's pins, it says whether the
    run is committed, for which ``git checkout -- PATHS`` undoes nothing. The manifest
    alone is asked: every run changes it, and a later edit of another record (a
    retarget entry's prose, after the commit) does not undo the commit. False where
    git cannot say (no repository, no commit yet)."""
    proc = _git_at(root, "diff", "--quiet", "HEAD", "--", layout.MANIFEST)
    return proc is not None and proc.returncode == 0


def _git_at(root: str, *args: str) -> "subprocess.CompletedProcess | None":
    """git ``args`` in the overlay repository at ``root`` (``git -C ROOT``, whatever
    its exit status); ``None`` when git is missing."""
    from overlay.git.run import run_git  # only for --abort without a run

    try:
        return run_git(["-C", root, *args], check=False)
    except GitError:
        return None


def _manifest_pins(ws: "Workspace") -> tuple[str, str] | None:
    """``(pin, fork commit)`` of the manifest, or ``None`` when it cannot be read."""
    try:
        manifest = ws.manifest
    except OverlayError:
        return None
    return manifest.pin, manifest.fork_commit
