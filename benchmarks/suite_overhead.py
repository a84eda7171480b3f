"""Per-run cost of the suite runner against a plain shell loop.

Runs the trivial child ``/bin/true`` N times (``--children``, default 200) three
ways, interleaved, ``--repeat`` times each in one run:

* ``shell``  -- ``sh -c 'i=0; while [ $i -lt N ]; do /bin/true; i=$((i+1)); done'``,
  the floor;
* ``runner`` -- :func:`overlay.suites.runner.run_suite` with a suite whose child
  is ``/bin/true`` (fresh process group, per-run files, ``result.json``);
* ``runner+markers`` -- the same with one stdout and one stderr marker, so
  every run also reads its two output files back.

Wall time (the runner's cost is its waiting as much as its CPU), the median of the
repeats per way; per-run overhead = (runner time - shell time) / N, in
milliseconds. The target (issue 7) is < 20 ms per run, checked on the median of
``--runs`` runs (benchmarks/_record.py: recorded with their spread and the load;
never the best run).

Usage: python benchmarks/suite_overhead.py [--children N] [--repeat R] [--runs K]
[--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from _record import RESULTS, record, repeat_runs  # noqa: E402

from overlay.suites.config import parse_suites  # noqa: E402
from overlay.suites.runner import Platform, run_suite  # noqa: E402

TARGET_MS = 20.0


def time_shell(n: int, true: str) -> float:
    """Seconds for ``n`` runs of ``true`` in one POSIX shell loop."""
    script = f'i=0; while [ "$i" -lt {n} ]; do {true}; i=$((i+1)); done'
    t0 = time.perf_counter()
    subprocess.run(["/bin/sh", "-c", script], check=True)
    return time.perf_counter() - t0


def time_runner(n: int, true: str, results: str, markers: bool) -> float:
    """Seconds for ``run_suite`` to run ``true`` ``n`` times (all must pass)."""
    text = f'[suites.trivial]\nchild = ["{true}"]\nruns = {n}\ndeadline = 30\n'
    if markers:
        text += (
            '[[suites.trivial.markers]]\nstream = "stdout"\ntext = "x"\nexpect = "never"\n'
            '[[suites.trivial.markers]]\nstream = "stderr"\ntext = "y"\nexpect = "never"\n'
        )
    suite = parse_suites(text)["trivial"]
    plat = Platform(hardware=frozenset(), backends=frozenset({"cpu"}))
    t0 = time.perf_counter()
    r = run_suite(suite, results, platform=plat)
    elapsed = time.perf_counter() - t0
    assert r.n == n and r.failed == 0, (r.n, r.failed)
    return elapsed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument(
        "--children", type=int, default=200, help="runs of the child per timing"
    )
    ap.add_argument(
        "--repeat", type=int, default=5, help="timings of each way per run, interleaved"
    )
    ap.add_argument(
        "--runs",
        type=int,
        default=3,
        help="runs of the whole measurement; the median and spread are recorded",
    )
    ap.add_argument(
        "--out",
        default=os.path.join(RESULTS, "suite_overhead.json"),
        help="where the JSON result is recorded",
    )
    args = ap.parse_args(argv)
    true = shutil.which("true") if not os.path.exists("/bin/true") else "/bin/true"
    n = args.children
    with tempfile.TemporaryDirectory(prefix="suite-overhead-") as tmp:
        time_shell(10, true)  # warm caches
        time_runner(10, true, tmp, False)

        def one_run(run: int) -> dict:
            t: dict[str, list[float]] = {
                "shell": [],
                "runner": [],
                "runner+markers": [],
            }
            for i in range(args.repeat):
                ways = list(t)
                if (i + run) % 2:  # alternate the order
                    ways.reverse()
                for way in ways:
                    if way == "shell":
                        t[way].append(time_shell(n, true))
                    else:
                        t[way].append(
                            time_runner(n, true, tmp, way == "runner+markers")
                        )
            per = {k: statistics.median(v) / n * 1000 for k, v in t.items()}
            return {
                "per_run_ms": {k: round(v, 3) for k, v in per.items()},
                "overhead_per_run_ms": {
                    "runner": round(per["runner"] - per["shell"], 3),
                    "runner+markers": round(per["runner+markers"] - per["shell"], 3),
                },
                "ratio_vs_shell": {
                    "runner": round(per["runner"] / per["shell"], 2),
                    "runner+markers": round(per["runner+markers"] / per["shell"], 2),
                },
            }

        summary = repeat_runs(
            one_run,
            args.runs,
            {
                "overhead_per_run_ms.runner": TARGET_MS,
                "overhead_per_run_ms.runner+markers": TARGET_MS,
            },
        )
    out = {
        "what": f"{n} runs of {true}: overlay's suite runner (with and without markers) "
        "against a shell loop; wall time, median of the repeats",
        "children": n,
        "repeat": args.repeat,
        **summary,
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
    }
    return record(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
