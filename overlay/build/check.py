"""``--check``: every translation unit through the compiler front end only
(``-fsyntax-only``); no object is written and nothing is built first."""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import threading
from collections.abc import Callable, Sequence

from overlay import layout
from overlay.build.cache import launcher_path
from overlay.build.diagnostics import ANSI_RE, tree_locator
from overlay.build.results import BuildResult
from overlay.build.runlog import BuildLog
from overlay.build.symbols import (
    CompilerFamilies,
    compiler_word,
    drop_flags,
    front_end_link_check,
    symbols_path,
    unit_shell,
)
from overlay.build.toolchain import Toolchain
from overlay.build.units import (
    Unit,
    entry_file,
    hip_targets,
    load_compile_commands,
    run_units,
)
from overlay.errors import OverlayError
from overlay.lazy import lazy_pattern

#: Arguments a syntax-only run must not pass on, besides the object and the dependency
#: file's (:func:`overlay.build.symbols.drop_flags`): compile-only (``-c``) and the
#: dependency file's switches (``-MD``: it belongs to the real object).
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
    kept = drop_flags(words, alone=(*_DROP_ALONE, "-fsyntax-only"), prefixes=())
    return [*kept, "-fsyntax-only"]


def _syntax_only_shell(
    command: str, compile_line: Callable[[list[str]], str] | None = None
) -> str:
    """:func:`syntax_only_argv` (or ``compile_line``: the compile's argv -> a shell
    line, the symbols check's :func:`overlay.build.symbols.unit_shell`) applied to the
    compile of a shell command line
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
    kept = [shlex.join(seg) for seg in segments[:compile_at] if seg and seg[0] == "cd"]
    if compile_line is None:
        kept.append(shlex.join(syntax_only_argv(segments[compile_at])))
    else:
        kept.append(compile_line(segments[compile_at]))
    return " && ".join(kept)


_MISSING_INCLUDE_RE = lazy_pattern(
    r"fatal error: (?:'(?P<clang>[^']+)' file not found"
    r"|(?P<gcc>[^\s:][^:]*): No such file or directory)"
)


def check_tree(
    result: BuildResult,
    toolchain: Toolchain,
    binds: list[str],
    jobs: int | None,
    log: BuildLog,
    progress: Callable[[int, int, str], None] | None,
    *,
    symbols: bool = False,
) -> str:
    """Every translation unit of the configured tree through the compiler front end.

    C++ (and any HIP unit CMake compiles as a language): the ``compile_commands.json``
    command through :func:`syntax_only_argv`. HIP objects made by custom commands
    (the fork's ``.hip`` files): the command ``ninja -t commands -s <object>``
    prints, through the same change. Nothing is built first: a unit whose source
    the build generates is listed as not checked, and so is one that fails only
    because an include the build generates is missing.

    With ``symbols``, each unit's run also writes its symbols
    (:func:`overlay.build.symbols.unit_shell`: an LTO object under GCC, an ``-O0``
    host object under clang and hipcc) and ``result.link`` gets the front end's link
    check over all of them (:func:`overlay.build.symbols.front_end_link_check`).

    Args:
        result: the build's result (``units`` and ``skipped_units`` are filled);
        toolchain, binds: where the compilers run; jobs: parallel units;
        log: the build log; progress: ``(done, total, text)`` callback or ``None``;
        symbols: also compute the undefined ``mlx::core`` symbols.
    Returns:
        The compilers' output, to parse for diagnostics.
    Raises:
        OverlayError: no ``compile_commands.json`` (exit 2).
        ToolchainError: a unit's command could not be started (exit 2).
    """
    entries = load_compile_commands(result.obj)
    if not entries:
        raise OverlayError(
            f"no compile_commands.json in {result.obj}: the check needs CMake's "
            "CMAKE_EXPORT_COMPILE_COMMANDS=ON (overlay sets it; was the project "
            "configured?)"
        )
    plan = _SymbolPlan(result, toolchain, binds) if symbols else None
    units = [
        unit
        for unit in (_entry_unit(e, result, toolchain, binds, plan) for e in entries)
        if unit is not None
    ]
    hip_units, commands = _hip_units(result, toolchain, binds, plan)
    output = run_units(
        result,
        units + hip_units,
        toolchain,
        binds,
        jobs,
        log,
        progress,
        hip_commands=commands,
        generated=_GeneratedIncludes(toolchain, result.obj, binds),
    )
    if plan is not None:
        result.link = plan.link_check(log)
    return output


class _SymbolPlan:
    """Where each unit's symbol object goes, and what is known of the units that
    wrote none (a failing or not-checked unit may define what the others miss)."""

    def __init__(self, result: BuildResult, toolchain: Toolchain, binds: list[str]):
        self.result, self.toolchain, self.binds = result, toolchain, binds
        self.backend_dir = os.path.dirname(result.obj)
        self.families = CompilerFamilies(toolchain, binds)
        self.objects: dict[str, str] = {}
        self.generated: dict[str, str] = {}  # label -> the ninja target that makes it

    def shell(self, label: str, words: list[str]) -> str:
        """The unit's check that writes its symbol object (recorded for the label)."""
        out = symbols_path(self.backend_dir, label)
        self.objects[label] = out
        return unit_shell(words, out, self.families(compiler_word(words)))

    def link_check(self, log: BuildLog):
        """The front end's link check over the units that compiled."""
        result = self.result
        ok = {u.path for u in result.units if u.ok}
        uncompiled: dict[str, str | None] = {
            u.path: _read(os.path.join(result.src, u.path))
            for u in result.units
            if not u.ok
        }
        for label, _why in result.skipped_units:
            if label in self.generated:
                uncompiled[label] = _generator_text(
                    self.toolchain, result.obj, self.binds, self.generated[label]
                )
            else:
                uncompiled[label] = _read(os.path.join(result.src, label))
        objects = {k: v for k, v in self.objects.items() if k in ok}
        return front_end_link_check(
            objects, uncompiled, self.toolchain, self.binds, result.obj, log
        )


def _read(path: str, limit: int = 4 << 20) -> str | None:
    """A source's text (at most ``limit`` bytes), or ``None`` when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(limit)
    except OSError:
        return None


def _generator_text(
    toolchain: Toolchain, obj: str, binds: list[str], target: str
) -> str | None:
    """What a generated source is made from: the texts of the inputs of the ninja rule
    that writes it (``ninja -t query``: MLX's ``compiled_preamble.cpp`` comes from
    ``make_compiled_preamble.sh``, which names the function it defines), ``None`` when
    ninja names none that can be read."""
    proc = subprocess.run(
        toolchain.wrap(["ninja", "-C", obj, "-t", "query", target], binds, obj),
        capture_output=True,
        text=True,
        errors="replace",
        stdin=subprocess.DEVNULL,
    )
    texts, inputs = [], False
    for line in proc.stdout.splitlines():
        word = line.strip()
        if line.startswith("  ") and not line.startswith("    "):
            inputs = word.startswith("input:")
            continue
        if inputs and word:
            path = word.lstrip("|").strip()
            full = path if os.path.isabs(path) else os.path.join(obj, path)
            text = _read(full) if os.path.isfile(full) else None
            if text is not None:
                texts.append(text)
    return "\n".join(texts) if texts else None


def _entry_unit(
    entry: dict,
    result: BuildResult,
    toolchain: Toolchain,
    binds: list[str],
    plan: _SymbolPlan | None = None,
) -> Unit | None:
    """The syntax-only unit of one ``compile_commands.json`` entry (with ``plan``: the
    one that also writes its symbols), or ``None`` (listed in ``result.skipped_units``)
    when its source is generated or its command cannot be split."""
    obj = result.obj
    full = entry_file(entry)
    label = _label(result, full, entry["directory"])
    if not os.path.exists(full):
        target = os.path.relpath(full, obj) if full.startswith(obj + os.sep) else full
        result.skipped_units.append(
            (label, f"generated by the build (`ninja {target}` makes it)")
        )
        if plan is not None:
            plan.generated[label] = target
        return None
    try:
        words = entry.get("arguments") or shlex.split(entry.get("command", ""))
    except ValueError:
        result.skipped_units.append(
            (label, "its compile_commands.json command cannot be split (quotes)")
        )
        return None
    if result.cache != "none":
        # as the HIP commands, through the cache launcher: ccache keeps a clean
        # -fsyntax-only result, so an unchanged unit is not checked twice
        words = [launcher_path(os.path.dirname(obj)), *words]
    check = (
        plan.shell(label, words)
        if plan is not None
        else shlex.join(syntax_only_argv(words))
    )
    argv = ["sh", "-c", f"cd {shlex.quote(entry['directory'])} && {check}"]
    kind = "hip" if full.endswith((".hip", ".cu")) else "cpp"
    return Unit(
        label, kind, "-fsyntax-only", toolchain.wrap(argv, binds, entry["directory"])
    )


def _label(result: BuildResult, full: str, cwd: str) -> str:
    """A unit's path as the reports print it: its repository path inside the exported
    tree; a source the build generates, under the build directory, as
    ``build/<backend>/obj/<path>`` (the report is read from the repository root, and
    an absolute path names one machine's checkout); anything else as given."""
    path, inside = tree_locator(result.src, cwd)(full)
    if inside:
        return path
    full = os.path.normpath(full if os.path.isabs(full) else os.path.join(cwd, full))
    for obj in {os.path.normpath(result.obj), os.path.realpath(result.obj)}:
        if full.startswith(obj + os.sep):
            rel = os.path.relpath(full, obj).replace(os.sep, "/")
            return f"{layout.backend_dir(result.backend)}/{layout.BACKEND_OBJ}/{rel}"
    return path


def _hip_units(
    result: BuildResult,
    toolchain: Toolchain,
    binds: list[str],
    plan: _SymbolPlan | None = None,
) -> tuple[list[Unit], dict[str, str]]:
    """The HIP custom commands' units and ``{ninja target: syntax-only command}``
    (from ``ninja -t commands -s``; with ``plan``, the command that also writes the
    host object's symbols); a unit whose source is generated is listed in
    ``result.skipped_units`` instead."""
    obj = result.obj
    hip = hip_targets(obj)
    commands: dict[str, str] = {}
    if not hip:
        return [], commands
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
    labels = {hip[full]: _label(result, full, obj) for full in hip}
    if proc.returncode == 0 and len(lines) == len(targets):
        for target, line in zip(targets, lines, strict=True):
            label = labels[target]
            try:
                commands[target] = _syntax_only_shell(
                    line,
                    None if plan is None else functools.partial(plan.shell, label),
                )
            except ValueError:
                continue  # listed as "ninja gave no command" by run_units
    units = []
    for full in sorted(hip):
        label = _label(result, full, obj)
        if not os.path.exists(full):
            result.skipped_units.append(
                (label, f"generated by the build (`ninja {hip[full]}` makes it)")
            )
            if plan is not None:
                plan.generated[label] = hip[full]
            continue
        units.append(Unit(label, "hip", "-fsyntax-only", hip_target=hip[full]))
    return units, commands


class _GeneratedIncludes:
    """``failed unit's output -> why it was not checked, or None``: a unit that fails
    only for want of headers the build generates was not checked, not broken.

    Ninja's outputs are listed once, on the first missing include (threads share it).
    """

    def __init__(self, toolchain: Toolchain, obj: str, binds: list[str]):
        self.toolchain, self.obj, self.binds = toolchain, obj, binds
        self._made: list[str] | None = None
        self._lock = threading.Lock()

    def __call__(self, text: str) -> str | None:
        names = [
            (m.group("clang") or m.group("gcc")).strip()
            for m in _MISSING_INCLUDE_RE.finditer(ANSI_RE.sub("", text))
        ]
        if not names:
            return None
        with self._lock:
            if self._made is None:
                self._made = _ninja_outputs(self.toolchain, self.obj, self.binds)
            made = self._made
        hits = []
        for name in names:
            tail = "/" + name.lstrip("./")
            hit = next((out for out in made if out == name or out.endswith(tail)), None)
            if hit is None:
                return None  # a missing include the build does not make: a real error
            hits.append(hit)
        return (
            f"needs {names[0]}, which the build generates (`ninja {hits[0]}` makes it); "
            "build once, then check again"
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
