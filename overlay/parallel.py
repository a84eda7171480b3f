"""Jobs on a few threads that a Ctrl-C, a SIGTERM (or SIGHUP) or a failed job stops
(:func:`run_parallel`), and the child processes they start (:func:`run_child`).

``overlay build`` runs its translation units this way, the race lab its objects and
the mutation check its suite runs: each job mostly waits on a child process, so
threads are enough.

A child a job starts through :func:`run_child` or :func:`child` is stopped with the
run, as ninja stops its commands: it runs in a process group of its own, and the
SIGINT, SIGTERM or SIGHUP the run takes is sent on to every such group. A Ctrl-C at
the terminal, or the SIGHUP of a terminal that closes, reaches overlay alone then
(its children are not in the terminal's foreground group) and is passed on; a
``kill`` of overlay's pid (a CI runner's SIGTERM on cancel, a supervisor's stop)
stops the compilers too, where before they went on to finish their unit after
overlay had ended. A second signal sends them SIGKILL and ends the run without
waiting; Ctrl-Z stops them with overlay and ``fg`` resumes them; Ctrl-\\ kills them
before overlay ends by it. A single long child
of the main thread (a whole build's ninja, CMake's configure) runs as a run of one
(:func:`foreground`) for the same reason. A child started outside a run stays in
overlay's own group, so the terminal's Ctrl-C reaches it directly.

Why not ``concurrent.futures.ThreadPoolExecutor``: a ``with`` block waits for every
queued job after a Ctrl-C (a check of 138 units went on compiling for minutes), and
the Ctrl-C itself is raised in the main thread at whatever point it is reached. The
executor's ``submit`` and ``Thread.start`` take locks from Python code, and an
exception raised between taking such a lock and entering the ``with`` that releases
it leaves the lock held: a later ``shutdown`` or a worker waits on it forever (the CI
run of 2026-12-03 hung in this function's Ctrl-C test), or the Ctrl-C
comes out as ``RuntimeError: release unlocked lock``. Here, while the jobs run, a
Ctrl-C only raises a flag: the workers take no new job, the main thread waits for the
running ones and raises :class:`KeyboardInterrupt` itself, outside every lock.
"""

import contextlib
import itertools
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from overlay.errors import Terminated

#: How long the main thread waits on a worker before looking at the flags again, in
#: seconds. Python runs a signal's handler in the main thread between bytecodes; a
#: SIGINT the kernel hands to a worker thread has woken the main thread's wait in every
#: run here (CPython 3.11, Linux), but nothing promises it, and an untimed join would
#: then sleep until the worker ran out of jobs.
_POLL_S = 0.05


#: The signals a run takes from Python's defaults and passes on to the children (as
#: ninja does); each but SIGINT ends the run as :class:`~overlay.errors.Terminated`.
_FORWARDED = {
    signal.SIGINT: signal.default_int_handler,
    signal.SIGTERM: signal.SIG_DFL,
    signal.SIGHUP: signal.SIG_DFL,
}


class _Stop:
    """Why the run stops, set from the signal handler or a failed worker.

    Plain attribute writes: the handler runs in the main thread between bytecodes
    and must take no lock.
    """

    def __init__(self) -> None:
        self.interrupted = False
        self.terminated: int | None = None  # the signal, SIGTERM or SIGHUP
        self.cancelled = False
        self.abandoned = False  # a second signal: the running jobs are not waited for
        self.error: BaseException | None = None

    @property
    def stopping(self) -> bool:
        """True once a signal came, a job failed or the caller gave up."""
        return (
            self.interrupted
            or self.terminated is not None
            or self.cancelled
            or self.error is not None
        )

    def raise_why(self) -> None:
        """Raise why the run stopped (a Ctrl-C before a SIGTERM or SIGHUP before a
        job's error); return when it ran to its end."""
        if self.interrupted:
            raise KeyboardInterrupt
        if self.terminated is not None:
            raise Terminated(self.terminated)
        if self.error is not None:
            raise self.error


class _Children:
    """The processes jobs started through :func:`child`, while they run.

    ``forwarding`` is set while a run on the main thread holds the signal handlers
    (only then does a child get a process group of its own); ``signum`` is the signal
    that run took, sent on to every child started after it too. ``running`` maps each
    child to the signal it gets instead (``None``: the run's own). The handler reads
    it with one ``list()`` of its items, a single C call under the GIL, so it takes
    no lock either.
    """

    def __init__(self) -> None:
        self.running: dict[subprocess.Popen, int | None] = {}
        self.forwarding = False
        self.signum: int | None = None

    def send(self, signum: int) -> bool:
        """Send ``signum`` (or a child's own stop signal) to the process group of
        every running child; from the second signal of a run on, SIGKILL (a child
        that catches or ignores the others, one stuck in a driver).

        Returns:
            Whether this was such a second signal.
        """
        again = self.signum is not None
        if not again:
            self.signum = signum
        for proc, instead in list(self.running.items()):
            _signal_group(proc, signal.SIGKILL if again else instead or signum)
        return again

    def each(self, signum: int) -> None:
        """Send ``signum`` to every running child's group, as it is (job control)."""
        for proc in list(self.running):
            _signal_group(proc, signum)


_CHILDREN = _Children()

T = TypeVar("T")


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    """``signum`` to the group ``proc`` leads; nothing when it has ended."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


@contextlib.contextmanager
def child(
    argv: Sequence[str], *, stop_signal: int | None = None, **popen: Any
) -> Iterator[subprocess.Popen]:
    """Start ``argv`` as a child that a run's Ctrl-C, SIGTERM or SIGHUP stops.

    Inside a :func:`run_parallel` of the main thread the child leads a process group
    of its own (everything it starts is in it), and the run's signal is sent to that
    group, also when it came while the child was starting. Elsewhere it is a plain
    :class:`subprocess.Popen` in overlay's group.

    A child started with ``start_new_session=True`` leads a session (and so a group)
    of its own wherever it runs, and gets the run's signal the same way.

    Args:
        argv: the command.
        stop_signal: the signal its group gets instead of the run's (the suite
            runner's SIGKILL: a test program may catch or ignore the others);
            ``None``, the run's own signal, as ninja passes it on.
        popen: keyword arguments of :class:`subprocess.Popen` (not ``process_group``).
    Yields:
        The running process; the caller waits for it inside the ``with``. Leaving
        the ``with`` by an exception sends SIGKILL to it (its group) if it still
        runs; its pipes are closed either way.
    Raises:
        OSError: the command could not be started (as from ``Popen``).
    """
    session = bool(popen.get("start_new_session"))
    # A session of its own is a group of its own already (setpgid after setsid fails).
    own = _CHILDREN.forwarding and not session
    proc = subprocess.Popen(list(argv), process_group=0 if own else None, **popen)
    _CHILDREN.running[proc] = stop_signal
    try:
        if (own or session) and _CHILDREN.signum is not None:
            # the signal came while it started
            _signal_group(proc, stop_signal or _CHILDREN.signum)
        yield proc
    except BaseException:
        # The caller gave up on it (its own error): no child is left running.
        # Not waited for: a process in uninterruptible sleep would hold the caller
        # forever; subprocess reaps it later.
        if proc.poll() is None:
            if own or session:
                _signal_group(proc, signal.SIGKILL)
            else:
                proc.kill()
        raise
    finally:
        _CHILDREN.running.pop(proc, None)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def raise_taken() -> None:
    """Raise what the signal the running :func:`run_parallel` of the main thread took
    means: :class:`KeyboardInterrupt` for a SIGINT, :class:`~overlay.errors.Terminated`
    for a SIGTERM or SIGHUP; return when it took none. A job that runs several
    children in turn calls it before the next one (the run then raises the signal in
    its caller's thread). Read without a lock (one attribute)."""
    signum = _CHILDREN.signum
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    if signum is not None:
        raise Terminated(signum)


def run_child(
    argv: Sequence[str], *, input: bytes | str | None = None, **popen: Any
) -> subprocess.CompletedProcess:
    """:func:`subprocess.run` for a job of :func:`run_parallel`: the child is stopped
    with the run (:func:`child`).

    Args:
        argv: the command.
        input: bytes for its stdin (give ``stdin=subprocess.PIPE`` with it).
        popen: keyword arguments of :class:`subprocess.Popen` (``stdout``, ``stderr``,
            ``stdin``, ``text``, ``errors``, ``cwd``, ``env``).
    Returns:
        The completed process (a child stopped by the run's signal has the negative
        signal number as its ``returncode``).
    Raises:
        OSError: the command could not be started.
    """
    with child(argv, **popen) as proc:
        out, err = proc.communicate(input)
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def run_parallel(workers: int, jobs: Sequence[Callable[[], None]]) -> None:
    """Run ``jobs`` on ``workers`` threads, in order, until all are done or one fails.

    A Ctrl-C (SIGINT), a SIGTERM, a SIGHUP or a job's exception stops the run: no job starts
    after it, the signal is sent on to the children the jobs started through
    :func:`child` (:func:`run_child`), the running jobs are waited for, then
    :class:`KeyboardInterrupt`, :class:`~overlay.errors.Terminated` or the first
    job's exception is raised in the calling thread. The signals are taken by
    handlers installed for the run (where the caller is the main thread and the
    signal has Python's default handler; the handlers before are put back before
    returning), so they never land inside a lock (the module docstring says why).

    Args:
        workers: thread count (fewer when there are fewer jobs; at least 1).
        jobs: callables taking no argument, started in this order.
    Raises:
        KeyboardInterrupt: a Ctrl-C came while the jobs ran.
        Terminated: a SIGTERM or SIGHUP came (and no Ctrl-C) while the jobs ran.
        BaseException: the first exception a job raised (a signal wins over it).
    """
    todo = list(jobs)
    if not todo:
        return
    stop = _Stop()
    # next() of an itertools.count is one C call: atomic under the GIL, no lock.
    next_index = itertools.count().__next__

    def worker() -> None:
        while not stop.stopping:
            i = next_index()
            if i >= len(todo):
                return
            try:
                todo[i]()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                if stop.error is None:
                    stop.error = exc
                return

    def on_signal(signum: int, _frame: object) -> None:
        if signum == signal.SIGINT:
            stop.interrupted = True
        elif stop.terminated is None:
            stop.terminated = signum
        if _CHILDREN.send(signum):
            stop.abandoned = True  # a second signal: end now, as a Ctrl-C did before

    previous = _take_signals(on_signal)
    started: list[threading.Thread] = []
    try:
        try:
            for n in range(max(1, min(workers, len(todo)))):
                thread = threading.Thread(
                    target=worker, name=f"overlay-job-{n}", daemon=True
                )
                thread.start()
                started.append(thread)
            _wait(started, stop)
        except BaseException:
            # Only where the handler above was not installed (another thread, another
            # handler) or a thread could not start: stop the rest, then raise.
            stop.cancelled = True
            _wait(started, stop)
            raise
    finally:
        _give_back(previous)
    stop.raise_why()


def foreground(job: Callable[[], T]) -> T:
    """Run ``job`` as a run of one on the main thread (:func:`run_parallel`), so that a
    Ctrl-C, SIGTERM or SIGHUP is sent on to the children it starts through :func:`child` (a
    whole build's ninja, CMake's configure), which stop their own children in turn;
    elsewhere (a job of a run already) call it directly.

    Returns:
        What ``job`` returned.
    Raises:
        KeyboardInterrupt, Terminated: the signal, once ``job`` has returned.
        BaseException: what ``job`` raised.
    """
    if threading.current_thread() is not threading.main_thread():
        return job()
    out: list[T] = []
    run_parallel(1, [lambda: out.append(job())])
    return out[0]


def _take_signals(handler: Callable[[int, Any], None]) -> dict[int, Any]:
    """Install ``handler`` for each of :data:`_FORWARDED` that has Python's default,
    and those of SIGTSTP (job control) and SIGQUIT (Ctrl-\\) where they have their
    default, on the main thread only, and turn on forwarding to :func:`child`
    processes.

    Only where the terminal's Ctrl-C is this run's or ignored (a background job of
    a shell): a SIGINT handler of someone else's (a debugger, an application that
    embeds overlay) expects the children in its group, where the terminal's Ctrl-C
    reaches them; then nothing is taken, as before forwarding existed.

    Returns:
        ``{signal: the handler it had}`` for those taken (empty off the main thread,
        under another SIGINT handler, or when none of them has its default).
    """
    if threading.current_thread() is not threading.main_thread():
        return {}
    if signal.getsignal(signal.SIGINT) not in (
        signal.default_int_handler,
        signal.SIG_IGN,
    ):
        return {}
    previous: dict[int, Any] = {}
    for signum, default in _FORWARDED.items():
        if signal.getsignal(signum) is default:
            previous[signum] = signal.signal(signum, handler)
    if not previous:
        return {}  # every one ignored or handled elsewhere: nothing to pass on
    if signal.getsignal(signal.SIGTSTP) is signal.SIG_DFL:
        previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, _on_stop)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_DFL:
        previous[signal.SIGQUIT] = signal.signal(signal.SIGQUIT, _on_quit)
    _CHILDREN.signum = None
    _CHILDREN.forwarding = True
    return previous


def _give_back(previous: dict[int, Any]) -> None:
    """Put back the handlers :func:`_take_signals` replaced and end forwarding, with
    those signals blocked meanwhile: one that comes then is handled after, by the
    handler put back (a Ctrl-C raising between two restores would leave the others
    this run's)."""
    if not previous:
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, set(previous))
    try:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _CHILDREN.forwarding = False
        _CHILDREN.signum = None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _on_quit(_signum: int, _frame: object) -> None:
    """Ctrl-\\ during a run: the children get SIGKILL (they are not in the terminal's
    group), then overlay ends by the signal as its default action would."""
    _CHILDREN.each(signal.SIGKILL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGQUIT)


def _on_stop(_signum: int, _frame: object) -> None:
    """Ctrl-Z during a run: the children, in groups of their own, are stopped with
    overlay (SIGTSTP to their groups), overlay stops itself as the default action
    would, and on ``fg`` (SIGCONT) they go on with it."""
    _CHILDREN.each(signal.SIGTSTP)
    signal.signal(signal.SIGTSTP, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until SIGCONT
    signal.signal(signal.SIGTSTP, _on_stop)
    _CHILDREN.each(signal.SIGCONT)


def _wait(threads: list[threading.Thread], stop: _Stop) -> None:
    """Return once every thread of ``threads`` has ended, or the run is abandoned (a
    second signal), waking every ``_POLL_S``."""
    for thread in threads:
        while thread.is_alive() and not stop.abandoned:
            thread.join(_POLL_S)
