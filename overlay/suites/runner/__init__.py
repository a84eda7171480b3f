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

The runner is split along its stages (this package re-exports every public name):

* :mod:`~overlay.suites.runner.common` -- run kinds, the result format, :class:`SuiteRunError`;
* :mod:`~overlay.suites.runner.hardware` -- :class:`Platform`, GPU detection, skip reasons;
* :mod:`~overlay.suites.runner.files` -- the child's argv, the run directories;
* :mod:`~overlay.suites.runner.reports` -- marker counts and reports in a run's output;
* :mod:`~overlay.suites.runner.run` -- one run of a child (:func:`run_once`);
* :mod:`~overlay.suites.runner.suite` -- a suite's runs and ``result.json`` (:func:`run_suite`);
* :mod:`~overlay.suites.runner.ab` -- A/B comparisons and their verdicts (:func:`run_ab`).
"""

from __future__ import annotations

from overlay.suites.runner.ab import AB_ALPHA, ABResult, load_ab, run_ab
from overlay.suites.runner.common import (
    FAILURE_KINDS,
    RESULT_FORMAT,
    RUN_KINDS,
    ProgressFn,
    SuiteRunError,
    write_json,
)
from overlay.suites.runner.files import make_run_dir, resolve_child
from overlay.suites.runner.hardware import (
    HARDWARE_ENV,
    Platform,
    detect_platform,
    skip_reason,
)
from overlay.suites.runner.reports import REPORT_SCAN_BYTES, scan_reports
from overlay.suites.runner.run import KILL_GRACE_S, RunResult, run_once
from overlay.suites.runner.suite import SuiteResult, load_result, run_suite

__all__ = [
    "RUN_KINDS",
    "FAILURE_KINDS",
    "HARDWARE_ENV",
    "KILL_GRACE_S",
    "REPORT_SCAN_BYTES",
    "RESULT_FORMAT",
    "ProgressFn",
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
