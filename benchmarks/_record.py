"""Shared head and tail of the benchmark scripts: their options, then print the result
and record it."""

from __future__ import annotations

import argparse
import datetime
import json
import os

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
        "--out",
        default=os.path.join(RESULTS, result),
        help="where the JSON result is recorded",
    )
    return ap


def record(out: dict, path: str) -> int:
    """Print ``out`` as JSON, write it to ``path`` with the date, return 0 when ``out["met"]``."""
    out = {
        **out,
        "cpu_count": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
    }
    text = json.dumps(out, indent=2) + "\n"
    print(text, end="")
    with open(path, "w") as fh:
        fh.write(text)
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
