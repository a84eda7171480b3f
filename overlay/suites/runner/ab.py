"""A/B: the suite's child against a fix-removed child, and what the difference shows."""

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from overlay.suites.config import Suite
from overlay.suites.runner.common import (
    RESULT_FORMAT,
    ProgressFn,
    SuiteRunError,
    write_json,
)
from overlay.suites.runner.files import make_run_dir, resolve_child
from overlay.suites.runner.hardware import Platform, detect_platform, skip_reason
from overlay.suites.runner.suite import SuiteResult, run_suite
from overlay.suites.stats import fisher_exact, runs_to_acquit, runs_to_significance

#: Significance level under which an A/B difference counts as a reproduction.
AB_ALPHA = 0.05


def _runs(n: int, what: str = "") -> str:
    """``1 run``, ``3 runs``, ``1 clean run`` (``what="clean "``)."""
    return f"{n} {what}run" + ("" if n == 1 else "s")


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
                    "on a model of HIP, hipBLASLt and rocBLAS under a sanitizer, not on an "
                    "AMD GPU. It shows what the code does under the model's runtime; what "
                    "the real runtime, library and GPU do is evidence only a GPU run gives.",
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
                    f"The fix-removed child never failed in {b.n} runs: this suite is a "
                    "guard, not a reproduction. It shows the fixed code passes; it does not "
                    "show the fix is needed (failure rate without the fix below "
                    f"{hi:.4f} at 95%).",
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
                            f"{_runs(a.n, 'clean ')} with the fix "
                            f"reach{'es' if a.n == 1 else ''} the "
                            f"{plan['runs_at_lower95']} "
                            "that acquit it at 99% even if the fix-removed failure rate were only "
                            f"{plan['baseline_lower95']:.4f}, the lower end of its 95% interval "
                            f"({plan['runs']} at the observed {b.failed}/{b.n}).",
                        )
                    )
            else:
                out.append(("inconclusive", self._inconclusive(p)))
        return out

    def _inconclusive(self, p: float | None) -> str:
        """The ``inconclusive`` sentence: failures without the fix, none with it, p >= alpha.

        It gives the runs per column that reach p < :data:`AB_ALPHA` at the observed
        rates, and seed 003's runs to acquit at the observed fix-removed rate beside
        those at the lower end of its 95% interval (the rate is not yet known).
        """
        a, b = self.with_fix, self.without_fix
        n = runs_to_significance(0.0, b.failed / b.n, AB_ALPHA)
        more = (
            f"at these rates ({a.failed}/{a.n} with the fix, {b.failed}/{b.n} without) "
            + (
                f"{_runs(n)} per column reach p < {AB_ALPHA}"
                if n
                else f"no feasible number of runs reaches p < {AB_ALPHA}"
            )
        )
        lo = b.interval()[0]
        acquit = (
            f"Runs to acquit at 99% (seed 003): "
            f"{_runs(runs_to_acquit(b.failed / b.n), 'clean ')} with the fix if the "
            f"fix-removed rate were known to be {b.failed}/{b.n}; "
            f"from {_runs(b.n)} it is known only to be above {lo:.4f} (95%), where "
            + (
                f"{_runs(runs_to_acquit(lo))} are needed."
                if lo > 0
                else "no number of runs acquits."
            )
        )
        return (
            f"Failures without the fix ({b.failed} of {b.n}) and none with it, but not "
            f"significant at {AB_ALPHA} (Fisher p = {p:.4g}): {more}. {acquit}"
        )

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

    def column(
        name: str, label: str, argv: list[str] | None, report: ProgressFn | None
    ) -> SuiteResult:
        """One column, run into ``<base>/<name>`` with the settings both share."""
        return run_suite(
            suite,
            results_dir,
            child_dir=child_dir,
            base_dir=base_dir,
            runs=runs,
            deadline_s=deadline_s,
            platform=platform,
            argv=argv,
            directory=os.path.join(base, name),
            label=label,
            environ=environ,
            progress=report,
        )

    a = column("with", "with fix", None, progress)
    b = column("without", "fix removed", list(without_argv), progress_b or progress)
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
