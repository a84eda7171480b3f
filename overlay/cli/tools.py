"""The one place failures become a line on stderr and an exit code.

Two layers, both here:

* :func:`handle_errors` decorates each command: an :class:`OverlayError`
  becomes ``overlay: <message>`` (and ``hint: <hint>``) and its exit code; a
  Ctrl-C becomes ``overlay: interrupted`` (or what the command's hook says)
  and exit 130;
* :class:`OverlayGroup` is the root group's class: everything a command did not
  handle ends there the same way -- click's usage errors (an unknown option,
  a bad value, a missing argument: one line, ``hint: overlay CMD --help``,
  exit 2), an interrupt outside a command body (exit 130), and any unexpected
  exception (one ``overlay: internal error`` line, exit 2; ``--debug`` shows
  the traceback).

Every line goes through :func:`one_line`, so a message quoting user data stays
one line. Exit codes are documented in ``docs/exit-codes.md``.
"""

from __future__ import annotations

import errno
import functools
import importlib
import io
import os
import re
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

import click

from overlay import layout
from overlay.errors import EXIT_USAGE, OverlayError, interrupt_outcome
from overlay.workspace import Workspace

_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters shown as ``\\xNN``.

    Messages quote user data (a series line, a diff line); a newline or an
    escape sequence in it must not break the one-line promise or the terminal.
    Lone surrogates (bytes a path decoded with ``surrogateescape`` could not
    decode) are shown as ``\\udcNN``: stderr could not encode them.
    """
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


def _debug(ctx: click.Context | None) -> bool:
    """Whether ``--debug`` was given: the workspace says so, or, when the root callback
    failed before it made one, the root's parsed options."""
    while ctx is not None:
        if getattr(ctx.obj, "debug", False) or ctx.params.get("debug") is True:
            return True
        ctx = ctx.parent
    return False


def report(exc: OverlayError, *, debug: bool = False) -> int:
    """Print ``overlay: <message>`` (and ``hint: <hint>``) on stderr; return the exit code.

    Args:
        exc: the expected failure.
        debug: print the traceback first (``--debug``).
    Returns:
        ``exc.exit_code``.
    """
    if debug:
        traceback.print_exception(exc)
    click.echo(f"overlay: {one_line(exc.message)}", err=True)
    if exc.hint:
        click.echo(f"hint: {one_line(exc.hint)}", err=True)
    return exc.exit_code


def handle_errors(fn=None, *, on_interrupt: Callable[[], str | None] | None = None):
    """Decorator for click commands: an :class:`OverlayError` becomes ``overlay: <message>``
    (and ``hint: <hint>``) on stderr and the error's exit code; ``--debug`` on the root
    command (or the context object's ``debug``) adds the traceback.

    A :class:`KeyboardInterrupt` (Ctrl-C) becomes one ``overlay: interrupted`` line and
    exit 130 (:data:`~overlay.errors.EXIT_INTERRUPTED`), never click's ``Aborted!``; a
    SIGTERM taken by parallel jobs (:class:`~overlay.errors.Terminated`) the same with
    ``terminated`` and exit 143.

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
            ctx.exit(report(exc, debug=_debug(ctx)))
        except KeyboardInterrupt as exc:
            word, code = interrupt_outcome(exc)
            note = None
            if on_interrupt is not None:
                try:
                    note = on_interrupt()
                except (
                    Exception,
                    KeyboardInterrupt,
                ):  # the generic line still goes out
                    note = None
            click.echo(f"overlay: {one_line(note or word)}", err=True)
            ctx.exit(code)

    return wrapper


def exit_with(code: int) -> NoReturn:
    """End the command with exit status ``code``: the one way a command exits with a
    status of its own (0 done, 1 findings or a failure it reported); an expected error
    is raised as :class:`OverlayError` instead.

    Raises:
        click.exceptions.Exit: always; the root group turns it into the status.
    """
    raise click.exceptions.Exit(code)


def run_note(root: str) -> str | None:
    """The line that a rebase or sync is in progress at ``root``
    (:func:`overlay.rebase.ondisk.in_progress_note`), or ``None``; the run state's
    modules load only when its directory (``.overlay/rebase/``) is there, as it is not
    for almost every ``status`` and ``verify``.
    """
    if not layout.run_state_present(root):
        return None
    # rebase.ondisk: only when a run's state directory is there
    from overlay.rebase.ondisk import in_progress_note

    return in_progress_note(root)


def workspace(ctx: click.Context | None = None) -> Workspace:
    """The command's :class:`~overlay.workspace.Workspace`: the root ``overlay`` group's
    context object, or, when a subgroup (``suite``, ``import``) runs on its own, a new
    one for the current directory and the default store, kept as the root's object.

    Args:
        ctx: a click context of the command (default: the current one).
    Returns:
        The workspace every context of the command shares.
    """
    root = (ctx or click.get_current_context()).find_root()
    if not isinstance(root.obj, Workspace):
        root.obj = Workspace(os.getcwd())
    return root.obj


def _first_lower(text: str) -> str:
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


def _named_path(group: click.Group, args: list[str]) -> list[str]:
    """The command path ``args`` name (``["overlay", "rebase"]``), parsed as click
    parses them but without errors, callbacks or prompts (resilient parsing).

    click's parser raises some usage errors (an option missing its value) with no
    context, so the error alone cannot say which command's help to point to.
    """
    path = ["overlay"]
    try:
        ctx = group.make_context("overlay", list(args), resilient_parsing=True)
        rest = [*ctx._protected_args, *ctx.args]
        command: click.Command = group
        while isinstance(command, click.Group) and rest:
            name, sub, rest = command.resolve_command(ctx, rest)
            if sub is None or name is None:
                break
            path.append(name)
            ctx = sub.make_context(name, rest, parent=ctx, resilient_parsing=True)
            rest, command = [*ctx._protected_args, *ctx.args], sub
    except (click.ClickException, click.exceptions.Exit):
        pass  # the path so far
    return path


def _usage_line(
    exc: click.UsageError, named: list[str] | None = None
) -> tuple[str, str]:
    message = " ".join(_first_lower(exc.format_message()).split())
    path = exc.ctx.command_path.split() if exc.ctx is not None else (named or [])
    command = " ".join(["overlay", *path[1:]])
    option = getattr(exc, "option_name", None)
    if option in _GLOBAL_OPTIONS and len(path) > 1:
        message = message.split(". Did you mean", 1)[
            0
        ]  # a near name of the command is not it
        return message.rstrip("."), (
            f"{option} is a global option: it goes before the command, "
            f"`overlay {option} ... {' '.join(path[1:])}`"
        )
    return message.rstrip("."), f"{command} --help"


#: The root group's options, which a user may put after the command by habit.
_GLOBAL_OPTIONS = ("-C", "--root", "--git-dir", "--offline", "--debug")


#: Exit status when the reader of stdout went away (``overlay status | head``): what a
#: shell reports for git killed by SIGPIPE, 128 + 13.
EXIT_BROKEN_PIPE = 141


def _broken_pipe() -> int:
    """The reader of stdout closed it: stop quietly, as git does. stdout is pointed at
    /dev/null so that the interpreter's final flush does not raise again (the recipe
    of Python's ``signal`` documentation)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_BROKEN_PIPE


class WholeWrites(io.FileIO):
    """A :class:`io.FileIO` whose :meth:`write` writes all it is given or raises: the
    raw stream under an unbuffered stdout (``python -u``, ``PYTHONUNBUFFERED``).

    There the interpreter's text stream writes straight to a :class:`io.FileIO`,
    which returns what one ``write(2)`` took, and the text stream drops the rest
    without an error. When the reader of a pipe leaves while that write is blocked on
    a full pipe, Linux returns the bytes already taken (64 KiB, a pipe's capacity),
    not EPIPE: ``overlay diff | head -1`` of a large diff exited 0, its output cut
    short, where a buffered stdout (whose writer loops) ends with
    :class:`BrokenPipeError` and exit 141. Here the rest is written again, and that
    write fails as any later one would.
    """

    def write(self, data) -> int:
        """Write all of ``data`` (a bytes-like object); return its length in bytes.

        Raises:
            BrokenPipeError: the reader went away before all of it was written.
            OSError: the descriptor refused the write otherwise.
        """
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            wrote = super().write(view[done:])
            if wrote is None:  # a non-blocking descriptor that is full: wait, not spin
                import select  # only such a stdout needs it

                select.select([], [self], [])
                continue
            done += wrote
        return len(view)


def whole_stdout() -> None:
    """Put an unbuffered :data:`sys.stdout` on :class:`WholeWrites` over the same
    descriptor, with the same encoding, error handler and line buffering. A buffered
    stdout (the default) already writes whole, and a stream of another kind (a test
    runner's capture) is not the program's: both are left as they are.

    Called once by the program (the console script, a command server's worker),
    before a command writes.
    """
    old = sys.stdout
    if type(old) is not io.TextIOWrapper or type(old.buffer) is not io.FileIO:
        return
    old.flush()
    sys.stdout = io.TextIOWrapper(
        WholeWrites(old.fileno(), "w", closefd=False),
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=old.line_buffering,
        write_through=True,
    )


#: errno values that say the machine refused a write (a full disk, a quota, a read-only
#: file system): the environment's doing, not a bug, said as such.
_WRITE_REFUSED = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


def _internal(exc: BaseException, debug: bool) -> int:
    if debug:
        traceback.print_exception(exc)
    if isinstance(exc, OSError) and exc.errno in _WRITE_REFUSED:
        where = f" ({exc.filename})" if exc.filename else ""
        click.echo(f"overlay: cannot write{where}: {exc.strerror}", err=True)
        click.echo(
            "hint: free space, or write where it is allowed, then run the command again",
            err=True,
        )
        return EXIT_USAGE
    what = (
        f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        if str(exc).strip()
        else type(exc).__name__
    )
    click.echo(f"overlay: internal error ({one_line(what)})", err=True)
    click.echo(
        "hint: rerun with `overlay --debug ...` for the traceback, and report it"
        if not debug
        else "hint: the traceback is above; please report it",
        err=True,
    )
    return EXIT_USAGE


def long_forms(command: click.Command, args: list[str]) -> list[str]:
    """``args`` with the leading options of ``command`` that take a value and were given by
    their short name (``-C DIR``, ``-CDIR``) written as their long one (``--root=DIR``).

    The meaning is the same; the cost is not. click tries every option first as a
    long one, and the error that a short one raises on the way imports :mod:`difflib`
    to suggest a long name, 1.3 ms of CPU (a tenth of a second per hundred commands)
    that ``overlay -C DIR status`` paid and ``overlay --root DIR status`` did not.
    Only the options before the command's first argument are rewritten (a
    subcommand's own are its parser's); a short name without its value is left for
    click to refuse in its own words.

    Args:
        command: the group (its options say which take a value).
        args: the command line after the program name.
    Returns:
        A new list.
    """
    takes_value = {}
    for param in command.params:
        if isinstance(param, click.Option) and not param.is_flag and not param.count:
            long = next((o for o in param.opts if o.startswith("--")), None)
            for name in param.opts:
                takes_value[name] = long
    out = list(args)
    i = 0
    while i < len(out):
        arg = out[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        short, attached = arg[:2], arg[2:]
        long = takes_value.get(short) if not arg.startswith("--") else None
        if long is not None and attached and not attached.startswith("="):
            out[i] = f"{long}={attached}"
        elif long is not None and not attached and i + 1 < len(out):
            out[i : i + 2] = [f"{long}={out[i + 1]}"]
        elif arg in takes_value and "=" not in arg:
            i += 1  # a long option's value, whatever it looks like
        i += 1
    return out


class OverlayGroup(click.Group):
    """Root group: every error path ends in one ``overlay:`` line and a documented exit code.

    :meth:`invoke` turns what a subcommand raises into a line (it knows
    ``--debug``); :meth:`main` runs click in non-standalone mode and turns
    click's own exceptions (usage errors, aborts) into lines, then exits.
    """

    #: Subcommand groups imported only when named (``name -> "module:attribute"``): the
    #: suites bring statistics, jinja2 and the runner, which no other command needs
    #: (start-up is the floor every command pays).
    lazy_commands: dict[str, str] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Eager and lazy subcommand names, sorted (``--help`` lists both)."""
        return sorted(set(super().list_commands(ctx)) | set(self.lazy_commands))

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """click's parsing of the group's options, each short one that takes a value
        given in its long form first (:func:`long_forms`): ``-C DIR`` is parsed as
        ``--root=DIR``, which means the same."""
        return super().parse_args(ctx, long_forms(self, args))

    def get_command(self, ctx: click.Context, cmd_name: str):
        """The subcommand ``cmd_name``; a lazy one is imported on first use."""
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            module, attribute = self.lazy_commands[cmd_name].split(":")
            self.add_command(
                getattr(importlib.import_module(module), attribute), cmd_name
            )
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context):
        """Run the group and its subcommand (see :meth:`click.Group.invoke`)."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, EOFError):
            raise
        except KeyboardInterrupt as exc:
            word, code = interrupt_outcome(exc)
            click.echo(f"overlay: {word}", err=True)
            raise click.exceptions.Exit(code) from None
        except BrokenPipeError:
            raise click.exceptions.Exit(_broken_pipe()) from None
        except OverlayError as exc:
            raise click.exceptions.Exit(report(exc, debug=_debug(ctx))) from None
        except (
            Exception,
            MemoryError,
            RecursionError,
        ) as exc:  # the last line of defence
            raise click.exceptions.Exit(_internal(exc, _debug(ctx))) from None

    def main(
        self,
        args=None,
        prog_name=None,
        complete_var=None,
        standalone_mode=True,
        **extra,
    ):
        """Run the command line; exit with its code (``standalone_mode``) or return it."""
        if prog_name is None:
            prog_name = "overlay"
        if args is None:
            whole_stdout()  # the program's stdout, not a caller's (a test runner's)
        code = self._main(args, prog_name, complete_var, **extra)
        if not standalone_mode:
            return code
        if args is None:
            # The program (the console script, not a caller in this process such as a
            # test runner) has ended and said so: a Ctrl-C from here on, during the
            # interpreter's shutdown, would only turn its exit status into a silent 130.
            import signal  # only at the program's end: `import overlay.cli` loads no more

            signal.signal(signal.SIGINT, signal.SIG_IGN)
        sys.exit(code)

    def _main(self, args, prog_name, complete_var, **extra) -> int:
        debug = "--debug" in (sys.argv[1:] if args is None else list(args))
        try:
            rv = super().main(
                args=args,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
        except (
            _NO_ARGS_IS_HELP
        ) as exc:  # bare ``overlay`` / ``overlay fix``: the help text, as click does
            exc.show()
            return exc.exit_code
        except click.UsageError as exc:
            named = None
            if exc.ctx is None:
                named = _named_path(self, sys.argv[1:] if args is None else list(args))
            message, hint = _usage_line(exc, named)
            click.echo(f"overlay: {one_line(message)}", err=True)
            click.echo(f"hint: {hint}", err=True)
            return EXIT_USAGE
        except click.ClickException as exc:
            click.echo(
                f"overlay: {one_line(' '.join(exc.format_message().split()))}", err=True
            )
            return EXIT_USAGE
        except (click.Abort, KeyboardInterrupt, EOFError) as exc:
            cause = exc if isinstance(exc, KeyboardInterrupt) else exc.__cause__
            if isinstance(cause, KeyboardInterrupt):
                word, code = interrupt_outcome(cause)
                click.echo(f"overlay: {word}", err=True)
                return code
            click.echo("overlay: aborted", err=True)
            return EXIT_USAGE
        except BrokenPipeError:
            return _broken_pipe()
        except (
            OverlayError
        ) as exc:  # raised before a subcommand ran (the root callback)
            return report(exc, debug=debug)
        except (Exception, MemoryError, RecursionError) as exc:
            return _internal(exc, debug)
        # Non-standalone click returns the code of ctx.exit(N), or the command's return value.
        return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


#: The name the root group had before it handled more than interrupts.
InterruptibleGroup = OverlayGroup
