"""Jobs on a few threads that a Ctrl-C or a failed job stops (:func:`run_parallel`).

``overlay build`` runs its translation units this way, the race lab its objects and
the mutation check its suite runs: each job mostly waits on a child process, so
threads are enough.

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

import itertools
import signal
import threading
from collections.abc import Callable, Sequence

#: How long the main thread waits on a worker before looking at the flags again, in
#: seconds. Python runs a signal's handler in the main thread between bytecodes; a
#: SIGINT the kernel hands to a worker thread has woken the main thread's wait in every
#: run here (CPython 3.11, Linux), but nothing promises it, and an untimed join would
#: then sleep until the worker ran out of jobs.
_POLL_S = 0.05


class _Stop:
    """Why the run stops, set from the SIGINT handler or a failed worker.

    Plain attribute writes: the handler runs in the main thread between bytecodes
    and must take no lock.
    """

    def __init__(self) -> None:
        self.interrupted = False
        self.cancelled = False
        self.error: BaseException | None = None

    @property
    def stopping(self) -> bool:
        """True once a Ctrl-C came, a job failed or the caller gave up."""
        return self.interrupted or self.cancelled or self.error is not None


def run_parallel(workers: int, jobs: Sequence[Callable[[], None]]) -> None:
    """Run ``jobs`` on ``workers`` threads, in order, until all are done or one fails.

    A Ctrl-C (SIGINT) or a job's exception stops the run: no job starts after it,
    the running ones are waited for, then :class:`KeyboardInterrupt` or the first
    job's exception is raised in the calling thread. The Ctrl-C is taken by a
    handler installed for the run (where the caller is the main thread and SIGINT
    has Python's default handler; the handler before is put back before returning),
    so it never lands inside a lock (the module docstring says why).

    Args:
        workers: thread count (fewer when there are fewer jobs; at least 1).
        jobs: callables taking no argument, started in this order.
    Raises:
        KeyboardInterrupt: a Ctrl-C came while the jobs ran.
        BaseException: the first exception a job raised (a Ctrl-C wins over it).
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

    def on_sigint(_signum: int, _frame: object) -> None:
        stop.interrupted = True

    previous = None
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        previous = signal.signal(signal.SIGINT, on_sigint)
    started: list[threading.Thread] = []
    try:
        try:
            for n in range(max(1, min(workers, len(todo)))):
                thread = threading.Thread(
                    target=worker, name=f"overlay-job-{n}", daemon=True
                )
                thread.start()
                started.append(thread)
            _wait(started)
        except BaseException:
            # Only where the handler above was not installed (another thread, another
            # handler) or a thread could not start: stop the rest, then raise.
            stop.cancelled = True
            _wait(started)
            raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if stop.interrupted:
        raise KeyboardInterrupt
    if stop.error is not None:
        raise stop.error


def _wait(threads: list[threading.Thread]) -> None:
    """Return once every thread of ``threads`` has ended, waking every ``_POLL_S``."""
    for thread in threads:
        while thread.is_alive():
            thread.join(_POLL_S)
