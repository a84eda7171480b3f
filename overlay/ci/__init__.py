"""``overlay ci``: everything this machine can do, as one gate.

Stages run in order -- ``verify``, ``check``, ``build``, ``suites`` -- and each
ends ``passed``, ``failed`` or ``skipped`` with its reason (no ROCm toolchain, no
AMD GPU, not requested). Skipped is not failure, except for a stage the caller
*requires* (``--require``): a required stage that ends skipped fails the gate, so a
runner that cannot compile never passes a gate that must compile. A stage never
crashes the gate: whatever goes wrong in it (a failed CMake configure, an
unexpected exception) becomes that stage's failure with its first error line. The
outcome is written as JUnit XML, a JSON summary and a Markdown section for the PR
body (jinja2 template ``overlay/templates/ci_summary.md.j2``).
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from overlay import layout
from overlay.checks.verify import verify
from overlay.ci.report import (
    CiResult,
    Stage,
    render_error,
    render_junit,
    render_markdown,
    render_text,
)
from overlay.errors import OverlayError
from overlay.git.store import Store
from overlay.rebase.report import last_rebase_pin, last_run_pins

if TYPE_CHECKING:
    from overlay.workspace import Workspace

# The reports live in overlay.ci.report; the CLI and tests reach them through here.
__all__ = [
    "REQUIRED_SKIPPED",
    "STAGES",
    "UNCHECKED_CODES",
    "CiResult",
    "Stage",
    "render_error",
    "render_junit",
    "render_markdown",
    "render_text",
    "run_ci",
    "stage_build",
    "stage_suites",
    "stage_verify",
]

STAGES = ("verify", "check", "build", "suites")
#: How the reason of a required stage that could not run begins.
REQUIRED_SKIPPED = "required, but skipped: "


def _overlay_state(ws: Workspace) -> tuple[dict, Any]:
    """The gate's summary of the overlay (pins, layers, series) and the layers with each
    patch's tree (``None`` when they cannot be computed: ``layers_error`` says why).

    Raises:
        ManifestError: the manifest is missing or invalid (exit 2).
    """
    manifest = ws.manifest
    state: dict = {
        "pin": manifest.pin,
        "fork": manifest.fork_commit,
        "merge_base": manifest.merge_base,
        "pins_before": None,
    }
    pins = last_run_pins(ws.root)
    if pins is not None and (pins["after"].get("pin"), pins["after"].get("fork")) == (
        manifest.pin,
        manifest.fork_commit,
    ):
        state["pins_before"] = pins["before"]
    try:
        layers = ws.layers(stepwise=True)
    except OverlayError as exc:
        state["layers_error"] = exc.message
        return state, None
    state.update(
        {
            "patched": layers.patched,
            "carried": len(layers.carried_changes),
            "conflicts": len(layers.conflicts),
            "resolutions": [c.path for c in layers.conflicts if c.resolved],
            "stale": layers.stale_resolutions,
            "series": [
                {
                    "name": r.patch.name,
                    "state": r.state,
                    "local_fix": r.patch.local_fix,
                    "subject": r.patch.subject,
                }
                for r in layers.patches
            ],
        }
    )
    return state, layers


#: Findings that mean the layers were not checked at all; a gate fails on them although
#: ``overlay verify`` reports them as warnings (offline with an empty store is no pass).
UNCHECKED_CODES = ("MAN002",)


def stage_verify(ws: Workspace) -> Stage:
    """Run ``overlay verify``; failed when any error finding, or when the layers could
    not be checked (:data:`UNCHECKED_CODES`, e.g. MAN002 offline with an empty store).

    Args:
        ws: the workspace (:func:`overlay.checks.verify.verify` checks its records).
    Returns:
        The ``verify`` :class:`Stage`.
    Raises:
        ManifestError: the manifest is missing or invalid (exit 2).
    """
    start = time.perf_counter()
    result = verify(ws)
    failing = [
        f for f in result.findings if f.severity == "error" or f.code in UNCHECKED_CODES
    ]
    errors = [f for f in result.findings if f.severity == "error"]
    unchecked = [f for f in result.findings if f.code in UNCHECKED_CODES]
    cases = [
        {
            "name": f"{f.code} {f.path or ''}:{f.line or ''}".rstrip(":"),
            "status": "failed" if f in failing else "passed",
            "message": f.message,
        }
        for f in result.findings
    ]
    if not cases:
        cases = [{"name": "verify", "status": "passed", "message": ""}]
    reasons = []
    if errors:
        reasons.append(f"{len(errors)} error finding(s)")
    if unchecked:
        reasons.append(
            f"the layers could not be checked ({unchecked[0].code}: {unchecked[0].message})"
        )
    return Stage(
        "verify",
        "failed" if failing else "passed",
        "; ".join(reasons),
        time.perf_counter() - start,
        cases,
        {"findings": [f.as_dict() for f in result.findings]},
    )


def stage_build(
    ws: Workspace,
    layers: Any,
    backend: str,
    arch: str | None,
    *,
    check: bool = False,
    drift_range: tuple[str, str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> Stage:
    """Build the patched tree (``check``: every unit through the front end only, see
    ``overlay build --check``); skipped with the reason when no toolchain exists.

    Args:
        ws: the workspace (root, store, manifest); layers: from the gate's state, its
            layers with each patch's tree (``None`` when they could not be computed:
            skipped).
        backend: ``rocm``, ``cpu`` or ``cuda``; arch: HIP architectures or ``None``
            (rocm: the manifest's, or the toolchain's default, as ``overlay build``).
        check: run the ``check`` stage instead of the ``build`` stage.
        drift_range: ``(old pin, new pin)``: a failure's errors and undefined symbols are
            attributed to the upstream commits of that range (``data["drift"]``; the
            reason names the commit behind the first one).
        progress: ``(done, total, text)`` of the units compiled (``n/N``).
    Returns:
        The :class:`Stage`; a configure or environment failure is a failed stage whose
        reason is the error's one line (for CMake: the first ``CMake Error`` body and
        any ``Could NOT find X``), a compile failure one whose reason names the first
        error with its attribution. ``data`` always holds ``backend``, ``toolchain``,
        ``arch``, ``errors`` and ``log``.
    """
    # the build package (CMake, ninja, ccache): only the check and build stages
    from overlay import build as _build

    name = "check" if check else "build"
    root = ws.root
    start = time.perf_counter()
    if layers is None:
        return Stage(name, "skipped", "the layers could not be computed (see verify)")
    try:
        toolchain = _build.find_toolchain(backend, None, repo_root=root)
    except _build.ToolchainError as exc:
        # The reason carries the way out (`provision it: tools/rocm-toolchain.sh ...`).
        return Stage(
            name, "skipped", exc.message + (f"; {exc.hint}" if exc.hint else "")
        )
    log = os.path.relpath(
        os.path.join(
            os.path.realpath(layout.under(root, layout.backend_dir(backend))),
            "build.log",
        ),
        root,
    )
    data: dict[str, Any] = {
        "backend": backend,
        "toolchain": toolchain.description,
        "arch": arch,
        "errors": 0,
        "log": log,
        "first_error": "",
        "units": 0,
        "not_checked": [],
        "undefined": 0,
        "drift": [],
        "drift_from": None,
        "link": "",
    }
    case = f"{name} {backend}"
    try:
        if backend == "rocm":
            arch, _note = _build.resolve_arch(
                arch, ws.manifest.architectures, toolchain
            )
            data["arch"] = arch
        options = _build.BuildOptions(
            backend, toolchain, arch=arch, check=check, drift_range=drift_range
        )
        res = _build.build(ws, options, layers=layers, progress=progress)
    except OverlayError as exc:
        data["first_error"] = exc.message
        return Stage(
            name,
            "failed",
            exc.message,
            time.perf_counter() - start,
            [
                {
                    "name": case,
                    "status": "failed",
                    "message": exc.message,
                    "text": exc.message + (f"\nhint: {exc.hint}" if exc.hint else ""),
                }
            ],
            data,
        )
    errors = len(res.diagnostics) + len(res.other_errors)
    status = "passed" if res.ok else "failed"
    undefined = len(res.link.undefined) if res.link else 0
    data.update(
        errors=errors,
        first_error=res.first_error(),
        units=len(res.units),
        not_checked=[f"{path}: {why}" for path, why in res.skipped_units]
        if check
        else [],
        undefined=undefined,
        drift=res.drift,
        drift_from=res.drift_from,
        link=res.link.report()[-1] if res.link else "",
    )
    reason = (
        ""
        if res.ok
        else f"{errors} error(s)"
        + (f", {undefined} undefined symbol(s)" if undefined else "")
        + f"; first: {res.first_error()}"
    )
    if res.drift and " -> " in res.drift[0]:
        reason += f"; drift: {res.drift[0].rsplit(' -> ', 1)[1]}"
    if res.ok and check and res.skipped_units:
        reason = f"{len(res.skipped_units)} unit(s) not checked (see the report)"
    return Stage(
        name,
        status,
        reason,
        time.perf_counter() - start,
        [
            {
                "name": case,
                "status": status,
                "message": reason,
                "text": "\n".join(res.report()),
            }
        ],
        data,
    )


def stage_suites(
    root: str, results_dir: str, child_dir: str | None, backend: str | None
) -> Stage:
    """Run every suite of ``patches-rocm/suites/suites.toml``; hardware-less ones skip."""
    # the suites package: only the suites stage runs them
    from overlay.suites import config as _config
    from overlay.suites import runner as _runner
    from overlay.suites.runner import SuiteRunError

    start = time.perf_counter()
    path = layout.under(root, layout.SUITES_TOML)
    if not os.path.isfile(path):
        return Stage("suites", "skipped", "no patches-rocm/suites/suites.toml")
    suites = _config.load_suites(path, root)
    platform = _runner.detect_platform(backend)
    cases: list[dict] = []
    rows: list[dict[str, Any]] = []
    any_ran = False
    for suite in suites.values():
        reason = _runner.skip_reason(suite, platform)
        if reason is None:
            try:
                result = _runner.run_suite(
                    suite,
                    results_dir,
                    child_dir=child_dir,
                    base_dir=os.path.dirname(path),
                    platform=platform,
                )
            except SuiteRunError as exc:
                reason = exc.message
            else:
                any_ran = any_ran or not result.skipped
                lo, hi = result.interval()
                rows.append(
                    {
                        "suite": suite.name,
                        "status": "failed"
                        if result.failed
                        else ("skipped" if result.skipped else "passed"),
                        "failed": result.failed,
                        "n": result.n,
                        "interval": [round(lo, 4), round(hi, 4)],
                        "reason": result.skip_reason,
                        "proves": suite.proves,
                    }
                )
                cases.append(
                    {
                        "name": suite.name,
                        "status": rows[-1]["status"],
                        "message": f"{result.failed} of {result.n} failed",
                    }
                )
                continue
        rows.append(
            {
                "suite": suite.name,
                "status": "skipped",
                "failed": 0,
                "n": 0,
                "interval": None,
                "reason": reason,
                "proves": suite.proves,
            }
        )
        cases.append({"name": suite.name, "status": "skipped", "message": reason})
    failed = [r for r in rows if r["status"] == "failed"]
    status = "failed" if failed else ("passed" if any_ran else "skipped")
    reason = (
        f"{len(failed)} suite(s) failed"
        if failed
        else ""
        if any_ran
        else "no suite can run here: " + "; ".join(sorted({r["reason"] for r in rows}))
    )
    ab = []
    for ab_path in sorted(glob.glob(os.path.join(results_dir, "*", "*-ab", "ab.json"))):
        try:
            with open(ab_path, encoding="utf-8") as fh:
                ab.append(json.load(fh))
        except (OSError, ValueError):
            continue
    return Stage(
        "suites",
        status,
        reason,
        time.perf_counter() - start,
        cases,
        {"suites": rows, "ab": ab},
    )


def run_ci(
    ws: Workspace,
    *,
    stages: Sequence[str] = STAGES,
    require: Sequence[str] = (),
    backend: str = "rocm",
    arch: str | None = None,
    results_dir: str | None = None,
    child_dir: str | None = None,
    drift_from: str | None = None,
    progress: Any = None,
) -> CiResult:
    """Run the requested stages; the others are reported skipped ("not requested").

    Args:
        ws: the workspace: its root, store and manifest, read once for every stage, and
            its layers with each patch's tree, computed once.
        stages: subset of :data:`STAGES` to run.
        require: stages that must run and pass: each is run even when ``stages``
            leaves it out, and one that ends skipped (no toolchain, no GPU) is failed
            with ``required, but skipped: <why>``.
        backend: build backend and suite backend (``rocm``, ``cpu``, ``cuda``).
        arch: HIP architectures for the build (default: the manifest's).
        results_dir: where suite runs are kept (default ``build/suite-results``).
        child_dir: where the suite children are (default ``build/<backend>/suites``).
        drift_from: the pin before the bump (a ref): a failing check or build stage names
            the upstream commit of ``drift_from..pin`` behind its errors. Default: the pin
            the last rebase started from, when it moved to the manifest's pin (a fresh
            clone has none: pass the base branch's pin).
        progress: a :class:`~overlay.report.progress.LiveProgress`: each stage's start as a
            note, the check or build stage's units as ``n/N``.
    Returns:
        :class:`CiResult`. A stage that raises becomes a failed stage with the
        error's line; nothing a stage does escapes this function.
    Raises:
        OverlayError: bad stage names (exit 2); the manifest cannot be read (exit 2).
    """
    unknown = sorted(set(stages) - set(STAGES)) + sorted(set(require) - set(STAGES))
    if unknown:
        raise OverlayError(
            f"unknown stage {unknown[0]!r} (stages: {', '.join(STAGES)})"
        )
    state, layers = _overlay_state(ws)
    drift_range = _drift_range(ws.root, ws.store, state["pin"], drift_from)
    run = set(stages) | set(require)
    out: list[Stage] = []
    for name in STAGES:
        if name not in run:
            stage = Stage(name, "skipped", "not requested")
        else:
            if progress is not None:
                progress.note(f"{name}: running")
            stage = _run_stage(
                name,
                ws,
                layers,
                backend,
                arch,
                results_dir,
                child_dir,
                out,
                drift_range,
                progress,
            )
        if name in require:
            stage.required = True
            if stage.status == "skipped":
                stage.status = "failed"
                stage.reason = f"{REQUIRED_SKIPPED}{stage.reason}"
                stage.cases = [
                    {
                        "name": c["name"],
                        "status": "failed" if c["status"] == "skipped" else c["status"],
                        "message": c["message"],
                    }
                    for c in stage.cases
                ]
        out.append(stage)
    return CiResult(state, out)


def _drift_range(
    root: str, store: Store, pin: str, drift_from: str | None
) -> tuple[str, str] | None:
    """``(old pin, pin)`` from ``drift_from`` (resolved in the store), else from the last rebase."""
    old = (
        store.resolve(drift_from, ["upstream"])
        if drift_from
        else last_rebase_pin(root, pin)
    )
    return (old, pin) if old else None


def _run_stage(
    name: str,
    ws: Workspace,
    layers: Any,
    backend: str,
    arch: str | None,
    results_dir: str | None,
    child_dir: str | None,
    before: Sequence[Stage],
    drift_range: tuple[str, str] | None = None,
    progress: Any = None,
) -> Stage:
    """One stage; any exception becomes its failure (one line)."""
    start = time.perf_counter()
    units = (lambda d, t, text: progress(d, t, f"{name}: {text}")) if progress else None
    try:
        if name == "verify":
            return stage_verify(ws)
        if name == "check":
            return stage_build(
                ws,
                layers,
                backend,
                arch,
                check=True,
                drift_range=drift_range,
                progress=units,
            )
        if name == "build":
            check = next((s for s in before if s.name == "check"), None)
            if (
                check is not None
                and check.status == "failed"
                and not check.reason.startswith(REQUIRED_SKIPPED)
            ):
                # the build would stop on the same compile errors, after far longer
                return Stage(
                    "build", "skipped", "the check stage failed: fix those errors first"
                )
            return stage_build(
                ws,
                layers,
                backend,
                arch,
                drift_range=drift_range,
                progress=units,
            )
        return stage_suites(
            ws.root,
            results_dir or ws.path(layout.SUITE_RESULTS_DIR),
            child_dir
            or ws.path(f"{layout.backend_dir(backend)}/{layout.BACKEND_SUITES}"),
            backend,
        )
    except OverlayError as exc:
        message = exc.message
    except Exception as exc:  # a gate reports every stage, whatever one of them hit
        message = f"internal error ({type(exc).__name__}: {exc})"
    return Stage(
        name,
        "failed",
        message,
        time.perf_counter() - start,
        [{"name": name, "status": "failed", "message": message}],
    )
