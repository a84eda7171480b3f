"""The compiler cache (ccache, sccache or none) in front of every compile of a build.

C/C++ objects get it through ``CMAKE_<LANG>_COMPILER_LAUNCHER``; the compile custom
commands (the fork's HIP objects) through a launcher script CMake runs in front of
every custom command (``RULE_LAUNCH_CUSTOM``, :func:`write_launcher`).
"""

from __future__ import annotations

import hashlib
import os
import shlex

from overlay.build.runlog import BuildLog, run_logged
from overlay.build.toolchain import Toolchain, ToolchainError
from overlay.fs.atomic import atomic_write

#: ``--cache`` values: the compiler cache put in front of every compile.
CACHES = ("ccache", "sccache", "none")


#: Under ``build/<backend>/``: the launcher of the compile custom commands and the CMake
#: file that installs it (:func:`write_launcher`).
LAUNCH_DIR = "launch"


#: The environment variable naming each cache's directory; a chroot build binds it.
CACHE_DIR_ENV = {"ccache": "CCACHE_DIR", "sccache": "SCCACHE_DIR"}


def resolve_cache(toolchain: Toolchain, cache: str | None) -> str:
    """The compiler cache a build uses.

    Args:
        toolchain: where the compilers run; cache: ``ccache``, ``sccache``, ``none``
            or ``None`` (ccache when it is installed there, else none).
    Returns:
        One of :data:`CACHES`.
    Raises:
        ToolchainError: an unknown name, or a cache that is not installed where the
            compilers run (exit 2).
    """
    if cache is None:
        return "ccache" if toolchain.has_tool("ccache") else "none"
    if cache not in CACHES:
        raise ToolchainError(
            f"unknown compiler cache {cache!r} (ccache, sccache or none)"
        )
    if cache != "none" and not toolchain.has_tool(cache):
        where = "the chroot" if toolchain.kind == "chroot" else "PATH"
        hint = (
            "provision the toolchain again (tools/rocm-toolchain.sh installs ccache and sccache)"
            if toolchain.kind == "chroot"
            else f"apt-get install {cache}, or --cache none"
        )
        raise ToolchainError(
            f"--cache {cache}: {cache} is not on the {where} where the compilers run "
            f"({toolchain.description})",
            hint=hint,
        )
    return cache


def launcher_path(backend_dir: str) -> str:
    """The launcher script of :func:`write_launcher` for ``build/<backend>``."""
    return os.path.join(backend_dir, LAUNCH_DIR, "custom")


def sccache_socket(backend_dir: str) -> str:
    """The sccache server's socket for one build directory (``SCCACHE_SERVER_UDS``).

    One server per build directory, started by the build's first compile and stopped
    when the build ends: a server left running inside the chroot's private mount
    namespace would serve a later build the directories bound for an earlier one.
    Under ``launch/`` unless that path is too long for a socket, then under ``/tmp``.
    """
    path = os.path.join(backend_dir, LAUNCH_DIR, "sccache.sock")
    if len(path.encode()) < 100:
        return path
    return os.path.join(
        "/tmp",
        f"overlay-sccache-{hashlib.sha1(backend_dir.encode()).hexdigest()[:12]}.sock",
    )


def _launcher_script(cache: str, socket: str) -> str:
    """The launcher: ``cache`` in front of a compiler, anything else as is."""
    run = '"$@"' if cache == "none" else f'{cache} "$@"'
    server = ""
    if cache == "sccache":
        server = (
            f"# one sccache server per build directory (overlay stops it when the build ends),\n"
            f"# unless the caller chose a server\n"
            f'if [ -z "${{SCCACHE_SERVER_UDS:-}}" ] && [ -z "${{SCCACHE_SERVER_PORT:-}}" ]; then\n'
            f"  SCCACHE_SERVER_UDS={shlex.quote(socket)}\n  export SCCACHE_SERVER_UDS\nfi\n"
        )
    return f"""#!/bin/sh
# Written by overlay build (--cache {cache}). CMake runs it in front of every C/C++
# compile (CMAKE_<LANG>_COMPILER_LAUNCHER) and every custom command (RULE_LAUNCH_CUSTOM):
# the compiler launchers do not reach custom commands, and the ROCm fork compiles its
# .hip files through them. It puts the cache in front of a compiler; other custom
# commands (ar, cmake -E) run unchanged.
# The chroot toolchain's hipcc wrapper puts ccache in front by itself; the choice is
# made here instead.
OVERLAY_NO_CCACHE=1
export OVERLAY_NO_CCACHE
{server}case "${{1##*/}}" in
  hipcc|nvcc|clang|clang++|clang-[0-9]*|clang++-[0-9]*|c++|cc|gcc|g++|gcc-[0-9]*|g++-[0-9]*|*-gcc|*-g++|*-c++)
    exec {run} ;;
esac
exec "$@"
"""


def write_launcher(backend_dir: str, cache: str) -> str:
    """Write ``build/<backend>/launch/{custom,rules.cmake}`` for ``cache``; return the
    CMake file to pass as ``-DCMAKE_PROJECT_INCLUDE`` (it sets the global
    ``RULE_LAUNCH_CUSTOM`` property to the launcher). Unchanged files are not rewritten,
    so ninja sees nothing new."""
    base = os.path.join(backend_dir, LAUNCH_DIR)
    os.makedirs(base, exist_ok=True)
    script = launcher_path(backend_dir)
    rules = os.path.join(base, "rules.cmake")
    texts = {
        script: _launcher_script(cache, sccache_socket(backend_dir)),
        rules: (
            "# Written by overlay build: the compiler cache launcher of the compile "
            "custom commands.\n"
            f'set_property(GLOBAL PROPERTY RULE_LAUNCH_CUSTOM "{script}")\n'
        ),
    }
    for path, text in texts.items():
        try:
            with open(path, encoding="utf-8") as fh:
                same = fh.read() == text
        except OSError:
            same = False
        if not same:
            atomic_write(path, text.encode(), durable=False)
    os.chmod(script, 0o755)
    return rules


def stop_sccache(
    toolchain: Toolchain, backend_dir: str, binds: list[str], log: BuildLog
) -> None:
    """Log the build's sccache statistics and stop its server (:func:`sccache_socket`)."""
    if os.environ.get("SCCACHE_SERVER_UDS") or os.environ.get("SCCACHE_SERVER_PORT"):
        return  # the caller's own server: leave it running
    sock = shlex.quote(sccache_socket(backend_dir))
    argv = toolchain.wrap(
        [
            "sh",
            "-c",
            f"SCCACHE_SERVER_UDS={sock} sccache --show-stats && "
            f"SCCACHE_SERVER_UDS={sock} sccache --stop-server >/dev/null",
        ],
        binds,
        backend_dir,
    )
    run_logged(argv, log)


def cache_binds(toolchain: Toolchain, cache: str) -> list[str]:
    """The cache directory to bind into the chroot (``$CCACHE_DIR`` / ``$SCCACHE_DIR`` of the
    caller, which ``tools/rocm-toolchain.sh exec`` passes on), created when missing; none
    on the host, where the compilers see it anyway."""
    var = CACHE_DIR_ENV.get(cache)
    path = os.environ.get(var or "", "")
    if toolchain.kind != "chroot" or not path or not os.path.isabs(path):
        return []
    os.makedirs(path, exist_ok=True)
    return [path]
