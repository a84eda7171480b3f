#!/usr/bin/env python3
"""Cold and no-op export of the real overlay against `git archive | tar -x`.

Needs the real mirrors: OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL (local paths).
Baseline, measured in the same run: `git archive <pin> | tar -x` into an empty
directory, then `git archive <fork> -- <carried fork-changed paths> | tar -x` over
it (the same bytes the `patched` layer holds when the series is empty).
Targets (issue 2): cold export <= 1.5x the baseline; no-op re-export < 0.1 s.

Usage: python benchmarks/export_bench.py [--repeat N] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from overlay.export import export_tree  # noqa: E402
from overlay.gitstore import Store, git_env  # noqa: E402
from overlay.layers import compute_layers  # noqa: E402
from overlay.manifest import load_manifest  # noqa: E402


from _record import mirrors_missing, record  # noqa: E402


def baseline(store: Store, pin: str, fork: str, carried: list[str], dest: str) -> float:
    env = git_env({"GIT_DIR": store.git_dir})
    start = time.perf_counter()
    subprocess.run(f"git archive {pin} | tar -x -C {dest}", shell=True, check=True, env=env)
    proc = subprocess.Popen(["git", "archive", fork, "--", *carried], stdout=subprocess.PIPE, env=env)
    subprocess.run(["tar", "-x", "-C", dest], stdin=proc.stdout, check=True)
    proc.wait()
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "export.json"))
    args = ap.parse_args()
    if mirrors_missing():
        return 2
    manifest = load_manifest(ROOT)
    store = Store()
    layers = compute_layers(store, manifest, ROOT)
    # Paths the fork changes that are carried and still exist in the fork (deletions need no tar).
    fork_paths = {e[3] for e in store.ls_tree(store.tree_of(manifest.fork_commit))}
    carried = [p for p in layers.carried_changes if p in fork_paths]
    base_times, cold_times, noop_times = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            b = os.path.join(tmp, f"b{i}")
            e = os.path.join(tmp, f"e{i}")
            os.makedirs(b)
            # Alternate the order so neither side always gets the warmer page cache.
            if i % 2:
                cold_times.append(export_tree(store, layers.patched, e).seconds)
                base_times.append(baseline(store, manifest.pin, manifest.fork_commit, carried, b))
            else:
                base_times.append(baseline(store, manifest.pin, manifest.fork_commit, carried, b))
                cold_times.append(export_tree(store, layers.patched, e).seconds)
            t = time.perf_counter()
            result = export_tree(store, layers.patched, e)
            noop_times.append(time.perf_counter() - t)
            assert not result.written and not result.removed
            shutil.rmtree(b)
            shutil.rmtree(e)
    files = len(store.ls_tree(layers.patched))
    out = {
        "what": "cold export of the patched layer vs git archive | tar -x of pin + carried fork files",
        "files": files,
        "repeat": args.repeat,
        "baseline_median_s": round(statistics.median(base_times), 4),
        "cold_export_median_s": round(statistics.median(cold_times), 4),
        "cold_ratio": round(statistics.median(cold_times) / statistics.median(base_times), 3),
        "noop_export_median_s": round(statistics.median(noop_times), 4),
        "targets": {"cold_ratio_max": 1.5, "noop_s_max": 0.1},
    }
    out["met"] = out["cold_ratio"] <= 1.5 and out["noop_export_median_s"] < 0.1
    return record(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
