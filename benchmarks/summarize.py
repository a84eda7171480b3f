#!/usr/bin/env python3
"""The README's benchmark table from several invocations of one script.

Each invocation of a script (``--out FILE``) records its runs' medians and spread
(benchmarks/_record.py). Given the files of several invocations of the same script,
this prints one Markdown row per figure: the median of the invocations' medians, each
invocation's median, the lowest and the highest run of all of them (the invocations'
spreads joined), the target where the script states one, and whether the median of
the invocations meets it.

Figures are named by their dotted path in ``median`` (``per_patch_ms.cold_verify``,
``disk.ratio``); ``--only`` keeps those given, in that order, and ``--label`` names
them (``KEY=TEXT``), as the README does.

Usage: python benchmarks/summarize.py FILE [FILE ...] [--only KEY ...] [--label KEY=TEXT ...]

Exit status: 0; 2 when a file is unreadable, is not a benchmark record, or the files
record different scripts (their ``what`` differs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Mapping
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _record import leaves  # noqa: E402


def _refuse(message: str) -> SystemExit:
    """``message`` on stderr as one ``summarize:`` line; the exit (2) to raise."""
    print(f"summarize: {message}", file=sys.stderr)
    return SystemExit(2)


def load(paths: list[str]) -> list[dict]:
    """The records at ``paths``, all of one script.

    Raises:
        SystemExit: (2) a file is unreadable or not a benchmark record, or two record
            different scripts.
    """
    records = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise _refuse(f"{path}: {exc}") from None
        if not isinstance(data, dict) or not {"median", "spread"} <= data.keys():
            raise _refuse(f"{path}: not a benchmark record")
        records.append(data)
    if len({r.get("what") for r in records}) > 1:
        raise _refuse("the files record different scripts")
    return records


def fmt(value: float, key: str) -> str:
    """A figure as the README writes it: ratios ``1.19x``, seconds ``0.307 s``,
    milliseconds ``2.40 ms``, megabytes ``25.1 MB``."""
    if key.endswith("_ms") or "_ms." in key:
        return f"{value:.2f} ms"
    if "rss_mb" in key:
        return f"{value:.1f} MB"
    if key.endswith("_s") or "_s." in key:
        return f"{value:.3f} s"
    return f"{value:.2f}x"


def rows(
    records: list[dict], only: list[str] | None, labels: dict[str, str]
) -> list[str]:
    """The table's rows (a header first) for ``records``."""
    medians = [leaves(r["median"]) for r in records]
    targets = records[0].get("targets") or {}
    keys = only or sorted(medians[0])
    out = [
        "| figure | median | each invocation | all runs | target | |",
        "|---|---|---|---|---|---|",
    ]
    for key in keys:
        if not all(key in m for m in medians):
            raise _refuse(f"{key}: not a figure of every file")
        each = [m[key] for m in medians]
        mid = statistics.median(each)
        low, high = [], []
        for spread in (r["spread"] for r in records):
            node: Any = spread
            for part in key.split("."):
                node = node.get(part) if isinstance(node, Mapping) else None
            if isinstance(node, list) and len(node) == 2:
                low.append(node[0])
                high.append(node[1])
        span = f"{fmt(min(low), key)} to {fmt(max(high), key)}" if low else ""
        target = targets.get(key)
        verdict = ""
        if target is not None:
            verdict = "met" if mid <= target else "**missed**"
        out.append(
            f"| {labels.get(key, key)} | {fmt(mid, key)} | "
            f"{', '.join(fmt(v, key) for v in each)} | {span} | "
            f"{fmt(target, key) if target is not None else ''} | {verdict} |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="records of one script's invocations")
    ap.add_argument("--only", nargs="+", help="the figures to show, in this order")
    ap.add_argument(
        "--label", action="append", default=[], help="KEY=TEXT: a figure's name"
    )
    args = ap.parse_args(argv)
    labels = dict(item.split("=", 1) for item in args.label if "=" in item)
    for line in rows(load(args.files), args.only, labels):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
