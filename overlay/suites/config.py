"""Load and validate ``patches-rocm/suites/suites.toml``.

The file holds one table per suite under ``[suites.<name>]``::

    [suites.hipblaslt_concurrency]
    description = "8 threads, own streams, exact bf16/f32 GEMMs"
    child = "hipblaslt_concurrency"          # or ["prog", "arg", ...]
    runs = 10                                # default 10
    deadline = 120                           # seconds per run, default 120
    env-remove = ["MLX_NO_HIPBLASLT"]
    env-set = { HIP_LAUNCH_BLOCKING = "0" }
    backend = "rocm"                         # rocm | cuda | cpu | any (default any)
    hardware = "amd-gpu"                     # amd-gpu | nvidia-gpu | none (default none)
    proves = 2                               # LOCAL_FIXES.md entry number
    model = "race-lab"                       # a host model, not a GPU run (docs/race-lab.md)

    [[suites.hipblaslt_concurrency.markers]]
    stream = "stderr"                        # stdout | stderr
    text = "[hipBLASLt caps] device"
    expect = "exactly 1"                     # "exactly N" | "at least N" | "never"

Unknown keys and bad values raise :class:`SuiteConfigError` naming the file,
the suite and the key. The reference is ``docs/suites.md``.
"""

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from overlay import layout
from overlay.errors import OverlayError
from overlay.fs.reading import RecordError, RecordMissing, read_record_text
from overlay.lazy import lazy_pattern
from overlay.records.manifest import load_toml

__all__ = [
    "BACKENDS",
    "HARDWARE",
    "MODELS",
    "DEFAULT_RUNS",
    "DEFAULT_DEADLINE_S",
    "Marker",
    "Suite",
    "SuiteConfigError",
    "load_suites",
    "parse_suites",
    "parse_expect",
    "select_suites",
]

#: Backends a suite may require; ``any`` runs on every build.
BACKENDS = ("rocm", "cuda", "cpu", "any")
#: Hardware a suite may require; ``none`` runs everywhere.
HARDWARE = ("amd-gpu", "nvidia-gpu", "none")
#: Host models a suite may run on instead of a GPU (``model``; docs/race-lab.md).
MODELS = ("race-lab",)
#: Fresh processes per suite when ``runs`` is absent (DESIGN.md section 9).
DEFAULT_RUNS = 10
#: Per-run deadline in seconds when ``deadline`` is absent (the 120 s of the
#: reference harness's ``run_child``, seed 000).
DEFAULT_DEADLINE_S = 120.0

_SUITE_KEYS = frozenset(
    {
        "description",
        "child",
        "runs",
        "deadline",
        "env-remove",
        "env-set",
        "markers",
        "backend",
        "hardware",
        "proves",
        "model",
    }
)
_MARKER_KEYS = frozenset({"stream", "text", "expect"})
_NAME_RE = lazy_pattern(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_ENV_RE = lazy_pattern(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EXPECT_RE = lazy_pattern(r"^\s*(?:(exactly|at\s+least)\s+(\d+)|(never))\s*$")


class SuiteConfigError(OverlayError):
    """``suites.toml`` is missing, malformed, or names an unknown suite (exit 2)."""


@dataclass(frozen=True)
class Marker:
    """A text that must occur a given number of times in a run's stdout or stderr.

    Attributes:
        stream: ``"stdout"`` or ``"stderr"``.
        text: the literal text; occurrences are counted as non-overlapping
            substrings of the raw bytes (UTF-8 encoded text).
        op: ``"exactly"``, ``"at least"`` or ``"never"`` (``never`` is
            ``exactly 0``).
        count: the N of ``exactly N`` / ``at least N`` (0 for ``never``).
    """

    stream: str
    text: str
    op: str
    count: int

    @property
    def expect(self) -> str:
        """The expectation as written in the file, e.g. ``"exactly 1"``."""
        return "never" if self.op == "never" else f"{self.op} {self.count}"

    def holds(self, observed: int) -> bool:
        """Whether ``observed`` occurrences satisfy this marker."""
        if self.op == "at least":
            return observed >= self.count
        return observed == self.count

    def describe(self, observed: int) -> str:
        """One line for a report: ``stderr "text": expected exactly 1, saw 2``."""
        return f'{self.stream} "{self.text}": expected {self.expect}, saw {observed}'

    def to_dict(self) -> dict:
        """JSON shape: ``{"stream", "text", "expect"}``."""
        return {"stream": self.stream, "text": self.text, "expect": self.expect}


@dataclass(frozen=True)
class Suite:
    """One validated suite from ``suites.toml``.

    Attributes:
        name: the table name (safe as a directory name).
        child: argv as a tuple; ``child[0]`` is a program name or path, resolved
            by :func:`overlay.suites.runner.resolve_child`.
        runs: fresh processes per ``suite run`` (int >= 1).
        deadline: per-run deadline in seconds (float > 0).
        env_remove: variable names removed from the inherited environment.
        env_set: variables set (after removal), name -> value.
        markers: stdout/stderr expectations, checked on every run.
        backend: ``rocm`` | ``cuda`` | ``cpu`` | ``any``.
        hardware: ``amd-gpu`` | ``nvidia-gpu`` | ``none``.
        proves: the ``LOCAL_FIXES.md`` entry this suite is evidence for, or None.
        model: the host model the child runs on (``race-lab``), or None for a
            child that runs on the real runtime. A host-model result is never a
            GPU result (docs/race-lab.md).
        description: free text for listings.
        source: the file the suite came from (for messages), or ``""``.
    """

    name: str
    child: tuple[str, ...]
    runs: int = DEFAULT_RUNS
    deadline: float = DEFAULT_DEADLINE_S
    env_remove: tuple[str, ...] = ()
    env_set: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    markers: tuple[Marker, ...] = ()
    backend: str = "any"
    hardware: str = "none"
    proves: int | None = None
    model: str | None = None
    description: str = ""
    source: str = ""

    def build_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """The child's environment: ``base`` minus ``env_remove``, plus ``env_set``.

        Args:
            base: the inherited environment (usually ``os.environ``).

        Returns:
            A new dict; ``base`` is not modified.
        """
        env = {k: v for k, v in base.items() if k not in self.env_remove}
        env.update(self.env_set)
        return env

    def to_dict(self) -> dict:
        """JSON shape of the suite's settings (used in ``result.json``)."""
        return {
            "name": self.name,
            "child": list(self.child),
            "runs": self.runs,
            "deadline_s": self.deadline,
            "env_remove": list(self.env_remove),
            "env_set": dict(self.env_set),
            "markers": [m.to_dict() for m in self.markers],
            "backend": self.backend,
            "hardware": self.hardware,
            "proves": self.proves,
            "model": self.model,
            "description": self.description,
        }


def parse_expect(value: str) -> tuple[str, int]:
    """Parse ``"exactly N"``, ``"at least N"`` or ``"never"``.

    Args:
        value: the ``expect`` string of a marker.

    Returns:
        ``(op, count)`` with op in ``exactly`` / ``at least`` / ``never``.

    Raises:
        ValueError: anything else (the caller adds the suite and key).
    """
    if not isinstance(value, str):
        raise ValueError(f'must be "exactly N", "at least N" or "never", got {value!r}')
    m = _EXPECT_RE.match(value)
    if not m:
        raise ValueError(f'must be "exactly N", "at least N" or "never", got {value!r}')
    if m.group(3):
        return ("never", 0)
    op = "exactly" if m.group(1) == "exactly" else "at least"
    return (op, int(m.group(2)))


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: ``err(key, message)``: the error for one key of one suite (the message names both).
_ErrorFor = Callable[[str, str], SuiteConfigError]


def _parse_suite(name: str, table: object, where: str) -> Suite:
    """Validate one ``[suites.<name>]`` table, key by key in a fixed order.

    Raises:
        SuiteConfigError: the first bad name, key or value (it names suite and key).
    """

    def err(key: str, msg: str) -> SuiteConfigError:
        return SuiteConfigError(f'{where}: suite "{name}": key "{key}": {msg}')

    checked = _check_table(name, table, where, err)
    child = _parse_child(checked, err)
    runs, deadline = _parse_counts(checked, err)
    env_remove, env_set = _parse_env(checked, err)
    markers = _parse_markers(checked, err)
    backend, hardware, proves, model, description = _parse_choices(checked, err)
    return Suite(
        name=name,
        child=tuple(child),
        runs=runs,
        deadline=float(deadline),
        env_remove=tuple(env_remove),
        env_set=MappingProxyType(dict(env_set)),
        markers=tuple(markers),
        backend=backend,
        hardware=hardware,
        proves=proves,
        model=model,
        description=description,
        source=where,
    )


def _check_table(
    name: str, table: object, where: str, err: _ErrorFor
) -> dict[str, Any]:
    """``table`` when the name is valid, it is a table and holds only known keys."""
    if not _NAME_RE.match(name):
        raise SuiteConfigError(
            f'{where}: suite name "{name}" must be letters, digits, "_", "-" or "." '
            "(it names a results directory)"
        )
    if not isinstance(table, dict):
        raise SuiteConfigError(
            f'{where}: suite "{name}": must be a table, got {type(table).__name__}'
        )
    unknown = sorted(set(table) - _SUITE_KEYS)
    if unknown:
        raise err(
            unknown[0], "unknown key (known: " + ", ".join(sorted(_SUITE_KEYS)) + ")"
        )
    return table


def _parse_child(table: dict[str, Any], err: _ErrorFor) -> list[str]:
    """``child`` as an argv list (a lone string is a one-word argv)."""
    if "child" not in table:
        raise err("child", "missing (a program name, a path, or an argv list)")
    child = table["child"]
    if isinstance(child, str):
        child = [child]
    if (
        not isinstance(child, list)
        or not child
        or not all(isinstance(a, str) for a in child)
        or not child[0].strip()
    ):
        raise err(
            "child",
            "must be a program name or a non-empty list of strings, "
            f"got {table['child']!r}",
        )
    return child


def _parse_counts(table: dict[str, Any], err: _ErrorFor) -> tuple[int, int | float]:
    """``(runs, deadline)``: an integer >= 1 and a finite number of seconds > 0."""
    runs = table.get("runs", DEFAULT_RUNS)
    if not _is_int(runs) or runs < 1:
        raise err("runs", f"must be an integer >= 1, got {runs!r}")
    deadline = table.get("deadline", DEFAULT_DEADLINE_S)
    if (
        not (_is_int(deadline) or isinstance(deadline, float))
        or isinstance(deadline, bool)
        or not math.isfinite(deadline)
        or deadline <= 0
    ):
        raise err("deadline", f"must be a number of seconds > 0, got {deadline!r}")
    return runs, deadline


def _parse_env(
    table: dict[str, Any], err: _ErrorFor
) -> tuple[list[str], dict[str, str]]:
    """``(env-remove, env-set)``: variable names, and names to string values."""
    env_remove = table.get("env-remove", [])
    if not isinstance(env_remove, list) or not all(
        isinstance(v, str) and _ENV_RE.match(v) for v in env_remove
    ):
        raise err("env-remove", f"must be a list of variable names, got {env_remove!r}")
    env_set = table.get("env-set", {})
    if not isinstance(env_set, dict):
        raise err("env-set", f'must be a table of NAME = "value", got {env_set!r}')
    for k, v in env_set.items():
        if not _ENV_RE.match(k):
            raise err("env-set", f"{k!r} is not a valid variable name")
        if not isinstance(v, str):
            raise err("env-set", f"value of {k} must be a string, got {v!r}")
    return env_remove, env_set


def _parse_markers(table: dict[str, Any], err: _ErrorFor) -> list[Marker]:
    """``markers``: an array of ``{stream, text, expect}`` tables."""
    markers_raw = table.get("markers", [])
    if not isinstance(markers_raw, list):
        raise err("markers", "must be an array of tables {stream, text, expect}")
    return [
        _parse_marker(m, f"markers[{i}]", err) for i, m in enumerate(markers_raw, 1)
    ]


def _parse_marker(m: object, key: str, err: _ErrorFor) -> Marker:
    """One marker table; ``key`` (``markers[N]``) names it in errors."""
    if not isinstance(m, dict):
        raise err(key, "must be a table {stream, text, expect}")
    unknown = sorted(set(m) - _MARKER_KEYS)
    if unknown:
        raise err(f"{key}.{unknown[0]}", "unknown key (known: expect, stream, text)")
    for k in ("stream", "text", "expect"):
        if k not in m:
            raise err(f"{key}.{k}", "missing")
    if m["stream"] not in ("stdout", "stderr"):
        raise err(f"{key}.stream", f'must be "stdout" or "stderr", got {m["stream"]!r}')
    if not isinstance(m["text"], str) or not m["text"]:
        raise err(f"{key}.text", f"must be a non-empty string, got {m['text']!r}")
    try:
        op, count = parse_expect(m["expect"])
    except ValueError as exc:
        raise err(f"{key}.expect", str(exc)) from None
    return Marker(m["stream"], m["text"], op, count)


def _parse_choices(
    table: dict[str, Any], err: _ErrorFor
) -> tuple[str, str, int | None, str | None, str]:
    """``(backend, hardware, proves, model, description)``, each checked."""
    backend = table.get("backend", "any")
    if backend not in BACKENDS:
        raise err("backend", f"must be one of {', '.join(BACKENDS)}, got {backend!r}")
    hardware = table.get("hardware", "none")
    if hardware not in HARDWARE:
        raise err("hardware", f"must be one of {', '.join(HARDWARE)}, got {hardware!r}")
    proves = table.get("proves")
    if proves is not None and (not _is_int(proves) or proves < 1):
        raise err(
            "proves",
            f"must be a LOCAL_FIXES.md entry number (integer >= 1), got {proves!r}",
        )
    model = table.get("model")
    if model is not None and model not in MODELS:
        raise err("model", f"must be one of {', '.join(MODELS)}, got {model!r}")
    description = table.get("description", "")
    if not isinstance(description, str):
        raise err("description", f"must be a string, got {description!r}")
    return backend, hardware, proves, model, description


def parse_suites(
    text: str, where: str = os.path.basename(layout.SUITES_TOML)
) -> dict[str, Suite]:
    """Parse and validate the text of a ``suites.toml``.

    Args:
        text: TOML text.
        where: a name for messages (the file's path).

    Returns:
        Suites by name, in file order.

    Raises:
        SuiteConfigError: TOML syntax error, a top-level key other than
            ``suites``, an unknown suite key, or a bad value (the message names
            the suite and the key).
    """
    data = load_toml(text, where, SuiteConfigError)
    unknown = sorted(set(data) - {"suites"})
    if unknown:
        raise SuiteConfigError(
            f'{where}: unknown top-level key "{unknown[0]}" (suites go under [suites.<name>])'
        )
    suites = data.get("suites", {})
    if not isinstance(suites, dict):
        raise SuiteConfigError(
            f'{where}: "suites" must be a table of [suites.<name>] tables'
        )
    return {name: _parse_suite(name, table, where) for name, table in suites.items()}


def load_suites(path: str, root: str | None = None) -> dict[str, Suite]:
    """Read and validate a ``suites.toml`` file.

    The file is read with :func:`overlay.fs.atomic.read_record`: a regular file (a
    symlink to one is followed while it stays inside ``root``), at most 16 MiB,
    UTF-8.

    Args:
        path: the file's path.
        root: the repository it must stay inside; default: the directory
            holding the file (a path given with ``--suites`` is the user's choice,
            but it still has to be a regular file).

    Returns:
        Suites by name, in file order (see :func:`parse_suites`).

    Raises:
        SuiteConfigError: the file cannot be read, is refused (FIFO, directory,
            symlink leaving ``root``, too big), is not UTF-8 (the byte offset is
            named), or is invalid.
    """
    full = os.path.abspath(path)
    # Lexically inside root: root is the boundary; elsewhere (an explicit --suites path)
    # its directory is.
    if root is None or not full.startswith(os.path.abspath(root) + os.sep):
        root = os.path.dirname(full)
    rel = os.path.relpath(full, root).replace(os.sep, "/")
    try:
        text = read_record_text(root, rel, what="suites file")
    except RecordMissing:
        raise SuiteConfigError(
            f"{path}: no such file",
            hint="pass --suites PATH or run from the repository root",
        ) from None
    except RecordError as exc:
        raise SuiteConfigError(
            f"{path}: {exc.message.split(': ', 1)[1]}", hint=exc.hint
        ) from None
    return parse_suites(text, path)


def select_suites(suites: Mapping[str, Suite], names) -> list[Suite]:
    """The suites named in ``names`` (all of them, in file order, when empty).

    Raises:
        SuiteConfigError: a name is not declared; the message lists the known ones.
    """
    names = list(names or [])
    if not names:
        return list(suites.values())
    missing = [n for n in names if n not in suites]
    if missing:
        known = ", ".join(suites) or "(none)"
        raise SuiteConfigError(f'unknown suite "{missing[0]}" (declared: {known})')
    seen: dict[str, Suite] = {}
    for n in names:
        seen.setdefault(n, suites[n])
    return list(seen.values())
