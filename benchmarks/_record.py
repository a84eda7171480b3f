"""Shared tail of the benchmark scripts: print the result and record it."""

from __future__ import annotations

import datetime
import json
import os


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
