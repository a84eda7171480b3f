"""Shared tail of the benchmark scripts: print the result and record it."""

from __future__ import annotations

import datetime
import json
import os


def record(out: dict, path: str) -> int:
    """Print ``out`` as JSON, write it to ``path`` with the date, return 0 when ``out["met"]``."""
    out = {**out, "cpu_count": os.cpu_count(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}
    text = json.dumps(out, indent=2) + "\n"
    print(text, end="")
    with open(path, "w") as fh:
        fh.write(text)
    return 0 if out["met"] else 1
