"""A package's names, imported from its modules when first used (PEP 562), and
regular expressions compiled when first used (:func:`lazy_pattern`).

A package that re-exports its modules' names (``from overlay.records import fixes;
fixes.load(...)``) would otherwise import every module of it as soon as any one is
imported: Python runs the package's ``__init__`` first. A command that needs one
module of the package (``rebase`` the heading rewrite of ``LOCAL_FIXES.md``, not its
checks) then pays for all of them at start-up, which is the floor every command pays.

The scientific-python ``lazy_loader`` package does the same with more (stub files,
a guard against a name shadowed by a module of the same name); importing it costs
start-up of its own, more than the hook below, so the hook is written here.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any, cast, overload


def attach(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose names come from its modules.

    Args:
        package: the package's ``__name__``.
        names: exported name -> the module of the package that defines it (its last
            part, e.g. ``{"load": "parser"}``).
    Returns:
        ``(__getattr__, __dir__)``: bind both at module level. A name is imported from
        its module on first use and kept on the package, with every other name of
        that module; ``__dir__`` lists the exported names.
    Raises:
        ValueError: an exported name is also the name of one of the modules: the
            import system sets a loaded module as its package's attribute, so the
            name would mean the module or the function depending on what was imported
            first. Import such a name from its module.
        AttributeError: (from ``__getattr__``) a name the package does not export.
    """
    shadowed = sorted(set(names) & set(names.values()))
    if shadowed:
        raise ValueError(f"{package}: {', '.join(shadowed)} also name its modules")
    by_module: dict[str, list[str]] = {}
    for name, module in names.items():
        by_module.setdefault(module, []).append(name)

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(f"{package}.{module}")
        space = sys.modules[package].__dict__
        for each in by_module[module]:
            space[each] = getattr(loaded, each)
        return space[name]

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__


@overload
def lazy_pattern(regex: str, flags: int = 0) -> re.Pattern[str]: ...
@overload
def lazy_pattern(regex: bytes, flags: int = 0) -> re.Pattern[bytes]: ...
def lazy_pattern(regex: str | bytes, flags: int = 0) -> re.Pattern:
    """A module's regular expression, compiled by :func:`re.compile` when first used.

    A module's patterns compiled at import cost every command that imports it, most
    of which never match against them (``status`` loads the patch parser's and the
    manifest's, and uses a few). Each attribute asked for (``match``, ``sub``,
    ``pattern`` ...) is then the compiled pattern's own, kept on the object, so a
    second call costs what a call on a compiled pattern costs. Each one made is kept
    for :func:`compile_all`, so make them at a module's top level, not per call.

    Args:
        regex, flags: as for :func:`re.compile`.
    Returns:
        An object that answers as the compiled pattern does (typed as one). It is not
        a :class:`re.Pattern`: pass ``.pattern`` where a function of :mod:`re` wants one.
    Raises:
        re.error: (on first use) the expression does not compile.
    """
    return cast(re.Pattern, _Pattern(regex, flags))


#: Every lazy pattern made so far, for :func:`compile_all`.
_MADE: list[_Pattern] = []


def compile_all() -> int:
    """Compile every lazy pattern made so far (the command server's preload: each
    worker it forks then finds them compiled, where it would compile those it uses
    again itself); returns how many there are (those compiled before included).

    Raises:
        re.error: a pattern does not compile.
    """
    for each in _MADE:
        each.compiled()
    return len(_MADE)


class _Pattern:
    """A regular expression compiled on its first use (see :func:`lazy_pattern`)."""

    def __init__(self, regex: str | bytes, flags: int) -> None:
        self._args = (regex, flags)
        _MADE.append(self)

    def compiled(self) -> re.Pattern:
        """The compiled pattern (compiled now, once)."""
        done = self.__dict__.get("_compiled")
        if done is None:
            done = self.__dict__["_compiled"] = re.compile(*self._args)
        return done

    def __getattr__(self, name: str) -> Any:
        # Called only for a name not yet kept: compile (once), keep, answer.
        value = getattr(self.compiled(), name)
        self.__dict__[name] = value
        return value
