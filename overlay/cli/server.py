"""``overlay server start|stop|status``: the command server (docs/server.md).

Exit codes: 0 done (``status``: a server runs); 1 ``status`` or ``stop`` found no
server; 2 the server could not be started (one ``overlay: ...`` line).
"""

from __future__ import annotations

import time

import click

from overlay.cli.tools import exit_with, handle_errors
from overlay.server import control
from overlay.server.worker import is_worker

__all__ = ["server_group"]


@click.group("server")
def server_group() -> None:
    """A warm overlay that runs each command in a fork of itself (docs/server.md)."""


def _show(facts: dict) -> None:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(facts["started"]))
    click.echo(
        f"server pid {facts['pid']}, started {started}, {facts['served']} command(s) "
        f"served, {facts['running']} running; ends after {facts['idle_s']:g} s "
        "without a command"
    )
    click.echo(f"socket: {facts['socket']}")
    click.echo(f"log: {facts['log']}")


def _finite(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    """Refuse ``nan`` (which every comparison of FloatRange lets through)."""
    if value != value:
        raise click.BadParameter("not a number")
    return value


@server_group.command("start")
@click.option(
    "--idle",
    "idle_minutes",
    type=click.FloatRange(min=0, min_open=True, max=7 * 24 * 60),
    default=30.0,
    show_default=True,
    callback=_finite,
    help="Minutes without a command after which the server ends (at most a week).",
)
@handle_errors
def start_cmd(idle_minutes: float) -> None:
    """Start the command server of this overlay installation."""
    _show(control.start(idle_minutes * 60))


@server_group.command("stop")
@handle_errors
def stop_cmd() -> None:
    """Stop the command server (commands it runs finish first)."""
    running = control.stop()
    if running is None:
        click.echo("no server runs")
        exit_with(1)
    running -= _itself()
    click.echo(
        "server stopping" + (f"; {running} command(s) finish first" if running else "")
    )


@server_group.command("status")
@handle_errors
def status_cmd() -> None:
    """Say whether the command server runs, and what it did."""
    facts = control.status()
    if facts is None:
        click.echo("no server runs")
        exit_with(1)
    _show({**facts, "running": facts["running"] - _itself()})


def _itself() -> int:
    """1 when this command is served (the server counts it among those it runs, and
    the user asked about the others), else 0."""
    return 1 if is_worker() else 0
