#!/usr/bin/env python3
"""A long series (shared case 9): 300 small patches on the real forked tree.

Needs OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL (the real mirrors). Builds 300
byte-stable patches, each changing one line of a different carried file of the
`forked` layer, and times in the same run:

* overlay's `apply_series` (the fast path: one `git apply --cached` for the whole
  series, then one `write-tree`), and `apply_series(stepwise=True)` (one apply and
  one write-tree per patch, as rebase and build attribution use it);
* the baseline a per-patch tool pays: `git read-tree` + `git apply --cached` +
  `git write-tree` for each patch, each its own process.

The case asks that applying be dominated by git's work, not by per-patch process
start-up or index rewrites: the fast path's ratio to the baseline shows it.

Usage: python benchmarks/series_bench.py [--patches N] [--repeat N] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from overlay.gitstore import Store  # noqa: E402
from overlay.layers import apply_series, compute_layers  # noqa: E402
from overlay.manifest import load_manifest  # noqa: E402
from overlay.patchfmt import format_patch, tree_diff  # noqa: E402
from overlay.series import parse_patch  # noqa: E402

from _record import mirrors_missing, record  # noqa: E402


def make_series(store: Store, forked: str, n: int, tmp: str) -> list:
    """``n`` patches, patch i appending a comment line to the i-th text file of the tree."""
    files = [e for e in store.ls_tree(forked)
             if e[0] == "100644" and e[3].endswith((".cpp", ".h", ".hip"))][:n]
    patches = []
    tree = forked
    with store.cat_file() as cat:
        for i, (_mode, _kind, oid, path) in enumerate(files, 1):
            data = cat.read(oid)[1] + f"// overlay series benchmark {i}\n".encode()
            new = store.edit_tree(tree, {path: ("100644", store.hash_blob(data))})
            body = format_patch(f"bench: touch {path}", "Benchmark patch.", [("Local-Fix", str(i))],
                                tree_diff(store, tree, new))
            name = f"{i:04d}-bench.patch"
            with open(os.path.join(tmp, name), "wb") as fh:
                fh.write(body)
            patches.append(parse_patch(body, name, os.path.join(tmp, name)))
            tree = new
    return patches, tree


def per_patch_baseline(store: Store, forked: str, patches, tmp: str) -> str:
    tree = forked
    env = {"GIT_INDEX_FILE": os.path.join(tmp, "baseline-index")}
    for patch in patches:
        store.git("read-tree", tree, env=env)
        store.git("apply", "--cached", patch.path, env=env)
        tree = store.out("write-tree", env=env)
    return tree


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patches", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "series.json"))
    args = ap.parse_args()
    if mirrors_missing():
        return 2
    store = Store()
    forked = compute_layers(store, load_manifest(ROOT), ROOT).forked
    fast_t, step_t, base_t = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        patches, expected = make_series(store, forked, args.patches, tmp)
        for _ in range(args.repeat):
            t = time.perf_counter()
            tree, results = apply_series(store, forked, patches)
            fast_t.append(time.perf_counter() - t)
            assert tree == expected and all(r.state == "exact" for r in results)
            t = time.perf_counter()
            tree, _ = apply_series(store, forked, patches, stepwise=True)
            step_t.append(time.perf_counter() - t)
            assert tree == expected
            t = time.perf_counter()
            assert per_patch_baseline(store, forked, patches, tmp) == expected
            base_t.append(time.perf_counter() - t)
    out = {
        "what": f"{len(patches)} one-line patches on the real forked tree: overlay's apply vs one "
                "read-tree + apply + write-tree process trio per patch",
        "patches": len(patches),
        "files_in_tree": len(store.ls_tree(forked)),
        "repeat": args.repeat,
        "fast_path_median_s": round(statistics.median(fast_t), 3),
        "stepwise_median_s": round(statistics.median(step_t), 3),
        "per_patch_baseline_median_s": round(statistics.median(base_t), 3),
        "fast_ratio": round(statistics.median(fast_t) / statistics.median(base_t), 3),
        "per_patch_ms_fast": round(1000 * statistics.median(fast_t) / len(patches), 2),
    }
    out["met"] = out["fast_ratio"] < 0.5
    return record(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
