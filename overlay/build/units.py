"""Translation units: the compile commands of a configured tree and running them.

``--only-changed`` compiles the units the series touches (:func:`compile_units`);
``--check`` runs every unit through the front end (:mod:`overlay.build.check`).
Both run their units through :func:`run_units`: C++ units straight from
``compile_commands.json`` in parallel, the HIP custom commands through one ninja.
"""

import dataclasses
import json
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from overlay.build.cache import launcher_path
from overlay.build.results import BuildResult, UnitResult
from overlay.build.runlog import BuildLog, run_logged
from overlay.build.toolchain import Toolchain, ToolchainError
from overlay.lazy import lazy_pattern
from overlay.parallel import run_child, run_parallel

SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c", ".hip", ".cu")


HEADER_SUFFIXES = (".h", ".hpp", ".hh", ".cuh", ".inc")


def load_compile_commands(obj: str) -> list[dict]:
    """The entries of ``obj/compile_commands.json`` (``[]`` when absent or unreadable)."""
    try:
        with open(os.path.join(obj, "compile_commands.json"), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return []


def entry_file(entry: dict) -> str:
    """The absolute, normalized source path of a compile_commands.json entry."""
    f = entry["file"]
    return os.path.normpath(
        f if os.path.isabs(f) else os.path.join(entry["directory"], f)
    )


def entry_output(entry: dict) -> str:
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


def tu_argv(
    entry: dict,
    toolchain: Toolchain,
    binds: list[str],
    cache: str = "none",
    launcher: str | None = None,
) -> list[str]:
    """The argv that compiles one ``compile_commands.json`` entry: in its directory, its
    object's directory made first, the cache launcher in front when one is used.
    """
    directory = entry["directory"]
    command = entry.get("command") or " ".join(
        shlex.quote(a) for a in entry.get("arguments", [])
    )
    output = entry_output(entry)
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


_CUSTOM_RE = lazy_pattern(r"^build (\S+?)(?: \|[^:]*)?: CUSTOM_COMMAND (\S+)")


def hip_targets(obj: str) -> dict[str, str]:
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
class Unit:
    """One process to run: a compile (``argv``), or a HIP unit whose command ninja
    gives (``hip_target``, check only)."""

    label: str
    kind: str
    how: str
    argv: list[str] | None = None
    hip_target: str | None = None


def compile_units(
    result: BuildResult,
    changed: list[str],
    toolchain: Toolchain,
    binds: list[str],
    jobs: int | None,
    log: BuildLog,
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
    entries = load_compile_commands(obj)
    by_file = {entry_file(e): e for e in entries}
    by_output = {
        os.path.normpath(os.path.join(e["directory"], entry_output(e))): e
        for e in entries
        if entry_output(e)
    }
    hip = hip_targets(obj)
    units: list[Unit] = []
    hip_units: list[tuple[str, str]] = []  # (label, ninja target)
    headers = {}
    for path in changed:
        full = os.path.normpath(os.path.join(src, path))
        if full in by_file:
            units.append(
                Unit(
                    path,
                    "cpp",
                    "compile_commands.json",
                    tu_argv(by_file[full], toolchain, binds, result.cache, launcher),
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
                        Unit(
                            label,
                            "cpp",
                            "compile_commands.json",
                            tu_argv(e, toolchain, binds, result.cache, launcher),
                        )
                    )
    for extra in extra_dirs:  # the suite children, when configured
        for e in load_compile_commands(extra):
            units.append(
                Unit(
                    e["file"],
                    "cpp",
                    "compile_commands.json",
                    tu_argv(e, toolchain, binds, result.cache, launcher),
                )
            )
    return run_units(
        result, units, toolchain, binds, jobs, log, progress, ninja_targets=hip_units
    )


def run_units(
    result: BuildResult,
    units: list[Unit],
    toolchain: Toolchain,
    binds: list[str],
    jobs: int | None,
    log: BuildLog,
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
            proc = run_child(
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
            f"$ {' '.join(shlex.quote(a) for a in argv)}\n{text}"
            f"[exit {proc.returncode}, {seconds:.2f} s]\n"
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
        status, output = run_logged(toolchain.wrap(argv, binds, obj), log)
        failed = {
            word
            for line in output.splitlines()
            if line.startswith("FAILED: ")
            for word in line[len("FAILED: ") :].split()
        }
        took = _ninja_log_seconds(ninja_log, offset)
        out = []
        for label, target in ninja_targets:
            # a target ninja did not get to (an unknown target: ninja stops before
            # building) failed too
            ok = target not in failed and (status == 0 or bool(failed))
            out.append(UnitResult(label, "hip", took.get(target, 0.0), ok, target))
        slots[len(units)] = (output, out)
        tick(len(ninja_targets), "ninja")

    t0 = time.perf_counter()
    run_parallel(
        workers,
        [lambda i=i: one(i) for i in range(len(units))]
        + ([batch] if ninja_targets else []),
    )
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
