"""``overlay suite ...``: list, run, plan and A/B the concurrency suites.

The commands only parse options, call :mod:`overlay.suites.runner` /
:mod:`overlay.suites.stats`, and render with :mod:`overlay.suites.report`.
Exit codes: 0 every run passed (skipped suites are not failures), 1 a run
failed (for ``ab``: a run of the with-fix column failed), 2 usage or
environment error (one ``overlay: ...`` line on stderr).

The context object is the command's :class:`~overlay.workspace.Workspace`: the
parent ``overlay`` group's (``-C``, ``--git-dir``, ``--offline``, ``--debug``), or
one for the current directory when the group runs on its own (tests,
``CliRunner``). The suites are read from :attr:`Workspace.suites_path
<overlay.workspace.Workspace.suites_path>` (``--suites``, else the repository's).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from types import MappingProxyType
from typing import TYPE_CHECKING

import click

from overlay import layout
from overlay.cli.mutate import mutate_cmd
from overlay.cli.options import format_option, output_option, suite_backend_option
from overlay.cli.tools import exit_with, handle_errors, workspace
from overlay.errors import EXIT_FINDINGS, EXIT_OK, OverlayError
from overlay.report.progress import LiveProgress
from overlay.suites import config as _config
from overlay.suites import racelab
from overlay.suites import report as _report
from overlay.suites import runner as _runner
from overlay.suites import stats as _stats
from overlay.suites.runner.common import ProgressFn

if TYPE_CHECKING:
    from overlay.workspace import Workspace

__all__ = ["suite"]


def _load(ws: Workspace) -> dict:
    """The suites of :attr:`Workspace.suites_path`, by name.

    Raises:
        SuiteConfigError: the file cannot be read or is invalid, or it declares no
            suite (an empty or truncated file: listing or running nothing must not
            look like success; exit 2).
    """
    suites = _config.load_suites(ws.suites_path, ws.base)
    if not suites:
        raise _config.SuiteConfigError(
            f"{ws.suites_path}: declares no suite (no [suites.<name>] table)",
            hint="add a suite (docs/suites.md), or pass --suites PATH to another file",
        )
    return suites


def _results_root(ws: Workspace, results_dir: str | None) -> str:
    """``--results``, else ``build/suite-results`` under the repository; absolute."""
    return os.path.abspath(
        results_dir or layout.under(ws.base, layout.SUITE_RESULTS_DIR)
    )


def _runs_line(live: LiveProgress, prefix: str = "") -> ProgressFn:
    """A runner ``progress`` callback ``(done, total, failures)`` that shows
    ``prefix i/n runs, k failed`` on ``live`` (the one progress display)."""

    def show(done: int, total: int, failures: int) -> None:
        live.show(f"{prefix}{done}/{total} runs, {failures} failed")

    return show


def _emit(text: str, output: str | None) -> None:
    click.echo(text, nl=False)
    if output:
        tmp = f"{output}.tmp.{os.getpid()}"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, output)
        except OSError as exc:
            raise OverlayError(f"cannot write {output}: {exc.strerror}") from None


@click.group(name="suite")
@click.option(
    "--suites",
    "suites_path",
    default=None,
    metavar="PATH",
    help=f"suites.toml to read (default <root>/{layout.SUITES_TOML}).",
)
@click.pass_context
def suite(ctx: click.Context, suites_path: str | None) -> None:
    """Run the concurrency suites in fresh processes and weigh the evidence."""
    ws = workspace(ctx)
    if suites_path:
        ws.suites_toml = os.path.abspath(suites_path)
    ctx.obj = ws


@suite.command("list")
@suite_backend_option()
@format_option(["text", "json"])
@click.pass_obj
@handle_errors
def list_cmd(ws: Workspace, backend: str | None, fmt: str) -> None:
    """List the suites and whether each would run on this machine."""
    suites = _load(ws)
    platform = _runner.detect_platform(backend)
    rows = []
    for s in suites.values():
        rows.append((s, _runner.skip_reason(s, platform)))
    if fmt == "json":
        click.echo(
            json.dumps(
                [
                    dict(
                        s.to_dict(), runs_here=reason is None, skip_reason=reason or ""
                    )
                    for s, reason in rows
                ],
                indent=2,
            )
        )
        return
    width = max([len(s.name) for s, _ in rows] + [5])
    for s, reason in rows:
        proves = f"proves #{s.proves}" if s.proves else "proves -"
        model = f"  {s.model}: {_report.HOST_MODEL_NOTE}" if s.model else ""
        click.echo(
            f"{s.name:<{width}}  {s.backend}/{s.hardware}  {s.runs} runs x {s.deadline:g} s  "
            f"{proves}  child: {' '.join(s.child)}{model}"
        )
        click.echo(
            f"{'':<{width}}  "
            + ("runs here" if reason is None else f"would be SKIPPED: {reason}")
        )


def _with_env(suites, pairs) -> list:
    """The suites with ``NAME=VALUE`` pairs set on top of their ``env-set`` (``--env``).

    The changed settings are what ``result.json`` records, so a run made with a
    different model setting says so.
    """
    extra = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not _config._ENV_RE.match(name):
            raise OverlayError(f"--env {pair!r}: expected NAME=VALUE")
        extra[name] = value
    if not extra:
        return list(suites)
    return [
        dataclasses.replace(
            s,
            env_set=MappingProxyType({**s.env_set, **extra}),
            env_remove=tuple(n for n in s.env_remove if n not in extra),
        )
        for s in suites
    ]


def _run_options(fn):
    """The options ``run`` and ``ab`` share (defined once, pip-tools style)."""
    for opt in reversed(
        [
            click.option(
                "--env",
                "env_pairs",
                multiple=True,
                metavar="NAME=VALUE",
                help="Set a variable for the children on top of the suite's env-set (repeatable); "
                "recorded with the results.",
            ),
            click.option(
                "--deadline",
                type=click.FloatRange(min=0, min_open=True),
                default=None,
                help="Per-run deadline in seconds (default: the suite's).",
            ),
            click.option(
                "--results",
                "results_dir",
                default=None,
                metavar="DIR",
                help=f"Results root (default <root>/{layout.SUITE_RESULTS_DIR}).",
            ),
            click.option(
                "--child-dir",
                default=None,
                envvar="OVERLAY_CHILD_DIR",
                metavar="DIR",
                help="Where the suite children were built. Env: OVERLAY_CHILD_DIR.",
            ),
            suite_backend_option(),
        ]
    ):
        fn = opt(fn)
    return fn


def _lab_dirs(ws: Workspace, suites, platform, child_dir: str | None) -> dict:
    """``{suite name: child dir}``: ``child_dir``, or for a runnable host-model suite
    without one, the race lab built from the patched layer (up to date, so usually
    no compile)."""
    dirs = {s.name: child_dir for s in suites}
    wanted = [
        s
        for s in suites
        if s.model and child_dir is None and _runner.skip_reason(s, platform) is None
    ]
    if wanted:
        built = racelab.build_layer(ws, "patched", progress=_lab_progress)
        for s in wanted:
            dirs[s.name] = built.out_dir
    return dirs


@suite.command("run")
@click.argument("names", nargs=-1)
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=None,
    help="Runs per suite (default: the suite's).",
)
@click.option(
    "--host-models",
    is_flag=True,
    help="Only the suites that run on a host model (race lab), not on a GPU.",
)
@_run_options
@format_option(_report.FORMATS)
@output_option()
@click.pass_obj
@handle_errors
def run_cmd(
    ws: Workspace,
    names,
    runs,
    host_models,
    env_pairs,
    deadline,
    results_dir,
    child_dir,
    backend,
    fmt,
    output,
) -> None:
    """Run suites (all when no NAME is given); exit 1 if any run failed.

    A host-model suite without --child-dir runs the race lab built from the
    patched layer (built first when it is missing or stale; docs/race-lab.md).
    """
    suites = _with_env(_config.select_suites(_load(ws), names), env_pairs)
    if host_models:
        suites = [s for s in suites if s.model]
        if not suites:
            raise OverlayError(
                "no host-model suite selected (a suite with a `model` key)"
            )
    platform = _runner.detect_platform(backend)
    results_dir = _results_root(ws, results_dir)
    base_dir = os.path.dirname(ws.suites_path)
    dirs = _lab_dirs(ws, suites, platform, child_dir)
    # Resolve every child that will run before running any, so a missing one costs no time.
    for s in suites:
        if _runner.skip_reason(s, platform) is None:
            _runner.resolve_child(s.child, dirs[s.name], base_dir)
    results = []
    for s in suites:
        with LiveProgress(s.name) as live:
            results.append(
                _runner.run_suite(
                    s,
                    results_dir,
                    child_dir=dirs[s.name],
                    base_dir=base_dir,
                    runs=runs,
                    deadline_s=deadline,
                    platform=platform,
                    progress=_runs_line(live),
                )
            )
    _emit(_report.render_results(results, fmt), output)
    exit_with(
        EXIT_FINDINGS
        if any(r.failed or r.status == "interrupted" for r in results)
        else EXIT_OK
    )


def _lab_progress(line: str) -> None:
    click.echo(f"race lab: {line}", err=True)


@suite.command("build")
@click.option(
    "--layer",
    type=click.Choice(["patched", "forked"]),
    default="patched",
    show_default=True,
    help="The layer whose files the children compile.",
)
@click.option(
    "--without",
    "without_patch",
    default=None,
    metavar="PATCH",
    help="Instead of a layer: the overlay with PATCH left out of the series.",
)
@click.option(
    "--out",
    "out_dir",
    default=None,
    metavar="DIR",
    help="Build directory (default <root>/build/race-lab/<layer> or without-<patch stem>).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Parallel compiles (default: CPUs).",
)
@click.pass_obj
@handle_errors
def build_cmd(
    ws: Workspace,
    layer: str,
    without_patch: str | None,
    out_dir: str | None,
    jobs: int | None,
) -> None:
    """Build the race lab's host-model children from an exported layer (docs/race-lab.md).

    The first line of stdout is the directory to pass as --child-dir.
    """
    if without_patch is not None and layer != "patched":
        raise OverlayError("give --layer or --without, not both")
    if without_patch is not None:
        built = racelab.build_without_patch(
            ws, without_patch, out_dir=out_dir, jobs=jobs, progress=_lab_progress
        )
    else:
        built = racelab.build_layer(
            ws, layer, out_dir=out_dir, jobs=jobs, progress=_lab_progress
        )
    click.echo(built.out_dir)
    click.echo(
        f"race lab {built.label} (tree {built.tree[:12]}): {len(built.programs)} children "
        f"({', '.join(os.path.basename(p) for p in built.programs)}); {built.compiled} object(s) "
        f"compiled in {built.seconds:.1f} s. A host model, not a GPU build."
    )


suite.add_command(mutate_cmd)


@suite.command("plan")
@click.option(
    "--baseline",
    type=float,
    required=True,
    help="Failure rate per run without the fix, in (0, 1].",
)
@click.option(
    "--confidence",
    type=float,
    default=0.99,
    show_default=True,
    help="Wanted confidence, in (0, 1).",
)
@click.option("--quiet", "-q", is_flag=True, help="Print only the number.")
@handle_errors
def plan_cmd(baseline: float, confidence: float, quiet: bool) -> None:
    """Clean runs needed to acquit a fix against a baseline failure rate (seed 003).

    The first line of stdout is the number alone, so scripts can read it.
    """
    n = _stats.runs_to_acquit(baseline, confidence)
    click.echo(str(n))
    if not quiet:
        chance = (1 - baseline) ** n
        click.echo(
            f"{n} clean runs in a row acquit the fix at {confidence:g} confidence "
            f"against a baseline failure rate of {baseline:g}: the chance of {n} clean "
            "runs with the fault still present "
            f"is (1 - {baseline:g})^{n} = {chance:.4g} <= {1 - confidence:.4g}."
        )


@suite.command("ab")
@click.argument("name")
@click.option(
    "--without",
    "without_patch",
    default=None,
    metavar="PATCH",
    help="Build the overlay with PATCH left out of the series and run its child as the "
    "fix-removed column.",
)
@click.option(
    "--without-child",
    "without_child",
    default=None,
    metavar="COMMAND",
    help="The fix-removed child: a program path, or a command line (shell-quoted words); "
    "it replaces the suite's whole child argv and is resolved like it.",
)
@click.option(
    "--without-layer",
    "without_layer",
    type=click.Choice(["forked"]),
    default=None,
    help="Build the fork's layer (no local fix at all) and run its child as the "
    "fix-removed column.",
)
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=None,
    help="Runs per column (default: the suite's).",
)
@_run_options
@format_option(_report.AB_FORMATS)
@output_option()
@click.pass_obj
@handle_errors
def ab_cmd(
    ws: Workspace,
    name,
    without_patch,
    without_child,
    without_layer,
    runs,
    env_pairs,
    deadline,
    results_dir,
    child_dir,
    backend,
    fmt,
    output,
):
    """Run NAME's child and a fix-removed child; compare with Fisher's exact test.

    Exit 1 when the with-fix column failed; a suite that is only a guard
    (the fix-removed child never failed) still exits 0, and the report says so.
    For a host-model suite, --without and --without-layer build the race lab
    from that tree (a few translation units), and the with-fix column uses the
    lab built from the patched layer unless --child-dir says otherwise.
    """
    (s,) = _with_env(_config.select_suites(_load(ws), [name]), env_pairs)
    if sum(x is not None for x in (without_patch, without_child, without_layer)) != 1:
        raise OverlayError(
            "give exactly one of --without PATCH, --without-layer forked and "
            "--without-child COMMAND"
        )
    platform = _runner.detect_platform(backend)
    if without_child is not None:
        without_argv = _child_argv(without_child)
    elif s.model and _runner.skip_reason(s, platform) is None:
        out_dir = _lab_without(ws, without_patch, without_layer)
        without_argv = [os.path.join(out_dir, s.child[0]), *s.child[1:]]
    else:
        out_dir = _build_without(ws, without_patch, backend or "rocm")
        without_argv = [os.path.join(out_dir, s.child[0]), *s.child[1:]]
    child_dir = _lab_dirs(ws, [s], platform, child_dir)[s.name]
    results_dir = _results_root(ws, results_dir)
    with LiveProgress(s.name) as live:
        ab = _runner.run_ab(
            s,
            without_argv,
            results_dir,
            runs=runs,
            child_dir=child_dir,
            base_dir=os.path.dirname(ws.suites_path),
            deadline_s=deadline,
            platform=platform,
            progress=_runs_line(live, "with fix: "),
            progress_b=_runs_line(live, "fix removed: "),
        )
    _emit(_report.render_ab(ab, fmt, root=ws.base), output)
    exit_with(EXIT_FINDINGS if ab.with_fix.failed else EXIT_OK)


def _child_argv(command: str) -> list[str]:
    """``--without-child COMMAND``: its words (shell-quoted).

    Raises:
        OverlayError: it does not split, or is empty (exit 2).
    """
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise OverlayError(f"--without-child: {exc}") from None
    if not argv:
        raise OverlayError("--without-child is empty")
    return argv


def _lab_without(ws: Workspace, patch: str | None, layer: str | None) -> str:
    """The race lab built from the series without ``patch``, or from ``layer``; its
    directory."""
    if patch is not None:
        built = racelab.build_without_patch(ws, patch, progress=_lab_progress)
    else:
        assert layer is not None  # ab_cmd gives exactly one of them
        built = racelab.build_layer(ws, layer, progress=_lab_progress)
    return built.out_dir


def _build_without(ws: Workspace, patch: str | None, backend: str) -> str:
    """The overlay built without ``patch`` (or, with ``None``, the fork's layer) from the
    command's store; the directory of its suite children."""
    # without (layers, the build package): only `--without` builds one
    from overlay.suites.without import build_forked, build_without, real_builder

    builder = real_builder(ws, backend)
    if patch is not None:
        return build_without(ws, patch, builder)
    return build_forked(ws, builder)
