#!/usr/bin/env python3
"""`overlay verify --offline` on the real overlay with a warm git store.

Needs OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL (the real mirrors) for the
first, online run that warms the store; then times N offline runs (median).
Baseline in the same run: the interpreter starting and importing the CLI
(`python -c "import overlay.cli"`), the floor any command pays.
Target (issue 3): well under one second.

Usage: python benchmarks/verify_bench.py [--repeat N] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _record import record  # noqa: E402


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stdout.decode()}{proc.stderr.decode()}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "verify.json"))
    args = ap.parse_args()
    py = sys.executable
    timed([py, "-m", "overlay.cli", "verify"])  # warm the store (online)
    verify_t, floor_t = [], []
    for _ in range(args.repeat):
        verify_t.append(timed([py, "-m", "overlay.cli", "--offline", "verify"]))
        floor_t.append(timed([py, "-c", "import overlay.cli"]))
    out = {
        "what": "overlay --offline verify on the real overlay, warm store, wall time per run",
        "repeat": args.repeat,
        "verify_median_s": round(statistics.median(verify_t), 3),
        "import_floor_median_s": round(statistics.median(floor_t), 3),
        "ratio_to_floor": round(statistics.median(verify_t) / statistics.median(floor_t), 2),
        "target_s_max": 1.0,
    }
    out["met"] = out["verify_median_s"] < 1.0
    return record(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
