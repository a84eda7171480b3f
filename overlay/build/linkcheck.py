"""The link check after a full build: undefined ``mlx::core`` symbols over every object
of the library's static archives (``nm``, ``c++filt``)."""

import dataclasses
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence

from overlay.build.runlog import BuildLog
from overlay.build.toolchain import Toolchain
from overlay.lazy import lazy_pattern


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
    """The link check: after a full build, every object of the library's archives, as
    a whole-archive link sees them; after ``--check`` (``front_end``), the symbols the
    front end's objects of every unit define and reference (:mod:`overlay.build.symbols`).

    Attributes:
        archives: the static libraries read (paths relative to the build directory);
            for the front end, ``[]``.
        members: how many objects they hold (front end: units read).
        undefined: :class:`UndefinedSymbol` s, sorted by name.
        seconds: wall time of ``nm`` and ``c++filt``.
        skipped: why the check did not run (no archive, no ``nm``), else ``None``.
        front_end: the symbols came from ``--check``'s units, not from archives.
        undecided: front end only: symbols no unit defines whose name a unit that did
            not compile (or was not checked) mentions, so it may define them; listed,
            never failing.
    """

    archives: list[str] = dataclasses.field(default_factory=list)
    members: int = 0
    undefined: list[UndefinedSymbol] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    skipped: str | None = None
    front_end: bool = False
    undecided: list[UndefinedSymbol] = dataclasses.field(default_factory=list)

    def report(self) -> list[str]:
        """One line per undefined (and undecided) symbol, then the summary line."""
        what = "link check (front end)" if self.front_end else "link check"
        if self.skipped:
            return [f"{what}: not run: {self.skipped}"]
        out = [u.format() for u in self.undefined]
        out += [
            f"  undecided {u.symbol} (referenced from {', '.join(u.referenced_from[:4])}): "
            "a unit that did not compile names it"
            for u in self.undecided
        ]
        if self.front_end:
            over = (
                f"over {self.members} unit(s) (every unit of the configured tree, as a "
                "whole-archive link sees them)"
            )
        else:
            over = (
                f"over {self.members} object(s) of {', '.join(self.archives)} (every "
                "object, as a whole-archive link sees them)"
            )
        line = f"{what}: {len(self.undefined)} undefined mlx::core symbol(s) {over}"
        if self.undecided:
            line += f", {len(self.undecided)} undecided"
        out.append(f"{line}, {self.seconds:.1f} s")
        return out


_NM_LINE_RE = lazy_pattern(
    r"^(?P<file>.+?)(?:\[(?P<member>[^\]]+)\])?: (?P<name>\S+) (?P<type>\S)(?:\s|$)"
)


#: nm types of a symbol defined for other objects: global (upper case) except U, plus
#: GNU unique (u) and indirect functions (i). Lower-case w and v are weak *undefined*.
_NM_UNDEFINED = "U"


def _nm_defines(kind: str) -> bool:
    """Whether an ``nm`` type defines the symbol for other objects."""
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
    """``text`` without its template argument lists (nested ``<...>`` removed)."""
    while True:
        stripped = re.sub(r"<[^<>]*>", "", text)
        if stripped == text:
            return text
        text = stripped


def link_check(
    obj: str, toolchain: Toolchain, binds: list[str], log: BuildLog
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
    defined, refs, members = read_nm(
        proc.stdout.decode("utf-8", "replace"),
        lambda file, member: (
            f"{os.path.relpath(file, obj)}({member})"
            if member
            else os.path.relpath(file, obj)
        ),
    )
    undefined = core_undefined(defined, refs, toolchain, binds, obj)
    log_undefined(log, undefined)
    result = LinkCheck(rel, members, undefined, time.perf_counter() - t0)
    log.write(result.report()[-1] + "\n")
    return result


def read_nm(
    text: str, where: Callable[[str, str | None], str]
) -> tuple[set[str], dict[str, list[str]], int]:
    """The global symbols of ``nm -A -P -g`` output.

    Args:
        text: nm's output (``file[member]: name type ...`` lines; other lines ignored).
        where: ``(file, archive member or None) -> the object's name in the report``.
    Returns:
        ``(defined names, {referenced name: objects referencing it}, objects read)``;
        the names are nm's (mangled).
    """
    defined: set[str] = set()
    refs: dict[str, list[str]] = {}
    members = 0
    previous = None
    for line in text.splitlines():
        m = _NM_LINE_RE.match(line)
        if not m:
            continue
        name_of = where(m.group("file"), m.group("member"))
        if name_of != previous:
            # nm lists each object's symbols together; an archive may hold two objects of
            # one name (mlx/backend/common/compiled.cpp.o and mlx/backend/rocm/...), so count
            # the runs, not the names
            members += 1
            previous = name_of
        name, kind = m.group("name"), m.group("type")
        if kind == _NM_UNDEFINED:
            refs.setdefault(name, []).append(name_of)
        elif _nm_defines(kind):
            defined.add(name)
    return defined, refs, members


def core_undefined(
    defined: set[str],
    refs: dict[str, list[str]],
    toolchain: Toolchain,
    binds: list[str],
    cwd: str,
) -> list[UndefinedSymbol]:
    """The referenced names no object defines that belong to ``mlx::core``, demangled
    (one ``c++filt`` run where the compilers run), sorted by name.

    Args:
        defined, refs: from :func:`read_nm`; toolchain, binds, cwd: where c++filt runs.
    Returns:
        :class:`UndefinedSymbol` s (``referenced_from`` sorted, without repeats).
    """
    missing = sorted(n for n in refs if n not in defined)
    demangled = _demangle(missing, toolchain, binds, cwd)
    undefined = []
    for name in missing:
        pretty = demangled.get(name, name)
        if is_mlx_core_symbol(pretty):
            undefined.append(UndefinedSymbol(pretty, sorted(set(refs[name]))))
    undefined.sort(key=lambda u: u.symbol)
    return undefined


def log_undefined(log: BuildLog, undefined: Sequence[UndefinedSymbol]) -> None:
    """One ``link check: undefined symbol: NAME`` entry per symbol (the form ``overlay
    drift --log`` reads), with the objects that reference it."""
    for u in undefined:
        log.write(
            f"link check: undefined symbol: {u.symbol}\n"
            f"  referenced from {', '.join(u.referenced_from)}\n"
        )


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
        dict(zip(names, out, strict=True))
        if proc.returncode == 0 and len(out) == len(names)
        else {}
    )
