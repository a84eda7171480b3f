"""The link check from the front end: ``--check``'s units write a cheap object each,
whose symbol table says which functions the unit defines and which it references.

A whole-archive link fails on a symbol some object references and none defines; the
full build shows that only after every object is compiled (tens of minutes, docs/build.md).
The front end already decides both sets, so the check's own compile of each unit
writes them down at about the cost of ``-fsyntax-only`` (measured in docs/build.md):

* GCC: ``-O0 -flto -fno-fat-lto-objects -c``: the unit is parsed and its templates
  instantiated as for ``-fsyntax-only``, then written as GIMPLE with the LTO symbol
  table; no code is generated. ``gcc-nm`` (nm with GCC's plugin) reads the table.
* clang (and any other compiler): ``-O0 -c`` (clang's ``-O0`` code generation is the
  cheap part of a unit);
* HIP through hipcc or clang: ``--offload-device-only -fsyntax-only`` (the device
  code is checked as before) and ``--offload-host-only -O0 -c`` (the host object,
  which is where a ``.hip`` unit's ``mlx::core`` functions live).

The objects go to ``build/<backend>/check-symbols/`` (never ninja's objects);
:func:`front_end_link_check` reads them all with one ``nm`` and reports the undefined
``mlx::core`` symbols as the full build's link check does
(:mod:`overlay.build.linkcheck`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence

from overlay.build.linkcheck import LinkCheck, core_undefined, log_undefined, read_nm
from overlay.build.runlog import BuildLog
from overlay.build.toolchain import Toolchain

#: Under ``build/<backend>/``: one object per checked unit (its repository path + ``.o``).
SYMBOLS_DIR = "check-symbols"

#: Arguments that write something a symbol object must not (``-o``, the dependency
#: file) or that would make it something else (``-c``, ``-fsyntax-only``, ``-S``,
#: ``-E``).
_DROP_WITH_VALUE = ("-o", "-MF", "-MT", "-MQ")
_DROP_ALONE = ("-c", "-MD", "-MMD", "-fsyntax-only", "-S", "-E")
#: Flags whose meaning the symbol object replaces (LTO and debug information).
_DROP_PREFIX = ("-flto", "-ffat-lto-objects", "-fno-fat-lto-objects", "-g")

_LAUNCHERS = ("ccache", "sccache", "custom")


def drop_flags(
    words: Sequence[str],
    alone: Sequence[str] = _DROP_ALONE,
    prefixes: tuple[str, ...] = _DROP_PREFIX,
) -> list[str]:
    """A compile's argv without its output and dependency-file arguments (``-o``,
    ``-MF``, ``-MT``, ``-MQ``, with their value, joined or not), the flags ``alone``,
    and the flags starting with one of ``prefixes`` (``-gpu...`` kept).

    Args:
        words: the compiler's argv.
        alone: flags dropped where they stand alone (default: the mode flags a
            symbol object replaces).
        prefixes: flag prefixes dropped (default: LTO and debug information).
    Returns:
        The remaining words, in order.
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
        if word in alone:
            continue
        if len(word) > 3 and word[:3] in _DROP_WITH_VALUE:
            continue  # the joined form, -MFpath
        if prefixes and word.startswith(prefixes) and not word.startswith("-gpu"):
            continue
        out.append(word)
    return out


def compiler_word(words: Sequence[str]) -> str:
    """The compiler of a compile argv: the first word that is not a cache launcher
    (``ccache``, ``sccache``, overlay's ``launch/custom``)."""
    for word in words:
        if os.path.basename(word) not in _LAUNCHERS:
            return word
    return words[0] if words else ""


def is_hip(words: Sequence[str]) -> bool:
    """Whether a compile argv compiles HIP (a ``.hip`` source, ``-x hip``, an
    ``--offload-arch``) with hipcc or clang: then device and host are split."""
    compiler = os.path.basename(compiler_word(words))
    if not (compiler.startswith(("hipcc", "clang")) or compiler == "amdclang++"):
        return False
    return any(
        w.endswith(".hip") or w.startswith("--offload-arch") for w in words
    ) or any(a == "-x" and b == "hip" for a, b in zip(words, words[1:], strict=False))


def symbols_argv(words: Sequence[str], out: str, family: str) -> list[str]:
    """A compile argv turned into the front-end check that writes the unit's symbols
    to ``out`` (not for HIP: see :func:`hip_symbols_commands`).

    Args:
        words: the compiler's argv (launcher first, when there is one).
        out: the object to write.
        family: ``gcc`` (LTO object: no code generation) or anything else (a plain
            ``-O0`` object), from :func:`compiler_family`.
    Returns:
        The new argv: the same compiler, defines, include paths and standard; ``-O0``
        last so it wins over the build's ``-O3``.
    """
    lto = ["-flto", "-fno-fat-lto-objects"] if family == "gcc" else []
    return [*drop_flags(words), "-O0", "-g0", *lto, "-c", "-o", out]


def hip_symbols_commands(words: Sequence[str], out: str) -> tuple[list[str], list[str]]:
    """The two runs of a HIP unit: the device code through the front end only, as the
    plain check does, and the host object whose symbols count.

    Args:
        words: hipcc's (or clang's) argv; out: the host object to write.
    Returns:
        ``(device argv, host argv)``.
    """
    base = drop_flags(words)
    return (
        [*base, "--offload-device-only", "-fsyntax-only"],
        [*base, "--offload-host-only", "-O0", "-g0", "-c", "-o", out],
    )


def unit_shell(words: Sequence[str], out: str, family: str) -> str:
    """The shell line that checks one unit and writes its symbol object: the object
    removed first (a failing unit leaves none, so an old one is never read), its
    directory made; for HIP both runs, the exit status failing when either fails."""
    prep = f"rm -f {shlex.quote(out)} && mkdir -p {shlex.quote(os.path.dirname(out))}"
    if is_hip(words):
        device, host = hip_symbols_commands(words, out)
        # both run: a device error must not hide the host's errors
        return (
            f"{prep} && {{ {shlex.join(device)}; d=$?; {shlex.join(host)}; h=$?; "
            '[ "$d" = 0 ] && [ "$h" = 0 ]; }'
        )
    return f"{prep} && {shlex.join(symbols_argv(words, out, family))}"


class CompilerFamilies:
    """``compiler path -> "gcc" | "clang" | "other"``, from one ``--version`` per
    compiler where the compilers run (``/usr/bin/c++`` may be either)."""

    def __init__(self, toolchain: Toolchain, binds: list[str]):
        self.toolchain, self.binds = toolchain, binds
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, compiler: str) -> str:
        with self._lock:
            if compiler not in self._known:
                self._known[compiler] = self._ask(compiler)
            return self._known[compiler]

    def _ask(self, compiler: str) -> str:
        try:
            proc = subprocess.run(
                self.toolchain.wrap([compiler, "--version"], self.binds),
                capture_output=True,
                text=True,
                errors="replace",
                stdin=subprocess.DEVNULL,
            )
        except OSError:
            return "other"
        return compiler_family(proc.stdout)


def compiler_family(version_text: str) -> str:
    """``gcc``, ``clang`` or ``other`` from a compiler's ``--version`` output."""
    first = version_text.splitlines()[0] if version_text else ""
    if "clang" in first.lower():
        return "clang"
    program = os.path.basename(first.split()[0]) if first.split() else ""
    if (
        re.fullmatch(r"(?:[\w.-]+-)?(?:g\+\+|gcc|c\+\+|cc)(?:-[\d.]+)?", program)
        or "(GCC)" in first
        or "Free Software Foundation" in version_text
    ):
        return "gcc"
    return "other"


def symbols_path(backend_dir: str, label: str) -> str:
    """Where the symbol object of the unit ``label`` (a repository path, or
    ``build/<backend>/obj/...`` for a generated source) goes."""
    rel = label.replace(os.sep, "/").lstrip("/").replace("../", "__/")
    return os.path.join(backend_dir, SYMBOLS_DIR, rel + ".o")


def front_end_link_check(
    objects: Mapping[str, str],
    uncompiled: Mapping[str, str | None],
    toolchain: Toolchain,
    binds: list[str],
    cwd: str,
    log: BuildLog,
) -> LinkCheck:
    """Undefined ``mlx::core`` symbols over the symbol objects of every checked unit.

    A name some unit references and no unit defines is undefined, as for a
    whole-archive link (:func:`overlay.build.linkcheck.link_check`). Units that did
    not compile (or were not checked) have unknown definitions: an undefined symbol
    whose unqualified name their text mentions (or any, when a text is unknown) is
    *undecided*, listed and not failing.

    Args:
        objects: ``{unit label: symbol object}`` of the units that compiled.
        uncompiled: ``{unit label: its source text, or None when unknown}`` of the
            units that failed or were not checked.
        toolchain, binds, cwd: where ``nm`` and ``c++filt`` run; log: the build log.
    Returns:
        A :class:`LinkCheck` with ``front_end`` set (``skipped`` when nm cannot run).
    """
    t0 = time.perf_counter()
    present = {label: path for label, path in objects.items() if os.path.isfile(path)}
    if not present:
        return LinkCheck(front_end=True, skipped="no unit wrote its symbols")
    by_path = {os.path.normpath(p): label for label, p in present.items()}
    nm = "gcc-nm" if toolchain.has_tool("gcc-nm") else "nm"
    argv = toolchain.wrap([nm, "-A", "-P", "-g", *sorted(by_path)], binds, cwd)
    log.write("$ " + shlex.join(argv) + "\n")
    try:
        proc = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL)
    except OSError as exc:
        return LinkCheck(front_end=True, skipped=f"cannot run {nm}: {exc.strerror}")
    if proc.returncode != 0 and not proc.stdout:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return LinkCheck(
            front_end=True,
            skipped=f"{nm} failed (exit {proc.returncode}): {err[-1] if err else ''}",
        )
    defined, refs, members = read_nm(
        proc.stdout.decode("utf-8", "replace"),
        lambda file, _member: by_path.get(os.path.normpath(file), file),
    )
    found = core_undefined(defined, refs, toolchain, binds, cwd)
    undefined, undecided = [], []
    for u in found:
        name = u.symbol.split("(", 1)[0].rsplit("::", 1)[-1]
        name = re.sub(r"<.*", "", name)
        if any(
            text is None or re.search(rf"\b{re.escape(name)}\b", text)
            for text in uncompiled.values()
        ):
            undecided.append(u)
        else:
            undefined.append(u)
    log_undefined(log, undefined)
    del members  # a unit without global symbols prints no line: count the objects
    result = LinkCheck(
        [],
        len(present),
        undefined,
        time.perf_counter() - t0,
        front_end=True,
        undecided=undecided,
    )
    log.write(result.report()[-1] + "\n")
    return result


__all__ = [
    "SYMBOLS_DIR",
    "CompilerFamilies",
    "compiler_family",
    "compiler_word",
    "front_end_link_check",
    "hip_symbols_commands",
    "is_hip",
    "symbols_argv",
    "symbols_path",
    "unit_shell",
]
