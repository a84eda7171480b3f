"""Where a suite's child and its results live: the child's argv, the run directories."""

from __future__ import annotations

import datetime as _dt
import os
import shutil
from collections.abc import Iterable

from overlay.suites.runner.common import SuiteRunError


def resolve_child(
    argv: Iterable[str], child_dir: str | None = None, base_dir: str | None = None
) -> list[str]:
    """Turn a suite's ``child`` into an argv whose first word is an executable path.

    Rules for ``argv[0]``: an absolute path is kept; a relative path with a
    ``/`` resolves against ``child_dir`` (or ``base_dir``, or the current
    directory); a bare name is looked up in ``child_dir`` first, then on
    ``PATH``. The remaining words are passed unchanged.

    Args:
        argv: the suite's child (program plus arguments).
        child_dir: where the build step put the suite children, or None.
        base_dir: fallback for relative paths (the ``suites.toml`` directory).

    Returns:
        A new argv list.

    Raises:
        SuiteRunError: the program is missing or not executable.
    """
    argv = list(argv)
    prog = argv[0]
    looked = []
    path = None
    if os.path.isabs(prog):
        path = prog
        looked.append(prog)
    elif "/" in prog or (os.sep != "/" and os.sep in prog):
        path = os.path.abspath(os.path.join(child_dir or base_dir or os.getcwd(), prog))
        looked.append(path)
    else:
        if child_dir:
            cand = os.path.abspath(os.path.join(child_dir, prog))
            looked.append(cand)
            if os.path.isfile(cand):
                path = cand
        if path is None:
            looked.append("PATH")
            path = shutil.which(prog)
    if path is None or not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise SuiteRunError(
            f"suite child {prog!r} not found or not executable (looked in {', '.join(looked)})",
            hint="build the suite children first (overlay build), or pass --child-dir DIR",
        )
    argv[0] = path
    return argv


def make_run_dir(
    results_dir: str, suite_name: str, run_id: str | None = None, *, suffix: str = ""
) -> str:
    """Create and return ``<results_dir>/<suite_name>/<run_id>``.

    Args:
        results_dir: the results root (created if missing).
        suite_name: a validated suite name.
        run_id: directory name; default a UTC timestamp ``YYYYmmddTHHMMSSZ``
            plus ``suffix``, with ``-2``, ``-3``, ... appended when that name is taken.
        suffix: appended to the timestamp (``"-ab"`` for A/B runs).

    Returns:
        The new directory's path (it did not exist before).

    Raises:
        SuiteRunError: the directory cannot be created, or ``run_id`` is taken
            or is not a plain name.
    """
    parent = os.path.join(results_dir, suite_name)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise SuiteRunError(
            f"cannot create results directory {parent}: {exc.strerror}"
        ) from None
    if run_id is not None:
        if run_id in ("", ".", "..") or "/" in run_id or os.sep in run_id:
            raise SuiteRunError(f"run id {run_id!r} must be a plain directory name")
        path = os.path.join(parent, run_id)
        try:
            os.mkdir(path)
        except FileExistsError:
            raise SuiteRunError(f"results directory {path} already exists") from None
        except OSError as exc:
            raise SuiteRunError(f"cannot create {path}: {exc.strerror}") from None
        return path
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ") + suffix
    for i in range(1, 10000):
        path = os.path.join(parent, stamp if i == 1 else f"{stamp}-{i}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise SuiteRunError(f"cannot create {path}: {exc.strerror}") from None
    raise SuiteRunError(f"too many runs named {stamp} under {parent}")
