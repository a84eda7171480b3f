"""Where the command server listens, what its messages are, and what must match.

Every caller of ``overlay`` imports this module before it knows whether a server
runs, so it imports nothing but :mod:`os`, :mod:`sys` and :mod:`marshal` (loaded by
the interpreter at start-up) and the C module ``_socket``: ``import socket`` alone
costs 11 ms of CPU here (it loads ``enum`` and ``selectors``), more than half of a
bare interpreter's start.

The socket is a ``SOCK_SEQPACKET`` Unix socket: each message arrives whole, so no
framing is needed. A message is one ``marshal``-ed tuple whose first item names it:

* caller to server: ``("run", request)`` with the caller's descriptors 0, 1 and 2
  (``SCM_RIGHTS``), ``("signal", signum)``, ``("status",)``, ``("stop",)``;
* server to caller: ``("started", pid)``, ``("exit", code)`` (a negative code: the
  worker ended by that signal), ``("declined", reason)``, ``("status", facts)``,
  ``("stopping",)``; a worker may send ``("handback",)`` (the command needs a
  terminal of its own: the caller runs it itself).

Only the user who owns the socket's directory (mode 0700) can connect, and the server
checks the peer's uid as well (``SO_PEERCRED``); ``marshal`` reads nothing but the
plain values a caller of the same interpreter wrote.
"""

import marshal
import os
import sys

#: Set to ``off`` to keep every command in its own process (the server is ignored).
ENV_SWITCH = "OVERLAY_SERVER"
#: The directory of the socket and the log, instead of the default (tests set it).
ENV_DIR = "OVERLAY_SERVER_DIR"
#: The largest message either side reads (a caller's environment is the largest part;
#: Linux refuses a datagram larger than the socket's send buffer, about 208 KiB).
MAX_MESSAGE = 1 << 20


def server_dir() -> str:
    """The directory of this user's overlay servers: ``$OVERLAY_SERVER_DIR``, else
    ``$XDG_RUNTIME_DIR/overlay`` (the per-user runtime directory systemd makes, mode
    0700), else ``/tmp/overlay-UID`` (tmux's ``/tmp/tmux-UID`` shape). It may not
    exist yet."""
    chosen = os.environ.get(ENV_DIR)
    if chosen:
        return chosen
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "overlay")
    return f"/tmp/overlay-{os.getuid()}"


def server_key() -> str:
    """Eight hex digits naming the server of this interpreter and this overlay package
    (a 32-bit FNV-1a hash of their paths; ``zlib`` would be a shared library to load):
    a second checkout or virtual environment has a server of its own, and never talks
    to another's."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = 0x811C9DC5
    for byte in f"{sys.executable}\0{package}".encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"


def socket_path(directory: str | None = None) -> str:
    """The server's socket in ``directory`` (default :func:`server_dir`)."""
    return os.path.join(directory or server_dir(), f"server-{server_key()}.sock")


def log_path(directory: str | None = None) -> str:
    """The server's log (one line per command served; docs/server.md)."""
    return os.path.join(directory or server_dir(), f"server-{server_key()}.log")


def private_dir(directory: str) -> bool:
    """``directory`` exists, is a directory of this user and no one else may enter
    it (mode ``0o077`` bits clear): the only kind a socket is trusted in."""
    try:
        st = os.lstat(directory)
    except OSError:
        return False
    return (
        (st.st_mode & 0o170000) == 0o040000
        and st.st_uid == os.getuid()
        and not st.st_mode & 0o077
    )


def interpreter_identity(environ: dict[str, str] | os._Environ[str]) -> tuple:
    """What the interpreter of a process fixed at its start and a worker cannot change
    afterwards: the executable and its version, ``sys.flags`` (``-O``, ``-X dev``,
    ...), warning options and ``-X`` options, whether its standard output is
    unbuffered (``-u``, which ``sys.flags`` does not show), and the environment variables the
    interpreter reads while it starts (``PYTHON*``: the bytecode cache, hash seed,
    paths...; ``LANG``, ``LC_*``: the encoding of the standard streams). A caller
    whose identity differs from the server's runs its command itself.

    Args:
        environ: the environment the process started with.
    Returns:
        A tuple of plain values (``marshal`` can write it).
    """
    env = tuple(
        sorted(
            (k, v)
            for k, v in environ.items()
            if k.startswith(("PYTHON", "LC_")) or k in ("LANG", "LANGUAGE")
        )
    )
    return (
        sys.executable,
        sys.version,
        tuple(sys.flags),
        tuple(sys.warnoptions),
        tuple(sorted((k, str(v)) for k, v in sys._xoptions.items())),
        unbuffered_stdio(),
        env,
    )


def unbuffered_stdio() -> bool:
    """Whether this interpreter started with unbuffered standard output and error
    (``-u`` or ``PYTHONUNBUFFERED``): its original ``sys.stdout`` then sits on the raw
    :class:`io.FileIO`, not a buffered writer (CPython's ``create_stdio``)."""
    return type(getattr(sys.__stdout__, "buffer", None)).__name__ == "FileIO"


def encode(message: tuple) -> bytes:
    """One message's bytes (``marshal``, version 4)."""
    return marshal.dumps(message, 4)


def decode(data: bytes) -> tuple:
    """A message from its bytes.

    Raises:
        ValueError: the bytes are not a message (not ``marshal``, or not a tuple
            with a name first).
    """
    try:
        message = marshal.loads(data)
    except (EOFError, ValueError, TypeError) as exc:
        raise ValueError(f"not a message: {exc}") from None
    if not isinstance(message, tuple) or not message or not isinstance(message[0], str):
        raise ValueError("not a message: no name")
    return message


def fds_bytes(fds: list[int]) -> bytes:
    """``SCM_RIGHTS`` data for ``fds`` (C ``int``s in the machine's order), without
    the ``array`` module."""
    return b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)


def fds_from(data: bytes) -> list[int]:
    """The descriptors of ``SCM_RIGHTS`` data (:func:`fds_bytes` read back)."""
    whole = len(data) - len(data) % 4
    return [
        int.from_bytes(data[i : i + 4], sys.byteorder, signed=True)
        for i in range(0, whole, 4)
    ]
