"""CMake: the options a backend is configured with, the configure run, its errors.

Errors: :class:`BuildError` (configure failed; exit 1), with the cause CMake printed
(:func:`cmake_error_summary`).
"""

from __future__ import annotations

import json
import os
import time

from overlay.build.cache import resolve_cache
from overlay.build.diagnostics import ANSI_RE
from overlay.build.results import BuildResult
from overlay.build.runlog import BuildLog, run_logged
from overlay.build.toolchain import Toolchain
from overlay.errors import EXIT_FINDINGS, OverlayError
from overlay.lazy import lazy_pattern

CONFIGURE_RECORD = ".overlay-configure.json"


class BuildError(OverlayError):
    """The build could not run to the compile stage: configure failed (exit 1)."""

    exit_code = EXIT_FINDINGS


_CMAKE_ERROR_RE = lazy_pattern(
    r"^CMake Error(?: (?:at|in) (?P<where>[^\s:][^:]*(?::\d+)?(?: \([^)]*\))?))?:\s*(?P<msg>.*)$"
)


_CMAKE_FRAME_RE = lazy_pattern(r"^\s+(?P<where>\S[^:]*:\d+ \([^)]*\))\s*$")


_NOT_FOUND_RE = lazy_pattern(r"^\s*(?:-- )?(?P<line>Could NOT find \S.*)$")


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
    lines = [ANSI_RE.sub("", raw).rstrip() for raw in output.splitlines()]
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


def json_source_dir(toolchain: Toolchain, backend_dir: str) -> str:
    """The nlohmann-json source for FetchContent, offline: the toolchain's, else a
    ``deps/`` stand-in linking ``/usr/include/nlohmann``; ``""`` when there is none.
    """
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


def configure(
    result: BuildResult,
    toolchain: Toolchain,
    opts: list[str],
    binds: list[str],
    log: BuildLog,
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
    status, output = run_logged(argv, log)
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
