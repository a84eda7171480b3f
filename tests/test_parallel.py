"""``run_parallel`` (overlay/parallel.py): a Ctrl-C cancels the jobs not yet started
instead of starting them one after another, whenever it comes and whichever thread the
kernel hands it to; an error of one job stops the rest and is raised; every job runs
when none fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from procfixtures import gone, python_child

from overlay.parallel import run_parallel


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
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_handed_to_a_worker_thread_stops_the_run_too():
    # The kernel may hand a process's SIGINT to any thread; Python runs the handler in
    # the main thread, which must not sleep until every job is done.
    started: list[int] = []

    def job(i: int) -> None:
        started.append(i)
        if i == 0:
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        time.sleep(0.02)

    with pytest.raises(KeyboardInterrupt):
        run_parallel(1, [lambda i=i: job(i) for i in range(100)])
    assert len(started) < 10, started


# A Ctrl-C at a random moment of a run, 200 times: with ThreadPoolExecutor it hung
# within a few dozen (a lock of the executor's left held by the KeyboardInterrupt raised
# inside submit) or came out as "RuntimeError: release unlocked lock". It runs in a
# child so that a hang is a failed test, not a stuck suite.
_RANDOM_CTRL_C = textwrap.dedent(
    """
    import os, random, signal, threading, time
    from overlay.parallel import run_parallel

    # SIGALRM's handler runs in the main thread at the next bytecode it checks for
    # signals, wherever the timer found it, and sends the SIGINT from there.
    signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    rng = random.Random(1)
    raised = 0
    for n in range(200):
        jobs = [lambda: time.sleep(0.0002) for _ in range(300)]  # at least 30 ms
        try:
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.00001, 0.01))
            run_parallel(2, jobs)
        except KeyboardInterrupt:
            raised += 1
        assert threading.active_count() == 1, (n, threading.enumerate())
    print("interrupted", raised)
    """
)


def test_a_ctrl_c_at_any_moment_raises_keyboardinterrupt_and_leaves_no_thread(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _RANDOM_CTRL_C],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,  # a few seconds here; a hang is what it catches
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["interrupted", "200"]


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
    run_parallel(3, [])  # nothing to run: returns


def test_off_the_main_thread_the_jobs_run_and_no_handler_is_touched():
    done: list[int] = []
    handler = signal.getsignal(signal.SIGINT)
    caller = threading.Thread(
        target=run_parallel, args=(2, [lambda i=i: done.append(i) for i in range(20)])
    )
    caller.start()
    caller.join(10)
    assert sorted(done) == list(range(20))
    assert signal.getsignal(signal.SIGINT) is handler


# A signal sent to overlay's pid alone (`kill PID`, a CI runner's cancel, a
# supervisor's stop) reaches none of its children: the run passes it on. Each job's
# child would sleep a minute; the run must end in seconds with them gone. In a child
# interpreter, so that a signal arriving outside the run cannot end the test session.
_SIGNAL_TO_PID = textwrap.dedent(
    """
    import signal, subprocess, sys
    sys.path.insert(0, sys.argv[2])
    from procfixtures import run_signalled
    from overlay.parallel import run_child

    signum = int(sys.argv[1])
    results = []

    def job(i):
        proc = run_child(["sleep", "60"], stdin=subprocess.DEVNULL)
        results.append(proc.returncode)

    # one second in: both children running
    raised, took = run_signalled(2, [lambda i=i: job(i) for i in range(6)], signum, 1.0)
    default = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and (
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ) and signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
    print(raised, ",".join(map(str, sorted(results))), round(took), default)
    """
)


@pytest.mark.parametrize(
    ("signum", "raised"),
    [
        (signal.SIGTERM, "Terminated"),
        (signal.SIGHUP, "Terminated"),  # a terminal that closes
        (signal.SIGINT, "KeyboardInterrupt"),
    ],
)
def test_a_signal_to_the_pid_alone_stops_the_running_children(tmp_path, signum, raised):
    proc = python_child(
        _SIGNAL_TO_PID, int(signum), os.path.dirname(__file__), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    name, results, took, default = proc.stdout.split()
    # the two running children ended by the signal passed on; none started after it
    assert name == raised
    assert results == f"-{int(signum)},-{int(signum)}"
    assert int(took) < 10, proc.stdout  # not the minute the children would sleep
    assert default == "True"  # Python's handlers are back


def test_a_child_gets_a_group_of_its_own_only_inside_a_run():
    from overlay.parallel import child

    groups: list[bool] = []

    def job() -> None:
        with child(["sleep", "0.2"], stdin=subprocess.DEVNULL) as proc:
            groups.append(os.getpgid(proc.pid) == proc.pid)
            proc.wait()

    run_parallel(1, [job])
    job()  # outside a run: in this process's group, so a terminal's Ctrl-C reaches it
    assert groups == [True, False]


def test_a_child_left_by_an_exception_is_killed():
    from overlay.parallel import child

    with pytest.raises(RuntimeError):
        with child(["sleep", "60"], stdin=subprocess.DEVNULL) as proc:
            raise RuntimeError("the caller's own error")
    assert proc.wait(timeout=10) == -signal.SIGKILL


# A second signal ends the run at once: its children get SIGKILL (one that ignores the
# first, as a wrapper trapping it does, or one stuck in a driver) and the running
# jobs are not waited for, as a Ctrl-C ended overlay before signals were passed on.
_TWICE = textwrap.dedent(
    """
    import os, signal, subprocess, sys, threading, time
    sys.path.insert(0, sys.argv[1])
    from procfixtures import signalled
    from overlay.parallel import run_child, run_parallel

    codes = []

    def job():
        proc = run_child(
            ["sh", "-c", "trap '' INT TERM HUP; echo $$; exec sleep 60"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        codes.append(proc.returncode)

    def second():
        time.sleep(2.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=second, daemon=True).start()
    raised, took = signalled(lambda: run_parallel(1, [job]), signal.SIGTERM, 1.0)
    time.sleep(0.5)  # the worker sees its child killed
    print(raised, round(took), codes)
    """
)


def test_a_second_signal_kills_the_children_and_ends_the_run_at_once(tmp_path):
    proc = python_child(_TWICE, os.path.dirname(__file__), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    raised, took, codes = proc.stdout.split(" ", 2)
    assert raised == "Terminated" and int(took) < 10, proc.stdout  # not the minute
    assert codes.strip() == f"[-{int(signal.SIGKILL)}]"  # the first did not end it


# A child a job starts after the run took its signal gets the signal as it starts.
_LATE_CHILD = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from procfixtures import signalled
    from overlay.parallel import run_child, run_parallel

    codes = []

    def job():
        time.sleep(1.0)  # the signal came meanwhile; the job goes on to start one
        codes.append(run_child(["sleep", "60"], stdin=subprocess.DEVNULL).returncode)

    raised, took = signalled(lambda: run_parallel(1, [job]), signal.SIGTERM, 0.2)
    print(raised, round(took), codes)
    """
)


def test_a_child_started_after_the_signal_gets_it_at_once(tmp_path):
    proc = python_child(_LATE_CHILD, os.path.dirname(__file__), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    raised, took, codes = proc.stdout.split(" ", 2)
    assert raised == "Terminated" and int(took) < 10, proc.stdout
    assert codes.strip() == f"[-{int(signal.SIGTERM)}]"


def test_under_another_sigint_handler_the_children_stay_in_this_group():
    """A debugger's or an embedding application's own SIGINT handler expects the
    terminal's Ctrl-C to reach the children: nothing is taken then."""
    from overlay.parallel import child

    groups: list[bool] = []

    def job() -> None:
        with child(["sleep", "0.1"], stdin=subprocess.DEVNULL) as proc:
            groups.append(os.getpgid(proc.pid) == os.getpgid(0))
            proc.wait()

    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        run_parallel(1, [job])
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, previous)
    assert groups == [True]


# Ctrl-Z stops the children with overlay and `fg` (SIGCONT) resumes them: they are in
# groups of their own, which the terminal's SIGTSTP does not reach.
_STOP_AND_GO = textwrap.dedent(
    """
    import os, signal, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    from procfixtures import default_signals
    from overlay.parallel import run_child, run_parallel

    default_signals()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTSTP, signal.SIG_DFL)
    tick = "while :; do echo x >> ticks; sleep 0.05; done"
    try:
        run_parallel(1, [lambda: run_child(["sh", "-c", tick], stdin=subprocess.DEVNULL)])
    except BaseException as exc:
        print(type(exc).__name__)
    """
)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def test_ctrl_z_stops_the_children_with_the_run_and_fg_resumes_them(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", _STOP_AND_GO, os.path.dirname(__file__)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A group of its own, whose parent (this process) is in another group of the
        # session: never orphaned, so SIGTSTP's default action stops it. In this
        # process's group it would be orphaned wherever the tests run in one (a CI
        # job left running after its shell exited, `setsid`), and the kernel discards
        # a stop signal there: the run would never stop.
        process_group=0,
    )
    ticks = tmp_path / "ticks"

    def count() -> int:
        return len(ticks.read_text().split()) if ticks.exists() else 0

    try:
        deadline = time.monotonic() + 30
        while count() < 5:
            assert time.monotonic() < deadline, proc.stderr
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGTSTP)
        while _state(proc.pid) != "T":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)  # a tick under way lands
        stopped = count()
        time.sleep(0.6)
        assert count() == stopped  # the child stopped with it
        os.kill(proc.pid, signal.SIGCONT)
        while count() == stopped:
            assert time.monotonic() < deadline, "the child did not go on"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert out.split() == ["Terminated"], err


# Ctrl-\ (SIGQUIT) ends overlay by the signal, as Python's default does, and kills the
# children first: they are not in the terminal's group, which the signal reaches.
_QUIT = textwrap.dedent(
    """
    import os, resource, signal, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    from procfixtures import signalled
    from overlay.parallel import run_child, run_parallel

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file of the test
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    tick = "echo $$ > child; exec sleep 60"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    job = lambda: run_child(["sh", "-c", tick], stdin=subprocess.DEVNULL, **quiet)
    signalled(lambda: run_parallel(1, [job]), signal.SIGQUIT, 1.0)
    print("not ended by the signal")
    """
)


def test_ctrl_backslash_kills_the_children_and_ends_by_the_signal(tmp_path):
    proc = python_child(_QUIT, os.path.dirname(__file__), cwd=tmp_path, timeout=120)
    assert proc.returncode == -signal.SIGQUIT, (proc.stdout, proc.stderr[-2000:])
    assert gone(int((tmp_path / "child").read_text()))
