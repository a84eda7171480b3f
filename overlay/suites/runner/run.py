"""One run of a child: a fresh process group, a deadline, and the run's kind."""

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from overlay.parallel import child
from overlay.suites.config import Marker
from overlay.suites.runner.common import SuiteRunError
from overlay.suites.runner.reports import marker_failures, scan_reports

#: Seconds to wait for a process group to die after SIGKILL before giving up
#: on it (a process in uninterruptible sleep inside a GPU driver ignores it).
KILL_GRACE_S = 10.0


@dataclass
class RunResult:
    """One run of a child.

    Attributes:
        index: 1-based run number.
        kind: one of :data:`RUN_KINDS`.
        returncode: exit status (>= 0) when the child exited; None for a hang
            or a signal death.
        signal: the signal number that killed the child (``crash``), or
            SIGKILL for a ``hang``; None otherwise.
        duration_s: wall time from start to exit or kill, seconds.
        marker_failures: one line per marker whose count was off (also filled
            when the run failed for another reason).
        strays_killed: True when processes the child left in its group were
            still alive after it ended and were killed.
        stdout: file name of the captured stdout, relative to the run directory.
        stderr: file name of the captured stderr, relative to the run directory.
        note: anything unusual, e.g. a hung child that did not die after SIGKILL.
        reports: ``{kind: occurrences}`` found in the run's stderr
            (:func:`scan_reports`), whatever the run's kind.
    """

    index: int
    kind: str
    returncode: int | None
    signal: int | None
    duration_s: float
    marker_failures: list = field(default_factory=list)
    strays_killed: bool = False
    stdout: str = ""
    stderr: str = ""
    note: str = ""
    reports: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """True for every kind but ``pass``."""
        return self.kind != "pass"

    def detail(self, deadline_s: float | None = None) -> str:
        """One line that says why the run has its kind, e.g. ``killed by SIGSEGV``."""
        if self.kind == "hang":
            text = (
                f"still running at the {deadline_s:g} s deadline; process group killed"
                if deadline_s is not None
                else "still running at its deadline; process group killed"
            )
            return f"{text}; {self.note}" if self.note else text
        if self.kind == "crash":
            return f"killed by {_signal_name(self.signal)}"
        if self.kind == "fail":
            return f"exit status {self.returncode}"
        if self.kind == "marker":
            return "; ".join(self.marker_failures)
        return "passed"

    def to_dict(self) -> dict:
        """JSON shape of the record."""
        return {
            "index": self.index,
            "kind": self.kind,
            "returncode": self.returncode,
            "signal": self.signal,
            "signal_name": _signal_name(self.signal) if self.signal else None,
            "duration_s": round(self.duration_s, 6),
            "marker_failures": list(self.marker_failures),
            "strays_killed": self.strays_killed,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "note": self.note,
            "reports": dict(self.reports),
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> "RunResult":
        """Inverse of :meth:`to_dict`."""
        return cls(
            index=d["index"],
            kind=d["kind"],
            returncode=d.get("returncode"),
            signal=d.get("signal"),
            duration_s=float(d.get("duration_s", 0.0)),
            marker_failures=list(d.get("marker_failures", [])),
            strays_killed=bool(d.get("strays_killed", False)),
            stdout=d.get("stdout", ""),
            stderr=d.get("stderr", ""),
            note=d.get("note", ""),
            reports=dict(d.get("reports", {})),
        )


def _signal_name(signum: int | None) -> str:
    if signum is None:
        return "no signal"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _killpg(pgid: int) -> bool:
    """SIGKILL the process group; True if any process was in it."""
    try:
        os.killpg(pgid, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _wait(proc: subprocess.Popen, timeout: float) -> None:
    """Wait for ``proc`` up to ``timeout`` seconds; raise TimeoutExpired past it.

    Uses a pidfd where the kernel has one (wakes exactly at exit, no polling),
    else :meth:`subprocess.Popen.wait`.
    """
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            fd = pidfd_open(proc.pid)
        except OSError:
            fd = None
        if fd is not None:
            try:
                poller = select.poll()
                poller.register(fd, select.POLLIN)
                if not poller.poll(min(max(0, int(timeout * 1000)), 2**31 - 1)):
                    raise subprocess.TimeoutExpired(proc.args, timeout)
            finally:
                os.close(fd)
            proc.wait()
            return
    proc.wait(timeout=timeout)


def _reap(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for a killed ``proc``; False if it is still there."""
    try:
        _wait(proc, timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def run_once(
    argv: list[str],
    env: Mapping[str, str],
    deadline_s: float,
    run_dir: str,
    index: int,
    markers: Sequence[Marker] = (),
    *,
    stdin_fd: int | None = None,
) -> RunResult:
    """Run ``argv`` once in a fresh process group and classify the run.

    Args:
        argv: resolved argv (see :func:`resolve_child`).
        env: the child's complete environment.
        deadline_s: seconds before the group is killed and the run is a ``hang``.
        run_dir: existing directory for ``run-NNN.out`` / ``run-NNN.err``.
        index: 1-based run number (names the files).
        markers: :class:`~overlay.suites.config.Marker` objects to check.
        stdin_fd: an open ``/dev/null`` descriptor to reuse (opened per call otherwise).

    Returns:
        A :class:`RunResult`.

    Raises:
        SuiteRunError: the program cannot be started (missing, not executable).
    """
    out_name, err_name = f"run-{index:03d}.out", f"run-{index:03d}.err"
    out_path, err_path = (
        os.path.join(run_dir, out_name),
        os.path.join(run_dir, err_name),
    )
    own_stdin = stdin_fd is None
    stdin = os.open(os.devnull, os.O_RDONLY) if stdin_fd is None else stdin_fd
    try:
        with (
            open(out_path, "wb") as out,
            open(err_path, "wb") as err,
            contextlib.ExitStack() as stack,
        ):
            start = time.monotonic()
            # Through overlay.parallel.child: a Ctrl-C, SIGTERM or SIGHUP of overlay
            # kills the run's group (SIGKILL, as at the deadline: a test program may
            # catch or ignore the others), also where suites run in parallel.
            started = child(
                argv,
                stop_signal=signal.SIGKILL,
                stdin=stdin,
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
            try:
                proc = stack.enter_context(started)
            except OSError as exc:
                raise SuiteRunError(
                    f"cannot start {argv[0]}: {exc.strerror or exc}"
                ) from None
            timed_out = False
            note = ""
            try:
                _wait(proc, deadline_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _killpg(proc.pid)
                if not _reap(proc, KILL_GRACE_S):
                    note = (
                        f"did not exit within {KILL_GRACE_S:g} s of SIGKILL "
                        "(uninterruptible sleep, e.g. stuck in a GPU driver); left behind"
                    )
            except BaseException:
                _killpg(proc.pid)
                _reap(proc, KILL_GRACE_S)
                raise
            duration = time.monotonic() - start
            # Anything the child left in its group (it is reaped, so only strays remain).
            strays = _killpg(proc.pid) if not timed_out else False
    finally:
        if own_stdin:
            os.close(stdin)

    failures = marker_failures(markers, out_path, err_path) if markers else []

    rc = proc.returncode
    if timed_out or rc is None:
        kind, returncode, signum = "hang", None, int(signal.SIGKILL)
    elif rc < 0:
        kind, returncode, signum = "crash", None, -rc
    elif rc > 0:
        kind, returncode, signum = "fail", rc, None
    elif failures:
        kind, returncode, signum = "marker", 0, None
    else:
        kind, returncode, signum = "pass", 0, None
    return RunResult(
        index=index,
        kind=kind,
        returncode=returncode,
        signal=signum,
        duration_s=duration,
        marker_failures=failures,
        strays_killed=strays,
        stdout=out_name,
        stderr=err_name,
        note=note,
        reports=scan_reports(err_path),
    )
