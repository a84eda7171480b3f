"""Starting, stopping and asking the command server: ``overlay server start|stop|status``.

:func:`start` runs :func:`overlay.server.daemon.main` in a new session and waits for
it to listen; :func:`stop` and :func:`status` ask the running server over its socket.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time

import overlay
from overlay.errors import OverlayError
from overlay.server import wire

#: Seconds with no command after which a server ends (``overlay server start --idle``).
DEFAULT_IDLE_S = 30 * 60
#: Seconds ``overlay server start`` waits for the new server to listen (it imports
#: every module first: about 0.9 s on an idle machine here, many times that at load 20).
START_TIMEOUT_S = 60.0


def _ask(message: tuple) -> tuple | None:
    """Send ``message`` to this package's server; its reply, or ``None`` when none
    answers.

    Raises:
        OverlayError: the socket's directory holds this package's socket but is no
            longer private to this user (made 0755 after the server started):
            overlay does not connect there, and "no server runs" could be untrue.
    """
    directory = wire.server_dir()
    if not wire.private_dir(directory):
        sock_file = wire.socket_path(directory)
        if os.path.lexists(sock_file):
            raise OverlayError(
                f"{directory} must be private to you (a directory you own, mode "
                "0700), and is not: overlay does not talk to the server whose "
                "socket is there, which may still run",
                hint=f"`chmod 700 {directory}`, then ask again; "
                "an idle server ends by itself",
            )
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.settimeout(10.0)
    try:
        sock.connect(wire.socket_path(directory))
        sock.send(wire.encode(message))
        return wire.decode(sock.recv(wire.MAX_MESSAGE))
    except (OSError, ValueError):
        return None
    finally:
        sock.close()


def status() -> dict | None:
    """The running server's facts (:meth:`overlay.server.daemon.Server.facts`), or
    ``None``.

    Raises:
        OverlayError: its directory is no longer private (:func:`_ask`).
    """
    reply = _ask(("status",))
    return reply[1] if reply and reply[0] == "status" else None


def stop() -> int | None:
    """Ask the running server to stop; the number of commands it still finishes, or
    ``None`` when no server answered.

    Raises:
        OverlayError: its directory is no longer private (:func:`_ask`).
    """
    reply = _ask(("stop",))
    return int(reply[1]) if reply and reply[0] == "stopping" else None


def start(idle_s: float = DEFAULT_IDLE_S) -> dict:
    """Start a server for this interpreter and package, in a session of its own.

    Args:
        idle_s: seconds without a command before it ends.
    Returns:
        Its facts (:meth:`overlay.server.daemon.Server.facts`).
    Raises:
        OverlayError: one runs already (its pid in the message); the directory
            cannot be made or is not private to this user; the server did not come
            up (its error, or the timeout).
    """
    running = status()
    if running is not None:
        raise OverlayError(f"a server runs already (pid {running['pid']})")
    directory = wire.server_dir()
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise OverlayError(f"cannot make {directory}: {exc.strerror}") from None
    if not wire.private_dir(directory):
        raise OverlayError(
            f"{directory} must be private to you (a directory you own, mode 0700), "
            "and is not: no server is started there",
            hint=f"fix its owner and mode, or set {wire.ENV_DIR}",
        )
    ready_r, ready_w = os.pipe()
    # The overlay this process runs, first on the path: `python -m overlay` in a
    # checkout finds the checkout's through the working directory, which the server
    # (in /, so it holds no file system busy) would not.
    here = os.path.dirname(os.path.dirname(os.path.abspath(overlay.__file__)))
    code = (
        f"import sys; sys.path.insert(0, {here!r}); "
        "from overlay.server.daemon import main; main()"
    )
    try:
        subprocess.Popen(
            [sys.executable, "-c", code, directory, str(idle_s), str(ready_w)],
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=[ready_w],
            start_new_session=True,
        )
    finally:
        os.close(ready_w)
    answer = _read_line(ready_r, START_TIMEOUT_S)
    if answer != "ok":
        raise OverlayError(
            f"the server did not start: {answer or 'no answer'}",
            hint=f"its log: {wire.log_path(directory)}",
        )
    facts = status()
    if facts is None:
        raise OverlayError(
            "the server started but does not answer",
            hint=f"its log: {wire.log_path(directory)}",
        )
    return facts


def _read_line(fd: int, timeout: float) -> str:
    """The first line written to pipe ``fd`` within ``timeout`` seconds ('' if none)."""
    deadline = time.monotonic() + timeout
    data = b""
    try:
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 512)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return data.decode(errors="replace").strip()
