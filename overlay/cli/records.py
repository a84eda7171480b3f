"""The record commands: ``verify`` (check every record) and ``refresh`` (rewrite patches)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

import click

from overlay import layout
from overlay.cli.options import format_option, output_option
from overlay.cli.tools import exit_with, handle_errors, run_note
from overlay.errors import EXIT_FINDINGS, LayerError, OverlayError
from overlay.workspace import Workspace

if TYPE_CHECKING:
    from overlay.records.series import Patch


@click.command("verify")
@format_option(["text", "json", "junit", "github"])
@click.option(
    "--only",
    multiple=True,
    metavar="FAMILY",
    help="Run only this family (MAN, SER, LAY, FIX).",
)
@click.option(
    "--skip",
    multiple=True,
    metavar="CODE",
    help="Drop findings with this code (repeat it, or give a comma-separated list).",
)
@output_option("Write the report here too.", short_first=True)
@click.option(
    "--strict",
    is_flag=True,
    help="Warnings fail too (exit 1), e.g. MAN002: layers not checked.",
)
@click.pass_obj
@handle_errors
def verify_cmd(
    ws: Workspace,
    fmt: str,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    output: str | None,
    strict: bool,
) -> None:
    """Check every record: manifest, series, layers, LOCAL_FIXES.md."""
    # the verdict cache only: a hit prints its report without loading the checks
    from overlay.checks import cache as verdict

    if skip:
        skip = tuple(c.strip() for item in skip for c in item.split(",") if c.strip())
        _warn_unknown_codes(skip)
    # The verdict cache: with every input as it was at an earlier verify, its
    # report is printed again without importing, reading or computing anything else.
    options = verdict.options_key(fmt, only, skip)
    key = verdict.inputs(ws.root, ws.git_dir, ws.offline)
    hit = verdict.lookup(ws.root, key, options) if key is not None else None
    if hit is not None:
        text, errors, warnings = hit
        _note_run_in_progress(ws)
    else:
        text, errors, warnings = _verify_now(ws, fmt, only, skip, key, options)
    click.echo(text, nl=False)
    if output:
        # fs.atomic (tempfile): only with --output
        from overlay.fs.atomic import atomic_write

        atomic_write(os.path.abspath(output), text.encode())
    exit_with(1 if errors or (strict and warnings) else 0)


def _warn_unknown_codes(skip: Iterable[str]) -> None:
    """One warning line per ``--skip`` code that is no finding code, or a retired one (a
    typo skips nothing). The run goes on: a code of a newer overlay, in a CI line shared
    by two versions, is no error."""
    # the code tables: only when --skip is given
    from overlay.checks.codes import CODES, RETIRED
    from overlay.records.fixes.model import CODES as FIX_CODES

    for code in skip:
        if code in RETIRED:
            why = "a retired code, which no finding has"
        elif code not in CODES and code not in FIX_CODES:
            why = "not a finding code (docs/findings.md lists them)"
        else:
            continue
        click.echo(f"overlay: warning: --skip {code}: {why}", err=True)


def _note_run_in_progress(ws: Workspace) -> None:
    """Say a stopped run beside a cached verdict: the records are keyed, the run state
    is not."""
    note = run_note(ws.root)
    if note:
        click.echo(f"note: {note}", err=True)


def _verify_now(
    ws: Workspace,
    fmt: str,
    only: Iterable[str],
    skip: Iterable[str],
    key: bytes | None,
    options: bytes,
) -> tuple[str, bool, bool]:
    """Run the checks and render them; remember the verdict when nothing it depends on
    changed meanwhile and the store lacked nothing.

    Returns:
        ``(report text, any error, any warning)``.
    """
    # the checks and renderers: only when the verdict cache cannot answer
    from overlay.checks import cache as verdict
    from overlay.checks.findings import has_errors
    from overlay.checks.render import render, render_junit
    from overlay.checks.verify import verify

    result = verify(ws, only=only, skip=skip)
    for note in result.notes:
        # stderr: the report itself stays parseable in every format
        click.echo(f"note: {note}", err=True)
    text = (
        render_junit(result.findings, result.checks)
        if fmt == "junit"
        else render(result.findings, fmt)
    )
    errors = has_errors(result.findings)
    warnings = any(f.severity == "warning" for f in result.findings)
    if (
        key is not None
        and result.cacheable
        and not result.notes
        and verdict.inputs(ws.root, ws.git_dir, ws.offline) == key
    ):
        verdict.remember(ws.root, key, options, text, errors, warnings)
    return text, errors, warnings


@click.command("refresh")
@click.argument("patches", nargs=-1)
@click.option(
    "--check",
    is_flag=True,
    help="Change nothing; exit 1 when a refresh would change bytes.",
)
@click.option(
    "--accept-text",
    "accept_text",
    multiple=True,
    metavar="PATCH",
    help="Take this patch's text as the truth where its recorded blobs disagree with "
    "it or cannot be found (SER017); repeat it for several.",
)
@click.pass_obj
@handle_errors
def refresh_cmd(
    ws: Workspace, patches: tuple[str, ...], check: bool, accept_text: tuple[str, ...]
) -> None:
    """Re-export patches byte-stable from the layers (only changed files are written).

    A patch's recorded blobs decide (docs/engine.md, the truth model): a text that
    disagrees with them is re-rendered from them, and a patch whose blobs cannot be
    found is not rewritten unless ``--accept-text`` names it.
    """
    # the records lock and the sweep load when `refresh` runs
    from overlay.fs.records_lock import state_lock
    from overlay.fs.sweep import sweep_killed_runs

    # Exclusive: refresh rewrites patches that a rebase also writes, and the sweep of
    # a killed refresh's temp files must not race a live writer's.
    with state_lock(ws.root, "refresh"):
        sweep_killed_runs(ws.root)
        # One cat-file answers every object question of the command (Store.reading),
        # not a `cat-file -e` per commit and tree checked.
        with ws.store.reading():
            _refresh_locked(ws, patches, check, accept_text)


def _refuse_binary_turns(turns) -> None:
    """Print each text diff a refresh would turn binary as a SER015 finding, then
    refuse (exit 1)."""
    # verify's finding and renderer: only when a diff would turn binary
    from overlay.checks.render import render
    from overlay.checks.verify import binary_turn_findings

    click.echo(render(binary_turn_findings(turns), "text"), nl=False)
    raise OverlayError(
        f"refresh refused: {len(turns)} text diff(s) would become `GIT binary patch`; "
        "no patch was written",
        exit_code=EXIT_FINDINGS,
        hint="remove the NUL byte from the patch's lines (a source file holds none), "
        "then refresh",
    )


def _refuse_unsafe_links(ws: Workspace, series: list[Patch]) -> None:
    """Refuse (exit 1, SER016 findings printed) a series that makes a symlink out of
    the tree: ``export`` refuses that tree and ``verify`` reports it, so ``refresh``
    must not end as if all were well. The check is verify's own (``link_findings``,
    on :func:`overlay.fs.paths.unsafe_links`). A series that no longer applies where it
    is recorded is carried, not checked here: its layers are not computed."""
    if not any(p.link_changes for p in series):
        return  # a series that touches no symlink makes none point out
    # the series checks load for a series that touches a symlink; the renderer only
    # for a finding
    from overlay.checks.series import link_findings

    try:
        layers = ws.layers(stepwise=True, series=series)
    except LayerError:
        return
    findings = link_findings(ws.store, layers.forked, layers.patches)
    if findings:
        # the findings' renderer (and its JUnit and XML) loads only to print one
        from overlay.checks.render import render

        click.echo(render(findings, "text"), nl=False)
        raise OverlayError(
            f"refresh refused: {len(findings)} symlink(s) of the series point out of "
            "the tree (`overlay export` refuses it); no patch was written",
            exit_code=EXIT_FINDINGS,
            hint="make each link relative and inside the tree, or drop it from its patch",
        )


def _refreshed(ws: Workspace, series: list[Patch], accept_text: set[str]) -> list:
    """Every patch of ``series`` (the series just read) refreshed from the layers; a
    series no longer on its recorded pre-images, or whose text disagrees with its
    recorded blobs, is carried (exactly where it can, 3-way by merge-ort from the
    recorded blobs where it must)."""
    # the engine and the rewriter load when `refresh` runs
    from overlay.engine import PatchApplyError
    from overlay.engine.refresh import carry_series, refresh_series

    try:
        return refresh_series(
            ws.store, ws.layers(stepwise=True, series=series), accept_text
        )
    except PatchApplyError:
        forked = ws.layers(empty_series=True).forked
        return carry_series(ws.store, forked, series, accept_text)


def _refresh_locked(
    ws: Workspace, patches: tuple[str, ...], check: bool, accept_text: tuple[str, ...]
) -> None:
    """Refresh (or with ``check``, only compare) the named patches, all when none."""
    # the pin checks, the series and the rewriter load when `refresh` runs
    from overlay.checks.pins import refuse_broken_ancestry
    from overlay.engine.refresh import nul_turns, write_refreshed
    from overlay.records.series import load_series, resolve_patch_name

    manifest = ws.manifest
    for sha in (manifest.fork_commit, manifest.merge_base):
        ws.store.ensure_commit(sha, ["fork", "upstream"])
    refuse_broken_ancestry(ws.store, manifest.merge_base, manifest.fork_commit)
    # A NUL byte in a text hunk refuses the refresh before any layer is computed: the
    # carry path would otherwise stop on a "binary conflict" that hides the cause.
    series = load_series(ws.root)  # read and parsed once for the whole command
    listed = [s.name for s in series]
    # A unique start of a name will do, as for `overlay edit` (quilt and git too).
    patches = tuple(resolve_patch_name(listed, p) for p in patches)
    accept_text = tuple(resolve_patch_name(listed, p) for p in accept_text)
    unknown = [p for p in (*patches, *accept_text) if p not in set(listed)]
    if unknown:
        # Said as `overlay edit` says it.
        names = list(dict.fromkeys(unknown))
        raise OverlayError(
            f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} not in "
            f"{layout.SERIES}",
            hint="name a patch of the series (`overlay status` lists them)",
        )
    early = [t for patch in series for t in nul_turns(patch)]
    if early:
        _refuse_binary_turns(early)
    refreshed = _refreshed(ws, series, set(accept_text))
    turns = [t for r in refreshed for t in r.turns]
    if turns:
        _refuse_binary_turns(
            turns
        )  # the whole series: the next patch on that file turns too
    _refuse_unsafe_links(ws, series)
    selected = [r for r in refreshed if not patches or r.patch.name in patches]
    drift = [r.patch.name for r in selected if r.changed]
    # r.reason diffs the old and new bytes: asked once per patch
    notes = {r.patch.name: reason for r in selected if (reason := r.reason)}
    if check:
        for name in drift:
            click.echo(
                f"would rewrite {name}" + (f": {notes[name]}" if name in notes else "")
            )
        click.echo(f"{len(drift)} of {len(selected)} patch(es) would change")
        exit_with(1 if drift else 0)
    written = write_refreshed(selected)
    for name in written:
        click.echo(f"rewrote {name}" + (f": {notes[name]}" if name in notes else ""))
    click.echo(f"{len(written)} of {len(selected)} patch(es) rewritten")


#: The commands of this module.
COMMANDS = [verify_cmd, refresh_cmd]
