"""``run_parallel`` (overlay/build/units.py): a Ctrl-C cancels the queued units instead
of starting them one after another, an error of one job stops the rest and is raised,
and every job runs when none fails."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from overlay.build.units import run_parallel


def test_ctrl_c_cancels_the_units_not_yet_started():
    started: list[int] = []
    lock = threading.Lock()

    def job(i: int) -> None:
        with lock:
            started.append(i)
        if i == 2:
            os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, in the main thread
        time.sleep(0.05)

    with pytest.raises(KeyboardInterrupt):
        run_parallel(2, [lambda i=i: job(i) for i in range(200)])
    time.sleep(0.2)  # nothing queued starts after the interrupt returned
    assert len(started) < 10, started


def test_an_error_of_one_job_stops_the_rest_and_is_raised():
    started: list[int] = []

    def job(i: int) -> None:
        started.append(i)
        if i == 0:
            raise RuntimeError("unit 0 broke")
        time.sleep(0.02)

    with pytest.raises(RuntimeError, match="unit 0 broke"):
        run_parallel(1, [lambda i=i: job(i) for i in range(100)])
    assert len(started) < 5


def test_every_job_runs_when_none_fails():
    done: list[int] = []
    run_parallel(3, [lambda i=i: done.append(i) for i in range(50)])
    assert sorted(done) == list(range(50))
