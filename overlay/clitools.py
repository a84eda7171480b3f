"""The one place expected failures become a line on stderr and an exit code."""

from __future__ import annotations

import functools
import traceback
from typing import Callable

import click

from overlay.errors import EXIT_INTERRUPTED, OverlayError


def handle_errors(fn=None, *, on_interrupt: Callable[[], str | None] | None = None):
    """Decorator for click commands: an :class:`OverlayError` becomes ``overlay: <message>``
    (and ``hint: <hint>``) on stderr and the error's exit code; ``--debug`` on the root
    command (or the context object's ``debug``) adds the traceback.

    A :class:`KeyboardInterrupt` (Ctrl-C) becomes one ``overlay: interrupted`` line and
    exit 130 (:data:`~overlay.errors.EXIT_INTERRUPTED`), never click's ``Aborted!``.

    Use it bare (``@handle_errors``) or with a hook (``@handle_errors(on_interrupt=f)``).

    Args:
        fn: the command function (when used bare).
        on_interrupt: called after an interrupt; the string it returns replaces
            ``interrupted`` in the line (it says what state is left and which command
            continues or undoes it); ``None`` keeps the generic word.
    Returns:
        The wrapped command (or, with only ``on_interrupt``, the decorator).
    """
    if fn is None:
        return functools.partial(handle_errors, on_interrupt=on_interrupt)

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
        except KeyboardInterrupt:
            note = None
            if on_interrupt is not None:
                try:
                    note = on_interrupt()
                except (Exception, KeyboardInterrupt):  # noqa: BLE001 - the generic line still goes out
                    note = None
            click.echo(f"overlay: {note or 'interrupted'}", err=True)
            ctx.exit(EXIT_INTERRUPTED)

    return wrapper


class InterruptibleGroup(click.Group):
    """The root command group: a Ctrl-C outside any command body (while parsing, in a
    group callback) also ends with one ``overlay: interrupted`` line and exit 130
    instead of click's ``Aborted!``; inside a command :func:`handle_errors` answers."""

    def invoke(self, ctx: click.Context):
        """Run the group and its subcommand (see :meth:`click.Group.invoke`)."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("overlay: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
