#!/usr/bin/env python3
"""Where a race lab A/B's sanitizer reports point: runs per reported location.

Usage: tools/race-lab-tally.py AB_DIR [AB_DIR...]

AB_DIR is a directory written by ``overlay suite ab`` (it holds ``ab.json`` and
``with/`` and ``without/``). For each column, every run's stderr is read for
sanitizer ``SUMMARY:`` lines (``SUMMARY: ThreadSanitizer: data race FILE:LINE:COL
in FUNCTION``), and the report counts, per location (file name and function),
in how many runs it appeared. The suite runner already counts reports per kind
(``docs/suites.md``); this says which code they are about, so a reader can tell
the init window from the shared workspace from the pipe erase (docs/race-lab.md).
"""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import sys

_SUMMARY = re.compile(r"^SUMMARY: (\w+Sanitizer): (.+?) (\S+?):\d+(?::\d+)? in (.+)$")


def _function(text: str) -> str:
    """``int ns::f<T>(int, char)`` -> ``ns::f<T>``: the name without return type or arguments."""
    text = text.replace("(anonymous namespace)::", "")
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    name = text[:cut].strip()
    depth, start = 0, 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == " " and depth == 0:
            start = i + 1
    return name[start:] or text


def tally(column_dir: str) -> tuple[int, collections.Counter]:
    """``(runs, Counter{"Sanitizer: kind at file: function": runs with it})`` for one column."""
    counts: collections.Counter = collections.Counter()
    runs = sorted(glob.glob(os.path.join(column_dir, "run-*.err")))
    for path in runs:
        seen = set()
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = _SUMMARY.match(line.rstrip("\n"))
                if m:
                    seen.add(
                        f"{m.group(1)}: {m.group(2)} at {os.path.basename(m.group(3))}: "
                        f"{_function(m.group(4))}"
                    )
        counts.update(seen)
    return len(runs), counts


def main(argv: list[str]) -> int:
    """Print the tally of each A/B directory; exit 2 on a directory that is no A/B."""
    if not argv:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    for ab_dir in argv:
        try:
            with open(os.path.join(ab_dir, "ab.json"), encoding="utf-8") as fh:
                suite = json.load(fh)["suite"]
        except (OSError, ValueError, KeyError):
            print(f"race-lab-tally: {ab_dir}: no ab.json", file=sys.stderr)
            return 2
        print(f"{suite} ({ab_dir}) [race-lab: host model, not a GPU result]")
        for column in ("with", "without"):
            n, counts = tally(os.path.join(ab_dir, column))
            label = "with fix" if column == "with" else "fix removed"
            print(f"  {label}: {n} runs, {sum(1 for _ in counts)} location(s)")
            for where, runs in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
                print(f"    {runs:3d} of {n} runs  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
