"""Processes in tests: whether one has ended."""

from __future__ import annotations

import os
import time


def gone(pid, wait_s=5.0):
    """True once ``pid`` no longer runs (absent, or a zombie awaiting its new parent)."""
    end = time.monotonic() + wait_s
    while True:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
            if state in ("Z", "X"):
                return True
        except FileNotFoundError:
            return True
        except OSError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
        if time.monotonic() > end:
            return False
        time.sleep(0.02)


def default_signals() -> None:
    """Give SIGINT, SIGTERM and SIGHUP their default action in this process (a
    ``preexec_fn``, or a child script's first step): a test session started in the
    background or under ``nohup`` ignores some, and a child inherits that."""
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def signalled(call, signum, after_s):
    """``call()`` in this thread, with ``signum`` sent to this process (its pid alone,
    as ``kill PID`` sends it) ``after_s`` seconds in, from a thread. The signals start
    from their defaults (:func:`default_signals`; SIGINT as Python's own handler).

    Returns:
        ``(what it raised, seconds it took)``: ``"Terminated"``,
        ``"KeyboardInterrupt"`` or ``"nothing"``.
    """
    import signal
    import threading

    from overlay.errors import Terminated

    def send():
        time.sleep(after_s)
        os.kill(os.getpid(), signum)

    default_signals()
    signal.signal(
        signal.SIGINT, signal.default_int_handler
    )  # Python's own, as at start
    threading.Thread(target=send, daemon=True).start()
    t0 = time.monotonic()
    try:
        call()
        raised = "nothing"
    except Terminated:
        raised = "Terminated"
    except KeyboardInterrupt:
        raised = "KeyboardInterrupt"
    return raised, time.monotonic() - t0


def run_signalled(workers, jobs, signum, after_s):
    """:func:`signalled` of ``run_parallel(workers, jobs)``."""
    from overlay.parallel import run_parallel

    return signalled(lambda: run_parallel(workers, jobs), signum, after_s)


def python_child(script, *args, cwd=None, timeout=200):
    """``python -c SCRIPT ARGS`` in a child interpreter, its output captured as text
    (a test that signals a process runs it there: a signal arriving outside the run
    cannot end the test session).

    Returns:
        The completed process.
    """
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def reader_leaves_mid_write(argv, env):
    """Run ``argv``, let its stdout pipe fill (64 KiB on Linux: the writer is then
    blocked inside one large write), and close the reading end, as ``| head -1``
    does after its line: the blocked write returns the bytes the pipe took, not
    EPIPE. Returns ``(exit status, stderr)``."""
    import fcntl
    import struct
    import subprocess
    import termios

    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    capacity = fcntl.fcntl(proc.stdout.fileno(), fcntl.F_GETPIPE_SZ)
    deadline = time.monotonic() + 60
    while True:
        waiting = fcntl.ioctl(proc.stdout.fileno(), termios.FIONREAD, b"\0" * 4)
        if struct.unpack("i", waiting)[0] >= capacity:
            break
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise AssertionError(f"the pipe never filled: {proc.stderr.read()!r}")
        time.sleep(0.01)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return proc.wait(), err
