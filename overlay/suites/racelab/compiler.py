"""The race lab's compiler: the ROCm toolchain's clang++, and how children run under it."""

import dataclasses
import os
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from overlay.lazy import lazy_pattern
from overlay.suites.racelab.lab import MODEL, MODELS_ENV, LabError

if TYPE_CHECKING:  # overlay.build is heavy; the lab needs it only to find the toolchain
    from overlay.build import Toolchain

#: Variables the chroot launcher passes into the chroot (its environment is clean).
FORWARDED_ENV = (
    "OVERLAY_*",
    "TSAN_OPTIONS",
    "ASAN_OPTIONS",
    "UBSAN_OPTIONS",
    "MLX_*",
    "HIPBLASLT_*",
)

_CLANG_RE = lazy_pattern(r"^clang\+\+-(\d+)$")


@dataclasses.dataclass
class LabCompiler:
    """How to run the lab's compiler and its children.

    Attributes:
        toolchain: the :class:`overlay.build.Toolchain` it came from.
        cxx: the clang++ to run, as a path valid where it runs (inside the chroot
            for a chroot toolchain).
        include_dirs: extra ``-I`` directories (a system ROCm's ``include``).
        pre_include: headers forced first (``format``: quirk 1 of docs/toolchain.md).
        description: one line for messages and ``racelab.json``.
    """

    toolchain: "Toolchain"
    cxx: str
    include_dirs: list[str]
    pre_include: list[str]
    description: str

    @property
    def chroot(self) -> bool:
        """True when commands run inside the toolchain chroot."""
        return getattr(self.toolchain, "kind", "") == "chroot"

    def argv(
        self, argv: Sequence[str], binds: Sequence[str], cwd: str | None = None
    ) -> list[str]:
        """``argv`` as run by this compiler's toolchain (wrapped for the chroot)."""
        return self.toolchain.wrap(argv, binds, cwd)

    def launcher(self, binary: str, binds: Sequence[str]) -> str:
        """A bash script that runs ``binary`` with the caller's arguments.

        For the chroot it runs ``tools/rocm-toolchain.sh exec`` with ``binds`` and
        passes on the variables of :data:`FORWARDED_ENV` (the chroot's environment
        is otherwise clean); ``exec`` keeps the process group, so the suite runner's
        deadline kill reaches the child.
        """
        head = (
            "#!/usr/bin/env bash\n"
            "# Written by overlay suite build (docs/race-lab.md): a race lab child.\n"
        )
        if not self.chroot:
            return head + f'exec {shlex.quote(binary)} "$@"\n'
        tc = self.toolchain
        # find_toolchain fills both for a chroot toolchain (overlay.build.Toolchain).
        script, root = tc.script or "", tc.root or ""
        patterns = "|".join(FORWARDED_ENV)
        bind_args = " ".join(f"--bind {shlex.quote(b)}" for b in binds)
        return head + (
            "envs=()\n"
            "while IFS= read -r -d '' kv; do\n"
            f'  case ${{kv%%=*}} in {patterns}) envs+=(--env "$kv");; esac\n'
            "done < <(env -0)\n"
            f"exec {shlex.quote(script)} exec --root {shlex.quote(root)} {bind_args} "
            f'"${{envs[@]}}" -- {shlex.quote(binary)} "$@"\n'
        )


def _newest_clang(bindir: str) -> str | None:
    best = None
    try:
        names = os.listdir(bindir)
    except OSError:
        return None
    for name in names:
        m = _CLANG_RE.match(name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), name)
    return best[1] if best else None


def find_lab_compiler(
    repo_root: str | None = None, spec: str | None = None
) -> LabCompiler:
    """The compiler for the lab: the ROCm toolchain :func:`overlay.build.find_toolchain` finds.

    Args:
        repo_root: the overlay repository (to find ``tools/rocm-toolchain.sh``).
        spec: ``None`` (auto), ``"system"`` or a toolchain root, as ``overlay build --toolchain``.
    Returns:
        A :class:`LabCompiler`.
    Raises:
        LabError: no ROCm toolchain, a chroot without root, or no clang++ in it (exit 2).
    """
    # the build package: only a lab that compiles looks for the toolchain
    from overlay.build import ToolchainError, find_toolchain

    try:
        tc = find_toolchain("rocm", spec, repo_root=repo_root)
    except ToolchainError as exc:
        raise LabError(exc.message, hint=exc.hint, exit_code=2) from None
    if tc.kind == "chroot":
        name = _newest_clang(os.path.join(tc.root or "", "chroot", "usr", "bin"))
        if name is None:
            raise LabError(
                f"no clang++-NN in the toolchain chroot {tc.root}",
                exit_code=2,
                hint="re-provision it: tools/rocm-toolchain.sh (it installs hipcc with clang)",
            )
        # The chroot's libstdc++ is GCC 16's: <format> must come before HIP's macros.
        return LabCompiler(
            tc, f"/usr/bin/{name}", [], ["format"], f"{name} in {tc.description}"
        )
    hipcc = next(
        (
            a.split("=", 1)[1]
            for a in tc.cmake_args
            if a.startswith("-DCMAKE_HIP_COMPILER=")
        ),
        "",
    )
    rocm = next(
        (
            a.split("=", 1)[1]
            for a in tc.cmake_args
            if a.startswith("-DCMAKE_PREFIX_PATH=")
        ),
        "",
    )
    cxx = os.path.join(rocm, "llvm", "bin", "clang++")
    if not os.access(cxx, os.X_OK):
        raise LabError(
            f"no clang++ beside {hipcc or 'hipcc'} (looked for {cxx})", exit_code=2
        )
    return LabCompiler(
        tc, cxx, [os.path.join(rocm, "include")], [], f"{cxx} (system ROCm {rocm})"
    )


_UNAVAILABLE: dict = {}


def unavailable_reason(
    repo_root: str | None = None, *, environ: Mapping[str, str] | None = None
) -> str | None:
    """Why the race lab cannot build here, or None when it can (cached per process).

    ``OVERLAY_SUITE_MODELS`` (a comma list of models, or ``none``) replaces the
    probe, as ``OVERLAY_SUITE_HARDWARE`` does for GPUs.
    """
    environ = os.environ if environ is None else environ
    override = environ.get(MODELS_ENV)
    if override is not None:
        items = {x.strip() for x in override.split(",") if x.strip()} - {"none"}
        return None if MODEL in items else f"{MODELS_ENV}={override!r}"
    if "reason" not in _UNAVAILABLE:
        try:
            find_lab_compiler(repo_root)
            _UNAVAILABLE["reason"] = None
        except LabError as exc:
            _UNAVAILABLE["reason"] = exc.message
    return _UNAVAILABLE["reason"]
