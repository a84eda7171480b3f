"""Test child: fails (exit 1) with a seeded probability, deterministic per run.

Usage: flaky.py RATE [SEED]. The run index comes from OVERLAY_RUN_INDEX (set by
the runner), so run i of a suite always draws the same number:
``random.Random(f"{SEED}:{i}").random() < RATE`` fails the run.
"""

import os
import random
import sys

rate = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
seed = sys.argv[2] if len(sys.argv) > 2 else "0"
index = os.environ.get("OVERLAY_RUN_INDEX", "0")
if random.Random(f"{seed}:{index}").random() < rate:
    print(f"flaky: run {index} failed", file=sys.stderr)
    sys.exit(1)
print("overlay-suite: done")
