"""Options several commands share, defined once (pip-tools style).

Each factory returns a click decorator; the choices, defaults and help a command
shows are its arguments, so that every command keeps the ``--help`` it had:

* :func:`format_option` -- ``--format`` (the report's format);
* :func:`output_option` -- ``-o/--output`` (write the report to a file too);
* :func:`backend_option` -- ``--backend`` (rocm, cpu, cuda).

Importing this module costs only click.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

#: The backends a build knows, in the order ``build`` and ``ci`` list them.
BACKENDS = ("rocm", "cpu", "cuda")
#: The same backends in the order the ``suite`` commands list them.
SUITE_BACKENDS = ("rocm", "cuda", "cpu")
#: The help of the ``suite`` commands' ``--backend``.
SUITE_BACKEND_HELP = (
    "Backend the children were built for (default: inferred from the GPUs present)."
)


def format_option(
    choices: Sequence[str], default: str = "text", help: str | None = None
) -> Callable[[F], F]:
    """``--format`` into the parameter ``fmt``: one of ``choices``, default shown.

    Args:
        choices: the formats this command renders, in the order ``--help`` lists them.
        default: the format without the option.
        help: the option's help line, or ``None`` for none.
    Returns:
        The click decorator.
    """
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(choices)),
        default=default,
        show_default=True,
        help=help,
    )


def output_option(
    help: str = "Also write the report to FILE.", *, short_first: bool = False
) -> Callable[[F], F]:
    """``-o/--output FILE`` into the parameter ``output`` (``None`` when not given).

    Args:
        help: the option's help line.
        short_first: list ``-o`` before ``--output`` in ``--help`` and make the value
            a file path (``verify``), rather than ``--output, -o FILE`` (``suite``).
    Returns:
        The click decorator.
    """
    if short_first:
        return click.option(
            "-o", "--output", type=click.Path(dir_okay=False), help=help
        )
    return click.option("--output", "-o", default=None, metavar="FILE", help=help)


def backend_option(
    *,
    choices: Sequence[str] = BACKENDS,
    default: str | None = None,
    required: bool = False,
    envvar: str | None = None,
    help: str | None = None,
) -> Callable[[F], F]:
    """``--backend`` into the parameter ``backend``.

    Args:
        choices: the backends offered (:data:`BACKENDS` or :data:`SUITE_BACKENDS`).
        default: the backend without the option (shown in ``--help`` when set).
        required: the option must be given (``build``).
        envvar: an environment variable that sets it (``OVERLAY_BACKEND``).
        help: the option's help line, or ``None`` for none.
    Returns:
        The click decorator.
    """
    extra: dict[str, Any] = {}
    if default is not None:
        extra["show_default"] = True
    if envvar is not None:
        extra["envvar"] = envvar
    return click.option(
        "--backend",
        type=click.Choice(list(choices)),
        default=default,
        required=required,
        help=help,
        **extra,
    )


def suite_backend_option() -> Callable[[F], F]:
    """The ``suite`` commands' ``--backend``: optional, from ``OVERLAY_BACKEND`` too."""
    return backend_option(
        choices=SUITE_BACKENDS, envvar="OVERLAY_BACKEND", help=SUITE_BACKEND_HELP
    )
