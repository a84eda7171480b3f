#!/usr/bin/env python3
"""A kill-point sweep of ``overlay record`` and ``overlay import whole-file`` (issue 26;
results in ``docs/fuzz.md``).

Builds the scenarios of ``tests/killsweep.py`` (real git repositories, no network) in
a private temporary directory with an isolated git identity: ``record`` of a new
patch, ``record`` of an existing patch whose later patch is carried, and ``import
whole-file``. Each command is killed (SIGKILL) at every write point in turn, and
each documented way out is checked (the same command again, plain ``overlay edit``,
``overlay edit --abort``). The seed draws the user's edit and whether the new patch
is recorded with ``--keep``.

Usage::

    .venv/bin/python tools/fuzz_kills.py --seed 26 --json kills-26.json

Exit status: 0 when every way out ended in the before or the after state with no
leftover and the user's edit intact, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; print one line per scenario and a total."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--only", choices=("record-new", "record-carry", "import"))
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    import fuzzlib
    import killsweep
    from gitfixtures import build_world

    tmp = Path(tempfile.mkdtemp(prefix="overlay-kills-"))
    try:
        fuzzlib.isolate_git(tmp / "home", os.environ)
        os.environ["TMPDIR"] = str(tmp / "home")
        tempfile.tempdir = None
        start = time.perf_counter()
        world = build_world(tmp / "world")
        scenarios = []
        if args.only != "import":
            scenarios += killsweep.record_scenarios(tmp, world, args.seed)
        if args.only in (None, "import"):
            scenarios.append(killsweep.import_scenario(tmp))
        results = []
        for sc in scenarios:
            if args.only and sc.name != args.only:
                continue
            t0 = time.perf_counter()
            result = killsweep.sweep(sc, tmp)
            result.update(
                args=sc.args[: 1 if sc.family == "import" else None], ways=list(sc.ways)
            )
            result["seconds"] = round(time.perf_counter() - t0, 1)
            results.append(result)
            print(
                f"{sc.name}: {result['points']} write points x {len(sc.ways)} way(s) out, "
                f"{result['runs']} runs, {len(result['problems'])} problem(s), "
                f"{result['seconds']} s"
            )
            for problem in result["problems"]:
                print(f"  {problem}")
        total = sum(len(r["problems"]) for r in results)
        print(
            f"seed {args.seed}: {sum(r['runs'] for r in results)} runs, {total} problem(s), "
            f"{time.perf_counter() - start:.0f} s"
        )
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump({"seed": args.seed, "results": results}, fh, indent=2)
        return 1 if total else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
