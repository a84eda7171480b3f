#!/usr/bin/env python3
"""A long fuzz campaign over the overlay's records (issue 13; results in ``docs/fuzz.md``).

Builds the fixture overlay of ``tests/fuzzlib.py`` (real git repositories, no
network) in a private temporary directory with an isolated git identity, then
runs ``--mutations`` mutations, round-robin over the five record kinds
(manifest, series, patch, LOCAL_FIXES.md, suites.toml). Mutation ``i`` is drawn
from ``random.Random(f"{seed}:{i}")``, so a result does not depend on the number
of workers and ``--only I`` replays one mutation. Each mutated overlay goes
through the record's commands (``fuzzlib.COMMANDS``) in-process, each under a
60 s hang guard.

Usage::

    .venv/bin/python tools/fuzz_records.py --seed 13 --mutations 2000 --workers 2 --json out.json

Exit status: 0 when no run had a problem (traceback, internal error, exit code
outside 0-2, hang), 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))

KINDS = ("manifest", "series", "patch", "fixes", "suites")

_STATE: dict = {}


def _init(seed: int, hang_s: int) -> None:
    """Per worker: own temp dir, isolated git, the world and the fixture template."""
    import fuzzlib
    from gitfixtures import build_world

    tmp = Path(tempfile.mkdtemp(prefix="overlay-fuzz-"))
    fuzzlib.isolate_git(tmp / "home", os.environ)
    world = build_world(tmp / "world")
    _STATE.update(
        tmp=tmp,
        template=fuzzlib.build_fixture(tmp / "template", world),
        seed=seed,
        hang_s=hang_s,
    )


def _one(index: int) -> dict:
    import fuzzlib

    rnd = random.Random(f"{_STATE['seed']}:{index}")
    record = KINDS[index % len(KINDS)]
    ops = fuzzlib.random_ops(rnd)
    start = time.perf_counter()
    runs = fuzzlib.run_mutation(
        _STATE["template"],
        _STATE["tmp"] / f"w{os.getpid()}",
        record,
        ops,
        hang_s=_STATE["hang_s"],
    )
    return {
        "index": index,
        "record": record,
        "ops": ops,
        "seconds": time.perf_counter() - start,
        "runs": [
            {
                "command": r.command,
                "exit": r.exit_code,
                "problem": r.problem,
                "output": r.output[-3000:] if r.problem else "",
            }
            for r in runs
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--mutations", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2)))
    parser.add_argument("--hang-seconds", type=int, default=60)
    parser.add_argument(
        "--only", type=int, default=None, help="replay one mutation index"
    )
    parser.add_argument(
        "--json", default=None, help="write every problem run and the counts here"
    )
    args = parser.parse_args(argv)
    indices = [args.only] if args.only is not None else list(range(args.mutations))
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(
        args.workers, _init, (args.seed, args.hang_seconds)
    ) as pool:
        results = pool.map(_one, indices, chunksize=8)
    wall = time.perf_counter() - start
    exits = collections.Counter()
    by_record = collections.defaultdict(collections.Counter)
    problems = collections.Counter()
    bad = []
    for res in results:
        for run in res["runs"]:
            exits[str(run["exit"])] += 1
            by_record[res["record"]][str(run["exit"])] += 1
            if run["problem"]:
                problems[run["problem"]] += 1
                bad.append(
                    {
                        "index": res["index"],
                        "record": res["record"],
                        "ops": res["ops"],
                        **run,
                    }
                )
    slowest = max(results, key=lambda r: r["seconds"])
    summary = {
        "command": "tools/fuzz_records.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "seed": args.seed,
        "mutations": len(indices),
        "runs": sum(exits.values()),
        "exit_codes": dict(sorted(exits.items())),
        "exit_codes_by_record": {
            k: dict(sorted(v.items())) for k, v in sorted(by_record.items())
        },
        "tracebacks": problems["traceback"],
        "internal_errors": problems["internal error"],
        "hangs": problems["hang"],
        "other_exit_codes": sum(v for k, v in problems.items() if k.startswith("exit")),
        "slowest_mutation_s": round(slowest["seconds"], 3),
        "slowest_index": slowest["index"],
        "wall_s": round(wall, 1),
        "python": sys.version.split()[0],
    }
    print(json.dumps(summary, indent=2))
    for item in bad[:20]:
        print(
            f"\n--- mutation {item['index']} ({item['record']}, {item['command']}): {item['problem']}\n"
            f"ops={item['ops']}\n{item['output'][-1500:]}",
            file=sys.stderr,
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"summary": summary, "problems": bad}, indent=2) + "\n"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
