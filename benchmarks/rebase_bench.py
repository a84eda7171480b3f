#!/usr/bin/env python3
"""Pin bump of the real overlay, v0.32.1 -> 846d17622 (no stop), against one merge-tree.

Needs OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL (the real mirrors) and a store that
holds the commits (OVERLAY_GIT_DIR or the default store; they are fetched once).

Each run starts from a copy of the overlay's records (patches-rocm/, LOCAL_FIXES.md)
as they were on v0.32.1 (taken from this repository's history)
and a fresh store that borrows the warm store's objects (objects/info/alternates), in
which `overlay --offline verify` ran once, untimed: the state a `verify` before the
bump leaves. Timed, as CPU (user + system, children included), interleaved, medians:

* the bump: `Rebase.start` + `Rebase.run` in this process, to the end (three
  resolutions settled, ten patches carried, records and report written);
* the floor: one `git merge-tree --write-tree` of the fork delta onto the new pin
  (the synthetic commits the bump merges), as its own process;
* for the record, the whole command `overlay --offline rebase --onto 846d17622`
  (interpreter start, imports, the pin checks) against the same floor.

Target (issue 14): the bump at most 3x the floor.

Usage: python benchmarks/rebase_bench.py [--repeat N] [--out FILE]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cpu import bench_env, cpu_run, fresh_store, median, overlay_cmd  # noqa: E402
from _record import mirror_bench_parser, mirrors_missing, record  # noqa: E402

from overlay.engine.layers import _carried_delta, ensure_commits  # noqa: E402
from overlay.git.store import Store  # noqa: E402
from overlay.rebase.run import Rebase  # noqa: E402
from overlay.rebase.state import Bases  # noqa: E402
from overlay.records.manifest import load_manifest  # noqa: E402
from overlay.workspace import Workspace  # noqa: E402

TARGET = "846d176227a0ac13d2667e58d2bb68b322109ab0"  # MLX main after v0.32.1
TARGET_RATIO = 3.0


#: The pin the bump starts from (MLX v0.32.1); the records at that pin are taken from
#: this repository's own history, since the checked-out records already moved on.
START_PIN = "3a6219917e4535575ce5bce2fc2ba27a483a709b"


def start_records() -> str:
    """The commit of this repository whose records were the last ones on ``START_PIN``:
    the parent of the commit that moved the pin away from it."""
    moved = subprocess.run(
        [
            "git",
            "-C",
            ROOT,
            "log",
            "-1",
            "--format=%H",
            f"-S{START_PIN}",
            "--",
            "patches-rocm/overlay.toml",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not moved:
        raise SystemExit(
            f"rebase_bench: no commit of this repository leaves pin {START_PIN}"
        )
    return moved + "^"


def copy_overlay(dest: str, rev: str) -> str:
    """Write the records (``patches-rocm/``, ``LOCAL_FIXES.md``) of commit ``rev`` of
    this repository into a new git repository at ``dest``."""
    os.makedirs(dest)
    archive = subprocess.run(
        ["git", "-C", ROOT, "archive", rev, "patches-rocm", "LOCAL_FIXES.md"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    subprocess.run(["git", "init", "-q", dest], check=True)
    return dest


def prepared(base: Store, tmp: str, name: str) -> tuple[str, Store]:
    """A copy of the overlay and a fresh store in which `overlay verify` ran once."""
    root = copy_overlay(os.path.join(tmp, name), start_records())
    store = Store(fresh_store(base.git_dir, os.path.join(tmp, name + ".git")))
    subprocess.run(
        overlay_cmd("-C", root, "--offline", "verify"),
        env=bench_env(OVERLAY_GIT_DIR=store.git_dir),
        check=True,
        capture_output=True,
    )
    return root, store


def cpu_now() -> float:
    s, c = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def bump(root: str, store: Store) -> tuple[float, dict]:
    m = load_manifest(root)
    start = cpu_now()
    rb = Rebase(Workspace.of(root, store))
    rb.start(
        "rebase",
        Bases(TARGET, m.fork_commit, m.merge_base),
        Bases(m.pin, m.fork_commit, m.merge_base),
    )
    report = rb.run()
    return cpu_now() - start, report.to_json()


def floor_commits(store: Store, m) -> tuple[str, str]:
    """The two commits `git merge-tree` merges in the bump: the new pin and the carried
    fork delta, both on the fork's merge base."""
    base_tree, _carried, _dropped, theirs = _carried_delta(
        store,
        m.merge_base,
        m.fork_commit,
        m.carry,
        [list(m.carry.include), list(m.carry.exclude)],
    )
    _c_base, ours, theirs_c = store.commit_chain(
        [
            (base_tree, [], "base"),
            (store.tree_of(TARGET), [0], "pin"),
            (theirs, [0], "fork delta"),
        ]
    )
    return ours, theirs_c


def main() -> int:
    ap = mirror_bench_parser(__doc__, "rebase.json", repeat=15)
    args = ap.parse_args()
    if mirrors_missing():
        return 2
    base = Store()
    with tempfile.TemporaryDirectory(prefix="overlay-rebase-bench-") as tmp:
        manifest = load_manifest(copy_overlay(os.path.join(tmp, "m"), start_records()))
    ensure_commits(base, manifest)
    base.ensure_commit(TARGET, ["upstream"])
    ours_t, floor_t, cli_t = [], [], []
    report = None
    with tempfile.TemporaryDirectory(prefix="overlay-rebase-bench-") as tmp:
        root, store = prepared(base, tmp, "warmup")
        bump(root, store)  # imports and first-use costs of this process, untimed
        root, store = prepared(base, tmp, "warmup-cli")
        cpu_run(  # untimed: fills the bytecode cache (bench_env) as an install would
            overlay_cmd("-C", root, "--offline", "rebase", "--onto", TARGET),
            env=bench_env(OVERLAY_GIT_DIR=store.git_dir),
        )
        for i in range(args.repeat):
            root, store = prepared(base, tmp, f"run{i}")
            commits = floor_commits(store, manifest)
            floor = [
                "git",
                f"--git-dir={store.git_dir}",
                "merge-tree",
                "--write-tree",
                "-z",
                *commits,
            ]
            if i % 2:
                floor_t.append(cpu_run(floor, check=False))
                cost, report = bump(root, store)
            else:
                cost, report = bump(root, store)
                floor_t.append(cpu_run(floor, check=False))
            ours_t.append(cost)
            root, store = prepared(base, tmp, f"cli{i}")
            cli_t.append(
                cpu_run(
                    overlay_cmd("-C", root, "--offline", "rebase", "--onto", TARGET),
                    env=bench_env(OVERLAY_GIT_DIR=store.git_dir),
                )
            )
    assert report is not None
    out = {
        "what": "overlay rebase --onto 846d17622 from v0.32.1 (3 resolutions, 10 patches, "
        "no stop) in-process, vs one git merge-tree --write-tree of the fork delta onto "
        "the new pin; CPU, children included",
        "repeat": args.repeat,
        "outcome": {
            "resolutions": {r["path"]: r["status"] for r in report["resolutions"]},
            "patches": {
                status: sum(p["status"] == status for p in report["patches"])
                for status in sorted({p["status"] for p in report["patches"]})
            },
        },
        "bump_median_s": round(median(ours_t), 4),
        "merge_tree_floor_median_s": round(median(floor_t), 4),
        "ratio": round(median(ours_t) / median(floor_t), 2),
        "whole_command_median_s": round(median(cli_t), 4),
        "whole_command_ratio": round(median(cli_t) / median(floor_t), 2),
        "target_ratio_max": TARGET_RATIO,
    }
    out["met"] = out["ratio"] <= TARGET_RATIO
    return record(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
