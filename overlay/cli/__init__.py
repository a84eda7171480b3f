"""Command-line interface: the ``overlay`` group and its context, the workspace.

Every command parses its options, calls domain functions with the command's
:class:`~overlay.workspace.Workspace` (made once, here, from the global options),
renders what they return, and ends one way: an expected failure is raised as
:class:`~overlay.errors.OverlayError` (:func:`overlay.cli.tools.handle_errors`
turns it into one line and its exit code), a status of its own goes through
:func:`overlay.cli.tools.exit_with`.

The commands live in modules by what they work on:

* :mod:`overlay.cli.trees` -- ``tree``, ``status``, ``export``, ``diff``;
* :mod:`overlay.cli.records` -- ``verify``, ``refresh``;
* :mod:`overlay.cli.editing` -- ``edit``, ``record``, ``fix new``, ``fix list``;
* :mod:`overlay.cli.runs` -- ``rebase``, ``sync``;
* :mod:`overlay.cli.builds` -- ``build``, ``drift``, ``ci``, ``doctor``;
* ``suite`` (:mod:`overlay.cli.suites`), ``import`` (:mod:`overlay.cli.importing`)
  and ``server`` (:mod:`overlay.cli.server`), imported only when named.

Importing this package loads click and these modules only; each command imports
the domain modules it needs when it runs (start-up is the floor every command
pays).
"""

from __future__ import annotations

import click

from overlay import __version__, layout
from overlay.cli import builds, editing, records, runs, trees
from overlay.cli.tools import OverlayGroup
from overlay.workspace import Workspace

__all__ = ["Context", "Workspace", "main"]

#: The context object's earlier name.
Context = Workspace


@click.group(cls=OverlayGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="overlay")
@click.option(
    "-C",
    "--root",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Start here instead of the current directory; the overlay repository is the "
    f"nearest of it and its parents holding {layout.MANIFEST}.",
)
@click.option(
    "--git-dir",
    envvar="OVERLAY_GIT_DIR",
    default=None,
    help="Git store (bare repo); default ~/.cache/overlay/store.git. "
    "Env: OVERLAY_GIT_DIR.",
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
    ctx.obj = Workspace(root, git_dir, offline, debug)


for _module in (trees, records, editing, runs, builds):
    for _command in _module.COMMANDS:
        main.add_command(_command)

main.lazy_commands = {
    "suite": "overlay.cli.suites:suite",
    "import": "overlay.cli.importing:import_group",
    "server": "overlay.cli.server:server_group",
}
