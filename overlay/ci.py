"""``overlay ci``: everything this machine can do, as one gate (issue 8).

Stages run in order -- ``verify``, ``build``, ``suites`` -- and each ends
``passed``, ``failed`` or ``skipped`` with its reason (no ROCm toolchain, no AMD
GPU, not requested). Skipped is not failure. The outcome is written as JUnit XML,
a JSON summary and a Markdown section for the PR body (jinja2 template
``overlay/templates/ci_summary.md.j2``).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import time
from typing import Any, Sequence

import jinja2

from overlay import junit
from overlay.errors import OverlayError
from overlay.gitstore import Store

STAGES = ("verify", "build", "suites")


@dataclasses.dataclass
class Stage:
    """One stage of the gate.

    Attributes:
        name: ``verify``, ``build`` or ``suites``.
        status: ``passed``, ``failed`` or ``skipped``.
        reason: why it failed or was skipped (one line), else ``""``.
        seconds: wall time.
        cases: JUnit test cases ``[{"name", "status", "message"}]``.
        data: stage-specific details for the Markdown template.
    """

    name: str
    status: str
    reason: str = ""
    seconds: float = 0.0
    cases: list[dict] = dataclasses.field(default_factory=list)
    data: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class CiResult:
    """The whole gate: the overlay's state plus each stage."""

    overlay: dict
    stages: list[Stage]

    @property
    def failed(self) -> bool:
        """True when any stage failed."""
        return any(s.status == "failed" for s in self.stages)

    def as_dict(self) -> dict:
        """JSON summary."""
        return {"overlay": self.overlay, "failed": self.failed,
                "stages": [dataclasses.asdict(s) for s in self.stages]}


def _overlay_state(root: str, store: Store) -> tuple[dict, Any]:
    from overlay.layers import compute_layers
    from overlay.manifest import load_manifest

    manifest = load_manifest(root)
    state: dict = {"pin": manifest.pin, "fork": manifest.fork_commit, "merge_base": manifest.merge_base,
                   "pins_before": None}
    try:
        with open(os.path.join(root, ".overlay", "last-rebase.json"), encoding="utf-8") as fh:
            last = json.load(fh)
        if last["pins"]["after"]["pin"] == manifest.pin and last["pins"]["after"]["fork"] == manifest.fork_commit:
            state["pins_before"] = last["pins"]["before"]
    except (OSError, ValueError, KeyError):
        pass
    try:
        layers = compute_layers(store, manifest, root, stepwise=True)
    except OverlayError as exc:
        state["layers_error"] = exc.message
        return state, None
    state.update({
        "patched": layers.patched,
        "carried": len(layers.carried_changes),
        "conflicts": len(layers.conflicts),
        "resolutions": [c.path for c in layers.conflicts if c.resolved],
        "stale": layers.stale_resolutions,
        "series": [{"name": r.patch.name, "state": r.state, "local_fix": r.patch.local_fix,
                    "subject": r.patch.subject} for r in layers.patches],
    })
    return state, layers


#: Findings that mean the layers were not checked at all; a gate fails on them although
#: ``overlay verify`` reports them as warnings (offline with an empty store is no pass).
UNCHECKED_CODES = ("MAN002",)


def stage_verify(root: str, store: Store) -> Stage:
    """Run ``overlay verify``; failed when any error finding, or when the layers could
    not be checked (:data:`UNCHECKED_CODES`, e.g. MAN002 offline with an empty store).

    Args:
        root: overlay repository.
        store: git store.
    Returns:
        The ``verify`` :class:`Stage`.
    Raises:
        ManifestError: the manifest is missing or invalid (exit 2).
    """
    from overlay.checks import verify

    start = time.perf_counter()
    result = verify(root, store)
    failing = [f for f in result.findings if f.severity == "error" or f.code in UNCHECKED_CODES]
    errors = [f for f in result.findings if f.severity == "error"]
    unchecked = [f for f in result.findings if f.code in UNCHECKED_CODES]
    cases = [{"name": f"{f.code} {f.path or ''}:{f.line or ''}".rstrip(":"),
              "status": "failed" if f in failing else "passed", "message": f.message}
             for f in result.findings]
    if not cases:
        cases = [{"name": "verify", "status": "passed", "message": ""}]
    reasons = []
    if errors:
        reasons.append(f"{len(errors)} error finding(s)")
    if unchecked:
        reasons.append(f"the layers could not be checked ({unchecked[0].code}: {unchecked[0].message})")
    return Stage("verify", "failed" if failing else "passed", "; ".join(reasons), time.perf_counter() - start,
                 cases, {"findings": [f.as_dict() for f in result.findings]})


def stage_build(root: str, store: Store, layers: Any, backend: str, arch: str | None) -> Stage:
    """Build the patched tree; skipped with the reason when no toolchain exists."""
    from overlay import build as _build
    from overlay.manifest import load_manifest

    start = time.perf_counter()
    if layers is None:
        return Stage("build", "skipped", "the layers could not be computed (see verify)")
    try:
        toolchain = _build.find_toolchain(backend, None, repo_root=root)
    except _build.ToolchainError as exc:
        return Stage("build", "skipped", exc.message)
    manifest = load_manifest(root)
    try:
        res = _build.build(store, layers, root, backend, arch=arch, toolchain=toolchain,
                           cmake_option=manifest.cmake_option,
                           suites_dir=os.path.join(root, "patches-rocm", "suites"))
    except OverlayError as exc:
        return Stage("build", "failed", exc.message, time.perf_counter() - start,
                     [{"name": f"build {backend}", "status": "failed", "message": exc.message}])
    errors = len(res.diagnostics) + len(res.other_errors)
    status = "passed" if res.ok else "failed"
    return Stage("build", status, "" if res.ok else f"{errors} error(s)", time.perf_counter() - start,
                 [{"name": f"build {backend}", "status": status, "message": "\n".join(res.report())}],
                 {"backend": backend, "toolchain": res.toolchain, "arch": res.arch, "errors": errors,
                  "log": os.path.relpath(res.log, root)})


def stage_suites(root: str, results_dir: str, child_dir: str | None, backend: str | None) -> Stage:
    """Run every suite of ``patches-rocm/suites/suites.toml``; hardware-less ones skip."""
    from overlay.suites import config as _config
    from overlay.suites import runner as _runner
    from overlay.suites.runner import SuiteRunError

    start = time.perf_counter()
    path = os.path.join(root, "patches-rocm", "suites", "suites.toml")
    if not os.path.isfile(path):
        return Stage("suites", "skipped", "no patches-rocm/suites/suites.toml")
    suites = _config.load_suites(path, root)
    platform = _runner.detect_platform(backend)
    cases, rows = [], []
    any_ran = False
    for suite in suites.values():
        reason = _runner.skip_reason(suite, platform)
        if reason is None:
            try:
                result = _runner.run_suite(suite, results_dir, child_dir=child_dir,
                                           base_dir=os.path.dirname(path), platform=platform)
            except SuiteRunError as exc:
                reason = exc.message
            else:
                any_ran = any_ran or not result.skipped
                lo, hi = result.interval()
                rows.append({"suite": suite.name, "status": "failed" if result.failed else
                             ("skipped" if result.skipped else "passed"), "failed": result.failed,
                             "n": result.n, "interval": [round(lo, 4), round(hi, 4)],
                             "reason": result.skip_reason, "proves": suite.proves})
                cases.append({"name": suite.name, "status": rows[-1]["status"],
                              "message": f"{result.failed} of {result.n} failed"})
                continue
        rows.append({"suite": suite.name, "status": "skipped", "failed": 0, "n": 0, "interval": None,
                     "reason": reason, "proves": suite.proves})
        cases.append({"name": suite.name, "status": "skipped", "message": reason})
    failed = [r for r in rows if r["status"] == "failed"]
    status = "failed" if failed else ("passed" if any_ran else "skipped")
    reason = (f"{len(failed)} suite(s) failed" if failed else
              "" if any_ran else "no suite can run here: " + "; ".join(sorted({r["reason"] for r in rows})))
    ab = []
    for ab_path in sorted(glob.glob(os.path.join(results_dir, "*", "*-ab", "ab.json"))):
        try:
            with open(ab_path, encoding="utf-8") as fh:
                ab.append(json.load(fh))
        except (OSError, ValueError):
            continue
    return Stage("suites", status, reason, time.perf_counter() - start, cases, {"suites": rows, "ab": ab})


def run_ci(root: str, store: Store, *, stages: Sequence[str] = STAGES, backend: str = "rocm",
           arch: str | None = None, results_dir: str | None = None, child_dir: str | None = None) -> CiResult:
    """Run the requested stages; the others are reported skipped ("not requested").

    Args:
        root: overlay repository.
        store: git store.
        stages: subset of :data:`STAGES`.
        backend: build backend and suite backend (``rocm``, ``cpu``, ``cuda``).
        arch: HIP architectures for the build (default: the manifest's).
        results_dir: where suite runs are kept (default ``build/suite-results``).
        child_dir: where the suite children are (default ``build/<backend>/suites``).
    Returns:
        :class:`CiResult`.
    """
    state, layers = _overlay_state(root, store)
    out = []
    for name in STAGES:
        if name not in stages:
            out.append(Stage(name, "skipped", "not requested"))
        elif name == "verify":
            out.append(stage_verify(root, store))
        elif name == "build":
            out.append(stage_build(root, store, layers, backend, arch))
        else:
            out.append(stage_suites(root, results_dir or os.path.join(root, "build", "suite-results"),
                                    child_dir or os.path.join(root, "build", backend, "suites"),
                                    backend))
    return CiResult(state, out)


def render_junit(result: CiResult) -> str:
    """JUnit XML (:func:`overlay.junit.render`): one testsuite per stage, one testcase per check/suite.

    Counts agree with the children; stage messages may hold anything (compiler
    output, control characters): the writer makes them XML-safe. ``message``
    attributes are cut at 500 characters, the full text is the failure's text.
    """
    suites = []
    for stage in result.stages:
        cases = stage.cases or [{"name": stage.name, "status": stage.status, "message": stage.reason}]
        suites.append(junit.Suite(stage.name, [
            junit.Case(case["name"], f"overlay.{stage.name}", case["status"], message=case["message"],
                       text=case["message"] if case["status"] == "failed" else None)
            for case in cases], time=stage.seconds))
    return junit.render(suites, name="overlay ci", message_limit=500)


_ENV = jinja2.Environment(loader=jinja2.PackageLoader("overlay", "templates"), autoescape=False,
                          keep_trailing_newline=True, undefined=jinja2.StrictUndefined)


def render_markdown(result: CiResult) -> str:
    """The Markdown section for the PR body."""
    return _ENV.get_template("ci_summary.md.j2").render(o=result.overlay, stages=result.stages,
                                                        by={s.name: s for s in result.stages},
                                                        failed=result.failed)


def render_text(result: CiResult) -> str:
    """One line per stage, skipped ones spelled out."""
    lines = []
    for s in result.stages:
        word = s.status.upper()
        lines.append(f"{s.name:<7} {word:<8} {s.reason}".rstrip())
    lines.append("overlay ci: FAILED" if result.failed else "overlay ci: passed (skipped stages are not failures)")
    return "\n".join(lines) + "\n"
