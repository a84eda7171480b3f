"""Toolchains: how cmake, ninja and the compilers run (host, system ROCm/CUDA, chroot).

:func:`find_toolchain` picks one; :func:`resolve_arch` the HIP architectures it can
build. Errors: :class:`ToolchainError` (no toolchain, a missing tool; exit 2).
"""

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence

from overlay.errors import OverlayError
from overlay.lazy import lazy_pattern

BACKENDS = ("rocm", "cpu", "cuda")


#: Default toolchain root written by ``tools/rocm-toolchain.sh``.
ENV_TOOLCHAIN_DIR = "OVERLAY_TOOLCHAIN_DIR"


#: Architectures for which the fork's CMake requires rocWMMA (not in Debian's packages).
ROCWMMA_ARCH_RE = lazy_pattern(r"^(gfx1[12]|gfx908|gfx90a|gfx942)")


class ToolchainError(OverlayError):
    """No usable toolchain or a missing tool (exit 2)."""


def default_toolchain_root() -> str:
    """``$OVERLAY_TOOLCHAIN_DIR``, else ``~/.cache/overlay/rocm-toolchain`` (as the script)."""
    return os.environ.get(ENV_TOOLCHAIN_DIR) or os.path.join(
        os.path.expanduser("~"), ".cache", "overlay", "rocm-toolchain"
    )


def toolchain_script(root: str | None = None) -> str | None:
    """Path of ``tools/rocm-toolchain.sh``: under ``root``, beside this package, or ``None``."""
    # overlay/build/toolchain.py -> the checkout holding overlay/
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for base in (root, here):
        if base:
            path = os.path.join(base, "tools", "rocm-toolchain.sh")
            if os.path.isfile(path):
                return path
    return None


def _read_env_file(path: str) -> dict[str, str]:
    """``KEY=value`` lines of a toolchain's ``toolchain.env`` (shell-quoted values)."""
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
    """``hipcc`` on PATH, else in ``$ROCM_PATH/bin`` (``/opt/rocm``), else ``None``."""
    found = shutil.which("hipcc")
    if found:
        return found
    rocm = os.environ.get("ROCM_PATH") or "/opt/rocm"
    cand = os.path.join(rocm, "bin", "hipcc")
    return cand if os.access(cand, os.X_OK) else None


def _chroot_toolchain(root: str, repo_root: str | None) -> Toolchain:
    """The chroot toolchain provisioned at ``root``.

    Raises:
        ToolchainError: no ``READY`` file, no ``tools/rocm-toolchain.sh``, not root.
    """
    root = os.path.abspath(root)
    if not os.path.isfile(os.path.join(root, "READY")):
        raise ToolchainError(
            f"no ROCm toolchain at {root} (no READY file)",
            hint=f"provision it: tools/rocm-toolchain.sh provision --root {root}",
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
    """CMake options that keep a configure off the network."""
    return [
        "-DUSE_SYSTEM_FMT=ON",
        "-DMLX_BUILD_GGUF=OFF",
        "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
    ]


def _gcc_major() -> int:
    """The host C++ compiler's major version (0 when unknown)."""
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
                hint="install ROCm, or provision a compile-only one: "
                f"tools/rocm-toolchain.sh provision --root {default} (about 2 minutes, "
                "as root; docs/toolchain.md)",
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
