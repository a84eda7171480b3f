"""``overlay build``: export the patched tree, configure CMake offline, build with ninja,
and attribute every compiler error to the patch hunk, the fork or upstream (DESIGN 9).

Layout under ``<build_root>/<backend>/`` (``build_root`` defaults to ``<root>/build``)::

    src/        the patched tree, exported incrementally (unchanged files keep mtimes)
    obj/        the CMake/ninja build directory (compile_commands.json)
    deps/       offline stand-ins for MLX's downloads (nlohmann-json)
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
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from overlay.errors import EXIT_FINDINGS, OverlayError
from overlay.export import ExportResult, export_tree
from overlay.fsutil import atomic_write, dir_lock
from overlay.gitstore import Store
from overlay.layers import Layers

BACKENDS = ("rocm", "cpu", "cuda")
#: Default toolchain root written by ``tools/rocm-toolchain.sh``.
ENV_TOOLCHAIN_DIR = "OVERLAY_TOOLCHAIN_DIR"
#: Architectures for which the fork's CMake requires rocWMMA (not in Debian's packages).
ROCWMMA_ARCH_RE = re.compile(r"^(gfx1[12]|gfx908|gfx90a|gfx942)")
CONFIGURE_RECORD = ".overlay-configure.json"
SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c", ".hip", ".cu")
HEADER_SUFFIXES = (".h", ".hpp", ".hh", ".cuh", ".inc")

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PROGRESS_RE = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")
_DIAG_RE = re.compile(
    r"^(?P<path>[^\s:][^:]*?):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error): (?P<msg>.*)$"
)
_TOOL_ERROR_RE = re.compile(
    r"^(?P<tool>[^\s:]+): (?:fatal )?error: (?P<msg>.*)$|.*undefined reference to .*"
)


class ToolchainError(OverlayError):
    """No usable toolchain or a missing tool (exit 2)."""


class BuildError(OverlayError):
    """The build could not run to the compile stage: configure failed (exit 1)."""

    exit_code = EXIT_FINDINGS


# ----------------------------------------------------------------- toolchains


def default_toolchain_root() -> str:
    """``$OVERLAY_TOOLCHAIN_DIR``, else ``~/.cache/overlay/rocm-toolchain`` (as the script)."""
    return os.environ.get(ENV_TOOLCHAIN_DIR) or os.path.join(
        os.path.expanduser("~"), ".cache", "overlay", "rocm-toolchain"
    )


def toolchain_script(root: str | None = None) -> str | None:
    """Path of ``tools/rocm-toolchain.sh``: under ``root``, beside this package, or ``None``."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for base in (root, here):
        if base:
            path = os.path.join(base, "tools", "rocm-toolchain.sh")
            if os.path.isfile(path):
                return path
    return None


def _read_env_file(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for raw in fh:
                raw = raw.strip()
                if not raw or raw.startswith("#") or "=" not in raw:
                    continue
                key, value = raw.split("=", 1)
                words = shlex.split(value)
                out[key] = (
                    words[0]
                    if len(words) == 1
                    else " ".join(shlex.quote(w) for w in words)
                )
    except (OSError, ValueError):
        pass
    return out


@dataclasses.dataclass
class Toolchain:
    """How to run cmake, ninja and the compilers.

    Attributes:
        kind: ``"host"`` (tools on PATH), ``"system"`` (ROCm/CUDA on the host) or
            ``"chroot"`` (a root made by ``tools/rocm-toolchain.sh``).
        description: one line for messages (``chroot /root/.cache/...``).
        root: the toolchain root (chroot only).
        script: ``tools/rocm-toolchain.sh`` (chroot only).
        cmake_args: backend arguments the toolchain needs (quirks, compiler paths).
        json_dir: a FetchContent source dir for nlohmann-json, valid where cmake runs
            (``None``: make one under ``deps/``).
        default_arch: architectures to use when neither ``--arch`` nor a usable
            manifest value is given (chroot: ``gfx1030``).
        rocwmma: rocWMMA is available (false for the chroot).
    """

    kind: str
    description: str
    root: str | None = None
    script: str | None = None
    cmake_args: list[str] = dataclasses.field(default_factory=list)
    json_dir: str | None = None
    default_arch: str | None = None
    rocwmma: bool = True

    def wrap(
        self, argv: Sequence[str], binds: Sequence[str], cwd: str | None = None
    ) -> list[str]:
        """``argv`` as run by this toolchain (unchanged on the host).

        Args:
            argv: the command; binds: host directories the command needs (chroot);
            cwd: working directory inside the chroot.
        Returns:
            The argv to pass to :mod:`subprocess`.
        """
        if self.kind != "chroot":
            return list(argv)
        out = [
            self.script or "tools/rocm-toolchain.sh",
            "exec",
            "--root",
            self.root or "",
        ]
        for b in binds:
            out += ["--bind", b]
        if cwd:
            out += ["--cwd", cwd]
        return out + ["--", *argv]

    def has_ccache(self) -> bool:
        """Whether ``ccache`` runs where the compilers run."""
        return self.has_tool("ccache")

    def has_tool(self, name: str) -> bool:
        """Whether the program ``name`` is on the ``PATH`` where the compilers run (in the
        chroot: ``/usr/bin`` or ``/usr/local/bin`` of its root; else the host's ``PATH``)."""
        if self.kind == "chroot":
            return any(
                os.path.exists(os.path.join(self.root or "", "chroot", d, name))
                for d in ("usr/bin", "usr/local/bin")
            )
        return shutil.which(name) is not None


def _system_hipcc() -> str | None:
    found = shutil.which("hipcc")
    if found:
        return found
    rocm = os.environ.get("ROCM_PATH") or "/opt/rocm"
    cand = os.path.join(rocm, "bin", "hipcc")
    return cand if os.access(cand, os.X_OK) else None


def _chroot_toolchain(root: str, repo_root: str | None) -> Toolchain:
    root = os.path.abspath(root)
    if not os.path.isfile(os.path.join(root, "READY")):
        raise ToolchainError(
            f"no ROCm toolchain at {root} (no READY file)",
            hint=f"provision it: tools/rocm-toolchain.sh --root {root}",
        )
    env = _read_env_file(os.path.join(root, "toolchain.env"))
    script = toolchain_script(repo_root) or env.get("OVERLAY_TOOLCHAIN_SCRIPT")
    if not script or not os.path.isfile(script):
        raise ToolchainError(
            "tools/rocm-toolchain.sh not found (needed to run the chroot toolchain)"
        )
    if os.geteuid() != 0:
        raise ToolchainError(
            f"the chroot toolchain at {root} needs root (chroot, mount, unshare)",
            hint="run as root, or use --toolchain system on a host with ROCm",
        )
    try:
        with open(os.path.join(root, "cmake-args.txt"), encoding="utf-8") as fh:
            args = [line.rstrip("\n") for line in fh if line.strip()]
    except OSError:
        args = shlex.split(env.get("OVERLAY_CMAKE_ARGS", ""))
    json_dir = env.get("OVERLAY_JSON_SOURCE_DIR_IN_CHROOT")
    return Toolchain(
        "chroot",
        f"chroot {root}",
        root=root,
        script=os.path.abspath(script),
        cmake_args=args,
        json_dir=json_dir,
        default_arch=env.get("OVERLAY_ROCM_ARCH_DEFAULT") or "gfx1030",
        rocwmma=False,
    )


def _offline_args() -> list[str]:
    return [
        "-DUSE_SYSTEM_FMT=ON",
        "-DMLX_BUILD_GGUF=OFF",
        "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
    ]


def _gcc_major() -> int:
    cxx = shutil.which("c++") or shutil.which("g++")
    if not cxx:
        return 0
    try:
        out = subprocess.run(
            [cxx, "-dumpversion"], capture_output=True, text=True, timeout=20
        ).stdout
        return int(out.strip().split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def find_toolchain(
    backend: str, spec: str | None, *, repo_root: str | None = None
) -> Toolchain:
    """Pick the toolchain for ``backend``.

    Args:
        backend: ``rocm``, ``cpu`` or ``cuda``.
        spec: ``None`` (auto), ``"system"``, or a toolchain root directory.
            Auto for rocm: ``system`` when ``hipcc`` is found (PATH, ``$ROCM_PATH``,
            ``/opt/rocm``), else the default chroot root when its ``READY`` exists.
            Auto for cpu: the host; for cuda: ``nvcc`` on PATH.
        repo_root: the overlay repository (to find ``tools/rocm-toolchain.sh``).
    Returns:
        A :class:`Toolchain`.
    Raises:
        ToolchainError: "no ROCm toolchain" / "no CUDA toolchain", a root without
            ``READY``, a chroot without root privileges, cmake or ninja missing (exit 2).
    """
    if backend not in BACKENDS:
        raise ToolchainError(f"unknown backend {backend!r} (rocm, cpu or cuda)")
    if spec not in (None, "system"):
        return _chroot_toolchain(spec, repo_root)
    if backend == "rocm":
        hipcc = _system_hipcc()
        if hipcc is None and spec is None:
            default = default_toolchain_root()
            if os.path.isfile(os.path.join(default, "READY")):
                return _chroot_toolchain(default, repo_root)
            raise ToolchainError(
                f"no ROCm toolchain: hipcc is not on PATH nor in $ROCM_PATH/bin (/opt/rocm), and "
                f"{default} holds no provisioned toolchain",
                hint="install ROCm, or provision a compile-only one: tools/rocm-toolchain.sh",
            )
        if hipcc is None:
            raise ToolchainError(
                "no ROCm toolchain: hipcc is not on PATH nor in $ROCM_PATH/bin (/opt/rocm)",
                hint="install ROCm, or pass --toolchain DIR (tools/rocm-toolchain.sh)",
            )
        rocm = os.path.dirname(os.path.dirname(os.path.realpath(hipcc)))
        args = [
            f"-DCMAKE_HIP_COMPILER={hipcc}",
            f"-DCMAKE_PREFIX_PATH={rocm}",
            *_offline_args(),
        ]
        tc = Toolchain("system", f"system ROCm ({hipcc})", cmake_args=args)
    elif backend == "cuda":
        nvcc = shutil.which("nvcc") or (
            os.path.join(os.environ.get("CUDA_PATH", "/usr/local/cuda"), "bin", "nvcc")
        )
        if not os.access(nvcc, os.X_OK):
            raise ToolchainError(
                "no CUDA toolchain: nvcc is not on PATH nor in $CUDA_PATH/bin (/usr/local/cuda)"
            )
        tc = Toolchain(
            "system",
            f"system CUDA ({nvcc})",
            cmake_args=[f"-DCMAKE_CUDA_COMPILER={nvcc}", *_offline_args()],
        )
    else:
        tc = Toolchain("host", "host compilers", cmake_args=_offline_args())
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            raise ToolchainError(
                f"{tool} not found on PATH",
                hint="apt-get install cmake ninja-build (docs/build.md)",
            )
    if tc.kind != "chroot" and backend == "rocm" and _gcc_major() >= 16:
        tc.cmake_args.append("-DCMAKE_CXX_FLAGS=-include format")
    return tc


def resolve_arch(
    arch: str | None, manifest_archs: Sequence[str], toolchain: Toolchain
) -> tuple[str, str | None]:
    """The HIP architectures to build and a note on how they were chosen.

    Args:
        arch: ``--arch`` (comma- or semicolon-separated), or ``None``.
        manifest_archs: the manifest's ``backend.architectures``.
        toolchain: the chosen toolchain (a chroot has no rocWMMA).
    Returns:
        ``(archs joined with ';', note or None)``.
    Raises:
        ToolchainError: ``--arch`` names a rocWMMA architecture the chroot cannot
            build, or no architecture is known at all (exit 2).
    """
    if arch:
        archs = [a for a in re.split(r"[,;\s]+", arch) if a]
        if not toolchain.rocwmma:
            bad = [a for a in archs if ROCWMMA_ARCH_RE.match(a)]
            if bad:
                raise ToolchainError(
                    f"{', '.join(bad)} need rocWMMA, which the chroot toolchain lacks "
                    f"(fork CMake requires it for gfx11*/gfx12*/gfx908/gfx90a/gfx942)",
                    hint=f"compile-check with --arch {toolchain.default_arch or 'gfx1030'}",
                )
        return ";".join(archs), None
    archs = list(manifest_archs)
    if archs and (
        toolchain.rocwmma or not any(ROCWMMA_ARCH_RE.match(a) for a in archs)
    ):
        return ";".join(archs), None
    if toolchain.default_arch:
        why = (
            f"the manifest's {', '.join(archs)} need rocWMMA, which this toolchain lacks"
            if archs
            else "the manifest names no architecture"
        )
        return toolchain.default_arch, f"building for {toolchain.default_arch}: {why}"
    raise ToolchainError(
        "no GPU architecture: pass --arch (e.g. gfx1100) or set backend.architectures"
    )


# -------------------------------------------------------------- compiler cache

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
    import hashlib

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
            "# Written by overlay build: the compiler cache launcher of the compile custom commands.\n"
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


def _stop_sccache(
    toolchain: Toolchain, backend_dir: str, binds: list[str], log: _Log
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
    _run_logged(argv, log)


# ---------------------------------------------------------------- diagnostics


@dataclasses.dataclass
class Diagnostic:
    """One compiler error.

    Attributes:
        path: repository path when the file is in the exported tree, else the path
            as the compiler printed it.
        line, col: 1-based position (``col`` may be ``None``).
        severity: ``error`` or ``fatal error``.
        message: the compiler's text after ``error:``.
        in_tree: the file is part of the patched tree (``path`` is repository-relative).
        count: how many compiler runs reported this same error (headers).
        origin: filled by attribution (:class:`overlay.attribute.Origin` or ``None``).
    """

    path: str
    line: int
    col: int | None
    severity: str
    message: str
    in_tree: bool
    count: int = 1
    origin: object | None = None

    def attribution(self) -> str:
        """``patch X hunk #N`` / ``from the fork`` / ``from upstream`` / ``outside the tree``."""
        if not self.in_tree:
            return "outside the tree"
        if self.origin is None:
            return "not attributed"
        return self.origin.label()  # type: ignore[attr-defined]

    def format(self) -> str:
        """``path:line:col: error: message [attribution]``."""
        col = f":{self.col}" if self.col else ""
        more = f" (reported {self.count}x)" if self.count > 1 else ""
        return f"{self.path}:{self.line}{col}: {self.severity}: {self.message} [{self.attribution()}]{more}"


def _map_path(path: str, src: str, cwd: str) -> tuple[str, bool]:
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))
    for base in {os.path.normpath(src), os.path.realpath(src)}:
        if full.startswith(base + os.sep):
            return os.path.relpath(full, base).replace(os.sep, "/"), True
    real = os.path.realpath(full)
    base = os.path.realpath(src)
    if real.startswith(base + os.sep):
        return os.path.relpath(real, base).replace(os.sep, "/"), True
    return path, False


def parse_diagnostics(
    text: str, src: str, cwd: str
) -> tuple[list[Diagnostic], list[str]]:
    """Compiler errors in ``text`` (gcc, clang, hipcc formats), deduplicated.

    Args:
        text: build output; src: the exported tree (paths under it become
            repository paths); cwd: directory relative paths are resolved against.
    Returns:
        ``(located errors in order of first appearance, other error lines)``
        (``clang: error: ...``, ``undefined reference``: no file and line).
    """
    found: dict[tuple, Diagnostic] = {}
    other: list[str] = []
    for raw in text.splitlines():
        line = _ANSI_RE.sub("", raw).rstrip()
        m = _DIAG_RE.match(line)
        if m:
            path, in_tree = _map_path(m.group("path"), src, cwd)
            col = int(m.group("col")) if m.group("col") else None
            key = (path, int(m.group("line")), col, m.group("msg"))
            if key in found:
                found[key].count += 1
            else:
                found[key] = Diagnostic(
                    path,
                    int(m.group("line")),
                    col,
                    m.group("sev"),
                    m.group("msg"),
                    in_tree,
                )
            continue
        if _TOOL_ERROR_RE.match(line) and line not in other:
            other.append(line)
    return list(found.values()), other


_CMAKE_ERROR_RE = re.compile(
    r"^CMake Error(?: (?:at|in) (?P<where>[^\s:][^:]*(?::\d+)?(?: \([^)]*\))?))?:\s*(?P<msg>.*)$"
)
_CMAKE_FRAME_RE = re.compile(r"^\s+(?P<where>\S[^:]*:\d+ \([^)]*\))\s*$")
_NOT_FOUND_RE = re.compile(r"^\s*(?:-- )?(?P<line>Could NOT find \S.*)$")


def cmake_error_summary(output: str) -> str:
    """The cause of a failed CMake configure, as one line.

    CMake prints ``CMake Error at <file>:<line> (<command>):`` and the message on
    the indented lines below it, then a ``Call Stack``. The location of the first
    line is often CMake's own module (``FindPackageHandleStandardArgs.cmake:230
    (message)``), which says nothing; the body says what is wrong (``Could NOT find
    BLAS (missing: BLAS_LIBRARIES)``) and the outermost call-stack frame inside the
    project (a relative path: CMake prints project files relative to the source
    directory) says where the project asked for it.

    Args:
        output: everything ``cmake`` printed (ANSI colours allowed).
    Returns:
        ``"<first message body> (at <project frame or error location>)"``, plus
        ``"; Could NOT find X ..."`` when such a line appears elsewhere in the output
        and is not the body already; the last non-empty line when there is no
        ``CMake Error`` at all; ``""`` for empty output.
    """
    lines = [_ANSI_RE.sub("", raw).rstrip() for raw in output.splitlines()]
    not_found = next(
        (m.group("line").strip() for m in map(_NOT_FOUND_RE.match, lines) if m), None
    )
    for i, line in enumerate(lines):
        m = _CMAKE_ERROR_RE.match(line)
        if not m:
            continue
        body = [m.group("msg").strip()] if m.group("msg").strip() else []
        where = m.group("where")
        frames: list[str] = []
        j = i + 1
        while j < len(lines):  # the first paragraph of the indented message body
            text = lines[j]
            if not text.strip():
                if body:
                    break
            elif text.startswith((" ", "\t")) and not text.startswith("Call Stack"):
                body.append(text.strip())
            else:
                break
            j += 1
        while (
            j < len(lines)
            and not lines[j].startswith("Call Stack")
            and not lines[j].strip()
        ):
            j += 1
        if j < len(lines) and lines[j].startswith("Call Stack"):
            for text in lines[j + 1 :]:
                frame = _CMAKE_FRAME_RE.match(text)
                if not frame:
                    break
                frames.append(frame.group("where"))
        inside = [f for f in frames if not f.startswith("/")]
        if inside:
            where = inside[
                -1
            ]  # the outermost project frame: where the project asked for it
        summary = " ".join(body) or line.strip()
        if where:
            summary += f" (at {where})"
        if not_found and not_found not in summary:
            summary += f"; {not_found}"
        return summary
    rest = [line.strip() for line in lines if line.strip()]
    if not_found:
        return not_found
    return rest[-1] if rest else ""


# -------------------------------------------------------------------- progress


class LiveProgress:
    """A one-line live ``[n/N] description`` status on stderr (rich); silent off a TTY.

    Use as a context manager; call the instance with ``(done, total, text)``.
    """

    def __init__(self, label: str, enabled: bool | None = None):
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._live = None

    def __enter__(self) -> LiveProgress:
        if self.enabled:
            from rich.console import Console
            from rich.live import Live
            from rich.text import Text

            self._text = Text
            self._live = Live(
                Text(f"{self.label}: starting"),
                console=Console(stderr=True),
                transient=True,
                refresh_per_second=8,
            )
            self._live.__enter__()
        return self

    def __call__(self, done: int, total: int, text: str) -> None:
        if self._live is not None:
            width = max(
                20, shutil.get_terminal_size((100, 20)).columns - len(self.label) - 16
            )
            short = text if len(text) <= width else "..." + text[-(width - 3) :]
            self._live.update(self._text(f"{self.label}: [{done}/{total}] {short}"))

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None


# --------------------------------------------------------------------- results


@dataclasses.dataclass
class UnitResult:
    """One translation unit compiled by ``--only-changed`` or checked by ``--check``.

    Attributes:
        path: repository path (or the suite child's path); kind: ``cpp``/``hip``;
        seconds: wall time (a HIP unit of ``--only-changed``: the time ninja's
            ``.ninja_log`` records for its object, 0 when it was up to date);
        ok: the compiler exited 0; how: ``compile_commands.json``, the ninja
            target, or ``-fsyntax-only`` (check).
    """

    path: str
    kind: str
    seconds: float
    ok: bool
    how: str


@dataclasses.dataclass
class BuildResult:
    """What :func:`build` did.

    Attributes:
        backend, toolchain: what was built and with which toolchain (description).
        arch: HIP architectures (rocm) or ``None``.
        src, obj, log: exported tree, build directory, full log path.
        export: the :class:`~overlay.export.ExportResult`.
        mode: ``build`` (ninja), ``only-changed`` or ``check`` (front end only).
        configured: CMake ran (cache missing or options changed).
        configure_seconds, build_seconds: wall times (s).
        returncode: ninja's exit status (``--only-changed``/``--check``: 0 when every
            unit compiled).
        no_work: ninja said ``no work to do`` (check: :data:`BUILT_RECORD` says the
            last full build compiled this very tree, so no unit was run again).
        diagnostics: located compiler errors, attributed; other_errors: errors without
            a location (driver, linker); failed_targets: ninja ``FAILED:`` outputs.
        units: per-TU results for ``--only-changed`` and ``--check``; skipped_units:
            files that were not compiled or checked (headers without dependency
            data, a source the build generates, a unit that needs a generated
            header), with why.
        suites: ``"built"``, ``"failed"``, or why the suite children were skipped.
        notes: lines to show before the report (architecture choice, ...).
        cache: the compiler cache in front of the compiles (``ccache``, ``sccache``, ``none``).
        link: the link check after a full build (:class:`LinkCheck`), or ``None``.
        drift: the upstream commit behind each error and undefined symbol (one line
            each, :func:`overlay.drift.short`) when a pin range was given and the run failed.
        drift_from: the old pin of that range.
    """

    backend: str
    toolchain: str
    arch: str | None
    src: str
    obj: str
    log: str
    export: ExportResult
    mode: str = "build"
    configured: bool = False
    configure_seconds: float = 0.0
    build_seconds: float = 0.0
    returncode: int = 0
    no_work: bool = False
    diagnostics: list[Diagnostic] = dataclasses.field(default_factory=list)
    other_errors: list[str] = dataclasses.field(default_factory=list)
    failed_targets: list[str] = dataclasses.field(default_factory=list)
    units: list[UnitResult] = dataclasses.field(default_factory=list)
    skipped_units: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    suites: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    cache: str = "none"
    link: LinkCheck | None = None
    drift: list[str] = dataclasses.field(default_factory=list)
    drift_from: str | None = None

    @property
    def ok(self) -> bool:
        """No error of any kind (an undefined symbol of the link check included) and a zero
        exit status."""
        return (
            self.returncode == 0
            and not self.diagnostics
            and not self.other_errors
            and not self.failed_targets
            and all(u.ok for u in self.units)
            and (self.link is None or not self.link.undefined)
        )

    def first_error(self) -> str:
        """The first error as one line (a located diagnostic with its attribution, else a
        driver/linker line, else a failed unit or target), ``""`` when there is none."""
        if self.diagnostics:
            return self.diagnostics[0].format()
        if self.other_errors:
            return self.other_errors[0]
        if self.link is not None and self.link.undefined:
            return self.link.undefined[0].format()
        failed = [u.path for u in self.units if not u.ok]
        if failed:
            return f"{failed[0]} failed to compile (see {self.log})"
        if self.failed_targets:
            return f"FAILED: {self.failed_targets[0]}"
        if self.returncode:
            return f"exit {self.returncode} (see {self.log})"
        return ""

    def report(self) -> list[str]:
        """Lines for the user: errors with attribution, per-TU times, the summary."""
        out = list(self.notes)
        check = self.mode == "check"
        for unit in self.units:
            if check and unit.ok:
                continue  # a check covers every unit of the tree: list only the failures
            out.append(
                f"  {unit.seconds:7.2f} s  {unit.kind:4} {unit.path}{'' if unit.ok else '  FAILED'}"
            )
        if self.units:
            total = sum(u.seconds for u in self.units)
            kinds = ", ".join(
                f"{sum(1 for u in self.units if u.kind == k)} {label}"
                for k, label in (("cpp", "C++"), ("hip", "HIP"))
            )
            failed = sum(1 for u in self.units if not u.ok)
            out.append(
                f"{'check (front end only)' if check else 'only-changed'}: {len(self.units)} "
                f"translation unit(s) ({kinds}), {total:.2f} s summed, {self.build_seconds:.2f} s wall"
                + (f", {failed} failed" if failed else "")
            )
        elif check and self.no_work:
            out.append(
                f"check: the last full build in {self.obj} compiled this very tree with the same "
                "configure; nothing to check again"
            )
        for path, why in self.skipped_units:
            out.append(f"  {'not checked' if check else 'skipped'} {path}: {why}")
        for diag in self.diagnostics:
            out.append(diag.format())
        for line in self.other_errors:
            out.append(f"{line} [no location]")
        if self.link is not None:
            out.extend(self.link.report())
        if self.drift:
            out.append(
                f"drift since the pin {self.drift_from[:12] if self.drift_from else '?'} "
                "(the upstream commit behind each error; `overlay drift --log` gives the detail):"
            )
            out.extend(f"  {line}" for line in self.drift)
        counts = {"patch": 0, "fork": 0, "upstream": 0}
        elsewhere = 0
        for diag in self.diagnostics:
            layer = getattr(diag.origin, "layer", None)
            if layer in counts:
                counts[layer] += 1
            else:
                elsewhere += 1
        n = len(self.diagnostics)
        what = "check" if check else "build"
        if not self.ok:
            parts = [
                f"{counts['patch']} from patches",
                f"{counts['fork']} from the fork",
                f"{counts['upstream']} from upstream",
            ]
            if elsewhere:
                parts.append(f"{elsewhere} outside the tree or unattributed")
            summary = f"{self.backend} {what} failed: {n} error(s) ({', '.join(parts)})"
            if self.other_errors:
                summary += f", {len(self.other_errors)} without location"
            if self.failed_targets:
                summary += f"; {len(self.failed_targets)} target(s) failed"
            if self.link is not None and self.link.undefined:
                summary += f"; {len(self.link.undefined)} undefined mlx::core symbol(s)"
            out.append(summary + f"; log: {self.log}")
        else:
            done = "nothing to do" if self.no_work else f"{self.build_seconds:.1f} s"
            out.append(
                f"{self.backend} {what} ok ({done}; configure "
                f"{'%.1f s' % self.configure_seconds if self.configured else 'cached'}); "
                f"log: {self.log}"
            )
        if self.suites:
            out.append(f"suite children: {self.suites}")
        return out


# ------------------------------------------------------------------ link check


@dataclasses.dataclass
class UndefinedSymbol:
    """An ``mlx::core`` symbol that objects of the library reference and none defines.

    Attributes:
        symbol: the demangled name (``mlx::core::Event::error() const``).
        referenced_from: ``archive(member)`` of each object that references it.
        cause: ``upstream <sha12> <subject>`` when a pin range was given and
            :func:`overlay.drift.attribute` found the commit, else ``None``.
        fork_file: the backend file that should define it (drift's owner), or ``None``.
    """

    symbol: str
    referenced_from: list[str]
    cause: str | None = None
    fork_file: str | None = None

    def format(self) -> str:
        """``link: undefined symbol: S (referenced from ...) [cause; fork file]``."""
        refs = ", ".join(self.referenced_from[:4])
        if len(self.referenced_from) > 4:
            refs += f" and {len(self.referenced_from) - 4} more"
        tags = [self.cause or "no upstream commit attributed"]
        if self.fork_file:
            tags.append(f"fork file to follow: {self.fork_file}")
        return f"link: undefined symbol: {self.symbol} (referenced from {refs}) [{'; '.join(tags)}]"


@dataclasses.dataclass
class LinkCheck:
    """The link check after a full build: every object of the library's archives, as a
    whole-archive link sees them.

    Attributes:
        archives: the static libraries read (paths relative to the build directory).
        members: how many objects they hold.
        undefined: :class:`UndefinedSymbol` s, sorted by name.
        seconds: wall time of ``nm`` and ``c++filt``.
        skipped: why the check did not run (no archive, no ``nm``), else ``None``.
    """

    archives: list[str] = dataclasses.field(default_factory=list)
    members: int = 0
    undefined: list[UndefinedSymbol] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    skipped: str | None = None

    def report(self) -> list[str]:
        """One line per undefined symbol, then the summary line."""
        if self.skipped:
            return [f"link check: not run: {self.skipped}"]
        out = [u.format() for u in self.undefined]
        what = ", ".join(self.archives)
        out.append(
            f"link check: {len(self.undefined)} undefined mlx::core symbol(s) over {self.members} "
            f"object(s) of {what} (every object, as a whole-archive link sees them), {self.seconds:.1f} s"
        )
        return out


_NM_LINE_RE = re.compile(
    r"^(?P<file>.+?)(?:\[(?P<member>[^\]]+)\])?: (?P<name>\S+) (?P<type>\S)(?:\s|$)"
)
#: nm types of a symbol defined for other objects: global (upper case) except U, plus
#: GNU unique (u) and indirect functions (i). Lower-case w and v are weak *undefined*.
_NM_UNDEFINED = "U"


def _nm_defines(kind: str) -> bool:
    return kind not in ("U", "w", "v", "?") and (kind.isupper() or kind in ("u", "i"))


def _archives(obj: str) -> list[str]:
    """The static libraries the build made under ``obj`` (not under ``CMakeFiles`` or
    FetchContent's ``_deps``), sorted."""
    found = []
    for dirpath, dirs, names in os.walk(obj):
        dirs[:] = sorted(d for d in dirs if d not in ("CMakeFiles", "_deps"))
        found += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".a")]
    return found


def is_mlx_core_symbol(demangled: str) -> bool:
    """Whether a demangled symbol belongs to ``mlx::core`` (its own name, not a template
    argument): ``mlx::core::Event::error() const``, ``vtable for mlx::core::Foo``, and a
    template function's ``void mlx::core::f<float>(...)`` are; ``std::vector<mlx::core::array>
    ::~vector()`` is not."""
    head = _strip_angle(demangled).split("(", 1)[0].split()
    return bool(head) and head[-1].startswith("mlx::core::")


def _strip_angle(text: str) -> str:
    while True:
        stripped = re.sub(r"<[^<>]*>", "", text)
        if stripped == text:
            return text
        text = stripped


def link_check(
    obj: str, toolchain: Toolchain, binds: list[str], log: _Log
) -> LinkCheck:
    """Undefined ``mlx::core`` symbols over every object of the build's static libraries.

    ``nm -A -P -g`` lists each object's global symbols; a name some object references
    (``U``) and no object of the archives defines is undefined: a link that pulls that
    object fails on it (a new primitive without ``eval_gpu``, a new ``Event::error()``),
    whether or not a given program happens to pull it. The names are demangled with
    ``c++filt``; each undefined one is written to the log as ``link check: undefined
    symbol: NAME`` (the form ``overlay drift --log`` reads).

    Args:
        obj: the build directory; toolchain, binds: where ``nm`` runs; log: the build log.
    Returns:
        :class:`LinkCheck` (``skipped`` set when there is no archive or no ``nm``).
    """
    t0 = time.perf_counter()
    archives = _archives(obj)
    rel = [os.path.relpath(a, obj) for a in archives]
    if not archives:
        return LinkCheck(skipped=f"no static library under {obj}")
    argv = toolchain.wrap(["nm", "-A", "-P", "-g", *archives], binds, obj)
    log.write("$ " + " ".join(shlex.quote(a) for a in argv) + "\n")
    try:
        proc = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL)
    except OSError as exc:
        return LinkCheck(rel, skipped=f"cannot run nm: {exc.strerror}")
    if proc.returncode != 0 and not proc.stdout:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return LinkCheck(
            rel, skipped=f"nm failed (exit {proc.returncode}): {err[-1] if err else ''}"
        )
    defined: set[str] = set()
    refs: dict[str, list[str]] = {}
    members = 0
    previous = None
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        m = _NM_LINE_RE.match(line)
        if not m:
            continue
        where = (
            f"{os.path.relpath(m.group('file'), obj)}({m.group('member')})"
            if m.group("member")
            else os.path.relpath(m.group("file"), obj)
        )
        if where != previous:
            # nm lists each object's symbols together; an archive may hold two objects of
            # one name (mlx/backend/common/compiled.cpp.o and mlx/backend/rocm/...), so count
            # the runs, not the names
            members += 1
            previous = where
        name, kind = m.group("name"), m.group("type")
        if kind == _NM_UNDEFINED:
            refs.setdefault(name, []).append(where)
        elif _nm_defines(kind):
            defined.add(name)
    missing = sorted(n for n in refs if n not in defined)
    demangled = _demangle(missing, toolchain, binds, obj)
    undefined = []
    for name in missing:
        pretty = demangled.get(name, name)
        if is_mlx_core_symbol(pretty):
            undefined.append(UndefinedSymbol(pretty, sorted(set(refs[name]))))
    undefined.sort(key=lambda u: u.symbol)
    for u in undefined:
        log.write(
            f"link check: undefined symbol: {u.symbol}\n  referenced from {', '.join(u.referenced_from)}\n"
        )
    result = LinkCheck(rel, members, undefined, time.perf_counter() - t0)
    log.write(result.report()[-1] + "\n")
    return result


def _demangle(
    names: Sequence[str], toolchain: Toolchain, binds: list[str], cwd: str
) -> dict[str, str]:
    """``{mangled: demangled}`` through one ``c++filt`` run (names it cannot read stay)."""
    if not names:
        return {}
    try:
        proc = subprocess.run(
            toolchain.wrap(["c++filt"], binds, cwd),
            input="\n".join(names).encode() + b"\n",
            capture_output=True,
        )
    except OSError:
        return {}
    out = proc.stdout.decode("utf-8", "replace").splitlines()
    return (
        dict(zip(names, out)) if proc.returncode == 0 and len(out) == len(names) else {}
    )


# ------------------------------------------------------------------- the build


class _Log:
    def __init__(self, path: str):
        self.fh = open(path, "w", encoding="utf-8", errors="replace")
        self.lock = threading.Lock()

    def write(self, text: str) -> None:
        with self.lock:
            self.fh.write(text)
            self.fh.flush()

    def close(self) -> None:
        self.fh.close()


def _run_logged(
    argv: Sequence[str],
    log: _Log,
    *,
    cwd: str | None = None,
    env: dict | None = None,
    on_line: Callable[[str], None] | None = None,
) -> tuple[int, str]:
    """Run ``argv``, stream stdout+stderr into ``log``; return ``(status, output)``."""
    log.write("$ " + " ".join(shlex.quote(a) for a in argv) + "\n")
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    except OSError as exc:
        raise ToolchainError(f"cannot run {argv[0]}: {exc.strerror}") from None
    chunks = []
    assert proc.stdout is not None
    for raw in proc.stdout:
        text = raw.decode("utf-8", "replace")
        chunks.append(text)
        log.write(text)
        if on_line is not None:
            on_line(text.rstrip("\n"))
    status = proc.wait()
    log.write(f"[exit {status}]\n")
    return status, "".join(chunks)


def _json_dir(toolchain: Toolchain, backend_dir: str) -> str:
    if toolchain.json_dir:
        return toolchain.json_dir
    target = "/usr/include/nlohmann"
    base = os.path.join(backend_dir, "deps", "nlohmann-json")
    link = os.path.join(base, "single_include", "nlohmann")
    if not os.path.isdir(target):
        return ""
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.islink(link) and os.readlink(link) == target:
        return base
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(target, link)
    return base


def cmake_options(
    backend: str,
    toolchain: Toolchain,
    *,
    arch: str | None,
    cmake_option: str,
    json_dir: str,
    cache: str | None = None,
    launch_rules: str | None = None,
) -> list[str]:
    """The CMake ``-D`` options (after ``-S``/``-B``/``-G Ninja``) for ``backend``.

    Args:
        backend: rocm, cpu or cuda; toolchain: from :func:`find_toolchain`;
        arch: ``;``-separated HIP/CUDA architectures or ``None``;
        cmake_option: the manifest's backend switch (``MLX_BUILD_ROCM``);
        json_dir: offline nlohmann-json FetchContent dir ("" to leave it to CMake);
        cache: the compiler cache (:func:`resolve_cache`; ``None``: ccache when present);
        launch_rules: the file of :func:`write_launcher` (the cache for custom commands).
    Returns:
        The option list (deterministic; recorded to decide on reconfiguring).
    """
    opts = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DMLX_BUILD_TESTS=OFF",
        "-DMLX_BUILD_EXAMPLES=OFF",
        "-DMLX_BUILD_BENCHMARKS=OFF",
        "-DMLX_BUILD_PYTHON_BINDINGS=OFF",
        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
        "-DMLX_BUILD_METAL=OFF",
    ]
    if backend == "rocm":
        opts += [f"-D{cmake_option}=ON", "-DMLX_BUILD_CUDA=OFF"]
        if arch:
            opts.append(f"-DCMAKE_HIP_ARCHITECTURES={arch}")
    elif backend == "cuda":
        opts += ["-DMLX_BUILD_CUDA=ON", f"-D{cmake_option}=OFF"]
        if arch:
            opts.append(f"-DMLX_CUDA_ARCHITECTURES={arch}")
    else:
        opts += [f"-D{cmake_option}=OFF", "-DMLX_BUILD_CUDA=OFF"]
    opts += toolchain.cmake_args
    if json_dir and not any(
        o.startswith("-DFETCHCONTENT_SOURCE_DIR_JSON=") for o in opts
    ):
        opts.append(f"-DFETCHCONTENT_SOURCE_DIR_JSON={json_dir}")
    cache = resolve_cache(toolchain, cache)
    # MLX_USE_CCACHE would set the launchers to ccache itself, over any other choice
    opts.append("-DMLX_USE_CCACHE=OFF")
    if cache != "none":
        # the launcher script where there is one (it also sets the sccache server up)
        launcher = (
            os.path.join(os.path.dirname(launch_rules), "custom")
            if launch_rules
            else cache
        )
        langs = ("C", "CXX", "CUDA") if backend == "cuda" else ("C", "CXX")
        opts += [f"-DCMAKE_{lang}_COMPILER_LAUNCHER={launcher}" for lang in langs]
    if launch_rules:
        opts.append(f"-DCMAKE_PROJECT_INCLUDE={launch_rules}")
    return opts


def _load_compile_commands(obj: str) -> list[dict]:
    try:
        with open(os.path.join(obj, "compile_commands.json"), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return []


_CUSTOM_RE = re.compile(r"^build (\S+?)(?: \|[^:]*)?: CUSTOM_COMMAND (\S+)")


def _hip_targets(obj: str) -> dict[str, str]:
    """``{absolute source path: ninja output}`` of the HIP/CUDA custom commands in build.ninja."""
    out: dict[str, str] = {}
    try:
        with open(
            os.path.join(obj, "build.ninja"), encoding="utf-8", errors="replace"
        ) as fh:
            for line in fh:
                m = _CUSTOM_RE.match(line)
                if m and m.group(2).endswith((".hip", ".cu")):
                    out.setdefault(
                        os.path.normpath(m.group(2).replace("$:", ":")),
                        m.group(1).replace("$:", ":"),
                    )
    except OSError:
        pass
    return out


def _header_users(
    toolchain: Toolchain, obj: str, binds: list[str], headers: set[str]
) -> dict[str, set[str]]:
    """Objects whose recorded dependencies (``ninja -t deps``) include one of ``headers``."""
    if not headers:
        return {}
    proc = subprocess.run(
        toolchain.wrap(["ninja", "-C", obj, "-t", "deps"], binds, obj),
        capture_output=True,
        text=True,
        errors="replace",
    )
    users: dict[str, set[str]] = {}
    current = None
    for line in proc.stdout.splitlines():
        if line and not line.startswith(" "):
            current = line.split(":", 1)[0]
        elif current:
            dep = os.path.normpath(os.path.join(obj, line.strip()))
            if dep in headers:
                users.setdefault(dep, set()).add(
                    os.path.normpath(os.path.join(obj, current))
                )
    return users


@dataclasses.dataclass
class _Unit:
    """One process to run: a compile (``argv``), or a HIP unit whose command ninja
    gives (``hip_target``, check only)."""

    label: str
    kind: str
    how: str
    argv: list[str] | None = None
    hip_target: str | None = None


def _compile_units(
    result: BuildResult,
    changed: list[str],
    toolchain: Toolchain,
    binds: list[str],
    jobs: int | None,
    log: _Log,
    extra_dirs: Sequence[str],
    progress: Callable[[int, int, str], None] | None,
) -> str:
    """Compile the translation units of ``changed`` (repository paths); return all output.

    C++ units run straight from ``compile_commands.json``, in parallel; every HIP
    target goes to one ninja process (two ninja processes in one build directory
    corrupt its ``.ninja_log``/``.ninja_deps``).
    """
    src, obj = result.src, result.obj
    launcher = launcher_path(os.path.dirname(obj))
    entries = _load_compile_commands(obj)
    by_file = {_entry_file(e): e for e in entries}
    by_output = {
        os.path.normpath(os.path.join(e["directory"], _entry_output(e))): e
        for e in entries
        if _entry_output(e)
    }
    hip = _hip_targets(obj)
    units: list[_Unit] = []
    hip_units: list[tuple[str, str]] = []  # (label, ninja target)
    headers = {}
    for path in changed:
        full = os.path.normpath(os.path.join(src, path))
        if full in by_file:
            units.append(
                _Unit(
                    path,
                    "cpp",
                    "compile_commands.json",
                    _tu_argv(by_file[full], toolchain, binds, result.cache, launcher),
                )
            )
        elif full in hip:
            hip_units.append((path, hip[full]))
        elif path.endswith(HEADER_SUFFIXES):
            headers[full] = path
        elif path.endswith(SOURCE_SUFFIXES):
            result.skipped_units.append(
                (path, "not part of this configuration (no compile command)")
            )
    if headers:
        users = _header_users(toolchain, obj, binds, set(headers))
        seen = {u.label for u in units}
        for full, path in headers.items():
            objs = users.get(full)
            if not objs:
                result.skipped_units.append(
                    (
                        path,
                        "header with no recorded users (build once fully for "
                        "dependency data)",
                    )
                )
                continue
            for o in sorted(objs):
                e = by_output.get(o)
                if e is None:
                    continue
                label = os.path.relpath(os.path.normpath(e["file"]), src).replace(
                    os.sep, "/"
                )
                if label not in seen:
                    seen.add(label)
                    units.append(
                        _Unit(
                            label,
                            "cpp",
                            "compile_commands.json",
                            _tu_argv(e, toolchain, binds, result.cache, launcher),
                        )
                    )
    for extra in extra_dirs:  # the suite children, when configured
        for e in _load_compile_commands(extra):
            units.append(
                _Unit(
                    e["file"],
                    "cpp",
                    "compile_commands.json",
                    _tu_argv(e, toolchain, binds, result.cache, launcher),
                )
            )
    return _run_units(
        result, units, toolchain, binds, jobs, log, progress, ninja_targets=hip_units
    )


def _run_units(
    result: BuildResult,
    units: list[_Unit],
    toolchain: Toolchain,
    binds: list[str],
    jobs: int | None,
    log: _Log,
    progress: Callable[[int, int, str], None] | None,
    *,
    ninja_targets: Sequence[tuple[str, str]] = (),
    hip_commands: dict[str, str] | None = None,
    generated: Callable[[str], str | None] | None = None,
) -> str:
    """Run ``units`` in parallel (``jobs`` workers, default the CPU count) and the
    ``ninja_targets`` in one ninja process beside them; fill ``result.units``.

    Args:
        units: compiles to run, one process each.
        ninja_targets: ``(label, target)`` pairs built by a single ``ninja -k 0``.
        hip_commands: ``{ninja target: syntax-only shell command}`` for units with a
            ``hip_target`` (check).
        generated: ``failed unit's output -> why it was not checked, or None``
            (check): a unit that fails only for want of a header the build makes is
            listed in ``result.skipped_units`` instead of failing, and its output is
            not parsed.
    Returns:
        The output to parse for diagnostics, in unit order.
    Raises:
        ToolchainError: a unit's command could not be started (exit 2).
    """
    obj = result.obj
    slots: list[tuple[str, list[UnitResult]]] = [
        ("", []) for _ in range(len(units) + 1)
    ]
    total = len(units) + len(ninja_targets)
    done = [0]
    lock = threading.Lock()
    workers = max(1, jobs or os.cpu_count() or 1)

    def tick(n: int, label: str) -> None:
        with lock:
            done[0] += n
            if progress:
                progress(done[0], total, label)

    def one(i: int) -> None:
        unit = units[i]
        argv = unit.argv
        if argv is None:
            command = (hip_commands or {}).get(unit.hip_target or "")
            argv = (
                toolchain.wrap(["sh", "-c", command], binds, obj) if command else None
            )
        if argv is None:
            with lock:
                result.skipped_units.append(
                    (unit.label, f"ninja gave no command for {unit.hip_target}")
                )
            tick(1, unit.label)
            return
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            raise ToolchainError(f"cannot run {argv[0]}: {exc.strerror}") from None
        seconds = time.perf_counter() - t0
        text = proc.stdout.decode("utf-8", "replace")
        log.write(
            f"$ {' '.join(shlex.quote(a) for a in argv)}\n{text}[exit {proc.returncode}, {seconds:.2f} s]\n"
        )
        needs = (
            generated(text)
            if (proc.returncode != 0 and generated is not None)
            else None
        )
        if needs:
            with lock:
                result.skipped_units.append((unit.label, needs))
            slots[i] = ("", [])
        else:
            slots[i] = (
                text,
                [
                    UnitResult(
                        unit.label, unit.kind, seconds, proc.returncode == 0, unit.how
                    )
                ],
            )
        tick(1, unit.label)

    def batch() -> None:
        targets = [t for _label, t in ninja_targets]
        ninja_log = os.path.join(obj, ".ninja_log")
        try:
            offset = os.path.getsize(ninja_log)
        except OSError:
            offset = 0
        argv = ["ninja", "-C", obj, "-k", "0", "-j", str(workers), *targets]
        status, output = _run_logged(toolchain.wrap(argv, binds, obj), log)
        failed = {
            word
            for line in output.splitlines()
            if line.startswith("FAILED: ")
            for word in line[len("FAILED: ") :].split()
        }
        took = _ninja_log_seconds(ninja_log, offset)
        out = []
        for label, target in ninja_targets:
            # a target ninja did not get to (an unknown target: ninja stops before building) failed too
            ok = target not in failed and (status == 0 or bool(failed))
            out.append(UnitResult(label, "hip", took.get(target, 0.0), ok, target))
        slots[len(units)] = (output, out)
        tick(len(ninja_targets), "ninja")

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one, i) for i in range(len(units))]
        if ninja_targets:
            futures.append(pool.submit(batch))
        for future in futures:
            future.result()
    result.build_seconds = time.perf_counter() - t0
    result.units = [u for _text, rs in slots for u in rs]
    result.returncode = 0 if all(u.ok for u in result.units) else 1
    return "".join(text for text, _rs in slots)


def _ninja_log_seconds(path: str, offset: int) -> dict[str, float]:
    """``{output: seconds}`` from the entries ninja appended to ``.ninja_log`` after
    byte ``offset`` (format v5+: ``start_ms<TAB>end_ms<TAB>mtime<TAB>output<TAB>hash``)."""
    out: dict[str, float] = {}
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return out
    for line in data.splitlines():
        fields = line.split("\t")
        if len(fields) >= 4 and fields[0].isdigit() and fields[1].isdigit():
            out[fields[3]] = (int(fields[1]) - int(fields[0])) / 1000.0
    return out


#: Arguments a syntax-only run must not pass on: the object (``-o``), compile-only
#: (``-c``) and the dependency file (``-MD -MF``: it belongs to the real object).
_DROP_WITH_VALUE = ("-o", "-MF", "-MT", "-MQ")
_DROP_ALONE = ("-c", "-MD", "-MMD")


def syntax_only_argv(words: Sequence[str]) -> list[str]:
    """A compile command turned into a front-end-only check of the same unit.

    The same compiler and flags (defines, include paths, ``-std``, ``-x hip``,
    ``--offload-arch``: hipcc then checks host and device code), minus the object
    and the dependency file, plus ``-fsyntax-only``: nothing is written.

    Args:
        words: the compiler's argv (``compile_commands.json`` ``arguments``, or a
            shell-split command).
    Returns:
        The new argv; ``-fsyntax-only`` is appended once.
    """
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word in _DROP_WITH_VALUE:
            skip = True
            continue
        if word in _DROP_ALONE or word == "-fsyntax-only":
            continue
        if len(word) > 3 and word[:3] in _DROP_WITH_VALUE:
            continue  # the joined form, -MFpath
        out.append(word)
    return [*out, "-fsyntax-only"]


def _syntax_only_shell(command: str) -> str:
    """:func:`syntax_only_argv` applied to the compile of a shell command line
    (``cd DIR && hipcc ... -c SRC -o OBJ [&& cmake -E cmake_transform_depfile ...]``,
    as ninja prints a custom command). Only the ``cd`` steps and the compile are
    kept: the steps around it handle the object or its depfile, which a check does
    not write (CMake's depfile transform would write an empty one).

    Raises:
        ValueError: the command cannot be split (unbalanced quotes).
    """
    words = shlex.split(command)
    segments: list[list[str]] = [[]]
    for word in words:
        if word == "&&":
            segments.append([])
        else:
            segments[-1].append(word)
    compile_at = next(
        (i for i, seg in enumerate(segments) if "-c" in seg), len(segments) - 1
    )
    kept = [seg for seg in segments[:compile_at] if seg and seg[0] == "cd"]
    kept.append(syntax_only_argv(segments[compile_at]))
    return " && ".join(shlex.join(seg) for seg in kept)


_MISSING_INCLUDE_RE = re.compile(
    r"fatal error: (?:'(?P<clang>[^']+)' file not found|(?P<gcc>[^\s:][^:]*): No such file or directory)"
)


def _check(
    result: BuildResult,
    toolchain: Toolchain,
    binds: list[str],
    jobs: int | None,
    log: _Log,
    progress: Callable[[int, int, str], None] | None,
) -> str:
    """Every translation unit of the configured tree through the compiler front end.

    C++ (and any HIP unit CMake compiles as a language): the ``compile_commands.json``
    command through :func:`syntax_only_argv`. HIP objects made by custom commands
    (the fork's ``.hip`` files): the command ``ninja -t commands -s <object>``
    prints, through the same change. Nothing is built first: a unit whose source
    the build generates is listed as not checked, and so is one that fails only
    because an include the build generates is missing.
    """
    obj, src = result.obj, result.src
    entries = _load_compile_commands(obj)
    if not entries:
        raise OverlayError(
            f"no compile_commands.json in {obj}: the check needs CMake's "
            "CMAKE_EXPORT_COMPILE_COMMANDS=ON (overlay sets it; was the project configured?)"
        )
    units: list[_Unit] = []
    for e in entries:
        full = _entry_file(e)
        label = _map_path(full, src, e["directory"])[0]
        if not os.path.exists(full):
            target = (
                os.path.relpath(full, obj) if full.startswith(obj + os.sep) else full
            )
            result.skipped_units.append(
                (label, f"generated by the build (`ninja {target}` makes it)")
            )
            continue
        try:
            words = e.get("arguments") or shlex.split(e.get("command", ""))
        except ValueError:
            result.skipped_units.append(
                (label, "its compile_commands.json command cannot be split (quotes)")
            )
            continue
        if result.cache != "none":
            # as the HIP commands, through the cache launcher: ccache keeps a clean
            # -fsyntax-only result, so an unchanged unit is not checked twice
            words = [launcher_path(os.path.dirname(obj)), *words]
        argv = [
            "sh",
            "-c",
            f"cd {shlex.quote(e['directory'])} && {shlex.join(syntax_only_argv(words))}",
        ]
        units.append(
            _Unit(
                label,
                "hip" if full.endswith((".hip", ".cu")) else "cpp",
                "-fsyntax-only",
                toolchain.wrap(argv, binds, e["directory"]),
            )
        )
    hip = _hip_targets(obj)
    commands: dict[str, str] = {}
    if hip:
        targets = [hip[k] for k in sorted(hip)]
        proc = subprocess.run(
            toolchain.wrap(
                ["ninja", "-C", obj, "-t", "commands", "-s", *targets], binds, obj
            ),
            capture_output=True,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
        )
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        if proc.returncode == 0 and len(lines) == len(targets):
            for target, line in zip(targets, lines):
                try:
                    commands[target] = _syntax_only_shell(line)
                except ValueError:
                    continue  # listed as "ninja gave no command" by _run_units
        for full in sorted(hip):
            label = _map_path(full, src, obj)[0]
            if not os.path.exists(full):
                result.skipped_units.append(
                    (label, f"generated by the build (`ninja {hip[full]}` makes it)")
                )
                continue
            units.append(_Unit(label, "hip", "-fsyntax-only", hip_target=hip[full]))
    made: list[
        list[str]
    ] = []  # ninja's outputs, listed once, on the first missing include
    made_lock = threading.Lock()

    def generated(text: str) -> str | None:
        names = [
            (m.group("clang") or m.group("gcc")).strip()
            for m in _MISSING_INCLUDE_RE.finditer(_ANSI_RE.sub("", text))
        ]
        if not names:
            return None
        with made_lock:
            if not made:
                made.append(_ninja_outputs(toolchain, obj, binds))
        hits = []
        for name in names:
            tail = "/" + name.lstrip("./")
            hit = next(
                (out for out in made[0] if out == name or out.endswith(tail)), None
            )
            if hit is None:
                return None  # a missing include the build does not make: a real error
            hits.append(hit)
        return (
            f"needs {names[0]}, which the build generates (`ninja {hits[0]}` makes it); "
            "build once, then check again"
        )

    return _run_units(
        result,
        units,
        toolchain,
        binds,
        jobs,
        log,
        progress,
        hip_commands=commands,
        generated=generated,
    )


def _ninja_outputs(toolchain: Toolchain, obj: str, binds: list[str]) -> list[str]:
    """Every output ninja knows (``ninja -t targets all``), as build.ninja names them."""
    proc = subprocess.run(
        toolchain.wrap(["ninja", "-C", obj, "-t", "targets", "all"], binds, obj),
        capture_output=True,
        text=True,
        errors="replace",
        stdin=subprocess.DEVNULL,
    )
    return [
        line.rsplit(": ", 1)[0] for line in proc.stdout.splitlines() if ": " in line
    ]


def _entry_file(entry: dict) -> str:
    """The absolute, normalized source path of a compile_commands.json entry."""
    f = entry["file"]
    return os.path.normpath(
        f if os.path.isabs(f) else os.path.join(entry["directory"], f)
    )


def _entry_output(entry: dict) -> str:
    """The object a compile_commands.json entry writes (``output``, or ``-o`` in its command)."""
    if entry.get("output"):
        return entry["output"]
    try:
        words = entry.get("arguments") or shlex.split(entry.get("command", ""))
    except ValueError:
        return ""
    for i, word in enumerate(words[:-1]):
        if word == "-o":
            return words[i + 1]
    return ""


def _tu_argv(
    entry: dict,
    toolchain: Toolchain,
    binds: list[str],
    cache: str = "none",
    launcher: str | None = None,
) -> list[str]:
    directory = entry["directory"]
    command = entry.get("command") or " ".join(
        shlex.quote(a) for a in entry.get("arguments", [])
    )
    output = _entry_output(entry)
    if cache != "none":
        # CMake leaves its compiler launcher out of compile_commands.json
        command = f"{shlex.quote(launcher) if launcher else cache} " + command
    mkdir = (
        f"mkdir -p {shlex.quote(os.path.dirname(os.path.join(directory, output)))} && "
        if output
        else ""
    )
    return toolchain.wrap(
        ["sh", "-c", f"cd {shlex.quote(directory)} && {mkdir}{command}"],
        binds,
        directory,
    )


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

#: The lock file in ``build/<backend>/`` (:func:`overlay.fsutil.dir_lock`): one overlay
#: build (and so one ninja) per build directory at a time.
BUILD_LOCK = ".overlay-build.lock"


def build(
    store: Store,
    layers: Layers,
    root: str,
    backend: str,
    *,
    arch: str | None = None,
    toolchain: Toolchain,
    jobs: int | None = None,
    only_changed: bool = False,
    check: bool = False,
    target: str | None = None,
    build_root: str | None = None,
    cmake_option: str = "MLX_BUILD_ROCM",
    suites_dir: str | None = None,
    notes: Iterable[str] = (),
    progress: Callable[[int, int, str], None] | None = None,
    on_wait: Callable[[str], None] | None = None,
    cache: str | None = None,
    link: bool = True,
    drift_range: tuple[str, str] | None = None,
) -> BuildResult:
    """Export ``layers.patched``, configure (when needed) and build; attribute errors.

    The whole run holds the build directory's lock (:data:`BUILD_LOCK`): a second
    ``overlay build`` of the same backend waits for the first, so two ninja
    processes never share one build directory (they would corrupt its
    ``.ninja_log`` and ``.ninja_deps``).

    Args:
        store: git store holding the layer trees.
        layers: computed with ``stepwise=True`` (attribution needs each patch's tree).
        root: the overlay repository (``build/`` goes under it by default).
        backend: ``rocm``, ``cpu`` or ``cuda``.
        arch: ``;``-separated architectures (see :func:`resolve_arch`) or ``None``.
        toolchain: from :func:`find_toolchain`.
        jobs: ninja ``-j`` / parallel units for ``only_changed`` and ``check``
            (``None``: ninja's default, the CPU count for units).
        only_changed: compile only the translation units the series touches (and the
            suite children when their build directory is configured), timing each.
        check: every translation unit through the compiler front end only
            (``-fsyntax-only``, from ``compile_commands.json`` and the HIP custom
            commands); no object is written and nothing is built first.
        target: a ninja target instead of the default (not with ``only_changed``
            or ``check``).
        build_root: directory holding ``<backend>/``; default ``<root>/build``.
        cmake_option: the manifest's backend switch.
        suites_dir: the suite children's CMake project (``patches-rocm/suites``); built
            after a full rocm/cuda build when given and present.
        notes: lines to carry into the report.
        progress: ``(done, total, text)`` callback (e.g. :class:`LiveProgress`).
        on_wait: called with the holder's pid when another build holds the build
            directory and this one waits for it.
        cache: the compiler cache (``ccache``, ``sccache``, ``none``; ``None``: ccache
            when present where the compilers run), for the C/C++ objects
            (``CMAKE_<LANG>_COMPILER_LAUNCHER``) and the compile custom commands such as
            the fork's HIP objects (``RULE_LAUNCH_CUSTOM``, :func:`write_launcher`).
            In the chroot, the directory named by ``CCACHE_DIR``/``SCCACHE_DIR`` is bound.
        link: after a successful full build (no ``target``), the link check
            (:func:`link_check`): undefined ``mlx::core`` symbols fail the build.
        drift_range: ``(old pin, new pin)`` commit SHAs: when the run fails, each error
            and undefined symbol is attributed to the upstream commit of that range
            behind it (:func:`overlay.drift.attribute_log`).
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
    """
    if sum(bool(x) for x in (only_changed, check, target)) > 1:
        raise OverlayError("--only-changed, --check and --target cannot be combined")
    # realpath: a build root that is a symlink (a scratch overlay sharing a build) keeps the
    # paths CMake was configured with, so nothing is reconfigured or rebuilt for the path alone
    backend_dir = os.path.realpath(
        os.path.join(build_root or os.path.join(root, "build"), backend)
    )
    cache = resolve_cache(toolchain, cache)
    with dir_lock(backend_dir, BUILD_LOCK, on_wait=on_wait):
        return _build_locked(
            store,
            layers,
            backend_dir,
            backend,
            arch=arch,
            toolchain=toolchain,
            jobs=jobs,
            only_changed=only_changed,
            check=check,
            target=target,
            cmake_option=cmake_option,
            suites_dir=suites_dir,
            notes=notes,
            progress=progress,
            cache=cache,
            link=link,
            drift_range=drift_range,
        )


def _cache_binds(toolchain: Toolchain, cache: str) -> list[str]:
    """The cache directory to bind into the chroot (``$CCACHE_DIR`` / ``$SCCACHE_DIR`` of the
    caller, which ``tools/rocm-toolchain.sh exec`` passes on), created when missing; none
    on the host, where the compilers see it anyway."""
    var = CACHE_DIR_ENV.get(cache)
    path = os.environ.get(var or "", "")
    if toolchain.kind != "chroot" or not path or not os.path.isabs(path):
        return []
    os.makedirs(path, exist_ok=True)
    return [path]


def _build_locked(
    store: Store,
    layers: Layers,
    backend_dir: str,
    backend: str,
    *,
    arch: str | None,
    toolchain: Toolchain,
    jobs: int | None,
    only_changed: bool,
    check: bool,
    target: str | None,
    cmake_option: str,
    suites_dir: str | None,
    notes: Iterable[str],
    progress: Callable[[int, int, str], None] | None,
    cache: str,
    link: bool,
    drift_range: tuple[str, str] | None,
) -> BuildResult:
    src, obj = os.path.join(backend_dir, "src"), os.path.join(backend_dir, "obj")
    os.makedirs(obj, exist_ok=True)
    log_path = os.path.join(backend_dir, "build.log")
    exported = export_tree(store, layers.patched, src)
    mode = "check" if check else "only-changed" if only_changed else "build"
    result = BuildResult(
        backend,
        toolchain.description,
        arch,
        src,
        obj,
        log_path,
        exported,
        mode=mode,
        notes=list(notes),
        cache=cache,
    )
    binds = [backend_dir, *_cache_binds(toolchain, cache)]
    log = _Log(log_path)
    try:
        log.write(
            f"# overlay build --backend {backend}{' --check' if check else ''}: tree {layers.patched}, "
            f"toolchain {toolchain.description}, arch {arch or '-'}, cache {cache}\n# export: "
            f"{len(exported.written)} written, {len(exported.removed)} removed, {exported.unchanged} unchanged\n"
        )
        opts = cmake_options(
            backend,
            toolchain,
            arch=arch,
            cmake_option=cmake_option,
            json_dir=_json_dir(toolchain, backend_dir),
            cache=cache,
            launch_rules=write_launcher(backend_dir, cache),
        )
        configured = _configure(result, toolchain, opts, binds, log)
        built_path = os.path.join(obj, BUILT_RECORD)
        built = {"tree": layers.patched, "configure": configured}
        if not check:
            _remove(
                built_path
            )  # objects are about to change: no longer "all built from one tree"
        if check and _read_json(built_path) == built:
            result.no_work = (
                True  # every unit compiled in this very tree, same configure
            )
            log.write(
                f"# check: {built_path} records a successful full build of this tree\n"
            )
            output = ""
        elif check:
            output = _check(result, toolchain, binds, jobs, log, progress)
        elif only_changed:
            extra = []
            suites_obj = os.path.join(backend_dir, "suites")
            if os.path.isfile(os.path.join(suites_obj, "compile_commands.json")):
                extra.append(suites_obj)
                if suites_dir:
                    binds.append(os.path.abspath(suites_dir))
            output = _compile_units(
                result,
                changed_paths(store, layers),
                toolchain,
                binds,
                jobs,
                log,
                extra,
                progress,
            )
        else:
            output = _ninja(result, toolchain, binds, jobs, target, log, progress)
        if cache == "sccache" and not result.no_work:
            _stop_sccache(toolchain, backend_dir, binds, log)
        diags, other = parse_diagnostics(output, src, obj)
        result.failed_targets = [
            line[len("FAILED: ") :].strip()
            for line in output.splitlines()
            if line.startswith("FAILED: ")
        ]
        result.other_errors = other
        result.diagnostics = diags
        if link and result.ok and mode == "build" and not target:
            result.link = link_check(obj, toolchain, binds, log)
        if result.ok and mode == "build" and not target:
            atomic_write(
                built_path, json.dumps(built, indent=1).encode(), durable=False
            )
        if (
            result.ok
            and mode == "build"
            and not target
            and backend in ("rocm", "cuda")
            and suites_dir
            and os.path.isfile(os.path.join(suites_dir, "CMakeLists.txt"))
        ):
            result.suites = _build_suites(
                result, toolchain, binds, jobs, log, backend, arch, suites_dir
            )
        if result.diagnostics:
            from overlay.attribute import Attributor

            located = [(d.path, d.line) for d in result.diagnostics if d.in_tree]
            origins = Attributor(store, layers).attribute(located) if located else {}
            for d in result.diagnostics:
                if d.in_tree:
                    d.origin = origins.get((d.path, d.line))
    finally:
        log.close()
    if drift_range and not result.ok:
        _attribute_drift(result, store, drift_range)
    return result


def _attribute_drift(
    result: BuildResult, store: Store, drift_range: tuple[str, str]
) -> None:
    """Fill ``result.drift`` and each undefined symbol's cause from the build log."""
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


def _configure(
    result: BuildResult,
    toolchain: Toolchain,
    opts: list[str],
    binds: list[str],
    log: _Log,
) -> dict:
    """Run CMake unless the build directory holds a configure with the same options;
    return that record (source, toolchain, options)."""
    obj, src = result.obj, result.src
    record_path = os.path.join(obj, CONFIGURE_RECORD)
    record = {"source": src, "toolchain": toolchain.description, "options": opts}
    cache = os.path.join(obj, "CMakeCache.txt")
    try:
        with open(record_path, encoding="utf-8") as fh:
            previous = json.load(fh)
    except (OSError, ValueError):
        previous = None
    if (
        os.path.isfile(cache)
        and previous == record
        and os.path.isfile(os.path.join(obj, "build.ninja"))
    ):
        log.write("# configure: cached (same options)\n")
        return record
    if os.path.isfile(cache):
        os.unlink(cache)  # options changed: start the cache afresh (objects stay)
    argv = toolchain.wrap(
        ["cmake", "-S", src, "-B", obj, "-G", "Ninja", *opts], binds, obj
    )
    t0 = time.perf_counter()
    status, output = _run_logged(argv, log)
    result.configure_seconds = time.perf_counter() - t0
    result.configured = True
    if status != 0:
        if os.path.exists(record_path):
            os.unlink(record_path)
        raise BuildError(
            f"CMake configure failed (exit {status}): {cmake_error_summary(output)}",
            hint=f"full output in {result.log}",
        )
    with open(record_path, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1)
    return record


def _read_json(path: str) -> object:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _ninja(
    result: BuildResult,
    toolchain: Toolchain,
    binds: list[str],
    jobs: int | None,
    target: str | None,
    log: _Log,
    progress: Callable[[int, int, str], None] | None,
) -> str:
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
    status, output = _run_logged(
        toolchain.wrap(argv, binds, result.obj), log, env=env, on_line=on_line
    )
    result.build_seconds = time.perf_counter() - t0
    result.returncode = status
    result.no_work = "ninja: no work to do." in output
    return output


def _build_suites(
    result: BuildResult,
    toolchain: Toolchain,
    binds: list[str],
    jobs: int | None,
    log: _Log,
    backend: str,
    arch: str | None,
    suites_dir: str,
) -> str:
    """Install MLX into ``install/`` and build the suite children into ``suites/``."""
    backend_dir = os.path.dirname(result.obj)
    prefix = os.path.join(backend_dir, "install")
    sobj = os.path.join(backend_dir, "suites")
    suites_dir = os.path.abspath(suites_dir)
    b = [*binds, suites_dir]
    status, _ = _run_logged(
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
    status, _ = _run_logged(
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
    status, output = _run_logged(toolchain.wrap(argv, b, sobj), log)
    diags, other = parse_diagnostics(output, result.src, sobj)
    result.diagnostics.extend(diags)
    result.other_errors.extend(other)
    if status != 0:
        result.returncode = status
        return f"failed: ninja in {sobj} (exit {status}); see {result.log}"
    return f"built in {sobj}"


__all__ = [
    "BACKENDS",
    "BUILD_LOCK",
    "BUILT_RECORD",
    "BuildError",
    "BuildResult",
    "Diagnostic",
    "LiveProgress",
    "Toolchain",
    "ToolchainError",
    "UnitResult",
    "build",
    "changed_paths",
    "cmake_error_summary",
    "cmake_options",
    "CACHES",
    "LinkCheck",
    "UndefinedSymbol",
    "is_mlx_core_symbol",
    "launcher_path",
    "link_check",
    "resolve_cache",
    "sccache_socket",
    "write_launcher",
    "default_toolchain_root",
    "find_toolchain",
    "parse_diagnostics",
    "resolve_arch",
    "syntax_only_argv",
    "toolchain_script",
]
