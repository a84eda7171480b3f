#!/usr/bin/env python3
"""`overlay --offline verify` of the real overlay against the start-up floor.

Needs OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL (the real mirrors) for the first,
online run that warms the store. Then, interleaved, medians of --repeat runs of
CPU (user + system of the process and its children):

* `verify` with nothing changed since the last one (the verdict cache answers);
* the floor: `python -c "import overlay.cli"`, the start any command pays, and its
  own floor `python -c "import click"`;
* for the record, a verify the cache cannot answer (a `--skip` of a code that does
  not exist, new each run, so that the report is made again; the layers come from
  the layer cache) and the same with `--only FIX`.

Targets (issue 14): the cached verify at most 1.2x the import of overlay.cli, and
that import at most 1.5x the import of click; checked on the median of --runs runs
(benchmarks/_record.py), recorded with their spread and the load.

Usage: python benchmarks/verify_bench.py [--repeat N] [--runs N] [--out FILE]
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cpu import bench_env, cpu_run, median, overlay_cmd  # noqa: E402
from _record import mirror_bench_parser, mirrors_missing, record, repeat_runs  # noqa: E402

TARGETS = {
    "cached_verify_to_cli_import": 1.2,
    "cli_import_to_click_import": 1.5,
}


def main() -> int:
    ap = mirror_bench_parser(__doc__, "verify.json", repeat=31)
    args = ap.parse_args()
    if mirrors_missing():
        return 2
    env = bench_env()
    py = sys.executable
    cpu_run(overlay_cmd("verify"), env=env, cwd=ROOT)  # online: fills the store
    cpu_run(
        overlay_cmd("--offline", "verify"), env=env, cwd=ROOT
    )  # the verdict for the runs below

    def one_run(_run: int) -> dict:
        times: dict[str, list[float]] = {
            "cached_verify": [],
            "cli_import": [],
            "click_import": [],
            "uncached_verify": [],
            "uncached_verify_only_fix": [],
        }
        for i in range(args.repeat):
            times["cached_verify"].append(
                cpu_run(overlay_cmd("--offline", "verify"), env=env, cwd=ROOT)
            )
            times["cli_import"].append(
                cpu_run([py, "-c", "import overlay.cli"], env=env, cwd=ROOT)
            )
            times["click_import"].append(
                cpu_run([py, "-c", "import click"], env=env, cwd=ROOT)
            )
            if i < max(3, args.repeat // 3):
                skip = f"BENCH{_run}x{i}"
                times["uncached_verify"].append(
                    cpu_run(
                        overlay_cmd("--offline", "verify", "--skip", skip),
                        env=env,
                        cwd=ROOT,
                    )
                )
                times["uncached_verify_only_fix"].append(
                    cpu_run(
                        overlay_cmd(
                            "--offline", "verify", "--only", "FIX", "--skip", skip
                        ),
                        env=env,
                        cwd=ROOT,
                    )
                )
        med = {k: round(median(v), 4) for k, v in times.items()}
        return {
            "median_cpu_s": med,
            "cached_verify_to_cli_import": round(
                med["cached_verify"] / med["cli_import"], 3
            ),
            "cli_import_to_click_import": round(
                med["cli_import"] / med["click_import"], 3
            ),
        }

    out = {
        "what": "overlay --offline verify of the real overlay with nothing changed since the last "
        "verify, against python -c 'import overlay.cli' and python -c 'import click'; "
        "CPU (user + sys, children included)",
        "repeat": args.repeat,
        **repeat_runs(one_run, args.runs, TARGETS),
    }
    return record(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
