"""What one build is asked to do (:class:`BuildOptions`), apart from the workspace it
builds and the callbacks that show its progress (:func:`overlay.build.build`)."""

import dataclasses

from overlay.build.toolchain import Toolchain


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    """The options of one :func:`overlay.build.build`, one value for every caller
    (``overlay build``, the gate's check and build stages, ``suite ab --without``).

    Attributes:
        backend: ``rocm``, ``cpu`` or ``cuda``.
        toolchain: from :func:`overlay.build.find_toolchain`.
        arch: ``;``-separated architectures (see :func:`overlay.build.resolve_arch`) or
            ``None``.
        jobs: ninja ``-j`` / parallel units for ``only_changed`` and ``check``
            (``None``: ninja's default, the CPU count for units).
        only_changed: compile only the translation units the series touches (and the
            suite children when their build directory is configured), timing each.
        check: every translation unit through the compiler front end only
            (``-fsyntax-only``, from ``compile_commands.json`` and the HIP custom
            commands); no object is written and nothing is built first.
        target: a ninja target instead of the default (not with ``only_changed``
            or ``check``).
        build_root: directory holding ``<backend>/``; ``None``: ``<root>/build``.
        cmake_option: the backend switch; ``None``: the manifest's (``[backend] cmake-option``).
        suites_dir: the suite children's CMake project, built after a full rocm/cuda
            build when it holds a ``CMakeLists.txt``; ``None``: the repository's
            ``patches-rocm/suites``.
        notes: lines to carry into the report.
        cache: the compiler cache (``ccache``, ``sccache``, ``none``; ``None``: ccache
            when present where the compilers run), for the C/C++ objects
            (``CMAKE_<LANG>_COMPILER_LAUNCHER``) and the compile custom commands such as
            the fork's HIP objects (``RULE_LAUNCH_CUSTOM``,
            :func:`overlay.build.write_launcher`). In the chroot, the directory named by
            ``CCACHE_DIR``/``SCCACHE_DIR`` is bound.
        link: after a successful full build (no ``target``), the link check
            (:func:`overlay.build.link_check`): undefined ``mlx::core`` symbols fail the
            build; with ``check``, the front end's link check over the units' symbols
            (:mod:`overlay.build.symbols`), which fails the check the same way.
        drift_range: ``(old pin, new pin)`` commit SHAs: when the run fails, each error
            and undefined symbol is attributed to the upstream commit of that range
            behind it (:func:`overlay.drift.attribute_log`).
    """

    backend: str
    toolchain: Toolchain
    arch: str | None = None
    jobs: int | None = None
    only_changed: bool = False
    check: bool = False
    target: str | None = None
    build_root: str | None = None
    cmake_option: str | None = None
    suites_dir: str | None = None
    notes: tuple[str, ...] = ()
    cache: str | None = None
    link: bool = True
    drift_range: tuple[str, str] | None = None
