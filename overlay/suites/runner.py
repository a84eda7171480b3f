"""Run a suite's child in fresh processes and classify every run.

Each run is a new process in its own process group and session
(``start_new_session=True``), with the suite's environment, stdin from
``/dev/null`` and stdout/stderr written straight to files under the results
directory::

    <results>/<suite>/<run-id>/run-001.out
    <results>/<suite>/<run-id>/run-001.err
    ...
    <results>/<suite>/<run-id>/result.json

A run's *kind* is decided in this order:

* ``hang``   -- still running at its deadline: SIGKILL goes to the whole
  process group (grandchildren included);
* ``crash``  -- the child died by a signal;
* ``fail``   -- the child exited nonzero;
* ``marker`` -- the child exited 0 but a stdout/stderr marker count is off;
* ``pass``   -- none of the above.

After every run, whatever the child left behind in its process group is
killed too (``strays_killed`` in the record), so no run leaks into the next.

Every child also gets ``OVERLAY_SUITE=<name>`` and ``OVERLAY_RUN_INDEX=<i>``
(1-based) in its environment, so a child may seed itself per run.

Whatever the kind, each run's stderr is scanned for *reports*: sanitizer
headers (``WARNING: ThreadSanitizer: data race``, ``ERROR: AddressSanitizer:
heap-use-after-free on address ...``) and the children's own
``overlay-suite: report <kind>: ...`` lines, counted per kind
(:func:`scan_reports`), so a report can say which fault a failed run showed.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import select
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from overlay.errors import OverlayError
from overlay.suites.config import Suite
from overlay.suites.stats import clopper_pearson, fisher_exact, runs_to_acquit

__all__ = [
    "RUN_KINDS",
    "FAILURE_KINDS",
    "HARDWARE_ENV",
    "SuiteRunError",
    "Platform",
    "RunResult",
    "SuiteResult",
    "detect_platform",
    "skip_reason",
    "resolve_child",
    "make_run_dir",
    "run_once",
    "run_suite",
    "load_result",
    "ABResult",
    "AB_ALPHA",
    "run_ab",
    "load_ab",
    "write_json",
    "scan_reports",
]

#: Every run kind, in the order reports list them.
RUN_KINDS = ("pass", "fail", "crash", "hang", "marker")
#: The kinds that count as a failed run.
FAILURE_KINDS = ("fail", "crash", "hang", "marker")
#: Environment override for hardware detection: a comma list of present
#: hardware (``amd-gpu``, ``nvidia-gpu``), or ``none``/empty for none.
HARDWARE_ENV = "OVERLAY_SUITE_HARDWARE"
#: Version of the ``result.json`` shape.
RESULT_FORMAT = 1
#: Seconds to wait for a process group to die after SIGKILL before giving up
#: on it (a process in uninterruptible sleep inside a GPU driver ignores it).
KILL_GRACE_S = 10.0
#: Seconds allowed for an external probe (``rocminfo``, ``nvidia-smi``).
_PROBE_TIMEOUT_S = 15.0

#: Bytes of a run's stderr scanned for reports (a runaway child's log is cut there).
REPORT_SCAN_BYTES = 64 << 20

ProgressFn = Callable[[int, int, int], None]

_SANITIZER_RE = re.compile(
    rb"^(?:==\d+==)?(?:WARNING|ERROR): ((?:Thread|Address|Leak|Memory|UndefinedBehavior)Sanitizer): (.*)$",
    re.M,
)
_CHILD_REPORT_RE = re.compile(
    rb"^overlay-suite: report ([A-Za-z0-9][A-Za-z0-9_.-]*):", re.M
)


def scan_reports(path: str, limit: int = REPORT_SCAN_BYTES) -> dict[str, int]:
    """Count the reports in a run's stderr, per kind.

    Kinds: ``<Sanitizer>: <what>`` for a sanitizer's header line (``what`` cut
    before `` (pid=``, `` on address`` and the like: ``ThreadSanitizer: data race``,
    ``AddressSanitizer: heap-use-after-free``), and ``<kind>`` for a child's
    ``overlay-suite: report <kind>: ...`` line.

    Args:
        path: the stderr file.
        limit: bytes read from its start.
    Returns:
        ``{kind: occurrences}``, kinds in order of first appearance; empty
        when the file is missing.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit)
    except OSError:
        return {}
    found: list[tuple[int, str]] = []
    for m in _SANITIZER_RE.finditer(data):
        what = m.group(2).decode("utf-8", "replace")
        what = re.split(
            r" \(| on (?:address|unknown address)\b| at pc ", what, maxsplit=1
        )[0].strip()
        found.append((m.start(), f"{m.group(1).decode()}: {what}"))
    for m in _CHILD_REPORT_RE.finditer(data):
        found.append((m.start(), m.group(1).decode()))
    counts: dict[str, int] = {}
    for _pos, kind in sorted(found):
        counts[kind] = counts.get(kind, 0) + 1
    return counts


class SuiteRunError(OverlayError):
    """A suite cannot be run: child not found or not startable, results dir unusable (exit 2)."""


# --------------------------------------------------------------------------- platform


@dataclass(frozen=True)
class Platform:
    """What this machine offers the suites.

    Attributes:
        hardware: present hardware, a subset of ``{"amd-gpu", "nvidia-gpu"}``
            (``none`` is always satisfied).
        backends: backends the children were built for; ``any`` suites ignore it.
        reasons: for each absent hardware, why it counts as absent (one line).
        backend_source: how ``backends`` was decided (for skip messages).
        models: host models whose children can be built and run here
            (``race-lab``: the ROCm toolchain is there).
        model_reasons: for each absent model, why (one line).
    """

    hardware: frozenset
    backends: frozenset
    reasons: Mapping[str, str] = field(default_factory=dict)
    backend_source: str = ""
    models: frozenset = frozenset()
    model_reasons: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON shape: ``{"hardware": [...], "backends": [...], "reasons": {...}, "models": [...]}``."""
        return {
            "hardware": sorted(self.hardware),
            "backends": sorted(self.backends),
            "reasons": dict(self.reasons),
            "backend_source": self.backend_source,
            "models": sorted(self.models),
            "model_reasons": dict(self.model_reasons),
        }


def _run_probe(argv: list[str]) -> str | None:
    """stdout of a short external probe, or None if it is missing or fails."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", "replace")


def _kfd_sysfs_has_gpu(root: str = "/sys/class/kfd/kfd/topology/nodes") -> bool:
    """True when a KFD topology node reports SIMDs (CPU agents report 0)."""
    try:
        nodes = os.listdir(root)
    except OSError:
        return False
    for node in nodes:
        try:
            with open(
                os.path.join(root, node, "properties"),
                encoding="ascii",
                errors="replace",
            ) as fh:
                for line in fh:
                    parts = line.split()
                    if (
                        len(parts) == 2
                        and parts[0] == "simd_count"
                        and parts[1].isdigit()
                        and int(parts[1]) > 0
                    ):
                        return True
        except OSError:
            continue
    return False


def _detect_amd() -> tuple[bool, str]:
    if not os.path.exists("/dev/kfd"):
        return False, "no /dev/kfd (no ROCm kernel driver)"
    if _kfd_sysfs_has_gpu():
        return True, "GPU agent in /sys/class/kfd"
    out = _run_probe(["rocminfo"])
    if out is not None:
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Device Type" and value.strip() == "GPU":
                return True, "rocminfo lists a GPU agent"
    out = _run_probe(["rocm-smi", "--showid"])
    if out is not None and "GPU[" in out:
        return True, "rocm-smi lists a GPU"
    return (
        False,
        "/dev/kfd exists but neither /sys/class/kfd, rocminfo nor rocm-smi shows a GPU agent",
    )


def _detect_nvidia() -> tuple[bool, str]:
    if shutil.which("nvidia-smi") is None:
        return False, "nvidia-smi not found"
    out = _run_probe(["nvidia-smi", "-L"])
    if out is not None and any(line.startswith("GPU ") for line in out.splitlines()):
        return True, "nvidia-smi -L lists a GPU"
    return False, "nvidia-smi -L lists no GPU"


_PLATFORM_CACHE: dict = {}


def detect_platform(
    backend: str | None = None, *, environ: Mapping[str, str] | None = None
) -> Platform:
    """Detect GPUs and decide which backends count as built.

    Hardware: ``amd-gpu`` is present iff ``/dev/kfd`` exists and a GPU agent
    shows in ``/sys/class/kfd`` (``simd_count > 0``), ``rocminfo`` or
    ``rocm-smi``; ``nvidia-gpu`` iff ``nvidia-smi -L`` lists a GPU. The
    variable ``OVERLAY_SUITE_HARDWARE`` (comma list, or ``none``) replaces
    detection. Probes run once per process (cached).

    Backends: ``backend`` when given (the build the children come from);
    otherwise ``cpu`` plus ``rocm`` with an AMD GPU and ``cuda`` with an
    NVIDIA GPU.

    Models: ``race-lab`` when the ROCm toolchain the race lab compiles with is
    there (:func:`overlay.suites.racelab.unavailable_reason`;
    ``OVERLAY_SUITE_MODELS`` replaces the probe).

    Args:
        backend: ``rocm`` | ``cuda`` | ``cpu`` or None.
        environ: environment to read the override from (default ``os.environ``).

    Returns:
        A :class:`Platform`.

    Raises:
        SuiteRunError: the override names unknown hardware, or ``backend`` is unknown.
    """
    environ = os.environ if environ is None else environ
    override = environ.get(HARDWARE_ENV)
    if override is not None:
        items = {x.strip() for x in override.split(",") if x.strip()} - {"none"}
        bad = items - {"amd-gpu", "nvidia-gpu"}
        if bad:
            raise SuiteRunError(
                f"{HARDWARE_ENV}: unknown hardware {sorted(bad)[0]!r} "
                "(use amd-gpu, nvidia-gpu or none)"
            )
        hardware = frozenset(items)
        reasons = {
            h: f"{HARDWARE_ENV}={override!r}"
            for h in ("amd-gpu", "nvidia-gpu")
            if h not in hardware
        }
    else:
        if "hw" not in _PLATFORM_CACHE:
            amd, amd_why = _detect_amd()
            nv, nv_why = _detect_nvidia()
            _PLATFORM_CACHE["hw"] = (amd, amd_why, nv, nv_why)
        amd, amd_why, nv, nv_why = _PLATFORM_CACHE["hw"]
        hardware = frozenset(
            h for h, ok in (("amd-gpu", amd), ("nvidia-gpu", nv)) if ok
        )
        reasons = {}
        if not amd:
            reasons["amd-gpu"] = amd_why
        if not nv:
            reasons["nvidia-gpu"] = nv_why
    if backend is not None:
        if backend not in ("rocm", "cuda", "cpu"):
            raise SuiteRunError(f"unknown backend {backend!r} (use rocm, cuda or cpu)")
        backends = frozenset({backend})
        source = f"children built for {backend}"
    else:
        backends = {"cpu"}
        if "amd-gpu" in hardware:
            backends.add("rocm")
        if "nvidia-gpu" in hardware:
            backends.add("cuda")
        backends = frozenset(backends)
        source = "no --backend given; inferred from the GPUs present"
    from overlay.suites import racelab

    lab_reason = racelab.unavailable_reason(environ=environ)
    models = frozenset() if lab_reason else frozenset({racelab.MODEL})
    model_reasons = {racelab.MODEL: lab_reason} if lab_reason else {}
    return Platform(
        hardware=hardware,
        backends=backends,
        reasons=reasons,
        backend_source=source,
        models=models,
        model_reasons=model_reasons,
    )


def skip_reason(suite: Suite, platform: Platform) -> str | None:
    """Why ``suite`` cannot run on ``platform``, or None when it can.

    Returns:
        One line such as ``"needs amd-gpu: no /dev/kfd (no ROCm kernel driver)"``.
    """
    if suite.hardware != "none" and suite.hardware not in platform.hardware:
        why = platform.reasons.get(suite.hardware, "not detected")
        return f"needs {suite.hardware}: {why}"
    if suite.backend != "any" and suite.backend not in platform.backends:
        have = ", ".join(sorted(platform.backends)) or "none"
        return f"needs the {suite.backend} backend; available: {have} ({platform.backend_source})"
    if suite.model is not None and suite.model not in platform.models:
        why = platform.model_reasons.get(suite.model, "not detected")
        return f"needs the {suite.model} host model's toolchain: {why}"
    return None


# --------------------------------------------------------------------------- children


def resolve_child(
    argv: Iterable[str], child_dir: str | None = None, base_dir: str | None = None
) -> list[str]:
    """Turn a suite's ``child`` into an argv whose first word is an executable path.

    Rules for ``argv[0]``: an absolute path is kept; a relative path with a
    ``/`` resolves against ``child_dir`` (or ``base_dir``, or the current
    directory); a bare name is looked up in ``child_dir`` first, then on
    ``PATH``. The remaining words are passed unchanged.

    Args:
        argv: the suite's child (program plus arguments).
        child_dir: where the build step put the suite children, or None.
        base_dir: fallback for relative paths (the ``suites.toml`` directory).

    Returns:
        A new argv list.

    Raises:
        SuiteRunError: the program is missing or not executable.
    """
    argv = list(argv)
    prog = argv[0]
    looked = []
    path = None
    if os.path.isabs(prog):
        path = prog
        looked.append(prog)
    elif "/" in prog or (os.sep != "/" and os.sep in prog):
        path = os.path.abspath(os.path.join(child_dir or base_dir or os.getcwd(), prog))
        looked.append(path)
    else:
        if child_dir:
            cand = os.path.abspath(os.path.join(child_dir, prog))
            looked.append(cand)
            if os.path.isfile(cand):
                path = cand
        if path is None:
            looked.append("PATH")
            path = shutil.which(prog)
    if path is None or not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise SuiteRunError(
            f"suite child {prog!r} not found or not executable (looked in {', '.join(looked)})",
            hint="build the suite children first (overlay build), or pass --child-dir DIR",
        )
    argv[0] = path
    return argv


def make_run_dir(
    results_dir: str, suite_name: str, run_id: str | None = None, *, suffix: str = ""
) -> str:
    """Create and return ``<results_dir>/<suite_name>/<run_id>``.

    Args:
        results_dir: the results root (created if missing).
        suite_name: a validated suite name.
        run_id: directory name; default a UTC timestamp ``YYYYmmddTHHMMSSZ``
            plus ``suffix``, with ``-2``, ``-3``, ... appended when that name is taken.
        suffix: appended to the timestamp (``"-ab"`` for A/B runs).

    Returns:
        The new directory's path (it did not exist before).

    Raises:
        SuiteRunError: the directory cannot be created, or ``run_id`` is taken
            or is not a plain name.
    """
    parent = os.path.join(results_dir, suite_name)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise SuiteRunError(
            f"cannot create results directory {parent}: {exc.strerror}"
        ) from None
    if run_id is not None:
        if run_id in ("", ".", "..") or "/" in run_id or os.sep in run_id:
            raise SuiteRunError(f"run id {run_id!r} must be a plain directory name")
        path = os.path.join(parent, run_id)
        try:
            os.mkdir(path)
        except FileExistsError:
            raise SuiteRunError(f"results directory {path} already exists") from None
        except OSError as exc:
            raise SuiteRunError(f"cannot create {path}: {exc.strerror}") from None
        return path
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ") + suffix
    for i in range(1, 10000):
        path = os.path.join(parent, stamp if i == 1 else f"{stamp}-{i}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise SuiteRunError(f"cannot create {path}: {exc.strerror}") from None
    raise SuiteRunError(f"too many runs named {stamp} under {parent}")


def write_json(path: str, data) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically (temp file + rename)."""
    from overlay.fsutil import atomic_write

    atomic_write(
        path,
        (json.dumps(data, indent=2, sort_keys=False) + "\n").encode(),
        durable=False,
    )


# --------------------------------------------------------------------------- one run


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
    def from_dict(cls, d: Mapping) -> RunResult:
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


def _count_in_file(path: str, needles: list[bytes]) -> list[int]:
    with open(path, "rb") as fh:
        data = fh.read()
    return [data.count(n) for n in needles]


def run_once(
    argv: list[str],
    env: Mapping[str, str],
    deadline_s: float,
    run_dir: str,
    index: int,
    markers=(),
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
    if own_stdin:
        stdin_fd = os.open(os.devnull, os.O_RDONLY)
    try:
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            start = time.monotonic()
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=stdin_fd,
                    stdout=out,
                    stderr=err,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                )
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
            os.close(stdin_fd)

    failures: list[str] = []
    if markers:
        for stream, path in (("stdout", out_path), ("stderr", err_path)):
            ms = [m for m in markers if m.stream == stream]
            if ms:
                counts = _count_in_file(path, [m.text.encode("utf-8") for m in ms])
                failures.extend(
                    m.describe(c) for m, c in zip(ms, counts) if not m.holds(c)
                )

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


# --------------------------------------------------------------------------- a suite


@dataclass
class SuiteResult:
    """The outcome of one suite: its runs, or why it was skipped.

    Attributes:
        suite: suite name.
        status: ``"ran"``, ``"skipped"`` or ``"interrupted"``.
        skip_reason: one line when skipped, else ``""``.
        runs: the run records, in order.
        planned_runs: runs asked for.
        deadline_s: per-run deadline used, seconds.
        argv: the resolved child argv (empty when skipped).
        settings: the suite's settings (``Suite.to_dict()``).
        label: a column name for A/B reports (``"with fix"``, ``"fix removed"``) or ``""``.
        directory: the run directory holding the outputs and ``result.json``, or None.
        started: UTC ISO-8601 start time.
        duration_s: total wall time, seconds.
        platform: :meth:`Platform.to_dict` of the machine.
    """

    suite: str
    status: str
    skip_reason: str = ""
    runs: list = field(default_factory=list)
    planned_runs: int = 0
    deadline_s: float = 0.0
    argv: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    label: str = ""
    directory: str | None = None
    started: str = ""
    duration_s: float = 0.0
    platform: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Runs completed."""
        return len(self.runs)

    @property
    def failed(self) -> int:
        """Runs of a failure kind."""
        return sum(1 for r in self.runs if r.failed)

    @property
    def skipped(self) -> bool:
        """True when the suite did not run on this machine."""
        return self.status == "skipped"

    def kinds(self) -> dict:
        """Counts of failure kinds, in :data:`FAILURE_KINDS` order, zeros left out."""
        c = Counter(r.kind for r in self.runs)
        return {k: c[k] for k in FAILURE_KINDS if c[k]}

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """Clopper–Pearson interval of the failure rate (see :mod:`overlay.suites.stats`)."""
        return clopper_pearson(self.failed, self.n, confidence)

    def report_kinds(self) -> dict:
        """``{kind: [runs with it, occurrences]}`` over the runs, kinds in order of first appearance."""
        out: dict[str, list[int]] = {}
        for r in self.runs:
            for kind, count in r.reports.items():
                row = out.setdefault(kind, [0, 0])
                row[0] += 1
                row[1] += count
        return out

    def to_dict(self) -> dict:
        """JSON shape written to ``result.json`` (``format`` 1)."""
        lo, hi = self.interval()
        return {
            "format": RESULT_FORMAT,
            "suite": self.suite,
            "label": self.label,
            "status": self.status,
            "skip_reason": self.skip_reason,
            "planned_runs": self.planned_runs,
            "deadline_s": self.deadline_s,
            "argv": list(self.argv),
            "settings": self.settings,
            "started": self.started,
            "duration_s": round(self.duration_s, 6),
            "platform": self.platform,
            "summary": {
                "runs": self.n,
                "failed": self.failed,
                "kinds": self.kinds(),
                "interval95": [lo, hi],
                "reports": self.report_kinds(),
            },
            "runs": [r.to_dict() for r in self.runs],
        }

    @classmethod
    def from_dict(cls, d: Mapping, directory: str | None = None) -> SuiteResult:
        """Inverse of :meth:`to_dict` (``summary`` is recomputed, not read)."""
        return cls(
            suite=d["suite"],
            status=d["status"],
            skip_reason=d.get("skip_reason", ""),
            runs=[RunResult.from_dict(r) for r in d.get("runs", [])],
            planned_runs=d.get("planned_runs", 0),
            deadline_s=d.get("deadline_s", 0.0),
            argv=list(d.get("argv", [])),
            settings=dict(d.get("settings", {})),
            label=d.get("label", ""),
            directory=directory,
            started=d.get("started", ""),
            duration_s=float(d.get("duration_s", 0.0)),
            platform=dict(d.get("platform", {})),
        )


def load_result(path: str) -> SuiteResult:
    """Read a stored ``result.json`` (or the run directory holding one).

    Raises:
        SuiteRunError: missing, unreadable, or not a result file.
    """
    if os.path.isdir(path):
        path = os.path.join(path, "result.json")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return SuiteResult.from_dict(
            data, directory=os.path.dirname(os.path.abspath(path))
        )
    except FileNotFoundError:
        raise SuiteRunError(f"{path}: no such result file") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SuiteRunError(f"{path}: not a suite result: {exc}") from None


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def run_suite(
    suite: Suite,
    results_dir: str,
    *,
    child_dir: str | None = None,
    base_dir: str | None = None,
    runs: int | None = None,
    deadline_s: float | None = None,
    platform: Platform | None = None,
    argv: list[str] | None = None,
    directory: str | None = None,
    label: str = "",
    environ: Mapping[str, str] | None = None,
    progress: ProgressFn | None = None,
) -> SuiteResult:
    """Run ``suite`` ``runs`` times in fresh processes, or skip it with its reason.

    Args:
        suite: the validated suite.
        results_dir: results root; outputs go to a new ``<results_dir>/<suite>/<timestamp>``.
        child_dir: where the suite children were built (see :func:`resolve_child`).
        base_dir: fallback directory for relative child paths.
        runs: override of ``suite.runs`` (int >= 1).
        deadline_s: override of ``suite.deadline``, seconds > 0.
        platform: the machine (default :func:`detect_platform`).
        argv: use this argv instead of the suite's child (A/B's fix-removed
            column); it is resolved the same way.
        directory: write into this (new or empty) directory instead of a timestamped one.
        label: column label stored with the result.
        environ: the inherited environment (default ``os.environ``).
        progress: called as ``progress(done, total, failures)`` after each run.

    Returns:
        A :class:`SuiteResult`; ``result.json`` is written in its directory,
        also for a skipped suite. On Ctrl-C the running group is killed, a
        result with status ``interrupted`` is written, and KeyboardInterrupt
        propagates.

    Raises:
        SuiteRunError: bad overrides, the child cannot be found or started, or
            the results directory cannot be written.
    """
    n = suite.runs if runs is None else runs
    deadline = suite.deadline if deadline_s is None else deadline_s
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SuiteRunError(f"--runs must be an integer >= 1, got {n!r}")
    if not deadline > 0:
        raise SuiteRunError(f"--deadline must be > 0 seconds, got {deadline!r}")
    platform = platform or detect_platform()
    result = SuiteResult(
        suite=suite.name,
        status="ran",
        planned_runs=n,
        deadline_s=float(deadline),
        settings=suite.to_dict(),
        label=label,
        started=_now(),
        platform=platform.to_dict(),
    )
    reason = skip_reason(suite, platform)
    if reason is None:
        # Resolve before creating anything, so a missing child leaves no empty directory.
        try:
            result.argv = resolve_child(
                argv if argv is not None else suite.child, child_dir, base_dir
            )
        except SuiteRunError as exc:
            if suite.model:
                # A host-model child comes from the race lab, not from overlay build.
                raise SuiteRunError(
                    exc.message,
                    hint="build the race lab: overlay suite build (docs/race-lab.md), "
                    "or run the suite without --child-dir",
                ) from None
            raise
    if directory is None:
        directory = make_run_dir(results_dir, suite.name)
    else:
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise SuiteRunError(f"cannot create {directory}: {exc.strerror}") from None
    result.directory = directory
    result_path = os.path.join(directory, "result.json")
    if reason is not None:
        result.status, result.skip_reason = "skipped", reason
        write_json(result_path, result.to_dict())
        return result

    base_env = suite.build_env(os.environ if environ is None else environ)
    base_env["OVERLAY_SUITE"] = suite.name
    markers = suite.markers
    failures = 0
    t0 = time.monotonic()
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        for i in range(1, n + 1):
            env = dict(base_env)
            env["OVERLAY_RUN_INDEX"] = str(i)
            rec = run_once(
                result.argv, env, deadline, directory, i, markers, stdin_fd=devnull
            )
            result.runs.append(rec)
            failures += rec.failed
            if progress is not None:
                progress(i, n, failures)
    except KeyboardInterrupt:
        result.status = "interrupted"
        result.duration_s = time.monotonic() - t0
        write_json(result_path, result.to_dict())
        raise
    finally:
        os.close(devnull)
    result.duration_s = time.monotonic() - t0
    write_json(result_path, result.to_dict())
    return result


# --------------------------------------------------------------------------- A/B

#: Significance level under which an A/B difference counts as a reproduction.
AB_ALPHA = 0.05


@dataclass
class ABResult:
    """Both columns of an A/B comparison and what they show.

    Attributes:
        suite: suite name.
        with_fix: the suite's child as configured (label ``"with fix"``).
        without_fix: the fix-removed child (label ``"fix removed"``).
        directory: the A/B directory holding ``with/``, ``without/`` and ``ab.json``.
    """

    suite: str
    with_fix: SuiteResult
    without_fix: SuiteResult
    directory: str | None = None

    @property
    def table(self) -> list[list[int]]:
        """``[[failed, passed] with fix, [failed, passed] fix removed]``."""
        a, b = self.with_fix, self.without_fix
        return [[a.failed, a.n - a.failed], [b.failed, b.n - b.failed]]

    @property
    def fisher_p(self) -> float | None:
        """Two-sided Fisher p for :attr:`table`, None when a column did not run."""
        if self.with_fix.skipped or self.without_fix.skipped:
            return None
        return fisher_exact(self.table)

    @property
    def guard_only(self) -> bool:
        """True when the fix-removed column ran and never failed (seed 000)."""
        return (
            not self.without_fix.skipped
            and self.without_fix.n > 0
            and self.without_fix.failed == 0
        )

    @property
    def model(self) -> str | None:
        """The host model the suite runs on (``race-lab``), or None for a real runtime."""
        return self.with_fix.settings.get("model")

    def acquit_plan(self, confidence: float = 0.99) -> dict | None:
        """Clean runs that acquit the fix against the fix-removed failure rate (seed 003's method).

        Returns:
            None when the fix-removed column did not run or never failed; else
            ``{"confidence", "baseline", "runs", "baseline_lower95", "runs_at_lower95",
            "clean_runs_with_fix"}``: ``runs`` is :func:`~overlay.suites.stats.runs_to_acquit`
            at the observed rate ``k/n``, ``runs_at_lower95`` the same at the lower end of
            its 95% interval (the cautious plan: the rate may be that low).
        """
        a, b = self.with_fix, self.without_fix
        if a.skipped or b.skipped or b.n == 0 or b.failed == 0:
            return None
        rate = b.failed / b.n
        lo = b.interval()[0]
        return {
            "confidence": confidence,
            "baseline": rate,
            "runs": runs_to_acquit(rate, confidence),
            "baseline_lower95": lo,
            "runs_at_lower95": runs_to_acquit(lo, confidence),
            "clean_runs_with_fix": a.n if not a.failed else 0,
        }

    def verdicts(self) -> list[tuple[str, str]]:
        """``(code, sentence)`` pairs, most important first.

        Codes: ``skipped``, ``fix-fails``, ``guard``, ``reproduction``,
        ``inconclusive``, ``acquitted``, ``host-model``. ``guard`` appears
        whenever the fix-removed column never failed: the suite is then a
        guard, not a reproduction. A ``reproduction`` needs failures without
        the fix, none with it, and Fisher p < 0.05 (:data:`AB_ALPHA`);
        ``acquitted`` says the fix's clean runs reach the runs that acquit it at
        99% against the lower 95% bound of the fix-removed rate (seed 003).
        ``host-model`` closes every verdict of a suite with a ``model``: what it
        shows is the model's, not an AMD GPU's.
        """
        out = self._verdicts()
        if self.model:
            out.append(
                (
                    "host-model",
                    f"Host model ({self.model}, docs/race-lab.md): the file's host code ran "
                    "on a model of HIP, hipBLASLt and rocBLAS under a sanitizer, not on an AMD GPU. It shows what "
                    "the code does under the model's runtime; what the real runtime, library and GPU do "
                    "is evidence only a GPU run gives.",
                )
            )
        return out

    def _verdicts(self) -> list[tuple[str, str]]:
        a, b = self.with_fix, self.without_fix
        out: list[tuple[str, str]] = []
        if a.skipped or b.skipped:
            why = a.skip_reason or b.skip_reason
            return [
                (
                    "skipped",
                    f"Not compared: the suite was skipped on this machine ({why}).",
                )
            ]
        if a.failed:
            out.append(
                (
                    "fix-fails",
                    f"The suite fails with the fix in place ({a.failed} of {a.n}): "
                    "the fix does not hold, or the suite catches another fault.",
                )
            )
        if self.guard_only:
            hi = b.interval()[1]
            out.append(
                (
                    "guard",
                    f"The fix-removed child never failed in {b.n} runs: this suite is a guard, "
                    "not a reproduction. It shows the fixed code passes; it does not show the fix is "
                    f"needed (failure rate without the fix below {hi:.4f} at 95%).",
                )
            )
            return out
        if not a.failed:
            p = self.fisher_p
            if p is not None and p < AB_ALPHA:
                out.append(
                    (
                        "reproduction",
                        f"The suite reproduces the fault: {b.failed} of {b.n} failed "
                        f"without the fix, 0 of {a.n} with it (Fisher p = {p:.4g} < {AB_ALPHA}).",
                    )
                )
                plan = self.acquit_plan()
                if plan and a.n >= plan["runs_at_lower95"]:
                    out.append(
                        (
                            "acquitted",
                            f"{a.n} clean runs with the fix reach the {plan['runs_at_lower95']} "
                            "that acquit it at 99% even if the fix-removed failure rate were only "
                            f"{plan['baseline_lower95']:.4f}, the lower end of its 95% interval "
                            f"({plan['runs']} at the observed {b.failed}/{b.n}).",
                        )
                    )
            else:
                need = runs_to_acquit(b.failed / b.n, 0.99)
                out.append(
                    (
                        "inconclusive",
                        f"Failures without the fix ({b.failed} of {b.n}) and none with it, "
                        f"but not significant at {AB_ALPHA} (Fisher p = {p:.4g}); at a baseline of "
                        f"{b.failed}/{b.n}, {need} clean runs acquit the fix at 99%.",
                    )
                )
        return out

    def to_dict(self) -> dict:
        """JSON shape written to ``ab.json``."""
        return {
            "format": RESULT_FORMAT,
            "suite": self.suite,
            "table": self.table,
            "fisher_p": self.fisher_p,
            "guard_not_reproduction": self.guard_only,
            "verdicts": [{"code": c, "text": t} for c, t in self.verdicts()],
            "acquit": self.acquit_plan(),
            "model": self.model,
            "with": self.with_fix.to_dict(),
            "without": self.without_fix.to_dict(),
        }


def run_ab(
    suite: Suite,
    without_argv: list[str],
    results_dir: str,
    *,
    runs: int | None = None,
    child_dir: str | None = None,
    base_dir: str | None = None,
    deadline_s: float | None = None,
    platform: Platform | None = None,
    environ: Mapping[str, str] | None = None,
    progress: ProgressFn | None = None,
    progress_b: ProgressFn | None = None,
) -> ABResult:
    """Run the suite's child and a fix-removed child the same number of times.

    Layout: ``<results_dir>/<suite>/<timestamp>-ab/{with,without}/`` (each with
    its ``run-NNN.*`` and ``result.json``) and ``ab.json`` beside them. Both
    columns get the same environment, deadline and markers.

    Args:
        suite: the validated suite.
        without_argv: argv of the fix-removed child (resolved like a suite child).
        results_dir: results root.
        runs: runs per column (default ``suite.runs``).
        child_dir, base_dir, deadline_s, platform, environ: as for :func:`run_suite`.
        progress: progress callback for the with-fix column.
        progress_b: progress callback for the fix-removed column (default ``progress``).

    Returns:
        An :class:`ABResult`.

    Raises:
        SuiteRunError: as :func:`run_suite`; both children are resolved
            before either runs.
    """
    platform = platform or detect_platform()
    if skip_reason(suite, platform) is None:
        resolve_child(suite.child, child_dir, base_dir)
        resolve_child(without_argv, child_dir, base_dir)
    base = make_run_dir(results_dir, suite.name, suffix="-ab")
    common = dict(
        child_dir=child_dir,
        base_dir=base_dir,
        runs=runs,
        deadline_s=deadline_s,
        platform=platform,
        environ=environ,
    )
    a = run_suite(
        suite,
        results_dir,
        directory=os.path.join(base, "with"),
        label="with fix",
        progress=progress,
        **common,
    )
    b = run_suite(
        suite,
        results_dir,
        directory=os.path.join(base, "without"),
        label="fix removed",
        argv=list(without_argv),
        progress=progress_b or progress,
        **common,
    )
    ab = ABResult(suite=suite.name, with_fix=a, without_fix=b, directory=base)
    write_json(os.path.join(base, "ab.json"), ab.to_dict())
    return ab


def load_ab(path: str) -> ABResult:
    """Read a stored ``ab.json`` (or the A/B directory holding one).

    Raises:
        SuiteRunError: missing, unreadable, or not an A/B result.
    """
    if os.path.isdir(path):
        path = os.path.join(path, "ab.json")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        base = os.path.dirname(os.path.abspath(path))
        return ABResult(
            suite=data["suite"],
            with_fix=SuiteResult.from_dict(data["with"], os.path.join(base, "with")),
            without_fix=SuiteResult.from_dict(
                data["without"], os.path.join(base, "without")
            ),
            directory=base,
        )
    except FileNotFoundError:
        raise SuiteRunError(f"{path}: no such A/B result file") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SuiteRunError(f"{path}: not an A/B result: {exc}") from None
