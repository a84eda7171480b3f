"""The layer commands: ``tree``, ``status``, ``export``, ``diff``."""

from __future__ import annotations

import contextlib

import click

from overlay import layout
from overlay.cli.tools import exit_with, handle_errors, run_note
from overlay.errors import EXIT_INTERRUPTED, OverlayError
from overlay.workspace import Workspace

LAYERS = ["pin", "forked", "patched"]

layer_option = click.option(
    "--layer",
    type=click.Choice(LAYERS),
    default="patched",
    show_default=True,
    help="Which layer.",
)
pin_option = click.option(
    "--pin",
    "pin_ref",
    metavar="REF",
    default=None,
    help="Preview on another MLX commit instead of the manifest's pin.",
)
fork_option = click.option(
    "--fork",
    "fork_ref",
    metavar="REF",
    default=None,
    help="Preview with another fork commit instead of the manifest's.",
)


@click.command("tree")
@layer_option
@pin_option
@fork_option
@click.pass_obj
@handle_errors
def tree_cmd(
    ws: Workspace, layer: str, pin_ref: str | None, fork_ref: str | None
) -> None:
    """Print the tree SHA of a layer (pin, forked, patched)."""
    click.echo(ws.layers(pin=pin_ref, fork=fork_ref).tree(layer))


@click.command("status")
@click.option(
    "--dest",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Export directory whose stamp to show (default: build/*/src).",
)
@click.pass_obj
@handle_errors
def status_cmd(ws: Workspace, dest: tuple[str, ...]) -> None:
    """Show pins, layer SHAs, the series with files and +/- counts, export stamps."""
    # the records lock loads when `status` runs
    from overlay.fs.records_lock import state_lock

    root = ws.found  # without one, the layers say where it looked
    with state_lock(root, "status", shared=True) if root else contextlib.nullcontext():
        unsafe = _status_locked(ws, dest)  # one consistent snapshot of the records
        note = run_note(root) if root else None
        if note:
            click.echo(f"note: {note}")
    if unsafe:
        exit_with(1)  # export refuses this tree: status must not say all is well


def _status_locked(ws: Workspace, dest: tuple[str, ...]) -> bool:
    """Print the status from one snapshot of the records (under the shared lock);
    true when the series makes a symlink out of the tree (then the exit is 1)."""
    # status's data loads when `status` runs
    from overlay.cli.status import unsafe_links_added

    layers = ws.layers()
    _echo_bases(ws)
    click.echo(f"layers    pin {layers.pin}")
    click.echo(
        f"          forked {layers.forked}  ({len(layers.carried_changes)} carried, "
        f"{len(layers.dropped_changes)} not carried, "
        f"{len(layers.conflicts)} resolved conflict(s))"
    )
    click.echo(f"          patched {layers.patched}")
    for stale in layers.stale_resolutions:
        click.echo(
            f"warning: stale resolution {layout.RESOLVED_DIR}/{stale}: "
            "the path no longer conflicts"
        )
    click.echo(f"series    {len(layers.patches)} patch(es)")
    for result in layers.patches:
        patch = result.patch
        fix = (
            f"Local-Fix {patch.local_fix}"
            if patch.local_fix is not None
            else "no Local-Fix"
        )
        click.echo(f"  {patch.name}  [{result.state}]  {fix}  {patch.subject}")
        for change in patch.changes:
            name = (
                f"{change.source} -> {change.target}" if change.rename else change.path
            )
            click.echo(f"      {name}  +{change.added} -{change.removed}")
    _echo_exports(ws, dest, layers.patched)
    unsafe = unsafe_links_added(ws.store, layers.forked, layers.patched)
    for line in unsafe:
        click.echo(
            f"error: {line}: `overlay export` refuses this tree (verify: SER016)"
        )
    return bool(unsafe)


def _echo_bases(ws: Workspace) -> None:
    """The remotes (with the variable overriding each URL) and the pinned commits."""
    # status's data loads when `status` runs
    from overlay.cli.status import remotes

    manifest = ws.manifest
    up, fork = remotes(manifest).values()
    up_note = f"  ({up.override})" if up.override else ""
    fork_note = f"  ({fork.override})" if fork.override else ""
    click.echo(f"upstream  {up.url}{up_note}  pin {manifest.pin}")
    click.echo(
        f"fork      {fork.url}{fork_note}  {manifest.fork_branch} {manifest.fork_commit}"
        f"  (merge base {manifest.merge_base[:12]})"
    )


def _echo_exports(ws: Workspace, dest: tuple[str, ...], patched: str) -> None:
    """One line per export directory: its stamp against the patched layer."""
    # export's stamp reader: only when `status` lists exports
    from overlay.cli.status import export_dirs, export_state
    from overlay.export import edited_note
    from overlay.export.stamp import stray_note

    for d in export_dirs(ws.root, dest):
        state = export_state(d, ws.store, patched)
        if state.state == "no stamp":
            click.echo(f"export    {d}: no stamp")
            continue
        if state.state == "interrupted":
            click.echo(
                f"export    {d}: interrupted export of {state.tree}; "
                f"a plain `overlay export {d}` completes it"
            )
        else:
            # An export with files edited by hand, or files no export wrote, is not
            # "up to date", though its stamp names the layer's tree: the warnings
            # below name the files.
            verdict = state.state
            if state.state == "edited":
                verdict = ", ".join(
                    ["the layer's tree"]
                    + (
                        [f"{len(state.edited)} file(s) edited or deleted by hand"]
                        if state.edited
                        else []
                    )
                    + (
                        [f"{len(state.strays)} file(s) the layer does not have"]
                        if state.strays
                        else []
                    )
                )
            click.echo(
                f"export    {d}: tree {state.tree} ({verdict}, {state.files} files)"
            )
        if state.edited:
            click.echo(f"warning: {d}: {edited_note(state.edited)}")
        if state.strays:
            click.echo(f"warning: {d}: {stray_note(state.strays)}")


@click.command("export")
@click.argument("dest", type=click.Path(file_okay=False))
@layer_option
@click.option(
    "--force",
    is_flag=True,
    help="Take over a non-empty directory / discard hand edits.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 when DEST keeps files edited by hand or files the layer does not "
    "have (a build would not be of the layer); they are still left as they are.",
)
@click.pass_obj
@handle_errors
def export_cmd(ws: Workspace, dest: str, layer: str, force: bool, strict: bool) -> None:
    """Write a layer into DEST incrementally (only changed paths); completes an
    interrupted export.

    A file edited by hand since the last export, which the layer leaves as it was
    exported, is kept and reported as a warning (exit 0: the edit is the user's work
    in progress), and so is a file DEST holds that the layer does not have (never
    touched, not even by ``--force``); ``--strict`` makes either exit 1 (a build or
    CI job must not build a tree that is not the layer's)."""
    # the exporter loads when `export` runs
    from overlay.export import edited_note, export_tree
    from overlay.export.stamp import stray_files, stray_note

    try:
        # One cat-file answers the object questions of the layers and of the export.
        with ws.store.reading():
            result = export_tree(ws.store, ws.layers().tree(layer), dest, force=force)
    except KeyboardInterrupt:
        # export_tree reports its own interrupts; this one came before it ran.
        raise OverlayError(
            f"interrupted before anything was written: {dest} is as it was",
            exit_code=EXIT_INTERRUPTED,
        ) from None
    if result.resumed:
        click.echo(f"resumed the interrupted export of {result.resumed}")
    click.echo(
        f"exported {layer} {result.tree} to {dest}: {len(result.written)} written, "
        f"{len(result.removed)} removed, {result.unchanged} unchanged "
        f"({result.seconds:.2f} s)"
    )
    strays = stray_files(dest, result.files)
    notes = ([edited_note(result.edited)] if result.edited else []) + (
        [stray_note(strays)] if strays else []
    )
    kind = "error" if strict else "warning"
    for note in notes:
        click.echo(f"{kind}: {dest}: {note}", err=True)
    if strict and notes:
        # Each way out for what was found: --force restores edited files, never strays.
        ways = (
            [
                "move the edits into a patch (`overlay edit`) or pass --force to restore "
                "the layer's files"
            ]
            if result.edited
            else []
        ) + (["remove the files the layer does not have"] if strays else [])
        click.echo(f"hint: {'; '.join(ways)}", err=True)
        exit_with(1)


@click.command("diff")
@click.option(
    "--from",
    "from_layer",
    type=click.Choice(LAYERS),
    default="forked",
    show_default=True,
)
@click.option(
    "--to",
    "to_layer",
    type=click.Choice(LAYERS),
    default="patched",
    show_default=True,
)
@click.option("--stat", is_flag=True, help="Summary per file instead of the patch.")
@click.option("--name-only", is_flag=True, help="Only the changed paths.")
@click.argument("paths", nargs=-1)
@click.pass_obj
@handle_errors
def diff_cmd(
    ws: Workspace,
    from_layer: str,
    to_layer: str,
    stat: bool,
    name_only: bool,
    paths: tuple[str, ...],
) -> None:
    """Show the diff between two layers (default forked -> patched)."""
    layers = ws.layers()
    mode = "--stat" if stat else "--name-only" if name_only else "-p"
    args = [
        "diff-tree",
        "-r",
        "-M",
        "--full-index",
        mode,
        layers.tree(from_layer),
        layers.tree(to_layer),
    ]
    if paths:
        args += ["--", *paths]
    click.echo(ws.store.git(*args).stdout.decode("utf-8", "replace"), nl=False)


#: The commands of this module, in ``--help`` order.
COMMANDS = [tree_cmd, status_cmd, export_cmd, diff_cmd]
