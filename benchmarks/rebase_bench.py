#!/usr/bin/env python3
"""Compute time of the v0.32.1 rebase with resolutions replayed, against a merge-file loop.

Needs OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL (the real mirrors). The overlay as it
was at the old pin (the commit before the rebase landed, `--from REV`, default the
parent of the commit that added patches-rocm/resolved/) is copied to a scratch
directory together with the rr-cache recorded when the conflicts were resolved by hand
(`.overlay/rr-cache`, or the resolved files themselves when the cache is absent), and
`overlay rebase --onto <v0.32.1>` runs in-process with no human step.

Baseline, measured in the same run: one `git merge-file` process per carried file
(merge base, pin and fork versions written to temporary files from one cat-file
reader), which is what a per-file tool does. Target (issue 6): <= 0.5x.

Usage: python benchmarks/rebase_bench.py [--repeat N] [--out FILE]
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

from overlay.gitstore import Store, git_env  # noqa: E402
from overlay.layers import ensure_commits, merge_fork_delta  # noqa: E402
from overlay.manifest import load_manifest, parse_manifest  # noqa: E402
from overlay.rebase import RR_CACHE, Bases, Rebase  # noqa: E402

TARGET = "3a6219917e4535575ce5bce2fc2ba27a483a709b"


from _record import mirrors_missing, record  # noqa: E402


def git_root(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, stdout=subprocess.PIPE, env=git_env()).stdout


def old_overlay(dest: str, rev: str) -> None:
    """Materialize the overlay files (patches-rocm/, LOCAL_FIXES.md) of commit ``rev``."""
    os.makedirs(dest)
    for path in git_root("ls-tree", "-r", "--name-only", rev, "--", "patches-rocm", "LOCAL_FIXES.md").decode().split():
        full = os.path.join(dest, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as fh:
            fh.write(git_root("show", f"{rev}:{path}"))


def merge_file_loop(store: Store, base: str, pin: str, fork: str, paths: list[str], tmp: str) -> float:
    start = time.perf_counter()
    trees = {c: {e[3]: e[2] for e in store.ls_tree(c)} for c in (pin, base, fork)}  # one ls-tree each
    with store.cat_file() as cat:
        for i, path in enumerate(paths):
            names = []
            for side, commit in (("ours", pin), ("base", base), ("theirs", fork)):
                oid = trees[commit].get(path)
                data = cat.read(oid)[1] if oid else b""
                name = os.path.join(tmp, f"{i}.{side}")
                with open(name, "wb") as fh:
                    fh.write(data)
                names.append(name)
            subprocess.run(["git", "merge-file", "-p", *names], stdout=subprocess.DEVNULL, env=git_env())
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--from", dest="rev", default=None)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "rebase.json"))
    args = ap.parse_args()
    if mirrors_missing():
        return 2
    rev = args.rev or git_root("log", "--diff-filter=A", "--format=%H", "-1", "--", "patches-rocm/resolved").decode().strip() + "~1"
    current = load_manifest(ROOT)
    resolutions = {}
    res_dir = os.path.join(ROOT, "patches-rocm", "resolved")
    for dirpath, _d, files in os.walk(res_dir):
        for fn in files:
            full = os.path.join(dirpath, fn)
            resolutions[os.path.relpath(full, res_dir)] = open(full, "rb").read()
    store = Store()
    rebase_t, loop_t = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            root = os.path.join(tmp, f"ov{i}")
            old_overlay(root, rev)
            with open(os.path.join(root, "patches-rocm", "overlay.toml")) as fh:
                old = parse_manifest(fh.read())
            # Record the hand resolutions the way a first run did: seed the rr-cache by conflict key.
            rb = Rebase(root, store)
            ensure_commits(store, old)
            store.ensure_commit(TARGET, ["upstream"])
            merge = merge_fork_delta(store, old.merge_base, TARGET, old.fork_commit, old.carry)
            os.makedirs(os.path.join(root, RR_CACHE))
            for path, stages in merge.stages.items():
                key = rb._conflict_key(rb._labelled({str(k): v for k, v in stages.items()}, None))
                with open(os.path.join(root, RR_CACHE, key), "wb") as fh:
                    fh.write(resolutions[path])
            start = time.perf_counter()
            rb.start("rebase", Bases(TARGET, old.fork_commit, old.merge_base),
                     Bases(old.pin, old.fork_commit, old.merge_base))
            report = rb.run()
            rebase_t.append(time.perf_counter() - start)
            assert all(r["status"] == "reused" for r in report["resolutions"]), report["resolutions"]
            loop_dir = os.path.join(tmp, f"loop{i}")
            os.makedirs(loop_dir)
            loop_t.append(merge_file_loop(store, old.merge_base, TARGET, old.fork_commit, merge.carried, loop_dir))
            shutil.rmtree(root)
            shutil.rmtree(loop_dir)
    out = {
        "what": "overlay rebase --onto v0.32.1 (3 conflicts replayed from the rr-cache, 3 patches, report with "
                "range-diff) vs one git merge-file per carried file",
        "carried_files": len(merge.carried),
        "conflicts": len(merge.stages),
        "repeat": args.repeat,
        "rebase_median_s": round(statistics.median(rebase_t), 3),
        "merge_file_loop_median_s": round(statistics.median(loop_t), 3),
        "ratio": round(statistics.median(rebase_t) / statistics.median(loop_t), 3),
        "target_ratio_max": 0.5,
        "pin_now": current.pin,
    }
    out["met"] = out["ratio"] <= 0.5
    return record(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
