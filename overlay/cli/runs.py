"""The run commands: ``rebase`` (onto a new MLX pin) and ``sync`` (onto a new fork
commit), each started, continued, skipped, aborted or shown.

The rules a run must pass before it starts live in :mod:`overlay.rebase.plan`; the run
itself in :mod:`overlay.rebase`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from overlay import layout
from overlay.cli.options import format_option
from overlay.cli.tools import handle_errors
from overlay.errors import OverlayError

# ``_rebase_action_locked`` is kept as it was in ``overlay/cli.py``: it names the
# workspace ``Context``.
from overlay.workspace import Workspace
from overlay.workspace import Workspace as Context

if TYPE_CHECKING:
    from overlay.rebase.ondisk import StateOnDisk


def _rebase_action(
    ctx: Workspace, action: str, fmt: str, kind: str, take_formatted: bool = False
) -> None:
    """Shared driver of ``rebase`` and ``sync`` for --continue/--skip/--abort/--status,
    under the rebase lock (shared for --status): a second command at the same time is
    refused with one line; --status then says which command is running."""
    # the records lock and the run's files load when an action runs
    from overlay.fs.records_lock import StateBusy, state_lock
    from overlay.fs.sweep import sweep_killed_runs

    try:
        with state_lock(ctx.root, f"{kind} --{action}", shared=action == "status"):
            if action != "status":
                # temp files of a killed command, before --abort says "as before"
                sweep_killed_runs(ctx.root)
            _rebase_action_locked(ctx, action, fmt, take_formatted)
    except StateBusy as busy:
        if action != "status":
            raise
        who = (
            f"`overlay {busy.holder[1]}` (pid {busy.holder[0]})"
            if busy.holder
            else "another overlay command"
        )
        click.echo(
            f"{who} is working on the rebase state right now; run --status again "
            "when it has finished"
        )


def _rebase_action_locked(
    ctx: Context, action: str, fmt: str, take_formatted: bool = False
) -> None:
    """One action on the run in progress, under the lock: say there is none, handle a
    wedged state, print the status, abort, or continue/skip/drop and print the report."""
    # the run and its report load when an action resumes or reads it
    from overlay.rebase.report import render
    from overlay.rebase.run import Rebase

    rb = Rebase(ctx)
    rb.say = click.echo
    info = rb.inspect()
    if not info.present:
        if action == "status":
            click.echo("no rebase or sync in progress")
            return
        # rebase.ondisk: only when no run is in progress
        from overlay.rebase.ondisk import no_run_to_abort

        raise no_run_to_abort(ctx, action)
    if info.problem:
        _wedged_action(rb, info, action)
        return
    rb.load(info)
    if action == "status":
        _print_status(rb.state, rb.work)
    elif action == "abort":
        forgotten = len(rb.state.rr_recorded)
        _print_aborted(rb.abort(), forgotten, rb.root)
    else:
        report = (
            rb.skip(drop=action == "drop")
            if action in ("skip", "drop")
            else rb.continue_(take_formatted=take_formatted)
        )
        click.echo(render(report, fmt), nl=False)
        click.echo("report written to .overlay/last-rebase.md")


def _wedged_action(rb, info, action: str) -> None:
    """A wedged state: --status describes it, --abort recovers it, anything else is
    refused with the way out."""
    # rebase.ondisk: only for a wedged state
    from overlay.rebase.ondisk import wedged_hint

    if action == "status":
        click.echo(f"{info.kind} state is wedged: {info.problem}")
        click.echo(f"  {wedged_hint(info.kind)}")
        return
    if action != "abort":
        raise OverlayError(
            f"the {info.kind} state is wedged: {info.problem}; "
            f"--{action} cannot go on from it",
            hint=wedged_hint(info.kind),
        )
    rec = rb.recover_wedged(info)
    _print_forgotten(rec.forgotten, rb.root)
    click.echo(
        f"aborted the wedged {rec.kind} state ({rec.problem}): "
        f"{len(rec.restored)} file(s) restored from its backup; the state is removed"
    )
    if rec.kept:
        click.echo(
            "warning: no backup copy, left as the run wrote them: "
            f"{', '.join(rec.kept)}; check them with `git diff`",
            err=True,
        )
    if rec.note:
        click.echo(f"note: {rec.note}")


def _print_status(st, work: str) -> None:
    """``--status`` of a run in progress: the move, each resolution and patch so far,
    where it stopped and the files to edit there (``work``: the run's work directory
    on disk), each with the formatted merge the stop offered where there is one."""
    click.echo(
        f"{st.kind} in progress: pin {st.old.pin[:12]} -> {st.new.pin[:12]}, "
        f"fork {st.old.fork[:12]} -> {st.new.fork[:12]}"
    )
    for path, resolution in sorted(st.resolutions.items()):
        click.echo(f"  resolution {path}: {resolution.status}")
    for path in st.stale or []:
        click.echo(f"  resolution {path}: removed (no longer conflicts)")
    for entry in st.patches:
        click.echo(f"  patch {entry.name}: {entry.status}")
    # the run state's module: loaded already, ``st`` is one of its objects
    from overlay.rebase.state import PatchStop, Phase, ResolutionStop

    if not st.patches and st.phase is Phase.FORK_DELTA:
        # The series is listed once the fork layer is settled.
        click.echo("  patches: not carried yet (the fork delta is settled first)")
    if st.stop is not None:
        # A conflicting patch goes only with --drop, an emptied one with --skip; a
        # conflicting fork path has only --abort.
        others = {
            "patch": "--drop it, or --abort",
            "empty": "--skip it, or --abort",
        }.get(st.stop.type, "--abort")
        click.echo(
            f"stopped at {st.stop.type} {st.stop.what}: edit the files under "
            f"{layout.REBASE_WORK_DIR}/, then --continue (or {others})"
        )
        # the run's modules: loaded already, the state was read through them
        from overlay.rebase.formatting import FORMATTED_SUFFIX

        if isinstance(st.stop, PatchStop):
            paths = st.stop.files
        elif isinstance(st.stop, ResolutionStop):
            paths = [st.stop.path]
        else:
            paths = []  # an emptied patch: nothing to edit
        for rel in paths:
            offer = ""
            if os.path.isfile(os.path.join(work, rel + FORMATTED_SUFFIX)):
                offer = (
                    f" ({rel}{FORMATTED_SUFFIX} beside it holds a clean merge of the "
                    f"clang-formatted sides: `overlay {st.kind} --continue "
                    "--take-formatted` takes it)"
                )
            click.echo(f"  edit {layout.REBASE_WORK_DIR}/{rel}{offer}")


def _print_aborted(restored: list[str], forgotten: int, root: str) -> None:
    """What ``--abort`` of a run in progress put back, and the resolutions this run
    had recorded in the rr-cache that it forgot with it (shared case 17: an aborted
    run leaves nothing behind, so a next run does not replay them); ``root``: the
    overlay repository."""
    _print_forgotten(forgotten, root)
    if restored:
        click.echo(
            f"aborted: {len(restored)} file(s) restored; "
            "the overlay is as it was before the run"
        )
    else:
        click.echo(
            "aborted: nothing had been written yet; the overlay is as it was before the run"
        )


def _print_forgotten(forgotten: int, root: str) -> None:
    """The line saying ``--abort`` forgot the ``forgotten`` resolutions its run had
    recorded in the rr-cache (nothing when 0), naming the team's shared rr-cache
    too where ``root`` has one (:func:`overlay.rebase.rerere.cache_dirs`: a run
    writes its new resolutions to both). Not "the
    next run stops on them": a resolution the run had removed and remembered is back
    in ``patches-rocm/resolved/`` with the rest of the records."""
    if forgotten:
        # the run's modules: loaded already, the run was read through them
        from overlay.rebase.rerere import cache_dirs

        caches = " and ".join(f"{label}/" for label, _dir in cache_dirs(root))
        click.echo(
            f"forgot the {forgotten} resolution(s) this run recorded in {caches}: "
            "a next run does not replay them"
        )


def _rebase_options(fn):
    """The options ``rebase`` and ``sync`` share."""
    for opt in reversed(
        [
            click.option(
                "--continue",
                "action",
                flag_value="continue",
                help="Take your edit and go on.",
            ),
            click.option(
                "--take-formatted",
                is_flag=True,
                help="With --continue: take the clean merge of the clang-formatted "
                "sides that the stop offers (PATH.formatted).",
            ),
            click.option(
                "--skip",
                "action",
                flag_value="skip",
                help="Leave out the patch the run stopped on when it changes nothing on "
                "the new base; on a conflict it asks for --drop.",
            ),
            click.option(
                "--drop",
                "action",
                flag_value="drop",
                help="Leave the patch the run stopped on out of the series (its file and "
                "series line go).",
            ),
            click.option(
                "--forget",
                "forget",
                metavar="PATH",
                default=None,
                help="Forget the resolutions recorded (rr-cache) for PATH.",
            ),
            click.option(
                "--abort",
                "action",
                flag_value="abort",
                help="Restore every file as before the run.",
            ),
            click.option(
                "--status",
                "action",
                flag_value="status",
                help="Show where the run stands.",
            ),
            click.option(
                "--force",
                is_flag=True,
                help="Accept a fork or merge base that breaks ancestry.",
            ),
            click.option(
                "--allow-fork-ahead",
                is_flag=True,
                help="Accept a fork commit that merged upstream commits newer than the "
                "pin.",
            ),
            format_option(
                ["text", "json", "markdown"], help="Report format at the end."
            ),
        ]
    ):
        fn = opt(fn)
    return fn


def _forget(ws: Workspace, path: str, kind: str) -> None:
    """``--forget PATH``: drop the recorded resolutions of PATH, under the lock."""
    # the lock and the resolution files load when `--forget` runs
    from overlay.fs.records_lock import state_lock
    from overlay.rebase.files import forget_resolution

    with state_lock(ws.root, f"{kind} --forget"):
        removed = forget_resolution(ws.root, path)
    click.echo(
        f"forgot {removed} recorded resolution(s) for {path}"
        if removed
        else f"no recorded resolution for {path}"
    )


def _ack_uncarried(ws: Workspace) -> None:
    """``sync --ack-uncarried``: remove ``[fork] uncarried-reviewed`` (the fork's changes
    outside ``[carry]`` up to its commit are reviewed), under the records lock."""
    # the lock and the manifest's reader and writer load when `--ack-uncarried` runs
    from overlay.fs.records_lock import state_lock
    from overlay.rebase.ondisk import refuse_if_in_progress
    from overlay.records.manifest import (
        manifest_text,
        set_uncarried_reviewed,
        write_manifest,
    )

    with state_lock(ws.root, "sync --ack-uncarried"):
        refuse_if_in_progress(ws.root)
        manifest = ws.manifest
        if manifest.uncarried_reviewed is None:
            click.echo(
                "nothing to acknowledge: no fork change outside [carry] awaits review"
            )
            return
        text = manifest_text(ws.root)
        write_manifest(ws.root, set_uncarried_reviewed(text, None))
    click.echo(
        f"acknowledged the fork's changes outside [carry] from "
        f"{manifest.uncarried_reviewed[:12]} to {manifest.fork_commit[:12]}"
    )


def _start_run(ws: Workspace, kind: str, fmt: str, **kwargs) -> None:
    """Start a rebase or sync under the rebase lock, from reading the manifest to the end
    of the run: a second start, --continue or --abort at the same time is refused, and
    no start works from a manifest another run changed meanwhile."""
    # the lock and the sweep load when a run starts
    from overlay.fs.records_lock import state_lock
    from overlay.fs.sweep import sweep_killed_runs

    with state_lock(ws.root, f"{kind} --{'onto' if kind == 'rebase' else 'fork'}"):
        sweep_killed_runs(ws.root)
        _start_run_locked(ws, kind, fmt, **kwargs)


def _start_run_locked(ws: Workspace, kind: str, fmt: str, **kwargs) -> None:
    """Plan the run (:func:`overlay.rebase.plan.plan_run`), say its warnings, run it and
    print its report; ``kwargs`` are :func:`~overlay.rebase.plan.plan_run`'s options."""
    # the refusals' modules load when a run starts
    from overlay.rebase.ondisk import refuse_if_in_progress

    # Before anything is resolved or fetched: a run in progress or an open edit refuses
    # a new run at once, before any refusal of the plan whose hint (`--force`) would
    # only lead to this one.
    info = refuse_if_in_progress(ws.root)
    if any(
        os.path.lexists(ws.path(name))
        for name in (layout.EDIT_STATE, layout.RECORD_JOURNAL)
    ):
        # the edit's module: only when an edit's state file or record journal is there
        from overlay.edit.session import refuse_during_edit

        refuse_during_edit(ws.root, kind)
    # One cat-file answers the plan's commit checks and the run's object questions
    # (Store.reading), not a `cat-file -e` per check.
    with ws.store.reading():
        _plan_and_run(ws, kind, fmt, info, **kwargs)


def _plan_and_run(
    ws: Workspace, kind: str, fmt: str, info: StateOnDisk, **kwargs
) -> None:
    """:func:`_start_run_locked` inside the store's reader; ``info``: the state
    directory as it inspected it (no run), under the lock it holds."""
    # the plan, the run and its report load when a run starts
    from overlay.rebase.plan import plan_run, start_checks
    from overlay.rebase.report import render
    from overlay.rebase.run import Rebase

    plan = plan_run(ws, kind, **kwargs)
    # Every warning goes to the terminal now and into the run's report (its state
    # keeps them across a stop), where the reviewer of the pull request reads them.
    warnings = plan.warnings + start_checks(ws, kind, plan, kwargs.get("force", False))
    for line in warnings:
        click.echo(f"warning: {line}", err=True)
    if plan.nothing_to_do:
        click.echo(
            f"nothing to do: already on pin {plan.old.pin[:12]} "
            f"and fork {plan.old.fork[:12]}"
        )
        return
    rb = Rebase(ws)
    rb.say = click.echo
    rb.start(kind, plan.new, plan.old, info, warnings, plan.fork_branch)
    report = rb.run()
    click.echo(render(report, fmt), nl=False)
    click.echo(f"report written to {layout.LAST_REBASE_MD}")


def _run_interrupted() -> str:
    """The ``on_interrupt`` hook of ``rebase`` and ``sync``: what Ctrl-C left behind."""
    # rebase.ondisk: only after a Ctrl-C
    from overlay.rebase.ondisk import interrupt_note

    click_ctx = click.get_current_context()
    ws = click_ctx.find_object(Workspace)
    return interrupt_note(
        ws.found if ws else None,
        click_ctx.info_name or "rebase",
        ws.started if ws else 0.0,
    )


def _no_target_with(action: str, option: str, value: str | None) -> None:
    """Refuse ``--onto X --abort`` and the like: the target would be ignored silently.

    Raises:
        click.UsageError: exit 2, one line.
    """
    if value is not None:  # an empty value is a target too, refused as such
        raise click.UsageError(
            f"{option} starts a run; --{action} acts on the run in progress: "
            "give one of them"
        )


def _formatted_with_continue(take_formatted: bool, action: str | None) -> None:
    """Refuse ``--take-formatted`` without ``--continue``.

    Raises:
        click.UsageError: exit 2, one line.
    """
    if take_formatted and action != "continue":
        raise click.UsageError("--take-formatted goes with --continue")


@click.command("rebase")
@click.option(
    "--onto",
    "onto",
    metavar="SHA",
    default=None,
    help="The new MLX pin (SHA, tag or branch).",
)
@_rebase_options
@click.pass_obj
@handle_errors(on_interrupt=_run_interrupted)
def rebase_cmd(
    ws: Workspace,
    onto: str | None,
    action: str | None,
    force: bool,
    fmt: str,
    forget: str | None,
    allow_fork_ahead: bool,
    take_formatted: bool,
) -> None:
    """Carry the fork delta and the series onto a new MLX pin."""
    if forget:
        return _forget(ws, forget, "rebase")
    _formatted_with_continue(take_formatted, action)
    if action:
        _no_target_with(action, "--onto", onto)
        return _rebase_action(ws, action, fmt, "rebase", take_formatted)
    if onto is None:  # "" goes on, to be refused as an empty ref
        raise OverlayError(
            "give --onto SHA (or a tag, or an upstream branch), or one of --continue, "
            "--skip, --drop, --abort, --status"
        )
    _start_run(
        ws, "rebase", fmt, pin=onto, force=force, allow_fork_ahead=allow_fork_ahead
    )


@click.command("sync")
@click.option(
    "--fork", "fork_ref", metavar="SHA", default=None, help="The new fork commit."
)
@click.option(
    "--merge-base",
    "merge_base",
    metavar="SHA",
    default=None,
    help="The fork's merge base (default: computed against the pin).",
)
@click.option(
    "--ack-uncarried",
    "ack_uncarried",
    is_flag=True,
    help="Say the fork's changes outside [carry] were reviewed (clears MAN005).",
)
@_rebase_options
@click.pass_obj
@handle_errors(on_interrupt=_run_interrupted)
def sync_cmd(
    ws: Workspace,
    fork_ref: str | None,
    merge_base: str | None,
    ack_uncarried: bool,
    action: str | None,
    force: bool,
    fmt: str,
    forget: str | None,
    allow_fork_ahead: bool,
    take_formatted: bool,
) -> None:
    """Carry the overlay onto a newer fork commit."""
    if forget:
        return _forget(ws, forget, "sync")
    if ack_uncarried:
        _no_target_with("ack-uncarried", "--fork", fork_ref)
        return _ack_uncarried(ws)
    _formatted_with_continue(take_formatted, action)
    if action:
        _no_target_with(action, "--fork", fork_ref)
        _no_target_with(action, "--merge-base", merge_base)
        return _rebase_action(ws, action, fmt, "sync", take_formatted)
    if fork_ref is None:  # "" goes on, to be refused as an empty ref
        raise OverlayError(
            "give --fork SHA (or a fork branch), or one of --continue, --skip, --drop, "
            "--abort, --status, --ack-uncarried"
        )
    _start_run(
        ws,
        "sync",
        fmt,
        fork=fork_ref,
        merge_base=merge_base,
        force=force,
        allow_fork_ahead=allow_fork_ahead,
    )


#: The commands of this module.
COMMANDS = [rebase_cmd, sync_cmd]
