"""The one place expected failures become a line on stderr and an exit code."""

from __future__ import annotations

import functools
import traceback

import click

from overlay.errors import OverlayError


def handle_errors(fn):
    """Decorator for click commands: an :class:`OverlayError` becomes ``overlay: <message>``
    (and ``hint: <hint>``) on stderr and the error's exit code; ``--debug`` on the root
    command (or the context object's ``debug``) adds the traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        try:
            return fn(*args, **kwargs)
        except OverlayError as exc:
            if any(getattr(obj, "debug", False) for obj in (ctx.find_root().obj, ctx.obj)):
                traceback.print_exc()
            click.echo(f"overlay: {exc.message}", err=True)
            if exc.hint:
                click.echo(f"hint: {exc.hint}", err=True)
            ctx.exit(exc.exit_code)

    return wrapper
