"""The race lab: host-model suite children built from an exported layer.

A *host-model* suite (``model = "race-lab"`` in ``suites.toml``) runs MLX's ROCm
host code on any Linux box: the file under test is compiled from a layer that
``overlay export`` writes (never copied into this repository), against the
real ROCm headers, and linked with our model of the HIP runtime and hipBLASLt
(``patches-rocm/suites/racelab/``) under ThreadSanitizer or AddressSanitizer.
What such a run proves, and what only an AMD GPU can, is in
``docs/race-lab.md``.

Layout of one build (``build/race-lab/<label>/`` by default)::

    src/                   the exported layer (incremental export)
    obj-tsan/, obj-asan/   objects, one per source and sanitizer
    bin/<child>_<san>      the linked children
    <child>_<san>          launchers the suites name (they run bin/... inside the
                           toolchain chroot, or directly with a system ROCm)
    racelab.json           what was built: tree, label, compiler, children

Compilers: the chroot made by ``tools/rocm-toolchain.sh`` (its clang++ and the
ROCm 7.2.4 headers; needs root, as every chroot command does) or a system ROCm
(``$ROCM_PATH/llvm/bin/clang++`` with ``$ROCM_PATH/include``), found by
:func:`overlay.build.find_toolchain`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as _dt
import hashlib
import json
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence

from overlay.errors import EXIT_FINDINGS, OverlayError
from overlay.suites.config import MODELS  # every value a suite's ``model`` may take

__all__ = [
    "MODEL",
    "MODELS",
    "MODELS_ENV",
    "SANITIZERS",
    "LabChild",
    "CHILDREN",
    "LabError",
    "LabCompiler",
    "LabBuild",
    "lab_sources_dir",
    "default_out_dir",
    "find_lab_compiler",
    "unavailable_reason",
    "build_tree",
    "build_layer",
    "build_without_patch",
]

#: The host model this module builds (the value of a suite's ``model`` key).
MODEL = "race-lab"
#: Environment override of model detection: a comma list of available models,
#: or ``none`` (tests, CI runners with a known shape).
MODELS_ENV = "OVERLAY_SUITE_MODELS"
#: Sanitizer suffix -> clang's ``-fsanitize=`` value.
SANITIZERS = {"tsan": "thread", "asan": "address"}
#: The build record in the output directory.
STAMP = "racelab.json"
#: Variables the chroot launcher passes into the chroot (its environment is clean).
FORWARDED_ENV = (
    "OVERLAY_*",
    "TSAN_OPTIONS",
    "ASAN_OPTIONS",
    "UBSAN_OPTIONS",
    "MLX_*",
    "HIPBLASLT_*",
)

_LAB_SUBDIR = os.path.join("patches-rocm", "suites", "racelab")
_CLANG_RE = re.compile(r"^clang\+\+-(\d+)$")


class LabError(OverlayError):
    """The race lab cannot be built: no toolchain (exit 2) or a compile error (exit 1)."""


@dataclasses.dataclass(frozen=True)
class LabChild:
    """One child program of the lab.

    Attributes:
        name: program name (the launchers are ``<name>_<sanitizer>``).
        lab_sources: files under ``patches-rocm/suites/racelab/``.
        tree_sources: files of the exported layer compiled in (the code under test).
    """

    name: str
    lab_sources: tuple[str, ...]
    tree_sources: tuple[str, ...] = ()


#: The lab's children. ``racelab_selftest`` checks the model alone; the others
#: run a file of the exported layer on it.
CHILDREN = (
    LabChild(
        "racelab_selftest",
        (
            "hip_stub.cpp",
            "gemm_model.cpp",
            "hipblaslt_stub.cpp",
            "racelab_selftest.cpp",
        ),
    ),
    LabChild(
        "hipblaslt_race",
        (
            "hip_stub.cpp",
            "gemm_model.cpp",
            "hipblaslt_stub.cpp",
            "mlx_shim.cpp",
            "hipblaslt_race.cpp",
        ),
        ("mlx/backend/rocm/gemms/hipblaslt_gemm.cpp",),
    ),
    LabChild(
        "rocblas_race",
        (
            "hip_stub.cpp",
            "gemm_model.cpp",
            "rocblas_stub.cpp",
            "device_shim.cpp",
            "rocblas_race.cpp",
        ),
        ("mlx/backend/rocm/device.cpp", "mlx/backend/rocm/worker.cpp"),
    ),
)


def lab_sources_dir(root: str) -> str:
    """``<root>/patches-rocm/suites/racelab``: the model's and the drivers' sources."""
    return os.path.join(root, _LAB_SUBDIR)


def default_out_dir(root: str, label: str) -> str:
    """``<root>/build/race-lab/<label>``: where :func:`build_layer` puts a build."""
    return os.path.join(root, "build", "race-lab", label)


# --------------------------------------------------------------------------- compiler


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

    toolchain: object
    cxx: str
    include_dirs: list
    pre_include: list
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
        head = "#!/usr/bin/env bash\n# Written by overlay suite build (docs/race-lab.md): a race lab child.\n"
        if not self.chroot:
            return head + f'exec {shlex.quote(binary)} "$@"\n'
        tc = self.toolchain
        patterns = "|".join(FORWARDED_ENV)
        bind_args = " ".join(f"--bind {shlex.quote(b)}" for b in binds)
        return head + (
            "envs=()\n"
            "while IFS= read -r -d '' kv; do\n"
            f'  case ${{kv%%=*}} in {patterns}) envs+=(--env "$kv");; esac\n'
            "done < <(env -0)\n"
            f"exec {shlex.quote(tc.script)} exec --root {shlex.quote(tc.root)} {bind_args} "
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
    from overlay.build import ToolchainError, find_toolchain

    try:
        tc = find_toolchain("rocm", spec, repo_root=repo_root)
    except ToolchainError as exc:
        raise LabError(exc.message, hint=exc.hint, exit_code=2) from None
    if tc.kind == "chroot":
        name = _newest_clang(os.path.join(tc.root, "chroot", "usr", "bin"))
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


# --------------------------------------------------------------------------- build


@dataclasses.dataclass
class LabBuild:
    """What :func:`build_tree` produced.

    Attributes:
        out_dir: the build directory; pass it as ``--child-dir``.
        tree: the exported layer's tree SHA.
        label: ``patched``, ``forked``, ``without-<patch stem>``, ...
        programs: launcher paths, ``<child>_<sanitizer>``.
        compiled: objects compiled this time (0 when everything was up to date).
        seconds: wall time of the build.
    """

    out_dir: str
    tree: str
    label: str
    programs: list
    compiled: int
    seconds: float


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _load_stamp(out_dir: str) -> dict:
    try:
        with open(os.path.join(out_dir, STAMP), encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def build_tree(
    root: str,
    tree_dir: str,
    out_dir: str,
    *,
    tree: str,
    label: str,
    compiler: LabCompiler | None = None,
    children: Sequence[LabChild] = CHILDREN,
    sanitizers: Sequence[str] = tuple(SANITIZERS),
    jobs: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> LabBuild:
    """Compile and link the lab's children against an exported tree.

    Objects are compiled again only when their source, the lab's header, the
    flags, the compiler or (for sources that include the tree) the tree changed.

    Args:
        root: the overlay repository (the lab's sources are under it).
        tree_dir: the exported layer (``-I`` root; holds the tree sources).
        out_dir: the build directory (created).
        tree: the exported tree's SHA (recorded; part of the objects' keys).
        label: a name for reports (``patched``, ``forked``, ...).
        compiler: default :func:`find_lab_compiler`.
        children: which children to build.
        sanitizers: keys of :data:`SANITIZERS`.
        jobs: parallel compiles (default: the CPU count).
        progress: called with one line per compiled object.
    Returns:
        A :class:`LabBuild`.
    Raises:
        LabError: no compiler (exit 2); a source missing from the tree or a
            compile or link error (exit 1; the compiler's output is in the message).
    """
    import time

    start = time.monotonic()
    compiler = compiler or find_lab_compiler(root)
    lab = lab_sources_dir(root)
    out_dir = os.path.abspath(out_dir)
    tree_dir = os.path.abspath(tree_dir)
    os.makedirs(os.path.join(out_dir, "bin"), exist_ok=True)
    binds = sorted(
        {out_dir, lab}
        | ({tree_dir} if not tree_dir.startswith(out_dir + os.sep) else set())
    )
    header = _read(os.path.join(lab, "racelab.h"))
    stamp = _load_stamp(out_dir)
    keys: dict = (
        dict(stamp.get("objects", {}))
        if stamp.get("compiler") == compiler.description
        else {}
    )

    # (sanitizer, source path, object path, key)
    units: dict[tuple[str, str], tuple[str, str, str, list[str]]] = {}
    links: list[tuple[str, str, list[str]]] = []
    for san in sanitizers:
        if san not in SANITIZERS:
            raise LabError(
                f"unknown sanitizer {san!r} (use {', '.join(SANITIZERS)})", exit_code=2
            )
        flags = [
            "-std=c++20",
            "-g",
            "-O1",
            "-fno-omit-frame-pointer",
            f"-fsanitize={SANITIZERS[san]}",
            "-D__HIP_PLATFORM_AMD__",
            "-w",
        ]
        for inc in compiler.pre_include:
            flags += ["-include", inc]
        flags += [f"-I{d}" for d in compiler.include_dirs] + [
            f"-I{lab}",
            f"-I{tree_dir}",
        ]
        for child in children:
            objs = []
            for src, in_tree in [
                (os.path.join(lab, s), False) for s in child.lab_sources
            ] + [(os.path.join(tree_dir, s), True) for s in child.tree_sources]:
                if not os.path.isfile(src):
                    where = "the exported layer" if in_tree else lab
                    raise LabError(
                        f"{os.path.relpath(src, tree_dir if in_tree else root)} is not in {where}",
                        exit_code=EXIT_FINDINGS,
                    )
                obj = os.path.join(
                    out_dir,
                    f"obj-{san}",
                    os.path.splitext(os.path.basename(src))[0] + ".o",
                )
                objs.append(obj)
                if (san, src) not in units:
                    # Lab sources may include the tree (mlx_shim, the drivers): key them by it too.
                    uses_tree = in_tree or b'"mlx/' in _read(src)
                    key = _digest(
                        compiler.description,
                        " ".join(flags),
                        _read(src),
                        header,
                        tree if uses_tree else "",
                    )
                    units[(san, src)] = (src, obj, key, flags)
            links.append(
                (san, os.path.join(out_dir, "bin", f"{child.name}_{san}"), objs)
            )

    todo = [
        (src, obj, key, flags)
        for (src, obj, key, flags) in units.values()
        if keys.get(os.path.relpath(obj, out_dir)) != key or not os.path.isfile(obj)
    ]

    def compile_one(unit) -> tuple[str, subprocess.CompletedProcess]:
        src, obj, _key, flags = unit
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        argv = compiler.argv(
            [compiler.cxx, *flags, "-c", src, "-o", obj], binds, cwd=out_dir
        )
        return src, subprocess.run(
            argv, capture_output=True, text=True, errors="replace"
        )

    errors: list[str] = []
    first_error = ""
    workers = max(1, jobs or os.cpu_count() or 2)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for unit, (src, proc) in zip(todo, pool.map(compile_one, todo)):
            if proc.returncode != 0:
                text = (proc.stdout + proc.stderr).strip()
                errors.append(f"== {unit[1]}: exit {proc.returncode}\n{text}")
                first_error = first_error or next(
                    (line for line in text.splitlines() if ": error: " in line),
                    f"{src}: exit {proc.returncode}",
                )
                keys.pop(os.path.relpath(unit[1], out_dir), None)
            else:
                keys[os.path.relpath(unit[1], out_dir)] = unit[2]
                if progress:
                    progress(f"compiled {os.path.relpath(unit[1], out_dir)}")
    record = {
        "format": 1,
        "label": label,
        "tree": tree,
        "compiler": compiler.description,
        "objects": keys,
        "children": [c.name for c in children],
        "sanitizers": list(sanitizers),
    }
    _write_json(os.path.join(out_dir, STAMP), record)
    log = os.path.join(out_dir, "build.log")
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("\n".join(errors) + ("\n" if errors else ""))
    if errors:
        raise LabError(
            f"race lab build failed: {len(errors)} object(s); first: {first_error}",
            hint=f"compiler output in {log}",
            exit_code=EXIT_FINDINGS,
        )

    programs = []
    rebuilt = {obj for (_s, obj, _k, _f) in todo}
    for san, binary, objs in links:
        if (
            not os.path.isfile(binary)
            or rebuilt.intersection(objs)
            or any(os.path.getmtime(o) > os.path.getmtime(binary) for o in objs)
        ):
            argv = compiler.argv(
                [
                    compiler.cxx,
                    f"-fsanitize={SANITIZERS[san]}",
                    "-o",
                    binary,
                    *objs,
                    "-lpthread",
                ],
                binds,
                cwd=out_dir,
            )
            proc = subprocess.run(
                argv, capture_output=True, text=True, errors="replace"
            )
            if proc.returncode != 0:
                text = (proc.stdout + proc.stderr).strip()
                with open(log, "a", encoding="utf-8") as fh:
                    fh.write(f"== link {binary}: exit {proc.returncode}\n{text}\n")
                lines = text.splitlines()
                first = next(
                    (x for x in lines if "undefined reference" in x),
                    next((x for x in lines if "error" in x), text[:200]),
                )
                raise LabError(
                    f"race lab link of {os.path.basename(binary)} failed: {first}",
                    hint=f"linker output in {log}",
                    exit_code=EXIT_FINDINGS,
                )
        launcher = os.path.join(out_dir, os.path.basename(binary))
        text = compiler.launcher(binary, [out_dir])
        if not os.path.isfile(launcher) or _read(launcher) != text.encode():
            tmp = f"{launcher}.tmp.{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp, 0o755)
            os.replace(tmp, launcher)
        programs.append(launcher)
    record["built"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    record["programs"] = [os.path.basename(p) for p in programs]
    _write_json(os.path.join(out_dir, STAMP), record)
    return LabBuild(
        out_dir=out_dir,
        tree=tree,
        label=label,
        programs=programs,
        compiled=len(todo),
        seconds=time.monotonic() - start,
    )


def _write_json(path: str, data) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)


def _export_and_build(
    root: str, store, tree: str, label: str, out_dir: str | None, **kw
) -> LabBuild:
    from overlay.export import export_tree

    out_dir = os.path.abspath(out_dir or default_out_dir(root, label))
    compiler = kw.pop("compiler", None) or find_lab_compiler(root)
    src = os.path.join(out_dir, "src")
    export_tree(store, tree, src)
    return build_tree(
        root, src, out_dir, tree=tree, label=label, compiler=compiler, **kw
    )


def build_layer(
    root: str, store, layer: str = "patched", *, out_dir: str | None = None, **kw
) -> LabBuild:
    """Export ``layer`` of the overlay at ``root`` and build the lab against it.

    Args:
        root: overlay repository.
        store: :class:`overlay.gitstore.Store`.
        layer: ``patched`` or ``forked`` (``pin`` has no ROCm backend).
        out_dir: default ``build/race-lab/<layer>``.
        **kw: passed to :func:`build_tree` (``compiler``, ``jobs``, ``progress``, ...).
    Returns:
        A :class:`LabBuild`.
    """
    from overlay.layers import compute_layers
    from overlay.manifest import load_manifest

    if layer not in ("patched", "forked"):
        raise LabError(
            f"the race lab builds the patched or the forked layer, not {layer!r}",
            exit_code=2,
        )
    layers = compute_layers(store, load_manifest(root), root)
    return _export_and_build(root, store, layers.tree(layer), layer, out_dir, **kw)


def build_without_patch(
    root: str, store, patch: str, *, out_dir: str | None = None, **kw
) -> LabBuild:
    """Build the lab against the overlay with ``patch`` left out of the series.

    Args:
        root, store: as :func:`build_layer`.
        patch: a name listed in ``patches-rocm/series``.
        out_dir: default ``build/race-lab/without-<patch stem>``.
    Returns:
        A :class:`LabBuild`.
    """
    from overlay.suites.without import layers_without

    stem = patch[: -len(".patch")] if patch.endswith(".patch") else patch
    layers = layers_without(root, store, patch)
    return _export_and_build(
        root, store, layers.patched, f"without-{stem}", out_dir, **kw
    )
