"""Command-line interface: parses options, calls domain functions, renders.

Only this module turns results into exit codes (see :mod:`overlay.errors`).
"""

from __future__ import annotations

import functools
import os
import sys
import traceback

import click

from overlay import __version__
from overlay.errors import OverlayError


class Context:
    """Options shared by every command (root, git store, offline, debug)."""

    def __init__(self, root: str, git_dir: str | None, offline: bool, debug: bool):
        self.root = root
        self.git_dir = git_dir
        self.offline = offline
        self.debug = debug


def handle_errors(fn):
    """Decorator: map :class:`OverlayError` to one line on stderr and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        debug = bool(ctx.find_object(Context) and ctx.find_object(Context).debug)
        try:
            return fn(*args, **kwargs)
        except OverlayError as exc:
            if debug:
                traceback.print_exc()
            click.echo(f"overlay: {exc.message}", err=True)
            if exc.hint:
                click.echo(f"hint: {exc.hint}", err=True)
            ctx.exit(exc.exit_code)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="overlay")
@click.option("-C", "--root", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Repository holding patches-rocm/ and LOCAL_FIXES.md.")
@click.option("--git-dir", envvar="OVERLAY_GIT_DIR", default=None,
              help="Git store (bare repo); default ~/.cache/overlay/store.git. Env: OVERLAY_GIT_DIR.")
@click.option("--offline", is_flag=True, help="Never fetch; a missing object is an error.")
@click.option("--debug", is_flag=True, help="Show tracebacks for expected errors.")
@click.pass_context
def main(ctx: click.Context, root: str, git_dir: str | None, offline: bool, debug: bool) -> None:
    """Assemble, check, rebase, build and prove the MLX + ROCm overlay."""
    ctx.obj = Context(os.path.abspath(root), git_dir, offline, debug)
