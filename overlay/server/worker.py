"""What a fork of the command server does to become the caller's command.

The server (:mod:`overlay.server.daemon`) forks one worker per command. The fork
holds every module the server imported, already initialised; what differs from a
command started by the caller is put right here, before the command line runs:

* the process: a process group of its own (the server sends the caller's signals to
  it), the default signal dispositions of a fresh Python, no ``atexit`` handler of
  the server, none of the server's descriptors;
* the caller's standard streams (descriptors 0, 1, 2, received with the request), and
  new ``sys.stdin``/``stdout``/``stderr`` on them, buffered as Python buffers them
  at start-up (a terminal's stdout by line, a pipe's by block);
* the caller's working directory, environment, umask and argument list.

Then :func:`finish` runs the command (:func:`overlay.__main__.run`) and ends the
worker as a command ends: threads joined, ``atexit`` handlers run, streams flushed,
the status.
"""

import atexit
import io
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from overlay.server import wire

#: The caller's descriptor of the connection, while this process is a worker (a
#: command hands itself back through it: :func:`hand_back`); ``None`` elsewhere.
_connection: list[int] = []

#: Signals whose disposition a fresh Python leaves at the default, and the server
#: changed (it takes the children's deaths and its stop through a wake-up pipe).
_RESET = (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def is_worker() -> bool:
    """This process runs a command for a caller of the command server."""
    return bool(_connection)


def hand_back() -> None:
    """Give the command back to its caller, which runs it in its own process; the
    worker ends. For a command that needs a terminal of its own (``record`` opening
    ``$EDITOR``) and has written nothing yet. Does nothing outside a worker.

    Raises:
        SystemExit: in a worker, always (status 0; the caller ignores it).
    """
    if not _connection:
        return
    os.write(_connection[0], wire.encode(("handback",)))
    raise SystemExit(0)


def become(request: dict, fds: list[int], conn_fd: int) -> None:
    """Turn this fork of the server into the caller's command process.

    Args:
        request: the caller's ``("run", request)`` message's dict: ``argv``, ``cwd``,
            ``env``, ``umask``.
        fds: the caller's descriptors 0, 1 and 2 as received.
        conn_fd: this command's connection (kept for :func:`hand_back`); the
            server's own descriptors are closed already.
    Raises:
        OSError: the caller's directory is gone (the worker ends with it: status 2,
            the message on the caller's stderr).
    """
    atexit._clear()
    for signum in _RESET:
        signal.signal(
            signum,
            signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL,
        )
    os.setpgid(0, 0)
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    _connection[:] = [conn_fd]
    sys.stdin = _stream(0, "r", sys.stdin)
    sys.stdout = _stream(1, "w", sys.stdout)
    sys.stderr = _stream(2, "w", sys.stderr, line=True)
    os.environ.clear()
    os.environ.update(request["env"])
    os.umask(request["umask"])
    sys.argv = ["overlay", *request["argv"]]
    os.chdir(request["cwd"])


def finish(command: Callable[[], None], mask: set | None = None) -> NoReturn:
    """Run ``command`` and end the worker as a command ends, without the interpreter's
    teardown.

    A command's process ends with ``sys.exit``: its other threads joined, ``atexit``
    handlers run, its streams flushed; then the interpreter frees every module it
    holds. In a fork that last step writes to every object the server loaded: each
    page it shares with the server is copied before it is freed. A worker of
    ``--version`` took 22.4 ms of CPU ending that way and 4.7 ms ending with
    ``os._exit`` (medians of 30 forks of a server of 33 MB, 2026-12-03). So the
    worker does the first three itself and ends with ``os._exit``; the kernel frees
    the rest.

    Args:
        command: runs the command line; raises ``SystemExit`` with its status.
        mask: the signal mask to run it under (the server blocks the caller's signals
            over the fork; one that came meanwhile is taken here, by the command's
            handlers).
    """
    code = 0
    try:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        command()
    except SystemExit as exc:
        code = _status(exc.code)
    except KeyboardInterrupt:  # a Ctrl-C before the command line took over
        sys.stderr.write("overlay: interrupted\n")
        code = 130
    except BaseException:  # noqa: BLE001 - printed as Python would, then the status
        import traceback  # only a command's bug needs it

        traceback.print_exc()
        code = 1
    try:
        main = threading.main_thread()
        for thread in threading.enumerate():
            if thread is not main and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                if stream is sys.stdout and code == 0:
                    code = 120  # what Python returns when it cannot flush stdout
        os._exit(code)


def _status(code: object) -> int:
    """The exit status of ``SystemExit(code)``, as the interpreter computes it (a
    message is printed to stderr and means 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _stream(fd: int, mode: str, old: object, line: bool = False) -> io.TextIOWrapper:
    """A text stream on descriptor ``fd`` with ``old``'s encoding and error handler
    (the server's, made under the same locale variables: they are part of
    :func:`overlay.server.wire.interpreter_identity`), buffered as Python's own
    start-up would: by line at a terminal's stdout and at stderr, and not at all for
    an output under ``-u`` or ``PYTHONUNBUFFERED`` (also part of that identity:
    :func:`overlay.server.wire.unbuffered_stdio`)."""
    raw = io.FileIO(fd, mode, closefd=False)
    unbuffered = mode == "w" and wire.unbuffered_stdio()
    buffered: io.FileIO | io.BufferedReader | io.BufferedWriter
    if unbuffered:
        buffered = raw
    elif mode == "r":
        buffered = io.BufferedReader(raw)
    else:
        buffered = io.BufferedWriter(raw)
    return io.TextIOWrapper(
        buffered,
        encoding=getattr(old, "encoding", None) or "utf-8",
        errors=getattr(old, "errors", None) or "strict",
        line_buffering=not unbuffered and (line or (mode == "w" and raw.isatty())),
        write_through=line or unbuffered,
    )
