"""The caller's side of the command server: hand the command to a running server.

:func:`served` is the first thing ``overlay`` does (``overlay/__main__.py``). Where
no server of this interpreter and package listens, it costs one ``lstat`` and the
command runs in the caller's process as it always did. Where one does, the caller
sends its command and its standard streams, passes on every signal it gets (a Ctrl-C
at the terminal reaches the caller alone: the worker is in the server's session), and
ends with the worker's status: its exit code, or, when a signal ended the worker, the
same signal. It imports only C modules (``_socket``, ``_signal``) beyond what
:mod:`overlay.server.wire` takes: ``socket`` and ``signal`` load ``enum``.
"""

import _signal  # type: ignore[import-not-found]  # no stub: signal's C half, built in
import os
import sys

from overlay.server import wire

#: Signals passed on to the worker's process group: the ones a terminal, a shell's
#: job control or a process manager send to a command. ``SIGTSTP`` stops the worker,
#: then the caller (:func:`_forward`).
FORWARDED = (
    _signal.SIGINT,
    _signal.SIGTERM,
    _signal.SIGHUP,
    _signal.SIGQUIT,
    _signal.SIGTSTP,
    _signal.SIGCONT,
    _signal.SIGWINCH,
    _signal.SIGUSR1,
    _signal.SIGUSR2,
)

#: Exit status when the server ended before it reported the worker's (the command's
#: outcome is unknown; docs/exit-codes.md).
EXIT_LOST = 2


def served(argv: list[str]) -> int | None:
    """Run the command ``argv`` (without the program name) in a running server.

    Args:
        argv: the command line's arguments, as ``sys.argv[1:]``.
    Returns:
        The command's exit status (``0``-``255``; a worker ended by a signal ends
        this process by the same signal instead, so the caller's caller sees it),
        or ``None``: run the command in this process. ``None`` whenever
        ``OVERLAY_SERVER=off``, no server listens, the socket's directory is not
        private to this user, the working directory is gone, a standard stream is
        closed, the server declines (another interpreter's settings, its code
        changed since it started: it then ends) or the command hands itself back
        (it needs a terminal of its own).
    """
    if os.environ.get(wire.ENV_SWITCH) == "off":
        return None
    directory = wire.server_dir()
    path = wire.socket_path(directory)
    try:
        os.lstat(path)
        cwd = os.getcwd()
    except OSError:
        return None
    if not wire.private_dir(directory):
        return None
    # a shared library to load: only where a server may answer
    import _socket

    umask = os.umask(0o022)
    os.umask(umask)
    request = {
        "argv": list(argv),
        "cwd": cwd,
        "env": dict(os.environ),
        "umask": umask,
        "identity": wire.interpreter_identity(os.environ),
    }
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    try:
        sock.connect(path)
        sock.sendmsg(
            [wire.encode(("run", request))],
            [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, wire.fds_bytes([0, 1, 2]))],
        )
        reply = wire.decode(sock.recv(wire.MAX_MESSAGE))
    except (OSError, ValueError):
        sock.close()
        return None
    if reply[0] != "started":
        sock.close()
        return None
    return _wait(sock, int(reply[1]))


def _wait(sock, pid: int) -> int | None:  # sock: a _socket.socket (typing not loaded)
    """Pass signals on to worker ``pid`` until the server reports its status."""
    previous = {}
    for signum in FORWARDED:
        previous[signum] = _signal.signal(signum, lambda s, _f: _forward(sock, s))
    handed_back = False
    try:
        while True:
            try:
                data = sock.recv(wire.MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                return None if handed_back else _lost(pid)
            try:
                message = wire.decode(data)
            except ValueError:
                continue
            if message[0] == "handback":
                # the worker ends at once: its status, then the command runs here
                # (leaving now would read as a hang-up to the server)
                handed_back = True
            elif message[0] == "exit" and handed_back:
                return None
            elif message[0] == "exit":
                # the command has ended: a Ctrl-C now ends nothing (as overlay's own
                # process ignores one once its command is done)
                previous[_signal.SIGINT] = _signal.SIG_IGN
                code = int(message[1])
                if code < 0:
                    _die_by(-code, previous)
                    return 128 - code
                return code
    finally:
        for signum, handler in previous.items():
            _signal.signal(signum, handler)
        sock.close()


def _forward(sock, signum: int) -> None:
    """Send ``signum`` to the worker (through the server, which knows its group);
    for ``SIGTSTP`` stop this process too, as the terminal meant it."""
    try:
        sock.send(wire.encode(("signal", signum)))
    except OSError:
        return
    if signum == _signal.SIGTSTP:
        os.kill(os.getpid(), _signal.SIGSTOP)


def _die_by(signum: int, previous: dict) -> None:
    """End this process by ``signum`` with its default action (the worker ended by
    it); returns only where that action does not end a process."""
    for sig, handler in previous.items():
        _signal.signal(sig, handler)
    sys.stdout.flush()
    sys.stderr.flush()
    _signal.signal(signum, _signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _lost(pid: int) -> int:
    """The server went away before the worker's status: wait for the worker to end
    (it writes to this process's streams), then say so. Returns :data:`EXIT_LOST`."""
    import time  # a C module; only this rare path needs it

    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        except PermissionError:
            break
        time.sleep(0.05)
    sys.stderr.write(
        f"overlay: the command server ended before it reported the command's status "
        f"(pid {pid}); its outcome is unknown\n"
    )
    return EXIT_LOST
