"""Shared head and tail of the benchmark scripts: their options, the repeated runs, then
print the result and record it.

A script measures one *run* (its ``--repeat`` interleaved timings, reduced to medians and
ratios) and :func:`repeat_runs` calls it ``--runs`` times (three at least). What is
recorded for every figure is the median of the runs and their spread (lowest and
highest), with the load average before each run: never the best run. The targets are
checked on those medians, every one of them; a missed target makes the script exit 1
and is named in ``missed``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from collections.abc import Callable, Mapping
from typing import Any

RESULTS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "results"
)


def mirror_bench_parser(doc: str, result: str, repeat: int) -> argparse.ArgumentParser:
    """The options every benchmark on the real mirrors takes: ``--repeat`` (timed runs of
    each command, interleaved) and ``--out`` (default ``benchmarks/results/<result>``).

    Args:
        doc: the script's docstring (its first line describes the script).
        result: the result file's name.
        repeat: the default of ``--repeat`` (the recorded run's).
    Returns:
        The parser; a script adds its own options.
    """
    ap = argparse.ArgumentParser(
        description=doc.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Needs OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL (the real mirrors).",
    )
    ap.add_argument(
        "--repeat", type=int, default=repeat, help="timed runs of each, interleaved"
    )
    ap.add_argument(
        "--runs",
        type=int,
        default=3,
        help="runs of the whole measurement (each of --repeat timings); the median and "
        "spread of the runs are recorded (at least 3)",
    )
    ap.add_argument(
        "--out",
        default=os.path.join(RESULTS, result),
        help="where the JSON result is recorded",
    )
    return ap


def leaves(tree: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a nested dict, by dotted path (``disk.ratio``)."""
    out: dict[str, float] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(leaves(value, path + "."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[path] = float(value)
    return out


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`leaves` undone: dotted paths back into nested dicts."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        *parents, last = path.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def repeat_runs(
    one_run: Callable[[int], Mapping[str, Any]],
    runs: int,
    targets: Mapping[str, float],
) -> dict[str, Any]:
    """Call ``one_run(i)`` for ``i`` in ``range(runs)`` and reduce the runs.

    Args:
        one_run: one whole measurement; returns nested dicts whose numeric leaves are
            its figures (seconds, ratios, counts), the same keys every run.
        runs: how many (``--runs``; at least 3: a median of fewer is one run).
        targets: dotted path of a figure -> its largest allowed median.
    Returns:
        ``{"runs", "load_average_1min", "median", "spread", "targets", "missed",
        "met"}``: ``median`` and ``spread`` (``[lowest, highest]``) are nested like a
        run's figures; ``load_average_1min`` is read before each run and after the last.
    Raises:
        SystemExit: fewer than 3 runs, or a target names no figure.
    """
    if runs < 3:
        raise SystemExit("--runs must be at least 3: a median of fewer is one run")
    loads, figures = [], []
    for i in range(runs):
        loads.append(round(os.getloadavg()[0], 2))
        figures.append(leaves(one_run(i)))
        print(f"run {i + 1} of {runs} done", file=sys.stderr)
    loads.append(round(os.getloadavg()[0], 2))
    paths = list(figures[0])
    median = {p: round(statistics.median(f[p] for f in figures), 4) for p in paths}
    spread = {
        p: [round(min(f[p] for f in figures), 4), round(max(f[p] for f in figures), 4)]
        for p in paths
    }
    unknown = [t for t in targets if t not in median]
    if unknown:
        raise SystemExit(f"targets name no figure: {', '.join(unknown)}")
    missed = [t for t, limit in targets.items() if median[t] > limit]
    return {
        "runs": runs,
        "load_average_1min": loads,
        "median": _nest(median),
        "spread": _nest(spread),
        "targets": dict(targets),
        "missed": missed,
        "met": not missed,
    }


def record(out: dict, path: str) -> int:
    """Print ``out`` as JSON, write it to ``path`` with the date, return 0 when ``out["met"]``
    (else say on stderr which targets were missed, and return 1)."""
    out = {
        **out,
        "cpu_count": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
    }
    text = json.dumps(out, indent=2) + "\n"
    print(text, end="")
    with open(path, "w") as fh:
        fh.write(text)
    if not out["met"]:
        print(
            "missed: " + ", ".join(out.get("missed", []) or ["a target"]),
            file=sys.stderr,
        )
    return 0 if out["met"] else 1


def mirrors_missing() -> bool:
    """True (after saying so on stderr) when the real mirrors are not configured."""
    if os.environ.get("OVERLAY_UPSTREAM_URL") and os.environ.get("OVERLAY_FORK_URL"):
        return False
    import sys

    print(
        "set OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL to the real mirrors",
        file=sys.stderr,
    )
    return True
