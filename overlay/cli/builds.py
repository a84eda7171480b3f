"""The machine commands: ``build``, ``drift`` (attribute errors), ``ci`` (the gate),
``doctor`` (what this machine can do)."""

from __future__ import annotations

import glob
import os

import click

from overlay import layout
from overlay.cli.options import backend_option, format_option
from overlay.cli.tools import exit_with, handle_errors
from overlay.errors import OverlayError
from overlay.workspace import Workspace


@click.command("drift")
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Compiler and linker output to read (e.g. build/rocm/build.log).",
)
@click.option(
    "--behaviour",
    is_flag=True,
    help="Instead of a log: compare the ROCm elementwise functors, compiled for the "
    "host, with upstream's CPU functors; drift since --from (default: the fork's merge "
    "base) fails (docs/build.md).",
)
@click.option(
    "--from",
    "--drift-from",
    "old_ref",
    metavar="REF",
    default=None,
    help="The pin before the bump (default: the 'before' pin of "
    f"{layout.LAST_REBASE_JSON}).",
)
@click.option(
    "--strip",
    "strip",
    multiple=True,
    metavar="DIR",
    help="Directory prefix to remove from paths (default: build/*/src under the root).",
)
@format_option(["text", "json", "markdown"])
@click.pass_obj
@handle_errors
def drift_cmd(
    ws: Workspace,
    log_path: str | None,
    behaviour: bool,
    old_ref: str | None,
    strip: tuple[str, ...],
    fmt: str,
) -> None:
    """Attribute every compile error and undefined symbol to the upstream commit
    behind it (--log), or find behaviour drift of the ROCm functors (--behaviour)."""
    # json and the drift modules load when `drift` runs, not at start-up
    import json

    if behaviour:
        # --behaviour: the functor comparison (export, host compiler) loads here
        from overlay.drift.behaviour import run_behaviour

        exit_with(run_behaviour(ws, old_ref, fmt))
    if log_path is None:
        raise OverlayError("drift needs --log FILE or --behaviour")

    # the drift attribution loads when `drift --log` runs
    from overlay.drift import attribute_log, render_markdown, render_text
    from overlay.rebase.plan import last_run_start

    manifest, store = ws.manifest, ws.store
    if old_ref is None:
        old_ref = last_run_start(ws.root)
    old = store.resolve(old_ref, ["upstream"])
    store.ensure_commit(manifest.pin, ["upstream", "fork"])
    prefixes = list(strip) or [
        os.path.abspath(p) for p in glob.glob(ws.path(layout.EXPORTS_GLOB))
    ]
    with open(log_path, encoding="utf-8", errors="replace") as fh:
        items = attribute_log(store, old, manifest.pin, fh.read(), prefixes)
    if fmt == "json":
        click.echo(json.dumps([i.as_dict() for i in items], indent=2))
    elif fmt == "markdown":
        click.echo(render_markdown(items), nl=False)
    else:
        click.echo(render_text(items), nl=False)
    exit_with(1 if items else 0)


@click.command("doctor")
@click.option("--no-network", is_flag=True, help="Do not probe the remotes.")
@click.pass_obj
@handle_errors
def doctor_cmd(ws: Workspace, no_network: bool) -> None:
    """Report git, the git store, remotes, CMake, the ROCm toolchain and the GPUs."""
    # doctor's probes (toolchain, GPUs) load when it runs
    from overlay.ci.doctor import run_checks

    checks = run_checks(ws, network=not (no_network or ws.offline))
    width = max(len(c.name) for c in checks)
    for c in checks:
        click.echo(f"{c.status:<4}  {c.name:<{width}}  {c.detail}")
    exit_with(1 if any(c.status == "fail" for c in checks) else 0)


def _stage_names(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[str, ...]:
    """``--only``/``--require`` values: repeatable, each a comma- or space-separated list."""
    # the gate's stage names: loaded when `ci` parses them, not at start-up
    from overlay.ci import STAGES
    from overlay.ci.gate import AUTO

    names = [n for value in values for n in value.replace(",", " ").split()]
    allowed = (*STAGES, AUTO) if param.name == "require" else STAGES
    for name in names:
        if name not in allowed:
            raise click.BadParameter(
                f"unknown stage {name!r} (stages: {', '.join(STAGES)})", ctx, param
            )
    return tuple(dict.fromkeys(names))


@click.command("ci")
@click.option(
    "--only",
    "only",
    multiple=True,
    metavar="STAGE[,STAGE]",
    callback=_stage_names,
    help="Run only these stages (verify, check, build, suites; repeat or comma list); "
    "the others are reported skipped.",
)
@click.option(
    "--require",
    "require",
    multiple=True,
    metavar="STAGE[,STAGE]",
    callback=_stage_names,
    help="These stages must run and pass: one this machine cannot run (skipped) fails "
    "the gate. `auto` (what `make ci` passes): verify, and check where a toolchain is "
    "found or $CI is set (docs/build.md).",
)
@backend_option(default="rocm")
@click.option(
    "--arch",
    default=None,
    help="HIP architectures for the build (default: the manifest's).",
)
@click.option(
    "--junit",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write JUnit XML here.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the JSON summary here.",
)
@click.option(
    "--markdown",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the PR-body Markdown here.",
)
@click.option(
    "--child-dir",
    default=None,
    help="Where the suite children are (default build/<backend>/suites).",
)
@click.option(
    "--drift-from",
    "drift_from",
    metavar="REF",
    default=None,
    help="The pin before the bump: a failing check or build names the upstream commit "
    "behind its errors (default: the pin the last rebase started from; in CI, the base "
    "branch's pin).",
)
@click.pass_obj
@handle_errors
def ci_cmd(
    ws: Workspace,
    only: tuple[str, ...],
    require: tuple[str, ...],
    backend: str,
    arch: str | None,
    junit: str | None,
    json_path: str | None,
    markdown: str | None,
    child_dir: str | None,
    drift_from: str | None,
) -> None:
    """The CI gate: verify, check, build, suites as far as this machine allows."""
    # the gate, its reports and the live progress line load when `ci` runs
    import json

    from overlay.ci import (
        STAGES,
        render_error,
        render_junit,
        render_markdown,
        render_text,
        run_ci,
    )
    from overlay.ci.gate import required_stages
    from overlay.fs.atomic import atomic_write
    from overlay.report.progress import LiveProgress

    def write(texts: tuple[str, str, str]) -> None:
        for path, text in zip((junit, json_path, markdown), texts, strict=True):
            if path:
                atomic_write(os.path.abspath(path), text.encode())

    try:
        require, note = required_stages(require, backend, ws.root)
        if note:
            click.echo(f"overlay ci: {note}", err=True)
        with LiveProgress("ci") as progress:
            result = run_ci(
                ws,
                stages=only or STAGES,
                require=require,
                backend=backend,
                arch=arch,
                child_dir=child_dir,
                drift_from=drift_from,
                progress=progress,
            )
    except OverlayError as exc:
        write(render_error(exc.message))  # the reports exist whenever asked for
        raise
    write(
        (
            render_junit(result),
            json.dumps(result.as_dict(), indent=2) + "\n",
            render_markdown(result),
        )
    )
    click.echo(render_text(result), nl=False)
    exit_with(1 if result.failed else 0)


@click.command("build")
@backend_option(required=True, help="Which backend to build.")
@click.option(
    "--arch",
    default=None,
    metavar="ARCHS",
    help="GPU architectures, comma-separated (default: the manifest's).",
)
@click.option(
    "--toolchain",
    "toolchain_spec",
    default=None,
    metavar="system|PATH",
    help="`system` (hipcc/nvcc on PATH or $ROCM_PATH) or a root made by "
    "tools/rocm-toolchain.sh.",
)
@click.option(
    "--jobs", "-j", type=click.IntRange(min=1), default=None, help="Parallel jobs."
)
@click.option(
    "--only-changed",
    is_flag=True,
    help="Compile only the translation units the series touches.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Every translation unit through the compiler front end only (-fsyntax-only); "
    "no objects.",
)
@click.option(
    "--target", default=None, metavar="T", help="A ninja target instead of the default."
)
@click.option(
    "--cache",
    type=click.Choice(["ccache", "sccache", "none"]),
    default=None,
    help="Compiler cache for the C++ objects and the HIP custom commands "
    "(default: ccache where the compilers run, else none).",
)
@click.option(
    "--link-check/--no-link-check",
    "link",
    default=True,
    show_default=True,
    help="After a full build, report undefined mlx::core symbols over every object of "
    "the library; with --check, over the symbols every unit's front end wrote.",
)
@click.option(
    "--drift-from",
    "drift_from",
    metavar="REF",
    default=None,
    help="Attribute errors and undefined symbols to the upstream commits since this pin "
    "(default: the pin the last rebase started from, when it moved to the manifest's "
    "pin).",
)
@click.pass_obj
@handle_errors
def build_cmd(
    ws: Workspace,
    backend: str,
    arch: str | None,
    toolchain_spec: str | None,
    jobs: int | None,
    only_changed: bool,
    check: bool,
    target: str | None,
    cache: str | None,
    link: bool,
    drift_from: str | None,
) -> None:
    """Export the patched tree, configure CMake offline, build with ninja, attribute
    errors."""
    # the build package (CMake, ninja, ccache) loads when `build` runs
    from overlay import build as _build
    from overlay.rebase.plan import drift_range

    if sum(bool(x) for x in (only_changed, check, target)) > 1:
        raise OverlayError("--only-changed, --check and --target cannot be combined")
    toolchain = _build.find_toolchain(backend, toolchain_spec, repo_root=ws.root)
    cache = _build.resolve_cache(toolchain, cache)
    layers = ws.layers(stepwise=True)
    archs, note = (
        _build.resolve_arch(arch, ws.manifest.architectures, toolchain)
        if backend == "rocm"
        else (arch, None)
    )
    options = _build.BuildOptions(
        backend,
        toolchain,
        arch=archs,
        jobs=jobs,
        only_changed=only_changed,
        check=check,
        target=target,
        notes=(note,) if note else (),
        cache=cache,
        link=link,
        drift_range=drift_range(ws, drift_from),
    )

    def waiting(pid: str) -> None:
        click.echo(
            f"build {backend}: waiting for another overlay build of build/{backend} "
            f"(pid {pid})",
            err=True,
        )

    with _build.LiveProgress(f"{'check' if check else 'build'} {backend}") as progress:
        result = _build.build(
            ws, options, layers=layers, progress=progress, on_wait=waiting
        )
    for line in result.report():
        click.echo(line)
    if not result.ok:
        exit_with(1)


#: The commands of this module.
COMMANDS = [build_cmd, drift_cmd, ci_cmd, doctor_cmd]
