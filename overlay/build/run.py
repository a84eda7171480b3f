"""The build run: export, configure, compile (ninja, ``--only-changed`` or ``--check``),
link check, suite children, then attribute the errors."""

import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from overlay import layout
from overlay.build.attribute import Attributor
from overlay.build.cache import cache_binds, resolve_cache, stop_sccache, write_launcher
from overlay.build.check import check_tree
from overlay.build.cmake import cmake_options, configure, json_source_dir
from overlay.build.diagnostics import Diagnostic, parse_diagnostics
from overlay.build.linkcheck import link_check
from overlay.build.options import BuildOptions
from overlay.build.results import BuildResult
from overlay.build.runlog import BuildLog, run_logged
from overlay.build.toolchain import Toolchain
from overlay.build.units import compile_units
from overlay.engine.layers import Layers
from overlay.errors import OverlayError
from overlay.export import export_tree
from overlay.fs.atomic import atomic_write
from overlay.fs.locks import dir_lock
from overlay.git.store import Store
from overlay.lazy import lazy_pattern

if TYPE_CHECKING:
    from overlay.workspace import Workspace

_PROGRESS_RE = lazy_pattern(r"^\[(\d+)/(\d+)\] (.*)$")


def changed_paths(store: Store, layers: Layers) -> list[str]:
    """Repository paths the series adds or modifies (``forked`` -> ``patched``), sorted."""
    return sorted(
        row[5]
        for row in store.diff_tree(layers.forked, layers.patched)
        if row[4] != "D"
    )


#: In the build directory after a successful full build: the patched tree and the
#: configure record it was built with. A check of the same tree and configure has
#: nothing left to find (every unit compiled), so it runs nothing. Removed before
#: any other build, ``--target`` and ``--only-changed`` runs (objects change).
BUILT_RECORD = ".overlay-built.json"


#: The lock file in ``build/<backend>/`` (:func:`overlay.fs.atomic.dir_lock`): one overlay
#: build (and so one ninja) per build directory at a time.
BUILD_LOCK = ".overlay-build.lock"


def build(
    ws: "Workspace",
    options: BuildOptions,
    *,
    layers: Layers | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> BuildResult:
    """Export the patched tree, configure (when needed) and build; attribute errors.

    The whole run holds the build directory's lock (:data:`BUILD_LOCK`): a second
    ``overlay build`` of the same backend waits for the first, so two ninja
    processes never share one build directory (they would corrupt its
    ``.ninja_log`` and ``.ninja_deps``).

    The progress callbacks are arguments of their own, not options: they are where this
    run's output goes (made by the caller's live display), while ``options`` is what to
    build, one comparable value.

    Args:
        ws: the workspace: its store holds the layer trees; ``build/`` goes under its
            root by default; its manifest gives the default ``cmake_option``.
        options: what to build and how (:class:`BuildOptions`).
        layers: the tree to build, computed with ``stepwise=True`` (attribution needs
            each patch's tree); ``None``: the workspace's (``ws.layers(stepwise=True)``).
            ``suite ab --without`` passes the layers with one patch left out.
        progress: ``(done, total, text)`` callback (e.g. :class:`LiveProgress`).
        on_wait: called with the holder's pid when another build holds the build
            directory and this one waits for it.
    Returns:
        :class:`BuildResult` (``ok`` false when anything failed to compile).
    Raises:
        BuildError: CMake configure failed (exit 1; the first CMake error's message,
            location and any ``Could NOT find`` line are named, see
            :func:`cmake_error_summary`).
        ToolchainError: a tool could not be started, or the cache is not installed (exit 2).
        OverlayError: two of ``only_changed``/``check``/``target`` combined, the
            export was refused (hand-edited files), or no compile_commands.json
            for a check (exit 2).
        ManifestError, GitError, OfflineMiss, LayerError: the workspace's manifest or
            layers cannot be read or computed (``layers`` not given; exit 1 or 2).
    """
    o = options
    if sum(bool(x) for x in (o.only_changed, o.check, o.target)) > 1:
        raise OverlayError("--only-changed, --check and --target cannot be combined")
    if layers is None:
        layers = ws.layers(stepwise=True)
    # realpath: a build root that is a symlink (a scratch overlay sharing a build) keeps the
    # paths CMake was configured with, so nothing is reconfigured or rebuilt for the path alone
    backend_dir = os.path.realpath(
        os.path.join(o.build_root or ws.path(layout.BUILD_DIR), o.backend)
    )
    cache = resolve_cache(o.toolchain, o.cache)
    cmake_option = o.cmake_option or ws.manifest.cmake_option
    o = dataclasses.replace(o, suites_dir=o.suites_dir or ws.path(layout.SUITES_DIR))
    with dir_lock(backend_dir, BUILD_LOCK, on_wait=on_wait):
        return _build_locked(
            ws.store, layers, backend_dir, o, progress, cache, cmake_option
        )


@dataclasses.dataclass
class _Run:
    """What the steps of one locked build share: the inputs, the tools, the log."""

    store: Store
    layers: Layers
    backend_dir: str
    toolchain: Toolchain
    jobs: int | None
    log: BuildLog
    binds: list[str]
    progress: Callable[[int, int, str], None] | None
    link: bool = True


def _build_locked(
    store: Store,
    layers: Layers,
    backend_dir: str,
    o: BuildOptions,
    progress: Callable[[int, int, str], None] | None,
    cache: str,
    cmake_option: str,
) -> BuildResult:
    """:func:`build` once the build directory's lock is held: export, configure,
    compile, check the link, attribute; ``cache`` and ``cmake_option`` resolved."""
    backend, toolchain, suites_dir = o.backend, o.toolchain, o.suites_dir
    src = os.path.join(backend_dir, layout.BACKEND_SRC)
    obj = os.path.join(backend_dir, layout.BACKEND_OBJ)
    os.makedirs(obj, exist_ok=True)
    exported = export_tree(store, layers.patched, src)
    result = BuildResult(
        backend,
        toolchain.description,
        o.arch,
        src,
        obj,
        os.path.join(backend_dir, "build.log"),
        exported,
        mode="check" if o.check else "only-changed" if o.only_changed else "build",
        notes=list(o.notes),
        cache=cache,
    )
    binds = [backend_dir, *cache_binds(toolchain, cache)]
    run = _Run(
        store,
        layers,
        backend_dir,
        toolchain,
        o.jobs,
        BuildLog(result.log),
        binds,
        progress,
        o.link,
    )
    try:
        run.log.write(_log_header(result, layers.patched))
        opts = cmake_options(
            backend,
            toolchain,
            arch=o.arch,
            cmake_option=cmake_option,
            json_dir=json_source_dir(toolchain, backend_dir),
            cache=cache,
            launch_rules=write_launcher(backend_dir, cache),
        )
        configured = configure(result, toolchain, opts, run.binds, run.log)
        built = {"tree": layers.patched, "configure": configured}
        output = _compile(run, result, built, target=o.target, suites_dir=suites_dir)
        if cache == "sccache" and not result.no_work:
            stop_sccache(toolchain, backend_dir, run.binds, run.log)
        _read_errors(result, output)
        if result.mode == "build" and not o.target:
            _finish_full_build(run, result, built, link=o.link, suites_dir=suites_dir)
        attribute_diagnostics(store, layers, result.diagnostics)
    finally:
        run.log.close()
    if o.drift_range and not result.ok:
        attribute_drift(result, store, o.drift_range)
    return result


def _log_header(result: BuildResult, tree: str) -> str:
    """The build log's first lines: what is built, with what, and what the export did."""
    exported = result.export
    check = " --check" if result.mode == "check" else ""
    return (
        f"# overlay build --backend {result.backend}{check}: tree {tree}, "
        f"toolchain {result.toolchain}, arch {result.arch or '-'}, cache {result.cache}\n"
        f"# export: {len(exported.written)} written, {len(exported.removed)} removed, "
        f"{exported.unchanged} unchanged\n"
    )


def _compile(
    run: _Run,
    result: BuildResult,
    built: dict,
    *,
    target: str | None,
    suites_dir: str | None,
) -> str:
    """Run the mode's compile step (check, only-changed or ninja); return its output.

    A check of the tree the last full build compiled, with the same configure
    (:data:`BUILT_RECORD`), runs nothing (``result.no_work``); any other run first
    removes that record, since objects are about to change.
    """
    built_path = os.path.join(result.obj, BUILT_RECORD)
    if result.mode != "check":
        _remove(built_path)
    elif _read_json(built_path) == built:
        result.no_work = True  # every unit compiled in this very tree, same configure
        run.log.write(
            f"# check: {built_path} records a successful full build of this tree\n"
        )
        return ""
    if result.mode == "check":
        return check_tree(
            result,
            run.toolchain,
            run.binds,
            run.jobs,
            run.log,
            run.progress,
            symbols=run.link,
        )
    if result.mode == "only-changed":
        return _only_changed(run, result, suites_dir)
    return run_ninja(
        result, run.toolchain, run.binds, run.jobs, target, run.log, run.progress
    )


def _only_changed(run: _Run, result: BuildResult, suites_dir: str | None) -> str:
    """Compile the units the series changes, and the suite children's units when their
    build directory is configured; return the output."""
    extra = []
    suites_obj = os.path.join(run.backend_dir, layout.BACKEND_SUITES)
    if os.path.isfile(os.path.join(suites_obj, "compile_commands.json")):
        extra.append(suites_obj)
        if suites_dir:
            run.binds.append(os.path.abspath(suites_dir))
    return compile_units(
        result,
        changed_paths(run.store, run.layers),
        run.toolchain,
        run.binds,
        run.jobs,
        run.log,
        extra,
        run.progress,
    )


def _read_errors(result: BuildResult, output: str) -> None:
    """Fill the result's errors from the compile output: located diagnostics, lines
    without a location, ninja's ``FAILED:`` targets."""
    diags, other = parse_diagnostics(output, result.src, result.obj)
    result.failed_targets = [
        line[len("FAILED: ") :].strip()
        for line in output.splitlines()
        if line.startswith("FAILED: ")
    ]
    result.other_errors = other
    result.diagnostics = diags


def _finish_full_build(
    run: _Run, result: BuildResult, built: dict, *, link: bool, suites_dir: str | None
) -> None:
    """After a full build, each step only while the build is ok: the link check, the
    :data:`BUILT_RECORD`, the suite children (rocm/cuda, when ``suites_dir`` holds a
    CMake project)."""
    if link and result.ok:
        result.link = link_check(result.obj, run.toolchain, run.binds, run.log)
    if not result.ok:
        return
    atomic_write(
        os.path.join(result.obj, BUILT_RECORD),
        json.dumps(built, indent=1).encode(),
        durable=False,
    )
    if (
        result.backend in ("rocm", "cuda")
        and suites_dir
        and os.path.isfile(os.path.join(suites_dir, "CMakeLists.txt"))
    ):
        result.suites = build_suites(
            result,
            run.toolchain,
            run.binds,
            run.jobs,
            run.log,
            result.backend,
            result.arch,
            suites_dir,
        )


def attribute_diagnostics(
    store: Store, layers: Layers, diagnostics: Sequence[Diagnostic]
) -> None:
    """Set each in-tree diagnostic's ``origin``: who wrote its line (a patch hunk, the
    fork, upstream; :class:`overlay.build.attribute.Attributor`).

    Args:
        store: git store; layers: computed with ``stepwise=True``;
        diagnostics: from :func:`overlay.build.diagnostics.parse_diagnostics` (changed in
            place; those outside the tree are left alone).
    Raises:
        OverlayError: layers without per-patch trees (exit 2).
    """
    located = [
        (d.path, d.line)
        for d in diagnostics
        if d.in_tree and d.path is not None and d.line is not None
    ]
    if not located:
        return
    origins = Attributor(store, layers).attribute(located)
    for d in diagnostics:
        if d.in_tree and d.path is not None and d.line is not None:
            d.origin = origins.get((d.path, d.line))


def attribute_drift(
    result: BuildResult, store: Store, drift_range: tuple[str, str]
) -> None:
    """Fill ``result.drift`` and each undefined symbol's cause from the build log."""
    # drift: only a failed build given a drift range reads its log again
    from overlay.drift import attribute_log, short

    try:
        with open(result.log, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return
    items = attribute_log(store, drift_range[0], drift_range[1], text, [result.src])
    result.drift_from = drift_range[0]
    checked = {u.symbol for u in result.link.undefined} if result.link else set()
    # an undefined symbol of the link check shows its cause on its own line
    result.drift = [
        short(item)
        for item in items
        if item.diagnostic.kind != "undefined" or item.diagnostic.message not in checked
    ]
    causes = {
        i.diagnostic.message: i for i in items if i.diagnostic.kind == "undefined"
    }
    for u in result.link.undefined if result.link else []:
        item = causes.get(u.symbol)
        if item is not None:
            u.cause = (
                f"upstream {item.commit[:12]} {item.subject}" if item.commit else None
            )
            u.fork_file = item.fork_file


def _read_json(path: str) -> object:
    """The JSON in ``path``, or ``None`` when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _remove(path: str) -> None:
    """Remove ``path`` when it exists."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def run_ninja(
    result: BuildResult,
    toolchain: Toolchain,
    binds: list[str],
    jobs: int | None,
    target: str | None,
    log: BuildLog,
    progress: Callable[[int, int, str], None] | None,
) -> str:
    """Run ninja over the build directory (``-k 0``), reporting ``[n/N]`` progress;
    fill the result's times and status and return ninja's output.
    """
    argv = ["ninja", "-C", result.obj, "-k", "0"]
    if jobs:
        argv += ["-j", str(jobs)]
    if target:
        argv.append(target)
    env = dict(os.environ, NINJA_STATUS="[%f/%t] ")

    def on_line(line: str) -> None:
        m = _PROGRESS_RE.match(line)
        if m and progress is not None:
            progress(int(m.group(1)), int(m.group(2)), m.group(3))

    t0 = time.perf_counter()
    status, output = run_logged(
        toolchain.wrap(argv, binds, result.obj), log, env=env, on_line=on_line
    )
    result.build_seconds = time.perf_counter() - t0
    result.returncode = status
    result.no_work = "ninja: no work to do." in output
    return output


def build_suites(
    result: BuildResult,
    toolchain: Toolchain,
    binds: list[str],
    jobs: int | None,
    log: BuildLog,
    backend: str,
    arch: str | None,
    suites_dir: str,
) -> str:
    """Install MLX into ``install/`` and build the suite children into ``suites/``."""
    backend_dir = os.path.dirname(result.obj)
    prefix = os.path.join(backend_dir, "install")
    sobj = os.path.join(backend_dir, layout.BACKEND_SUITES)
    suites_dir = os.path.abspath(suites_dir)
    b = [*binds, suites_dir]
    status, _ = run_logged(
        toolchain.wrap(
            ["cmake", "--install", result.obj, "--prefix", prefix], b, result.obj
        ),
        log,
    )
    if status != 0:
        return f"failed: cmake --install (exit {status}); see {result.log}"
    pinned = os.path.join(result.src, "mlx", "backend", "rocm")
    opts = [
        "-G",
        "Ninja",
        f"-DCMAKE_PREFIX_PATH={prefix}",
        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
        f"-DOVERLAY_PINNED_DIR={pinned}",
        f"-DOVERLAY_PINNED_LANGUAGE={'HIP' if backend == 'rocm' else 'CUDA'}",
    ]
    if not os.path.isfile(os.path.join(pinned, "pinned.cu")):
        opts.append("-DOVERLAY_PINNED_LANGUAGE=OFF")
    # Not CMAKE_HIP_COMPILER: MLX's backend drives hipcc through custom commands, but the
    # children's CMake HIP language refuses the hipcc wrapper and finds clang itself.
    opts += [
        a
        for a in toolchain.cmake_args
        if a.startswith(("-DCMAKE_CUDA_COMPILER=", "-DCMAKE_CXX_FLAGS="))
    ]
    if arch:
        opts.append(
            f"-DCMAKE_{'HIP' if backend == 'rocm' else 'CUDA'}_ARCHITECTURES={arch}"
        )
    status, _ = run_logged(
        toolchain.wrap(
            ["cmake", "-S", suites_dir, "-B", sobj, *opts],
            b,
            sobj if os.path.isdir(sobj) else backend_dir,
        ),
        log,
    )
    if status != 0:
        return f"failed: configure of {suites_dir} (exit {status}); see {result.log}"
    argv = ["ninja", "-C", sobj, "-k", "0"] + (["-j", str(jobs)] if jobs else [])
    status, output = run_logged(toolchain.wrap(argv, b, sobj), log)
    diags, other = parse_diagnostics(output, result.src, sobj)
    result.diagnostics.extend(diags)
    result.other_errors.extend(other)
    if status != 0:
        result.returncode = status
        return f"failed: ninja in {sobj} (exit {status}); see {result.log}"
    return f"built in {sobj}"
