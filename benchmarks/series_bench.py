#!/usr/bin/env python3
"""A long series (issue 14, shared case 9): the real overlay plus N synthetic patches.

Needs OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL (the real mirrors) and a store that
holds the real overlay's commits (OVERLAY_GIT_DIR, or the default store; the first
run fetches them). Two copies of the overlay are made (``benchmarks/_synth.py``):
the real series alone (N = 0) and the real series plus N synthetic patches (default
1,000; patch i appends a line to the (i mod 82)-th text file of the ROCm backend,
so a file is touched by about a dozen patches in a row). Each is verified clean.

Timed, as CPU of the whole `overlay` process and its git children, interleaved,
medians of --repeat runs:

* cold `overlay --offline verify`: a fresh store (the pinned commits borrowed from
  the warm store through objects/info/alternates; no layer cache, none of the
  series' blobs, no verdict cache);
* `overlay --offline tree --layer patched` with such a fresh store;
* `overlay --offline refresh --check` with a warm store (the layer cache of an
  earlier verify), as after an edit of the records;
* the floor of `tree`: one `git read-tree`, one `git apply --cached` of the whole
  series and one `git write-tree` (a shell running the three), fresh store too.

Per patch = (figure at N - figure at 0) / N: what each patch adds. The totals
divided by the number of patches are recorded too. Git processes are counted in
separate, untimed runs (a PATH wrapper logs each git started); the growth per
patch is (count at N - count at 0) / N.

Targets (issue 14): per patch cold verify <= 2 ms, tree <= 1.0 ms, refresh
<= 0.5 ms; git processes grow by at most one per patch.

Every target is checked on the median of --runs runs (benchmarks/_record.py), recorded
with their spread and the load.

Usage: python benchmarks/series_bench.py [--patches N] [--repeat N] [--runs N] [--out FILE]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cpu import GitCounter, bench_env, cpu_run, fresh_store, median, overlay_cmd  # noqa: E402
from _record import mirror_bench_parser, mirrors_missing, record, repeat_runs  # noqa: E402
from _synth import make_overlay  # noqa: E402

from overlay.engine.layers import compute_layers  # noqa: E402
from overlay.git.store import Store  # noqa: E402
from overlay.records.manifest import load_manifest  # noqa: E402
from overlay.records.series import read_series  # noqa: E402

TARGETS_MS = {"cold_verify": 2.0, "tree_fresh_store": 1.0, "refresh_warm": 0.5}


def floor_cmd(root: str, forked: str) -> str:
    """The shell line of the floor: read-tree, one apply of the whole series, write-tree."""
    names = " ".join(f"patches-rocm/{name}" for name, _ in read_series(root))
    return (
        f"cd {root} && export GIT_INDEX_FILE=$(mktemp -u) && git read-tree {forked} && "
        f"git apply --cached {names} && git write-tree >/dev/null; rm -f $GIT_INDEX_FILE"
    )


def main() -> int:
    ap = mirror_bench_parser(__doc__, "series.json", repeat=9)
    ap.add_argument("--patches", type=int, default=1000, help="synthetic patches (N)")
    args = ap.parse_args()
    if mirrors_missing():
        return 2
    base = Store()
    forked = compute_layers(
        base, load_manifest(ROOT), ROOT
    ).forked  # warms the store (fetches once)
    n = args.patches
    tmp = tempfile.mkdtemp(prefix="overlay-series-bench-")
    try:
        roots = {}
        for count in (0, n):
            gen = Store(fresh_store(base.git_dir, os.path.join(tmp, f"gen{count}.git")))
            roots[count] = os.path.join(tmp, f"overlay{count}")
            make_overlay(gen, ROOT, roots[count], count)
        warm = {}
        for count, root in roots.items():  # a store with the layer cache, for refresh
            warm[count] = fresh_store(
                base.git_dir, os.path.join(tmp, f"warm{count}.git")
            )
            # exits 1 on any error finding, which stops the benchmark (cpu_run checks)
            cpu_run(
                overlay_cmd("-C", root, "--offline", "verify"),
                env=bench_env(OVERLAY_GIT_DIR=warm[count]),
            )
        run = 0

        def one_run(_i: int) -> dict:
            times: dict[str, dict[int, list[float]]] = {
                k: {0: [], n: []}
                for k in ("cold_verify", "tree_fresh_store", "refresh_warm", "floor")
            }
            for _ in range(args.repeat):
                for count in (n, 0) if run % 2 else (0, n):
                    root = roots[count]

                    def fresh() -> dict[str, str]:
                        nonlocal run
                        run += 1
                        return bench_env(
                            OVERLAY_GIT_DIR=fresh_store(
                                base.git_dir, os.path.join(tmp, f"s{run}.git")
                            )
                        )

                    times["cold_verify"][count].append(
                        cpu_run(
                            overlay_cmd("-C", root, "--offline", "verify"), env=fresh()
                        )
                    )
                    times["tree_fresh_store"][count].append(
                        cpu_run(
                            overlay_cmd(
                                "-C", root, "--offline", "tree", "--layer", "patched"
                            ),
                            env=fresh(),
                        )
                    )
                    times["refresh_warm"][count].append(
                        cpu_run(
                            overlay_cmd("-C", root, "--offline", "refresh", "--check"),
                            env=bench_env(OVERLAY_GIT_DIR=warm[count]),
                        )
                    )
                    env = fresh()
                    env["GIT_DIR"] = env.pop("OVERLAY_GIT_DIR")
                    times["floor"][count].append(
                        cpu_run(floor_cmd(root, forked), env=env, shell=True)
                    )
            figures: dict = {
                "median_cpu_s": {
                    k: {str(c): round(median(v[c]), 3) for c in (0, n)}
                    for k, v in times.items()
                },
                "per_patch_ms": {},
                "total_per_patch_ms": {},
            }
            for k, v in times.items():
                figures["per_patch_ms"][k] = round(
                    1000 * (median(v[n]) - median(v[0])) / n, 3
                )
                figures["total_per_patch_ms"][k] = round(
                    1000 * median(v[n]) / (n + real), 3
                )
            figures["tree_ratio_to_floor"] = round(
                figures["per_patch_ms"]["tree_fresh_store"]
                / figures["per_patch_ms"]["floor"],
                2,
            )
            return figures

        real = len(read_series(ROOT))
        targets = {f"per_patch_ms.{k}": t for k, t in TARGETS_MS.items()}
        summary = repeat_runs(one_run, args.runs, targets)
        counter = GitCounter()
        processes = {}
        try:
            for count, root in roots.items():
                for what, cmd, store in (
                    ("cold_verify", ("verify",), None),
                    ("tree_fresh_store", ("tree",), None),
                    ("refresh_warm", ("refresh", "--check"), warm[count]),
                ):
                    run += 1
                    git_dir = store or fresh_store(
                        base.git_dir, os.path.join(tmp, f"c{run}.git")
                    )
                    processes.setdefault(what, {})[count] = counter.count(
                        overlay_cmd("-C", root, "--offline", *cmd),
                        env=bench_env(OVERLAY_GIT_DIR=git_dir),
                    )
        finally:
            counter.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {
        "what": f"the real series ({real} patches) and it plus {n} synthetic ones: CPU of the "
        "overlay process and its git children, per patch = (at N - at 0) / N",
        "patches": n,
        "real_patches": real,
        "repeat": args.repeat,
        "git_processes": {
            k: {str(c): v[c] for c in (0, n)} for k, v in processes.items()
        },
        "git_processes_per_patch": {
            k: round((v[n] - v[0]) / n, 3) for k, v in processes.items()
        },
        **summary,
    }
    grown = [k for k, g in out["git_processes_per_patch"].items() if g > 1.0]
    if grown:  # git processes grow by at most one per patch (counted once, not timed)
        out["missed"] = [
            *out["missed"],
            *(f"git_processes_per_patch.{k}" for k in grown),
        ]
        out["met"] = False
    return record(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
