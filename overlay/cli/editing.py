"""The editing commands: ``edit`` and ``record`` (change a patch), ``fix new`` and
``fix list`` (the entries of ``LOCAL_FIXES.md``)."""

from __future__ import annotations

import os
import sys

import click

from overlay import layout
from overlay.cli.tools import handle_errors
from overlay.errors import OverlayError
from overlay.workspace import Workspace


def _shown(path: str) -> str:
    """``path`` relative to the current directory when it lies below it (shorter to
    copy), else as is."""
    try:
        rel = os.path.relpath(path)
    except OSError:
        # the current directory is gone (record removed the work tree it was in)
        return path
    return path if rel.startswith("..") else rel


def _moved_with_it(spare: str) -> None:
    """Say so when the current directory moved with the work tree into ``spare`` (a
    shell that ran the command from inside the work tree is in the spare now, whose
    files the next ``overlay edit`` resets)."""
    try:
        cwd = os.getcwd()
    except OSError:
        return  # gone: the next command there says so
    if cwd == spare or cwd.startswith(spare + os.sep):
        click.echo(
            f"note: the current directory moved with it (now {cwd}); cd to the "
            "repository: what you change there the next `overlay edit` resets"
        )


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


@click.command("edit")
@click.argument("patch", required=False)
@click.option(
    "--new",
    "new_name",
    metavar="NAME",
    default=None,
    help="Start a new patch NAME (.patch is added); its series line goes after "
    "--after, or at the end.",
)
@click.option(
    "--after",
    metavar="PATCH",
    default=None,
    help="With --new: the series entry the new patch follows.",
)
@click.option(
    "--rename",
    "rename",
    metavar="NAME",
    default=None,
    help="Rename PATCH to NAME (.patch is added): its file and series line, every "
    "other byte kept.",
)
@click.option(
    "--abort", "abort", is_flag=True, help="Throw the work tree and the edit away."
)
@click.pass_obj
@handle_errors
def edit_cmd(
    ws: Workspace,
    patch: str | None,
    new_name: str | None,
    after: str | None,
    rename: str | None,
    abort: bool,
) -> None:
    """Prepare a work tree to edit PATCH (a unique prefix such as 0002 will do, or a
    --new one); `overlay record` writes the patch."""
    if abort:
        if patch or new_name or after or rename:
            raise OverlayError("--abort takes no PATCH, --new, --after or --rename")
        _abort_edit(ws)
    elif rename is not None:
        if patch is None or new_name or after:
            raise OverlayError("--rename NAME takes the PATCH to rename, and no --new")
        _rename(ws, patch, rename)
    elif patch is None and new_name is None and after is None:
        _show_edit(ws)
    else:
        _start_edit(ws, patch, new_name, after)


def _rename(ws: Workspace, patch: str, rename: str) -> None:
    """``edit --rename NAME PATCH``: an edit of PATCH recorded at once under NAME
    (the record's all-or-nothing write); the edit goes again if the record fails."""
    # overlay.edit (the session, its worktree) loads when `edit` runs
    from overlay.edit import abort_edit, load_session, start_edit
    from overlay.edit.record import record
    from overlay.edit.session import patch_file_name
    from overlay.records.series import read_series, resolve_patch_name

    # Its own name is no rename: said before a work tree is made for it. (A patch not
    # in the series is start_edit's to refuse, whatever the new name.)
    listed = [n for n, _ in read_series(ws.root)]
    name = resolve_patch_name(listed, patch)
    if name in listed and patch_file_name(rename) == name:
        raise OverlayError(
            f"{layout.PATCH_DIR}/{name} already has that name: nothing to rename",
            hint="give the new name first: `overlay edit --rename NEW PATCH`",
        )
    current = load_session(ws.root)
    if current is not None:
        raise OverlayError(
            f"an edit of {current.name} is in progress in {current.directory}",
            hint="`overlay record --name NAME` renames the patch being edited as it "
            "records it; or `overlay edit --abort` first",
        )
    start_edit(ws, patch=patch)
    try:
        done = record(ws, rename=rename)
    except BaseException:
        abort_edit(ws)
        raise
    click.echo(
        f"renamed {layout.PATCH_DIR}/{done.renamed_from or done.name} to "
        f"{layout.PATCH_DIR}/{done.name} (its series line too; every other byte kept)"
    )


def _echo_completed(done) -> None:
    """Say that a record a kill had interrupted was completed (and what stays)."""
    if done is None:
        return
    click.echo(
        f"completed the interrupted `overlay record` of {done.name}: "
        f"{layout.PATCH_DIR}/{done.name} and the records are as it wrote them"
    )
    if done.why_kept == "changed":
        click.echo(
            f"kept the work tree {done.directory}: it changed after the record, "
            "`overlay record` records that change too"
        )
    elif done.why_kept == "unreadable":
        click.echo(
            f"kept the work tree {done.directory}: git cannot read it, so nothing "
            "there was removed"
        )


def _abort_edit(ws: Workspace) -> None:
    """``edit --abort``: throw the edit away and say what went with it."""
    # overlay.edit loads when `edit --abort` runs
    from overlay.edit import abort_edit

    aborted = abort_edit(ws)
    _echo_completed(aborted.completed)
    dropped, lost = aborted.session, aborted.lost
    if dropped is None:
        click.echo("no edit in progress: nothing to throw away")
        return
    from overlay.edit.writes import spare_of  # loaded with the abort already

    spare = spare_of(dropped.directory)
    went = (
        f"its work tree {dropped.directory} moved to {spare}, where the next edit starts"
        if aborted.spare
        else f"its work tree {dropped.directory} removed"
    )
    click.echo(
        f"threw away the edit of {dropped.name} ({went})"
        + (
            f", with its unrecorded change(s) to {', '.join(lost)}"
            if lost
            else " (no unrecorded change)"
        )
    )
    if aborted.spare:
        _moved_with_it(os.path.join(ws.root, spare))
    if not dropped.new:
        click.echo(
            f"{layout.PATCH_DIR}/{dropped.name} keeps what `overlay record` last wrote"
        )


def _show_edit(ws: Workspace) -> None:
    """Plain ``edit``: where the edit in progress is and what it changed; with none,
    says so and how to start one (exit 0: a question answered, as ``git status`` on a
    clean tree, not bad input)."""
    # overlay.edit loads when `edit --show` runs
    from overlay.edit import show_edit

    completed, current, changed = show_edit(ws)
    _echo_completed(completed)
    if current is None:
        if completed is None:
            click.echo(
                "no edit in progress: `overlay edit PATCH` edits a patch of the series "
                "(`overlay status` lists it), `overlay edit --new NAME` starts a new one"
            )
        return
    listed = ": " + ", ".join(changed[:5]) if changed else ""
    more = " ..." if len(changed) > 5 else ""
    click.echo(
        f"editing {current.name} in {_shown(current.workdir(ws.root))}: "
        f"{len(changed)} file(s) changed{listed}{more}"
    )
    click.echo("`overlay record` writes it, `overlay edit --abort` throws it away")


def _start_edit(
    ws: Workspace, patch: str | None, new_name: str | None, after: str | None
) -> None:
    """``edit PATCH`` / ``edit --new NAME``: prepare the work tree and say how to go on."""
    # overlay.edit loads when `edit` starts one
    from overlay.edit import start_edit

    started = start_edit(ws, patch=patch, new=new_name, after=after)
    _echo_completed(started.completed)
    s = started.session
    where = _shown(started.workdir)
    if started.resumed:
        click.echo(f"the edit of {s.name} is already prepared in {where}")
    elif s.new:
        click.echo(
            f"prepared {where}: a git checkout of the layer with {len(started.below)} "
            f"patch(es) of the series applied, for the new patch {s.name}"
        )
    else:
        click.echo(
            f"prepared {where}: a git checkout of the layer below {s.name} with the "
            "patch applied (`git diff HEAD~1` there shows the whole patch)"
        )
    if started.from_spare:
        from overlay.edit.writes import spare_of  # loaded with the edit already

        click.echo(
            f"(made from {spare_of(s.directory)}, the last edit's work tree: its "
            "files are this layer's now, what git does not track there is gone)"
        )
    click.echo(
        f"edit the files under {where} (`git diff` there shows your change), then:"
    )
    if s.new:
        click.echo(
            '  overlay record -m "<subject>" --description "<why>" '
            "[--forwarded not-needed] [--fix N]"
        )
    else:
        click.echo("  overlay record   (-m/--description to change its message too)")


@click.command("record")
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
    help="From: of a new patch (default: your git identity, user.name and "
    "user.email, as git format-patch writes it; else the last patch's author).",
)
@click.option(
    "--name",
    "rename",
    metavar="NAME",
    default=None,
    help="Record the patch under NAME (.patch is added): the file and its series "
    "line are renamed in the same write.",
)
@click.option("--keep", is_flag=True, help="Keep the work tree for another round.")
@click.pass_obj
@handle_errors
def record_cmd(
    ws: Workspace,
    subject: str | None,
    description: str | None,
    fix: int | None,
    forwarded: str | None,
    section: str,
    title: str | None,
    author: str | None,
    rename: str | None,
    keep: bool,
) -> None:
    """Write the edit in progress into its patch file, LOCAL_FIXES.md entry and series
    line."""
    if (subject is None or description is None) and _interactive():
        # $EDITOR may open: an editor wants the terminal as its controlling one, which
        # a command server's worker does not have, so the caller runs it itself
        # (nothing is read or written before this; docs/server.md)
        from overlay.server.worker import hand_back

        hand_back()
    # overlay.edit loads when `record` runs
    from overlay.edit import load_session, resume_record
    from overlay.edit.record import record

    completed = resume_record(ws)
    if completed is not None:
        # The interrupted record was this command's work: done, unless the work tree
        # changed after it (then that change is the edit that stays).
        _echo_completed(completed)
        click.echo("next: overlay verify; overlay export DEST (e.g. build/rocm/src)")
        return
    session = load_session(ws.root)
    if (
        session is not None
        and session.new
        and (subject is None or description is None)
        and _interactive()
    ):
        subject, description = _message_from_editor(subject, description)
    done = record(
        ws,
        subject=subject,
        description=description,
        fix=fix,
        forwarded=forwarded,
        section=section,
        title=title,
        author=author,
        keep=keep,
        rename=rename,
    )
    _echo_recorded(ws, done, section)


def _echo_recorded(ws: Workspace, done, section: str) -> None:
    """What ``record`` wrote, carried and kept, and what to run next."""
    files = ", ".join(
        f"{p} +{a} -{r}" + (f" (mode {m})" if m else "") for p, a, r, m in done.files
    )
    click.echo(f"recorded {layout.PATCH_DIR}/{done.name}: {files}")
    if done.renamed_from:
        click.echo(
            f"renamed from {layout.PATCH_DIR}/{done.renamed_from} (its series line too)"
        )
    trailers = f"Local-Fix: {done.fix}, Forwarded: {done.forwarded}"
    if done.entry_created:
        click.echo(
            f"added entry {done.fix} to {layout.LOCAL_FIXES} ({section}); "
            f"the patch says {trailers}"
        )
    elif done.new:
        click.echo(f"the patch says {trailers}")
    if done.new:
        click.echo(
            f"{layout.SERIES}: {done.name} "
            + (f"after {done.after}" if done.after else "first")
        )
    for name in done.carried:
        click.echo(f"carried {name} onto the change (rewritten byte-stable)")
    # Named from the repository root: the current directory may have been inside it.
    where = os.path.relpath(done.workdir, ws.root)
    if done.kept:
        click.echo(f"kept the work tree {where}")
    elif done.spare:
        from overlay.edit.writes import spare_of  # loaded with the record already

        spare = spare_of(where)
        click.echo(
            f"moved the work tree {where} to {spare}, where the next edit starts"
        )
        _moved_with_it(os.path.join(ws.root, spare))
    else:
        click.echo(f"removed the work tree {where}")
    click.echo("next: overlay verify; overlay export DEST (e.g. build/rocm/src)")


@click.group("fix")
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
    ws: Workspace, section: str, title: str, files: tuple[str, ...], body: str | None
) -> None:
    """Add an entry with the next free number, ending with the policy sentence."""
    # LOCAL_FIXES.md's model and writer load when `fix new` runs
    from overlay.fs.records_lock import state_lock
    from overlay.records import fixes

    manifest = ws.manifest
    with state_lock(
        ws.root, "fix new"
    ):  # LOCAL_FIXES.md is a record a rebase also writes
        number = fixes.add_entry(
            ws.path(layout.LOCAL_FIXES),
            section,
            title,
            list(files),
            body,
            **fixes.entry_policy(manifest),
        )
    # An entry that names only resolutions (patches-rocm/resolved/) has no patch.
    resolved = layout.RESOLVED_DIR + "/"
    only_resolutions = bool(files) and all(f.startswith(resolved) for f in files)
    click.echo(
        f"added entry {number} to {layout.LOCAL_FIXES}"
        + ("" if only_resolutions else f"; put `Local-Fix: {number}` in its patch")
    )


@fix_group.command("list")
@click.pass_obj
@handle_errors
def fix_list_cmd(ws: Workspace) -> None:
    """Print the entries with their patches and files."""
    # LOCAL_FIXES.md's parser and the series load when `fix list` runs
    from overlay.records import fixes
    from overlay.records.series import load_series

    doc = fixes.load(ws.path(layout.LOCAL_FIXES))
    records = [
        fixes.PatchRecord(
            f"{layout.PATCH_DIR}/{p.name}",
            tuple(p.trailers.get("Local-Fix") or ()),
            p.forwarded,
            p.touched,
            p.deleted,
        )
        for p in load_series(ws.root)
    ]
    for row in fixes.list_entries(doc, records):
        click.echo(f"{row['number']:>3}. [{row['section']}] {row['title']}")
        for patch in row["patches"] or ["(no patch)"]:
            click.echo(f"       patch: {patch}")
        for f in row["files"]:
            click.echo(f"       file:  {f}")


#: The commands of this module.
COMMANDS = [edit_cmd, record_cmd, fix_group]
