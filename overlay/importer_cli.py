"""``overlay import ...``: turn an overlay kept another way into records.

Only parses options, calls :mod:`overlay.importer` and renders its report. Exit
codes: 0 imported and ``overlay verify`` finds no error on the new records; 1
imported, with error findings (listed in the report); 2 usage or environment
error, nothing written (one ``overlay: ...`` line on stderr).

The target repository is ``-C DIR`` or the current directory itself (it holds no
manifest yet, so it is not looked for upwards).
"""

from __future__ import annotations

import os
import sys

import click

from overlay.clitools import handle_errors
from overlay.patchfmt import DEFAULT_AUTHOR

__all__ = ["import_group"]


@click.group("import")
def import_group() -> None:
    """Turn an overlay kept another way into records (patches-rocm/, LOCAL_FIXES.md)."""


def _interrupted() -> str:
    """The line for a Ctrl-C: whether the records were written (the manifest is renamed
    into place last, with the directory that holds it)."""
    root = click.get_current_context().find_root().obj
    target = getattr(root, "start", None) or os.getcwd()
    manifest = os.path.join(target, "patches-rocm", "overlay.toml")
    try:
        written = os.path.getmtime(manifest) >= getattr(root, "started", 0.0)
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
    help="Move a non-empty patches-rocm/ and another LOCAL_FIXES.md aside to "
    ".overlay/import-backup-<time>-<random>/ instead of refusing.",
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
    help="The policy sentence (default: the last sentence of the newest kernels, build or API entry).",
)
@click.option(
    "--author",
    default=DEFAULT_AUTHOR,
    show_default=True,
    help="From: header of the patches.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "markdown"]),
    default="text",
    show_default=True,
    help="Report format.",
)
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
    """Import DIR (UPSTREAM, LOCAL_FIXES.md, mlx/, CMakeLists.txt) as manifest, resolutions and series."""
    from overlay.gitstore import Store
    from overlay.importer import (
        DEFAULT_UPSTREAM_URL,
        REPORT_MD,
        import_whole_file,
        render,
    )

    root = ctx.find_root().obj
    target = getattr(root, "start", None) or os.getcwd()
    store = Store(
        getattr(root, "git_dir", None), offline=bool(getattr(root, "offline", False))
    )
    report = import_whole_file(
        store,
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
        click.echo(f"report written to {REPORT_MD}")
        from overlay.fsutil import git_ignored

        if not git_ignored(target, [".overlay/last-import.md"]):
            # .overlay/ is this clone's state (locks, reports, rr-cache), not a record to commit.
            click.echo(
                "next: add `/.overlay/` to .gitignore (overlay's per-clone state); commit "
                "patches-rocm/ and LOCAL_FIXES.md"
            )
    errors = [f for f in report["findings"] or [] if f["severity"] == "error"]
    sys.exit(1 if errors else 0)
