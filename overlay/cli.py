"""Command-line interface: parses options, calls domain functions, renders.

Only this module turns results into exit codes (see :mod:`overlay.errors`).
"""

from __future__ import annotations

import os
import sys
import time

import click

from overlay import __version__
from overlay.clitools import OverlayGroup, handle_errors
from overlay.errors import OverlayError


class Context:
    """Options shared by every command (root, git store, offline, debug).

    Args:
        start: where root discovery begins: the current directory, or ``-C DIR``.
        git_dir, offline, debug: the global options.
    """

    def __init__(self, start: str, git_dir: str | None, offline: bool, debug: bool):
        self.start = os.path.abspath(start)
        self.git_dir = git_dir
        self.offline = offline
        self.debug = debug
        self._root: str | None = None
        self.started = time.time()

    @property
    def root(self) -> str:
        """The overlay repository: the nearest of ``start`` and its parents holding
        ``patches-rocm/overlay.toml`` (found on first use, as git finds its root).

        Raises:
            ManifestError: there is none; the message names where it looked (exit 2).
        """
        if self._root is None:
            from overlay.locate import find_root

            self._root = find_root(self.start)
        return self._root

    @property
    def found(self) -> str | None:
        """The overlay repository, or ``None`` where there is none (for commands that
        also run outside one, such as ``doctor`` and ``suite``)."""
        from overlay.errors import ManifestError

        try:
            return self.root
        except ManifestError:
            return None


@click.group(cls=OverlayGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="overlay")
@click.option(
    "-C",
    "--root",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Start here instead of the current directory; the overlay repository is the "
    "nearest of it and its parents holding patches-rocm/overlay.toml.",
)
@click.option(
    "--git-dir",
    envvar="OVERLAY_GIT_DIR",
    default=None,
    help="Git store (bare repo); default ~/.cache/overlay/store.git. Env: OVERLAY_GIT_DIR.",
)
@click.option(
    "--offline", is_flag=True, help="Never fetch; a missing object is an error."
)
@click.option("--debug", is_flag=True, help="Show tracebacks for expected errors.")
@click.pass_context
def main(
    ctx: click.Context, root: str, git_dir: str | None, offline: bool, debug: bool
) -> None:
    """Assemble, check, rebase, build and prove the MLX + ROCm overlay."""
    ctx.obj = Context(root, git_dir, offline, debug)


def _store(ctx: Context):
    from overlay.gitstore import Store

    return Store(ctx.git_dir, offline=ctx.offline)


def _layers(
    ctx: Context,
    *,
    pin: str | None = None,
    fork: str | None = None,
    stepwise: bool = False,
    empty_series: bool = False,
):
    from overlay.layers import compute_layers
    from overlay.manifest import load_manifest

    manifest = load_manifest(ctx.root)
    store = _store(ctx)
    for name, url in manifest.remote_urls().items():
        store.set_remote(name, url)
    if pin is not None:
        pin = store.resolve(pin, ["upstream"])
    if fork is not None:
        fork = store.resolve(fork, ["fork"])
    return (
        manifest,
        store,
        compute_layers(
            store,
            manifest,
            ctx.root,
            pin=pin,
            fork=fork,
            stepwise=stepwise,
            patches=[] if empty_series else None,
        ),
    )


layer_option = click.option(
    "--layer",
    type=click.Choice(["pin", "forked", "patched"]),
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


@main.command("tree")
@layer_option
@pin_option
@fork_option
@click.pass_obj
@handle_errors
def tree_cmd(
    ctx: Context, layer: str, pin_ref: str | None, fork_ref: str | None
) -> None:
    """Print the tree SHA of a layer (pin, forked, patched)."""
    _m, _s, layers = _layers(ctx, pin=pin_ref, fork=fork_ref)
    click.echo(layers.tree(layer))


@main.command("status")
@click.option(
    "--dest",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Export directory whose stamp to show (default: build/*/src).",
)
@click.pass_obj
@handle_errors
def status_cmd(ctx: Context, dest: tuple[str, ...]) -> None:
    """Show pins, layer SHAs, the series with files and +/- counts, export stamps."""
    import contextlib

    from overlay.runstate import in_progress_note, state_lock

    root = ctx.found  # without one, _layers says where it looked
    with state_lock(root, "status", shared=True) if root else contextlib.nullcontext():
        _status_locked(ctx, dest)  # one consistent snapshot of the records
        note = in_progress_note(root) if root else None
        if note:
            click.echo(f"note: {note}")


def _status_locked(ctx: Context, dest: tuple[str, ...]) -> None:
    import glob

    from overlay.export import edited_files, edited_note, read_stamp

    manifest, _store_, layers = _layers(ctx)
    urls = manifest.remote_urls()
    up_note = (
        "  (OVERLAY_UPSTREAM_URL)" if urls["upstream"] != manifest.upstream_url else ""
    )
    fork_note = "  (OVERLAY_FORK_URL)" if urls["fork"] != manifest.fork_url else ""
    click.echo(f"upstream  {urls['upstream']}{up_note}  pin {manifest.pin}")
    click.echo(
        f"fork      {urls['fork']}{fork_note}  {manifest.fork_branch} {manifest.fork_commit}"
        f"  (merge base {manifest.merge_base[:12]})"
    )
    click.echo(f"layers    pin {layers.pin}")
    click.echo(
        f"          forked {layers.forked}  ({len(layers.carried_changes)} carried, "
        f"{len(layers.dropped_changes)} not carried, {len(layers.conflicts)} resolved conflict(s))"
    )
    click.echo(f"          patched {layers.patched}")
    for stale in layers.stale_resolutions:
        click.echo(
            f"warning: stale resolution patches-rocm/resolved/{stale}: the path no longer conflicts"
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
    dests = list(dest) or sorted(glob.glob(os.path.join(ctx.root, "build", "*", "src")))
    for d in dests:
        stamp = read_stamp(d)
        if stamp is None:
            click.echo(f"export    {d}: no stamp")
            continue
        if stamp.get("pending"):
            click.echo(
                f"export    {d}: interrupted export of {stamp['pending']['tree']}; "
                f"a plain `overlay export {d}` completes it"
            )
        else:
            state = "up to date" if stamp["tree"] == layers.patched else "stale"
            click.echo(
                f"export    {d}: tree {stamp['tree']} ({state}, {len(stamp['files'])} files)"
            )
        edited = edited_files(d, stamp, store=_store_, tree=layers.patched)
        if edited:
            click.echo(f"warning: {d}: {edited_note(edited)}")


@main.command("export")
@click.argument("dest", type=click.Path(file_okay=False))
@layer_option
@click.option(
    "--force",
    is_flag=True,
    help="Take over a non-empty directory / discard hand edits.",
)
@click.pass_obj
@handle_errors
def export_cmd(ctx: Context, dest: str, layer: str, force: bool) -> None:
    """Write a layer into DEST incrementally (only changed paths); completes an interrupted export."""
    from overlay.errors import EXIT_INTERRUPTED
    from overlay.export import edited_note, export_tree

    try:
        _m, store, layers = _layers(ctx)
        result = export_tree(store, layers.tree(layer), dest, force=force)
    except (
        KeyboardInterrupt
    ):  # export_tree reports its own interrupts; this is before it ran
        raise OverlayError(
            f"interrupted before anything was written: {dest} is as it was",
            exit_code=EXIT_INTERRUPTED,
        ) from None
    if result.resumed:
        click.echo(f"resumed the interrupted export of {result.resumed}")
    click.echo(
        f"exported {layer} {result.tree} to {dest}: {len(result.written)} written, "
        f"{len(result.removed)} removed, {result.unchanged} unchanged ({result.seconds:.2f} s)"
    )
    if result.edited:
        click.echo(f"warning: {dest}: {edited_note(result.edited)}", err=True)


@main.command("diff")
@click.option(
    "--from",
    "from_layer",
    type=click.Choice(["pin", "forked", "patched"]),
    default="forked",
    show_default=True,
)
@click.option(
    "--to",
    "to_layer",
    type=click.Choice(["pin", "forked", "patched"]),
    default="patched",
    show_default=True,
)
@click.option("--stat", is_flag=True, help="Summary per file instead of the patch.")
@click.option("--name-only", is_flag=True, help="Only the changed paths.")
@click.argument("paths", nargs=-1)
@click.pass_obj
@handle_errors
def diff_cmd(
    ctx: Context,
    from_layer: str,
    to_layer: str,
    stat: bool,
    name_only: bool,
    paths: tuple[str, ...],
) -> None:
    """Show the diff between two layers (default forked -> patched)."""
    _m, store, layers = _layers(ctx)
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
    click.echo(store.git(*args).stdout.decode("utf-8", "replace"), nl=False)


@main.command("verify")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "junit", "github"]),
    default="text",
    show_default=True,
)
@click.option(
    "--only",
    multiple=True,
    metavar="FAMILY",
    help="Run only this family (MAN, SER, LAY, FIX).",
)
@click.option(
    "--skip", multiple=True, metavar="CODE", help="Drop findings with this code."
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Write the report here too."
)
@click.option(
    "--strict",
    is_flag=True,
    help="Warnings fail too (exit 1), e.g. MAN002: layers not checked.",
)
@click.pass_obj
@handle_errors
def verify_cmd(
    ctx: Context,
    fmt: str,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    output: str | None,
    strict: bool,
) -> None:
    """Check every record: manifest, series, layers, LOCAL_FIXES.md."""
    from overlay import verdict

    # The verdict cache (issue 14): with every input as it was at an earlier verify, its
    # report is printed again without importing, reading or computing anything else.
    options = verdict.options_key(fmt, only, skip)
    key = verdict.inputs(ctx.root, ctx.git_dir, ctx.offline)
    hit = verdict.lookup(ctx.root, key, options) if key is not None else None
    if hit is not None:
        text, errors, warnings = hit
        if os.path.isdir(os.path.join(ctx.root, ".overlay", "rebase")):
            # The records are keyed, the run state is not: a stopped run is still said.
            from overlay.runstate import in_progress_note

            note = in_progress_note(ctx.root)
            if note:
                click.echo(f"note: {note}", err=True)
    else:
        from overlay.checks import verify
        from overlay.findings import has_errors
        from overlay.render import render, render_junit

        result = verify(ctx.root, _store(ctx), only=only, skip=skip)
        for (
            note
        ) in result.notes:  # stderr: the report itself stays parseable in every format
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
            and verdict.inputs(ctx.root, ctx.git_dir, ctx.offline) == key
        ):
            verdict.remember(ctx.root, key, options, text, errors, warnings)
    click.echo(text, nl=False)
    if output:
        from overlay.fsutil import atomic_write

        atomic_write(os.path.abspath(output), text.encode())
    sys.exit(1 if errors or (strict and warnings) else 0)


@main.command("refresh")
@click.argument("patches", nargs=-1)
@click.option(
    "--check",
    is_flag=True,
    help="Change nothing; exit 1 when a refresh would change bytes.",
)
@click.pass_obj
@handle_errors
def refresh_cmd(ctx: Context, patches: tuple[str, ...], check: bool) -> None:
    """Re-export patches byte-stable from the layers (only changed files are written)."""
    from overlay.runstate import state_lock, sweep_killed_runs

    # Exclusive: refresh rewrites patches that a rebase also writes, and the sweep of
    # a killed refresh's temp files must not race a live writer's.
    with state_lock(ctx.root, "refresh"):
        sweep_killed_runs(ctx.root)
        _refresh_locked(ctx, patches, check)


def _refuse_binary_turns(turns) -> None:
    """Print each text diff a refresh would turn binary as a SER015 finding, then refuse (exit 1)."""
    from overlay.checks import binary_turn_findings
    from overlay.errors import EXIT_FINDINGS
    from overlay.render import render

    click.echo(render(binary_turn_findings(turns), "text"), nl=False)
    raise OverlayError(
        f"refresh refused: {len(turns)} text diff(s) would become `GIT binary patch`; "
        "no patch was written",
        exit_code=EXIT_FINDINGS,
        hint="remove the NUL byte from the patch's lines (a source file holds none), then refresh",
    )


def _refresh_locked(ctx: Context, patches: tuple[str, ...], check: bool) -> None:
    from overlay.engine import PatchApplyError
    from overlay.refresh import carry_series, nul_turns, refresh_series, write_refreshed
    from overlay.series import load_series

    # A NUL byte in a text hunk refuses the refresh before any layer is computed: the
    # carry path would otherwise stop on a "binary conflict" that hides the cause.
    early = [t for patch in load_series(ctx.root) for t in nul_turns(patch)]
    if early:
        _refuse_binary_turns(early)
    try:
        _m, store, layers = _layers(ctx, stepwise=True)
        refreshed = refresh_series(store, layers)
    except PatchApplyError:
        # A patch is no longer on its recorded pre-image: carry the series (exactly where
        # it can, 3-way by merge-ort from the recorded blobs where it must).
        _m, store, layers = _layers(ctx, empty_series=True)
        refreshed = carry_series(store, layers.forked, load_series(ctx.root))
    known = {r.patch.name for r in refreshed}
    unknown = [p for p in patches if p not in known]
    if unknown:
        raise OverlayError(f"not in series: {', '.join(unknown)}")
    turns = [t for r in refreshed for t in r.turns]
    if turns:
        _refuse_binary_turns(
            turns
        )  # the whole series: the next patch on that file turns too
    selected = [r for r in refreshed if not patches or r.patch.name in patches]
    drift = [r.patch.name for r in selected if r.changed]
    if check:
        for name in drift:
            click.echo(f"would rewrite {name}")
        click.echo(f"{len(drift)} of {len(selected)} patch(es) would change")
        sys.exit(1 if drift else 0)
    written = write_refreshed(selected)
    for name in written:
        click.echo(f"rewrote {name}")
    click.echo(f"{len(written)} of {len(selected)} patch(es) rewritten")


def _shown(path: str) -> str:
    """``path`` relative to the current directory when it lies below it (shorter to copy), else as is."""
    try:
        rel = os.path.relpath(path)
    except (
        OSError
    ):  # the current directory is gone (record removed the work tree it was in)
        return path
    return path if rel.startswith("..") else rel


def _interactive() -> bool:
    """True when a person is at a terminal (then ``record`` may open $EDITOR)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


_MESSAGE_HELP = """\
# The first line is the subject ("rocm: bounds-check the device index"), then a blank
# line, then the description: why the change is needed, what was shared or unchecked,
# how it is owned now. Lines starting with '#' are ignored; an empty message aborts.
"""


def _message_from_editor(
    subject: str | None, description: str | None
) -> tuple[str, str]:
    """Subject and description from $EDITOR (click.edit), prefilled with what was given."""
    text = click.edit(
        f"{subject or ''}\n\n{description or ''}\n{_MESSAGE_HELP}",
        extension=".txt",
        require_save=False,
    )
    lines = [ln for ln in (text or "").splitlines() if not ln.startswith("#")]
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        raise OverlayError("the message is empty: nothing was recorded")
    return lines[0].strip(), "\n".join(lines[1:]).strip()


@main.command("edit")
@click.argument("patch", required=False)
@click.option(
    "--new",
    "new_name",
    metavar="NAME",
    default=None,
    help="Start a new patch NAME (.patch is added); its series line goes after --after, or at the end.",
)
@click.option(
    "--after",
    metavar="PATCH",
    default=None,
    help="With --new: the series entry the new patch follows.",
)
@click.option(
    "--abort", "abort", is_flag=True, help="Throw the work tree and the edit away."
)
@click.pass_obj
@handle_errors
def edit_cmd(
    ctx: Context,
    patch: str | None,
    new_name: str | None,
    after: str | None,
    abort: bool,
) -> None:
    """Prepare a work tree to edit PATCH (or a --new one); `overlay record` writes the patch."""
    from overlay.edit import abort_edit, load_session, start_edit
    from overlay.manifest import load_manifest

    if abort:
        if patch or new_name or after:
            raise OverlayError("--abort takes no PATCH, --new or --after")
        from overlay.edit import changed_files

        lost: list[str] = []
        try:  # what the abort throws away, said before it goes (an unreadable state: nothing to say)
            current = load_session(ctx.root)
            lost = (
                changed_files(_store(ctx), ctx.root, current)
                if current is not None
                else []
            )
        except OverlayError:
            pass
        dropped = abort_edit(ctx.root)
        if dropped is None:
            click.echo("no edit in progress: nothing to throw away")
            return
        click.echo(
            f"threw away the edit of {dropped.name} and its work tree {dropped.directory}"
            + (
                f", with its unrecorded change(s) to {', '.join(lost)}"
                if lost
                else " (no unrecorded change)"
            )
        )
        if not dropped.new:
            click.echo(
                f"patches-rocm/{dropped.name} keeps what `overlay record` last wrote"
            )
        return
    if patch is None and new_name is None:
        current = load_session(ctx.root)
        if current is None:
            raise OverlayError(
                "give a PATCH of the series to edit, or --new NAME for a new one",
                hint="`overlay status` lists the series",
            )
        from overlay.edit import changed_files

        changed = changed_files(_store(ctx), ctx.root, current)
        click.echo(
            f"editing {current.name} in {_shown(current.workdir(ctx.root))}: {len(changed)} file(s) "
            f"changed{': ' + ', '.join(changed[:5]) if changed else ''}{' ...' if len(changed) > 5 else ''}"
        )
        click.echo("`overlay record` writes it, `overlay edit --abort` throws it away")
        return
    manifest = load_manifest(ctx.root)
    started = start_edit(
        ctx.root, _store(ctx), manifest, patch=patch, new=new_name, after=after
    )
    s = started.session
    where = _shown(started.workdir)
    if started.resumed:
        click.echo(f"the edit of {s.name} is already prepared in {where}")
    elif s.new:
        click.echo(
            f"prepared {where}: a git checkout of the layer with {len(started.below)} patch(es) of the "
            f"series applied, for the new patch {s.name}"
        )
    else:
        click.echo(
            f"prepared {where}: a git checkout of the layer below {s.name} with the patch applied "
            "(`git diff HEAD~1` there shows the whole patch)"
        )
    click.echo(
        f"edit the files under {where} (`git diff` there shows your change), then:"
    )
    if s.new:
        click.echo(
            '  overlay record -m "<subject>" --description "<why>" [--forwarded not-needed] [--fix N]'
        )
    else:
        click.echo("  overlay record   (-m/--description to change its message too)")


@main.command("record")
@click.option(
    "-m", "--message", "subject", default=None, help="The patch's subject line."
)
@click.option(
    "--description",
    default=None,
    help="Why the change is needed (the patch's description).",
)
@click.option(
    "--fix",
    "fix",
    type=click.IntRange(1, 9999),
    default=None,
    help="Point Local-Fix at this existing LOCAL_FIXES.md entry instead of adding one.",
)
@click.option(
    "--forwarded",
    default=None,
    help="The Forwarded: trailer (default not-needed, the fork policy).",
)
@click.option(
    "--section",
    type=click.Choice(["kernels", "build", "api", "retarget"]),
    default="kernels",
    show_default=True,
    help="Section of the new LOCAL_FIXES.md entry.",
)
@click.option(
    "--title",
    default=None,
    help="Title of the new entry (default: the subject without its tag).",
)
@click.option(
    "--author",
    default=None,
    metavar="'NAME <EMAIL>'",
    help="From: of a new patch (default: the last patch's author).",
)
@click.option("--keep", is_flag=True, help="Keep the work tree for another round.")
@click.pass_obj
@handle_errors
def record_cmd(
    ctx: Context,
    subject: str | None,
    description: str | None,
    fix: int | None,
    forwarded: str | None,
    section: str,
    title: str | None,
    author: str | None,
    keep: bool,
) -> None:
    """Write the edit in progress into its patch file, LOCAL_FIXES.md entry and series line."""
    from overlay.edit import load_session, record
    from overlay.manifest import load_manifest

    session = load_session(ctx.root)
    if (
        session is not None
        and session.new
        and (subject is None or description is None)
        and _interactive()
    ):
        subject, description = _message_from_editor(subject, description)
    done = record(
        ctx.root,
        _store(ctx),
        load_manifest(ctx.root),
        subject=subject,
        description=description,
        fix=fix,
        forwarded=forwarded,
        section=section,
        title=title,
        author=author,
        keep=keep,
    )
    files = ", ".join(f"{p} +{a} -{r}" for p, a, r in done.files)
    click.echo(f"recorded patches-rocm/{done.name}: {files}")
    if done.entry_created:
        click.echo(
            f"added entry {done.fix} to LOCAL_FIXES.md ({section}); the patch says Local-Fix: {done.fix}, "
            f"Forwarded: {done.forwarded}"
        )
    elif done.new:
        click.echo(f"the patch says Local-Fix: {done.fix}, Forwarded: {done.forwarded}")
    if done.new:
        click.echo(
            f"patches-rocm/series: {done.name} "
            + (f"after {done.after}" if done.after else "first")
        )
    for name in done.carried:
        click.echo(f"carried {name} onto the change (rewritten byte-stable)")
    # Named from the repository root: the current directory may have been inside it.
    where = os.path.relpath(done.workdir, ctx.root)
    click.echo(
        f"kept the work tree {where}" if done.kept else f"removed the work tree {where}"
    )
    click.echo("next: overlay verify; overlay export DEST (e.g. build/rocm/src)")


@main.group("fix")
def fix_group() -> None:
    """Entries of LOCAL_FIXES.md: add one, list them."""


@fix_group.command("new")
@click.option(
    "--section",
    type=click.Choice(["retarget", "kernels", "build", "api"]),
    required=True,
)
@click.option("--title", required=True, help="The entry's bold title (a sentence).")
@click.option(
    "--file",
    "files",
    multiple=True,
    required=True,
    help="A file the fix touches (repeat).",
)
@click.option(
    "--body", default=None, help="The paragraph; a placeholder is written when omitted."
)
@click.pass_obj
@handle_errors
def fix_new_cmd(
    ctx: Context, section: str, title: str, files: tuple[str, ...], body: str | None
) -> None:
    """Add an entry with the next free number, ending with the policy sentence."""
    from overlay import fixes
    from overlay.manifest import load_manifest
    from overlay.runstate import state_lock

    manifest = load_manifest(ctx.root)
    with state_lock(
        ctx.root, "fix new"
    ):  # LOCAL_FIXES.md is a record a rebase also writes
        number = fixes.add_entry(
            os.path.join(ctx.root, fixes.FILE_NAME),
            section,
            title,
            list(files),
            body,
            **fixes.entry_policy(manifest),
        )
    click.echo(
        f"added entry {number} to {fixes.FILE_NAME}; put `Local-Fix: {number}` in its patch"
    )


@fix_group.command("list")
@click.pass_obj
@handle_errors
def fix_list_cmd(ctx: Context) -> None:
    """Print the entries with their patches and files."""
    from overlay import fixes
    from overlay.series import PATCH_DIR, load_series

    doc = fixes.load(os.path.join(ctx.root, fixes.FILE_NAME))
    records = [
        fixes.PatchRecord(
            f"{PATCH_DIR}/{p.name}",
            tuple(p.trailers.get("Local-Fix") or ()),
            p.forwarded,
            p.touched,
            p.deleted,
        )
        for p in load_series(ctx.root)
    ]
    for row in fixes.list_entries(doc, records):
        click.echo(f"{row['number']:>3}. [{row['section']}] {row['title']}")
        for patch in row["patches"] or ["(no patch)"]:
            click.echo(f"       patch: {patch}")
        for f in row["files"]:
            click.echo(f"       file:  {f}")


def _rebase_action(ctx: Context, action: str, fmt: str, kind: str) -> None:
    """Shared driver of ``rebase`` and ``sync`` for --continue/--skip/--abort/--status,
    under the rebase lock (shared for --status): a second command at the same time is
    refused with one line; --status then says which command is running."""
    from overlay.runstate import StateBusy, state_lock, sweep_killed_runs

    try:
        with state_lock(ctx.root, f"{kind} --{action}", shared=action == "status"):
            if action != "status":
                sweep_killed_runs(
                    ctx.root
                )  # temp files of a killed command, before --abort says "as before"
            _rebase_action_locked(ctx, action, fmt)
    except StateBusy as busy:
        if action != "status":
            raise
        who = (
            f"`overlay {busy.holder[1]}` (pid {busy.holder[0]})"
            if busy.holder
            else "another overlay command"
        )
        click.echo(
            f"{who} is working on the rebase state right now; run --status again when it has finished"
        )


def _rebase_action_locked(ctx: Context, action: str, fmt: str) -> None:
    from overlay.rebase import Rebase
    from overlay.rebase_report import render
    from overlay.runstate import wedged_hint

    rb = Rebase(ctx.root, _store(ctx))
    info = rb.inspect()
    if not info.present:
        if action == "status":
            click.echo("no rebase or sync in progress")
            return
        from overlay.runstate import no_run_to_abort

        raise no_run_to_abort(ctx.root, action)
    if info.problem:
        if action == "status":
            click.echo(f"{info.kind} state is wedged: {info.problem}")
            click.echo(f"  {wedged_hint(info.kind)}")
        elif action == "abort":
            rec = rb.recover_wedged()
            click.echo(
                f"aborted the wedged {rec.kind} state ({rec.problem}): {len(rec.restored)} file(s) restored "
                "from its backup; the state is removed"
            )
            if rec.kept:
                click.echo(
                    f"warning: no backup copy, left as the run wrote them: {', '.join(rec.kept)}; "
                    "check them with `git diff`",
                    err=True,
                )
            if rec.note:
                click.echo(f"note: {rec.note}")
        else:
            raise OverlayError(
                f"the {info.kind} state is wedged: {info.problem}; --{action} cannot go on from it",
                hint=wedged_hint(info.kind),
            )
        return
    rb.load()
    if action == "status":
        st = rb.state
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
        if st.stop is not None:
            click.echo(
                f"stopped at {st.stop.type} {st.stop.what}: edit the files under "
                ".overlay/rebase/work/, then --continue (or --skip a patch, or --abort)"
            )
        return
    if action == "abort":
        restored = rb.abort()
        if restored:
            click.echo(
                f"aborted: {len(restored)} file(s) restored; the overlay is as it was before the run"
            )
        else:
            click.echo(
                "aborted: nothing had been written yet; the overlay is as it was before the run"
            )
        return
    report = (
        rb.skip(drop=action == "drop") if action in ("skip", "drop") else rb.continue_()
    )
    click.echo(render(report, fmt), nl=False)
    click.echo("report written to .overlay/last-rebase.md")


def _rebase_options(fn):
    for opt in reversed(
        [
            click.option(
                "--continue",
                "action",
                flag_value="continue",
                help="Take your edit and go on.",
            ),
            click.option(
                "--skip",
                "action",
                flag_value="skip",
                help="Leave out the patch the run stopped on when it changes nothing on the new base; "
                "on a conflict it asks for --drop.",
            ),
            click.option(
                "--drop",
                "action",
                flag_value="drop",
                help="Leave the patch the run stopped on out of the series (its file and series line go).",
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
                help="Accept a fork commit that merged upstream commits newer than the pin.",
            ),
            click.option(
                "--format",
                "fmt",
                type=click.Choice(["text", "json", "markdown"]),
                default="text",
                show_default=True,
                help="Report format at the end.",
            ),
        ]
    ):
        fn = opt(fn)
    return fn


def _forget(ctx: Context, path: str, kind: str) -> None:
    from overlay.rebase import forget_resolution
    from overlay.runstate import state_lock

    with state_lock(ctx.root, f"{kind} --forget"):
        removed = forget_resolution(ctx.root, path)
    click.echo(
        f"forgot {removed} recorded resolution(s) for {path}"
        if removed
        else f"no recorded resolution for {path}"
    )


def _check_start(ctx: Context, store, kind: str, old, new, force: bool) -> None:
    """Before a run starts (and before "nothing to do"): refuse while a run is in
    progress; for a new pin, refuse one that is not an upstream commit unless --force,
    and on a backwards move name the patches that follow commits the new pin lacks."""
    from overlay.pins import backwards_citations, check_new_pin
    from overlay.runstate import refuse_if_in_progress

    refuse_if_in_progress(ctx.root)
    if kind != "rebase" or new.pin == old.pin:
        return
    for line in check_new_pin(
        store, new.pin, fork_commits=(old.fork, new.fork), force=force
    ):
        click.echo(f"warning: {line}", err=True)
    for citation in backwards_citations(store, ctx.root, old.pin, new.pin):
        click.echo(f"warning: {citation.describe()}", err=True)


def _start_run(ctx: Context, kind: str, fmt: str, **kwargs) -> None:
    """Start a rebase or sync under the rebase lock, from reading the manifest to the end
    of the run: a second start, --continue or --abort at the same time is refused, and
    no start works from a manifest another run changed meanwhile."""
    from overlay.runstate import state_lock, sweep_killed_runs

    with state_lock(ctx.root, f"{kind} --{'onto' if kind == 'rebase' else 'fork'}"):
        sweep_killed_runs(ctx.root)
        _start_run_locked(ctx, kind, fmt, **kwargs)


def _start_run_locked(
    ctx: Context,
    kind: str,
    fmt: str,
    *,
    pin: str | None = None,
    fork: str | None = None,
    merge_base: str | None = None,
    force: bool = False,
    allow_fork_ahead: bool = False,
) -> None:
    from overlay.manifest import load_manifest
    from overlay.rebase import Bases, Rebase
    from overlay.rebase_report import render

    manifest = load_manifest(ctx.root)
    store = _store(ctx)
    for name, url in manifest.remote_urls().items():
        store.set_remote(name, url)
    old = Bases(manifest.pin, manifest.fork_commit, manifest.merge_base)
    for sha, remotes in (
        (old.pin, ["upstream", "fork"]),
        (old.fork, ["fork"]),
        (old.merge_base, ["fork", "upstream"]),
    ):
        store.ensure_commit(sha, remotes)
    new_pin = store.resolve(pin, ["upstream"]) if pin else old.pin
    new_fork = store.resolve(fork, ["fork"]) if fork else old.fork

    def ancestor(a: str, b: str) -> bool:
        return store.is_ancestor(a, b)

    if kind == "sync":
        if merge_base:
            new_base = store.resolve(merge_base, ["fork", "upstream"])
        else:
            new_base = store.out("merge-base", new_fork, new_pin)
        if not force and not ancestor(old.fork, new_fork):
            if ancestor(new_fork, old.fork):
                behind = store.out("rev-list", "--count", f"{new_fork}..{old.fork}")
                raise OverlayError(
                    f"fork commit {new_fork[:12]} is {behind} commit(s) older than the current "
                    f"{old.fork[:12]}: the sync would move the fork backwards",
                    hint="pass --force to go back to it on purpose",
                )
            raise OverlayError(
                f"fork commit {new_fork[:12]} does not descend from {old.fork[:12]}",
                hint="pass --force if the fork was rewritten on purpose",
            )
        if not allow_fork_ahead:
            from overlay.pins import refuse_fork_ahead

            refuse_fork_ahead(store, new_fork, new_pin)
    else:
        new_base = old.merge_base
    if not force and not ancestor(new_base, new_pin):
        raise OverlayError(
            f"merge base {new_base[:12]} is not an ancestor of pin {new_pin[:12]}",
            hint="pass --force to accept it, or give --merge-base",
        )
    new = Bases(new_pin, new_fork, new_base)
    if new_pin != old.pin and not ancestor(old.pin, new_pin):
        click.echo(
            f"warning: pin {new_pin[:12]} does not descend from the current pin {old.pin[:12]} "
            "(moving backwards or sideways)",
            err=True,
        )
    _check_start(ctx, store, kind, old, new, force)
    if new == old:
        click.echo(
            f"nothing to do: already on pin {old.pin[:12]} and fork {old.fork[:12]}"
        )
        return
    rb = Rebase(ctx.root, store)
    rb.start(kind, new, old)
    report = rb.run()
    click.echo(render(report, fmt), nl=False)
    click.echo("report written to .overlay/last-rebase.md")


def _run_interrupted() -> str:
    """The ``on_interrupt`` hook of ``rebase`` and ``sync``: what Ctrl-C left behind."""
    from overlay.runstate import interrupt_note

    click_ctx = click.get_current_context()
    ctx = click_ctx.find_object(Context)
    return interrupt_note(
        ctx.found if ctx else None,
        click_ctx.info_name or "rebase",
        ctx.started if ctx else 0.0,
    )


def _no_target_with(action: str, option: str, value: str | None) -> None:
    """Refuse ``--onto X --abort`` and the like: the target would be ignored silently.

    Raises:
        click.UsageError: exit 2, one line.
    """
    if value:
        raise click.UsageError(
            f"{option} starts a run; --{action} acts on the run in progress: give one of them"
        )


@main.command("rebase")
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
    ctx: Context,
    onto: str | None,
    action: str | None,
    force: bool,
    fmt: str,
    forget: str | None,
    allow_fork_ahead: bool,
) -> None:
    """Carry the fork delta and the series onto a new MLX pin."""
    if forget:
        return _forget(ctx, forget, "rebase")
    if action:
        _no_target_with(action, "--onto", onto)
        return _rebase_action(ctx, action, fmt, "rebase")
    if not onto:
        raise OverlayError(
            "give --onto SHA, or one of --continue, --skip, --abort, --status"
        )
    _start_run(ctx, "rebase", fmt, pin=onto, force=force)


@main.command("sync")
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
@_rebase_options
@click.pass_obj
@handle_errors(on_interrupt=_run_interrupted)
def sync_cmd(
    ctx: Context,
    fork_ref: str | None,
    merge_base: str | None,
    action: str | None,
    force: bool,
    fmt: str,
    forget: str | None,
    allow_fork_ahead: bool,
) -> None:
    """Carry the overlay onto a newer fork commit."""
    if forget:
        return _forget(ctx, forget, "sync")
    if action:
        _no_target_with(action, "--fork", fork_ref)
        _no_target_with(action, "--merge-base", merge_base)
        return _rebase_action(ctx, action, fmt, "sync")
    if not fork_ref:
        raise OverlayError(
            "give --fork SHA, or one of --continue, --skip, --abort, --status"
        )
    _start_run(
        ctx,
        "sync",
        fmt,
        fork=fork_ref,
        merge_base=merge_base,
        force=force,
        allow_fork_ahead=allow_fork_ahead,
    )


@main.command("drift")
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False, exists=True),
    required=True,
    help="Compiler and linker output to read (e.g. build/rocm/build.log).",
)
@click.option(
    "--from",
    "--drift-from",
    "old_ref",
    metavar="REF",
    default=None,
    help="The pin before the bump (default: the 'before' pin of .overlay/last-rebase.json).",
)
@click.option(
    "--strip",
    "strip",
    multiple=True,
    metavar="DIR",
    help="Directory prefix to remove from paths (default: build/*/src under the root).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "markdown"]),
    default="text",
    show_default=True,
)
@click.pass_obj
@handle_errors
def drift_cmd(
    ctx: Context, log_path: str, old_ref: str | None, strip: tuple[str, ...], fmt: str
) -> None:
    """Attribute every compile error and undefined symbol to the upstream commit behind it."""
    import glob
    import json

    from overlay.drift import attribute_log, render_markdown, render_text
    from overlay.manifest import load_manifest

    manifest = load_manifest(ctx.root)
    store = _store(ctx)
    for name, url in manifest.remote_urls().items():
        store.set_remote(name, url)
    if old_ref is None:
        try:
            with open(
                os.path.join(ctx.root, ".overlay", "last-rebase.json"), encoding="utf-8"
            ) as fh:
                old_ref = json.load(fh)["pins"]["before"]["pin"]
        except (OSError, ValueError, KeyError):
            raise OverlayError(
                "no --from given and no .overlay/last-rebase.json to take the old pin from"
            ) from None
    old = store.resolve(old_ref, ["upstream"])
    store.ensure_commit(manifest.pin, ["upstream", "fork"])
    prefixes = list(strip) or [
        os.path.abspath(p)
        for p in glob.glob(os.path.join(ctx.root, "build", "*", "src"))
    ]
    with open(log_path, encoding="utf-8", errors="replace") as fh:
        items = attribute_log(store, old, manifest.pin, fh.read(), prefixes)
    if fmt == "json":
        click.echo(json.dumps([i.as_dict() for i in items], indent=2))
    elif fmt == "markdown":
        click.echo(render_markdown(items), nl=False)
    else:
        click.echo(render_text(items), nl=False)
    sys.exit(1 if items else 0)


@main.command("doctor")
@click.option("--no-network", is_flag=True, help="Do not probe the remotes.")
@click.pass_obj
@handle_errors
def doctor_cmd(ctx: Context, no_network: bool) -> None:
    """Report git, the git store, remotes, CMake, the ROCm toolchain and the GPUs."""
    from overlay.doctor import run_checks
    from overlay.errors import GitError

    try:
        store = _store(ctx)
    except GitError:
        store = None  # reported by the git line
    checks = run_checks(
        ctx.found or ctx.start, store, network=not (no_network or ctx.offline)
    )
    width = max(len(c.name) for c in checks)
    for c in checks:
        click.echo(f"{c.status:<4}  {c.name:<{width}}  {c.detail}")
    sys.exit(1 if any(c.status == "fail" for c in checks) else 0)


def _stage_names(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[str, ...]:
    """``--only``/``--require`` values: repeatable, each a comma- or space-separated list."""
    from overlay.ci import STAGES

    names = [n for value in values for n in value.replace(",", " ").split()]
    for name in names:
        if name not in STAGES:
            raise click.BadParameter(
                f"unknown stage {name!r} (stages: {', '.join(STAGES)})", ctx, param
            )
    return tuple(dict.fromkeys(names))


@main.command("ci")
@click.option(
    "--only",
    "only",
    multiple=True,
    metavar="STAGE[,STAGE]",
    callback=_stage_names,
    help="Run only these stages (verify, check, build, suites; repeat or comma list); "
    "the others are reported skipped.",
)
@click.option(
    "--require",
    "require",
    multiple=True,
    metavar="STAGE[,STAGE]",
    callback=_stage_names,
    help="These stages must run and pass: one this machine cannot run (skipped) fails the gate.",
)
@click.option(
    "--backend",
    type=click.Choice(["rocm", "cpu", "cuda"]),
    default="rocm",
    show_default=True,
)
@click.option(
    "--arch",
    default=None,
    help="HIP architectures for the build (default: the manifest's).",
)
@click.option(
    "--junit",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write JUnit XML here.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the JSON summary here.",
)
@click.option(
    "--markdown",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the PR-body Markdown here.",
)
@click.option(
    "--child-dir",
    default=None,
    help="Where the suite children are (default build/<backend>/suites).",
)
@click.option(
    "--drift-from",
    "drift_from",
    metavar="REF",
    default=None,
    help="The pin before the bump: a failing check or build names the upstream commit behind its "
    "errors (default: the pin the last rebase started from; in CI, the base branch's pin).",
)
@click.pass_obj
@handle_errors
def ci_cmd(
    ctx: Context,
    only: tuple[str, ...],
    require: tuple[str, ...],
    backend: str,
    arch: str | None,
    junit: str | None,
    json_path: str | None,
    markdown: str | None,
    child_dir: str | None,
    drift_from: str | None,
) -> None:
    """The CI gate: verify, check, build, suites as far as this machine allows."""
    import json

    from overlay.ci import (
        STAGES,
        render_error,
        render_junit,
        render_markdown,
        render_text,
        run_ci,
    )
    from overlay.fsutil import atomic_write

    def write(texts: tuple[str, str, str]) -> None:
        for path, text in zip((junit, json_path, markdown), texts):
            if path:
                atomic_write(os.path.abspath(path), text.encode())

    try:
        result = run_ci(
            ctx.root,
            _store(ctx),
            stages=only or STAGES,
            require=require,
            backend=backend,
            arch=arch,
            child_dir=child_dir,
            drift_from=drift_from,
        )
    except OverlayError as exc:
        write(
            render_error(exc.message)
        )  # the reports exist whenever they were asked for
        raise
    write(
        (
            render_junit(result),
            json.dumps(result.as_dict(), indent=2) + "\n",
            render_markdown(result),
        )
    )
    click.echo(render_text(result), nl=False)
    sys.exit(1 if result.failed else 0)


main.lazy_commands = {"suite": "overlay.suites.cli:suite"}
main.lazy_commands["import"] = "overlay.importer_cli:import_group"


def _drift_range(
    root: str, store, pin: str, drift_from: str | None
) -> tuple[str, str] | None:
    """``(old pin, manifest pin)`` for drift attribution: ``--drift-from`` resolved, else the
    pin the last rebase started from when it moved to the manifest's pin, else ``None``."""
    from overlay.drift import last_rebase_pin

    if drift_from is None:
        drift_from = last_rebase_pin(root, pin)
        if drift_from is None:
            return None
    return store.resolve(drift_from, ["upstream"]), pin


@main.command("build")
@click.option(
    "--backend",
    type=click.Choice(["rocm", "cpu", "cuda"]),
    required=True,
    help="Which backend to build.",
)
@click.option(
    "--arch",
    default=None,
    metavar="ARCHS",
    help="GPU architectures, comma-separated (default: the manifest's).",
)
@click.option(
    "--toolchain",
    "toolchain_spec",
    default=None,
    metavar="system|PATH",
    help="`system` (hipcc/nvcc on PATH or $ROCM_PATH) or a root made by tools/rocm-toolchain.sh.",
)
@click.option(
    "--jobs", "-j", type=click.IntRange(min=1), default=None, help="Parallel jobs."
)
@click.option(
    "--only-changed",
    is_flag=True,
    help="Compile only the translation units the series touches.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Every translation unit through the compiler front end only (-fsyntax-only); no objects.",
)
@click.option(
    "--target", default=None, metavar="T", help="A ninja target instead of the default."
)
@click.option(
    "--cache",
    type=click.Choice(["ccache", "sccache", "none"]),
    default=None,
    help="Compiler cache for the C++ objects and the HIP custom commands "
    "(default: ccache where the compilers run, else none).",
)
@click.option(
    "--link-check/--no-link-check",
    "link",
    default=True,
    show_default=True,
    help="After a full build, report undefined mlx::core symbols over every object of the library.",
)
@click.option(
    "--drift-from",
    "drift_from",
    metavar="REF",
    default=None,
    help="Attribute errors and undefined symbols to the upstream commits since this pin "
    "(default: the pin the last rebase started from, when it moved to the manifest's pin).",
)
@click.pass_obj
@handle_errors
def build_cmd(
    ctx: Context,
    backend: str,
    arch: str | None,
    toolchain_spec: str | None,
    jobs: int | None,
    only_changed: bool,
    check: bool,
    target: str | None,
    cache: str | None,
    link: bool,
    drift_from: str | None,
) -> None:
    """Export the patched tree, configure CMake offline, build with ninja, attribute errors."""
    from overlay import build as _build

    if sum(bool(x) for x in (only_changed, check, target)) > 1:
        raise OverlayError("--only-changed, --check and --target cannot be combined")
    toolchain = _build.find_toolchain(backend, toolchain_spec, repo_root=ctx.root)
    cache = _build.resolve_cache(toolchain, cache)
    manifest, store, layers = _layers(ctx, stepwise=True)
    archs, note = (
        _build.resolve_arch(arch, manifest.architectures, toolchain)
        if backend == "rocm"
        else (arch, None)
    )
    drift_range = _drift_range(ctx.root, store, manifest.pin, drift_from)

    def waiting(pid: str) -> None:
        click.echo(
            f"build {backend}: waiting for another overlay build of build/{backend} (pid {pid})",
            err=True,
        )

    with _build.LiveProgress(f"{'check' if check else 'build'} {backend}") as progress:
        result = _build.build(
            store,
            layers,
            ctx.root,
            backend,
            arch=archs,
            toolchain=toolchain,
            jobs=jobs,
            only_changed=only_changed,
            check=check,
            target=target,
            cmake_option=manifest.cmake_option,
            suites_dir=os.path.join(ctx.root, "patches-rocm", "suites"),
            notes=[note] if note else [],
            progress=progress,
            on_wait=waiting,
            cache=cache,
            link=link,
            drift_range=drift_range,
        )
    for line in result.report():
        click.echo(line)
    if not result.ok:
        ctx_ = click.get_current_context()
        ctx_.exit(1)


if (
    __name__ == "__main__"
):  # python -m overlay.cli; last, so that every command above is defined
    main()
