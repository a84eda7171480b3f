#!/usr/bin/env python3
"""The everyday commands as a user runs them, each against the start-up floor and its git floor.

Needs OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL (the real mirrors) and a store that
holds this repository's commits (OVERLAY_GIT_DIR or the default store). As in
benchmarks/rebase_bench.py, each repeat starts from a copy of this repository's
records and a fresh store that borrows the warm store's objects and holds its
upstream branches and tags, in which `overlay --offline verify` ran once and the
patched layer was exported once to a directory (untimed). Then, as whole processes,
timed as CPU (user + system, children included), medians of --repeat timings per run:

* `overlay --offline status` and `overlay --offline tree`: git floor one
  `git rev-parse --verify PIN^{commit}` in the store (the one process a script that
  trusts its caches still starts);
* `overlay --offline refresh --check`: git floor one `git diff-tree -r -p
  --full-index FORKED PATCHED` (the whole series as one diff);
* `overlay --offline edit 0013-floor-divide-floors.patch`: git floor `git archive
  PATCHED | tar -x` into an empty directory (the files the user edits);
* a line added to the patch's file there, then `overlay --offline record`: git floor
  `git diff HEAD~1` in the edit's checkout (the patch as git shows it), timed before
  the record. Both run once the clock is past the second the edit's checkout wrote
  its index in (:func:`after_the_edits_second`), as a person's record always is;
* `overlay --offline export DIR` right after that record, no command between them
  (incremental: one file changed since the export): git floor one `git diff-tree -r
  -z OLD NEW` (what changed). Until 2026-12-03 an untimed `overlay tree` ran between
  the two, which computed the new layers for the export.

Each repeat also runs the six commands served by a command server of the
benchmark's own (`overlay server start`, docs/server.md; `served_<command>`), in a
fresh copy of their own: the caller's CPU, its worker's (git children included) and
the server's part, from the server's log (`_cpu.Served`), against the same floors.

The import floor is `python -c "import overlay.cli"`, timed beside each command.
Target (issue 31): each command at most 1.5x the import floor plus its git floor
(`<command>_over_floors` at most 1.0), checked on the median of --runs runs
(benchmarks/_record.py), recorded with their spread and the load.

Usage: python benchmarks/everyday_bench.py [--repeat N] [--runs N] [--out FILE]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cpu import Served, bench_env, cpu_run, median, overlay_cmd  # noqa: E402
from _record import mirror_bench_parser, mirrors_missing, record, repeat_runs  # noqa: E402
from rebase_bench import prepared, upstream_refs  # noqa: E402

from overlay.engine.layers import ensure_commits  # noqa: E402
from overlay.git.store import Store  # noqa: E402
from overlay.records.manifest import load_manifest  # noqa: E402

#: The patch the edit and the record work on, and the file of it they change.
PATCH = "0013-floor-divide-floors.patch"
EDITED = "mlx/backend/rocm/device/binary_ops.hpp"
#: The command at most this many import floors plus its git floor (issue 31).
IMPORT_FLOORS = 1.5
COMMANDS = ("status", "tree", "refresh_check", "edit", "record", "export_incremental")
#: The same commands served by a command server of the benchmark's own.
SERVED = tuple(f"served_{c}" for c in COMMANDS)


def after_the_edits_second(work: str) -> None:
    """Wait until the clock is past the whole second in which the edit's checkout
    ``work`` wrote its index.

    A person edits a file and types `overlay record` seconds after `overlay edit`. In
    that same second, git (which compares whole seconds) takes every file of the
    checkout as possibly changed, and `record` could not tell git otherwise
    (overlay/edit/worktree.py, `trust_stat_data`): its `git add -A` hashed all 1,049
    files again, which no person's record meets. Waits at most a second.
    """
    index_second = os.stat(os.path.join(work, ".git", "index")).st_mtime_ns // 10**9
    while time.time() < index_second + 1:
        time.sleep(index_second + 1.01 - time.time())


def one_repeat(
    base: Store, tmp: str, name: str, refs: bytes, server: Served | None = None
) -> dict[str, float]:
    """One timing of each command and of each floor, in a fresh copy; with
    ``server``, the commands are served by it (the keys then start with ``served_``)."""
    root, store = prepared(base, tmp, name, "HEAD", refs)
    env = bench_env(OVERLAY_GIT_DIR=store.git_dir)
    git = ["git", f"--git-dir={store.git_dir}"]

    def timed(cmd: list[str]) -> float:
        if server is None:
            return cpu_run(cmd, env=env)
        return server.cpu_run(cmd, env=env)

    def overlay(*args: str) -> list[str]:
        return overlay_cmd("-C", root, "--offline", *args)

    def out(cmd: list[str]) -> str:
        return subprocess.run(
            cmd, env=env, check=True, capture_output=True, text=True
        ).stdout.strip()

    pin = load_manifest(root).pin
    forked = out(overlay("tree", "--layer", "forked"))
    patched = out(overlay("tree", "--layer", "patched"))
    dest = os.path.join(tmp, name + "-export")
    cpu_run(overlay("export", dest), env=env)  # untimed: the first, cold export
    t: dict[str, float] = {}
    t["import_floor"] = cpu_run(
        [sys.executable, "-c", "import overlay.cli"], env=bench_env()
    )
    rev_parse = [*git, "rev-parse", "--verify", "--quiet", f"{pin}^{{commit}}"]
    t["status"] = timed(overlay("status"))
    t["status_git_floor"] = cpu_run(rev_parse)
    t["tree"] = timed(overlay("tree"))
    t["tree_git_floor"] = cpu_run(rev_parse)
    t["refresh_check"] = timed(overlay("refresh", "--check"))
    t["refresh_check_git_floor"] = cpu_run(
        [*git, "diff-tree", "-r", "-p", "--full-index", forked, patched]
    )
    files = os.path.join(tmp, name + "-files")
    os.makedirs(files)
    t["edit_git_floor"] = cpu_run(
        f"git --git-dir={store.git_dir} archive {patched} | tar -x -C {files}",
        shell=True,
    )
    t["edit"] = timed(overlay("edit", PATCH))
    work = os.path.join(root, ".overlay", "edit", PATCH.removesuffix(".patch"))
    after_the_edits_second(work)
    with open(os.path.join(work, EDITED), "a") as fh:
        fh.write("// a line added by overlay's everyday benchmark\n")
    t["record_git_floor"] = cpu_run(["git", "-C", work, "diff", "HEAD~1"])
    t["record"] = timed(overlay("record"))
    # Right after the record, as a user types it: a command between the two (the
    # `tree` below) would compute the new layers for the export.
    t["export_incremental"] = timed(overlay("export", dest))
    new = out(overlay("tree", "--layer", "patched"))
    assert new != patched, "the record changed nothing"
    t["export_incremental_git_floor"] = cpu_run(
        [*git, "diff-tree", "-r", "-z", patched, new]
    )
    if server is not None:
        return {(k if k == "import_floor" else f"served_{k}"): v for k, v in t.items()}
    return t


def main() -> int:
    ap = mirror_bench_parser(__doc__, "everyday.json", repeat=7)
    args = ap.parse_args()
    if mirrors_missing():
        return 2
    base = Store()
    ensure_commits(base, load_manifest(ROOT))
    base.refresh_upstream_refs()  # online, untimed: branches, tags, commit-graph
    refs = upstream_refs(base)
    with tempfile.TemporaryDirectory(prefix="overlay-everyday-bench-") as tmp:
        one_repeat(base, tmp, "warmup", refs)  # untimed: fills the bytecode cache
        server = Served(bench_env())
        one_repeat(base, tmp, "warmup-served", refs, server)  # untimed
        count = [0]

        def one_run(_run: int) -> dict:
            timings: dict[str, list[float]] = {}
            for _ in range(args.repeat):
                for each in (None, server):
                    count[0] += 1
                    name = f"r{count[0]}"
                    for key, value in one_repeat(base, tmp, name, refs, each).items():
                        timings.setdefault(key, []).append(value)
            med = {k: round(median(v), 4) for k, v in timings.items()}
            return {
                "median_cpu_s": med,
                **{
                    f"{c}_over_floors": round(
                        med[c]
                        / (IMPORT_FLOORS * med["import_floor"] + med[f"{c}_git_floor"]),
                        3,
                    )
                    for c in COMMANDS + SERVED
                },
            }

        summary = repeat_runs(
            one_run, args.runs, {f"{c}_over_floors": 1.0 for c in COMMANDS + SERVED}
        )
        server.close()
    out = {
        "what": "status, tree, refresh --check, edit, record and an incremental export of "
        "this repository's records as whole processes, each against 1.5x the import of "
        "overlay.cli plus its git floor; CPU, children included",
        "repeat": args.repeat,
        "import_floors": IMPORT_FLOORS,
        **summary,
    }
    return record(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
