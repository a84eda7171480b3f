"""A suite: its runs in a row, the stored ``result.json``, skipped or interrupted."""

import datetime as _dt
import functools
import json
import os
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from overlay.parallel import foreground, raise_taken
from overlay.suites.config import Suite
from overlay.suites.runner.common import (
    FAILURE_KINDS,
    RESULT_FORMAT,
    ProgressFn,
    SuiteRunError,
    write_json,
)
from overlay.suites.runner.files import make_run_dir, resolve_child
from overlay.suites.runner.hardware import Platform, detect_platform, skip_reason
from overlay.suites.runner.run import RunResult, run_once
from overlay.suites.stats import clopper_pearson


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
        """``{kind: [runs with it, occurrences]}`` over the runs.

        Kinds come in order of first appearance.
        """
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
    def from_dict(cls, d: Mapping, directory: str | None = None) -> "SuiteResult":
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
        also for a skipped suite. On a Ctrl-C (a SIGTERM or SIGHUP: Terminated)
        the running group is killed (SIGKILL), a result with status
        ``interrupted`` is written without the run the signal cut short, and the
        exception propagates (:func:`overlay.parallel.foreground`, and
        :func:`overlay.parallel.raise_taken` where suites run in parallel).

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
            # A run of one (overlay.parallel.foreground): a Ctrl-C, SIGTERM or SIGHUP
            # of overlay kills the run's group (run_once's stop signal), and is raised
            # here once the run ended; where suites run in parallel (already a job of
            # a run), it reaches this thread as raise_taken(). Either way the run it
            # cut short is not recorded: the user stopped it.
            rec = foreground(
                functools.partial(
                    run_once,
                    result.argv,
                    env,
                    deadline,
                    directory,
                    i,
                    markers,
                    stdin_fd=devnull,
                )
            )
            raise_taken()
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
