"""``overlay build``: export the patched tree, configure CMake offline, build with ninja,
and attribute every compiler error to the patch hunk, the fork or upstream (docs/design.md §9).

Layout under ``<build_root>/<backend>/`` (``build_root`` defaults to ``<root>/build``)::

    src/        the patched tree, exported incrementally (unchanged files keep mtimes)
    obj/        the CMake/ninja build directory (compile_commands.json)
    deps/       offline stand-ins for MLX's downloads (nlohmann-json)
    check-symbols/  ``--check``'s symbol object of each unit (the front end's link check)
    suites/     the suite children's build directory (rocm/cuda, full builds only)
    install/    ``cmake --install obj`` for the suite children
    build.log   everything configure, ninja and the compilers printed

Toolchains (:func:`find_toolchain`): ``host`` (cpu backend: cmake/ninja/c++ on
PATH), ``system`` (``hipcc`` on PATH or in ``$ROCM_PATH/bin``, ``/opt/rocm`` by
default; ``nvcc`` for cuda), or a *chroot* root made by
``tools/rocm-toolchain.sh``: every cmake, ninja and compiler command then runs
through ``tools/rocm-toolchain.sh exec --root ROOT --bind <build dir> -- ...``;
the build directory is bound at its own path, so compiler messages carry host
paths and need no mapping.

Errors: :class:`ToolchainError` (no toolchain, missing tool; exit 2) and
:class:`BuildError` (configure failed; exit 1). Compile errors do not raise:
they come back in :class:`BuildResult` (``ok`` false; the CLI exits 1).

The package, one module per stage:

* :mod:`~overlay.build.toolchain` finds the toolchain and the architectures,
* :mod:`~overlay.build.cache` puts the compiler cache in front of the compiles,
* :mod:`~overlay.build.cmake` configures (options, errors),
* :mod:`~overlay.build.units` and :mod:`~overlay.build.check` run translation units
  (``--only-changed``, ``--check``),
* :mod:`~overlay.build.linkcheck` looks for undefined ``mlx::core`` symbols after a
  full build, :mod:`~overlay.build.symbols` from ``--check``'s units (the front end),
* :mod:`~overlay.build.results` holds what a build did and its report,
* :mod:`~overlay.build.options` is what one build is asked to do (:class:`BuildOptions`),
* :mod:`~overlay.build.run` drives it all (:func:`build`);
* :mod:`~overlay.build.runlog` is the build log.

Compiler errors are read by :mod:`overlay.build.diagnostics` (shared with ``overlay
drift``); the live display is :class:`overlay.report.progress.LiveProgress`.
"""

from overlay.build.cache import (
    CACHE_DIR_ENV,
    CACHES,
    LAUNCH_DIR,
    launcher_path,
    resolve_cache,
    sccache_socket,
    write_launcher,
)
from overlay.build.check import syntax_only_argv
from overlay.build.cmake import (
    CONFIGURE_RECORD,
    BuildError,
    cmake_error_summary,
    cmake_options,
)
from overlay.build.diagnostics import Diagnostic, parse_diagnostics
from overlay.build.linkcheck import (
    LinkCheck,
    UndefinedSymbol,
    is_mlx_core_symbol,
    link_check,
)
from overlay.build.options import BuildOptions
from overlay.build.results import BuildResult, UnitResult
from overlay.build.run import (
    BUILD_LOCK,
    BUILT_RECORD,
    attribute_diagnostics,
    build,
    changed_paths,
)
from overlay.build.toolchain import (
    BACKENDS,
    ENV_TOOLCHAIN_DIR,
    ROCWMMA_ARCH_RE,
    Toolchain,
    ToolchainError,
    default_toolchain_root,
    find_toolchain,
    resolve_arch,
    toolchain_script,
)
from overlay.build.units import HEADER_SUFFIXES, SOURCE_SUFFIXES
from overlay.report.progress import LiveProgress

__all__ = [
    "BACKENDS",
    "BUILD_LOCK",
    "BUILT_RECORD",
    "CACHES",
    "CACHE_DIR_ENV",
    "CONFIGURE_RECORD",
    "ENV_TOOLCHAIN_DIR",
    "HEADER_SUFFIXES",
    "LAUNCH_DIR",
    "ROCWMMA_ARCH_RE",
    "SOURCE_SUFFIXES",
    "BuildError",
    "BuildOptions",
    "BuildResult",
    "Diagnostic",
    "LinkCheck",
    "LiveProgress",
    "Toolchain",
    "ToolchainError",
    "UndefinedSymbol",
    "UnitResult",
    "attribute_diagnostics",
    "build",
    "changed_paths",
    "cmake_error_summary",
    "cmake_options",
    "default_toolchain_root",
    "find_toolchain",
    "is_mlx_core_symbol",
    "launcher_path",
    "link_check",
    "parse_diagnostics",
    "resolve_arch",
    "resolve_cache",
    "sccache_socket",
    "syntax_only_argv",
    "toolchain_script",
    "write_launcher",
]
