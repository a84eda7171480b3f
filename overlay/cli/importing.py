"""``overlay import ...``: turn an overlay kept another way into records.

Only parses options, calls :mod:`overlay.importer` and renders its report. Exit
codes: 0 imported and ``overlay verify`` finds no error on the new records; 1
imported, with error findings (listed in the report); 2 usage or environment
error, nothing written (one ``overlay: ...`` line on stderr).

The target repository is ``-C DIR`` or the current directory itself (it holds no
manifest yet, so it is not looked for upwards): the workspace's start directory.
"""

from __future__ import annotations

import os

import click

from overlay import layout
from overlay.cli.options import format_option
from overlay.cli.tools import exit_with, handle_errors, workspace
from overlay.git.run import git_ignored
from overlay.records.patchfmt import DEFAULT_AUTHOR

__all__ = ["import_group"]


@click.group("import")
def import_group() -> None:
    """Turn an overlay kept another way into records (patches-rocm/, LOCAL_FIXES.md)."""


def _interrupted() -> str:
    """The line for a Ctrl-C: whether the records were written (the manifest is renamed
    into place last, with the directory that holds it)."""
    ws = workspace()
    manifest = layout.under(ws.start, layout.MANIFEST)
    try:
        written = os.path.getmtime(manifest) >= ws.started
    except OSError:
        written = False
    if written:
        return (
            "interrupted after the records were written; `overlay verify` checks them"
        )
    return (
        "interrupted: no record was written (LOCAL_FIXES.md may already be the overlay's); "
        "run the import again"
    )


@import_group.command("whole-file")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option(
    "--force",
    is_flag=True,
    help=f"Move a non-empty {layout.PATCH_DIR}/ and another {layout.LOCAL_FIXES} aside to "
    f"{layout.STATE_DIR}/import-backup-<time>-<random>/ instead of refusing.",
)
@click.option(
    "--upstream-url",
    default=None,
    metavar="URL",
    help="Upstream MLX's URL for the manifest (default: github.com/ml-explore/mlx).",
)
@click.option(
    "--fork-url",
    default=None,
    metavar="URL",
    help="The fork's URL (default: UPSTREAM's source).",
)
@click.option(
    "--closing-sentence",
    default=None,
    metavar="TEXT",
    help="The policy sentence (default: the last sentence of the newest kernels, build "
    "or API entry).",
)
@click.option(
    "--author",
    default=DEFAULT_AUTHOR,
    show_default=True,
    help="From: header of the patches.",
)
@format_option(["text", "json", "markdown"], help="Report format.")
@click.pass_context
@handle_errors(on_interrupt=_interrupted)
def whole_file_cmd(
    ctx: click.Context,
    directory: str,
    force: bool,
    upstream_url: str | None,
    fork_url: str | None,
    closing_sentence: str | None,
    author: str,
    fmt: str,
) -> None:
    """Import DIR (UPSTREAM, LOCAL_FIXES.md, mlx/, CMakeLists.txt) as manifest,
    resolutions and series."""
    # the importer loads when `import whole-file` runs, not for --help
    from overlay.importer import (
        DEFAULT_UPSTREAM_URL,
        import_whole_file,
        render,
    )

    ws = workspace(ctx)
    target = ws.start
    report = import_whole_file(
        ws.store,
        target,
        directory,
        force=force,
        upstream_url=upstream_url or DEFAULT_UPSTREAM_URL,
        fork_url=fork_url,
        closing_sentence=closing_sentence,
        author=author,
    )
    click.echo(render(report, fmt), nl=False)
    if fmt == "text":
        click.echo(f"report written to {layout.LAST_IMPORT_MD}")
        # .overlay/ is this clone's state (locks, reports, rr-cache), not a record to
        # commit; its own .gitignore (layout.make_state_dir) hides it, unless a rule of
        # the repository brings it back.
        ignore = (
            ""
            if git_ignored(target, [layout.LAST_IMPORT_MD])
            else f"add `/{layout.STATE_DIR}/` to .gitignore (overlay's per-clone "
            "state); "
        )
        click.echo(f"next: {ignore}commit {layout.PATCH_DIR}/ and {layout.LOCAL_FIXES}")
    errors = [f for f in report["findings"] or [] if f["severity"] == "error"]
    exit_with(1 if errors else 0)
