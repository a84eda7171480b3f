#!/usr/bin/env python3
"""The pin bump and the fork sync of the real overlay, as a user runs them, against their floors.

Needs OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL (the real mirrors) and a store that
holds the commits (OVERLAY_GIT_DIR or the default store). The store's upstream
branches and tags are fetched once from the mirror first (untimed), as a user's
store holds them after any online command; the fetch also leaves the store's
commit-graph (overlay/git/fetch.py).

Each timed command starts from a copy of the overlay's records and a fresh store that
borrows the warm store's objects (objects/info/alternates) and holds its upstream
branches and tags, in which `overlay --offline verify` ran once, untimed: the state a
`verify` before the bump leaves. Timed, as CPU (user + system, children included),
interleaved, medians of --repeat timings per run:

* the bump from the v0.32.1 records (taken from this repository's history) to
  846d17622: `Rebase.start` + `Rebase.run` in this process (three resolutions
  settled, ten patches carried, records and report written), against one
  `git merge-tree --write-tree` of the fork delta onto the new pin (the synthetic
  commits the bump merges), as its own process. Target (issue 14): at most 3x;
* the whole command a user types, `overlay --offline rebase --onto 846d17622`, in a
  fresh process, against the import floor (`python -c "import overlay.cli"`, the
  start every command pays) plus 3x that merge-tree. Target (issue 31): at most 1.0
  of that sum;
* the whole `overlay --offline sync --fork F` from this repository's records, where
  F is the fork commit plus one commit that adds a file under the carried
  `mlx/backend/rocm/` (written into each run's store with a fixed identity and date:
  the same F every run), against the import floor plus 3x one merge-tree of the
  sync's fork delta onto the pin. Target (issue 31): at most 1.0 of that sum;
* for the record, what the whole rebase and the whole sync cannot go below without
  importing less or dropping their merge (`rebase_imports_and_merge_tree_over_floors`,
  `sync_imports_and_merge_tree_over_floors`): a process that imports every module the
  whole command imports (their names read, untimed, from one run of it with
  ``PYTHONPROFILEIMPORTTIME``) and then runs its floor's merge-tree, against the same
  floors;
* the same two commands served by a command server of the benchmark's own
  (`overlay server start`, docs/server.md), started once after the warm-up: the
  caller's CPU, its worker's (git children included) and the server's part for the
  command, from the server's log (`_cpu.Served`), against the same floors. Target:
  at most 1.0 of them.

With `--peer SCRIPT`, the peer too: the whole-file tool teams run today
(`scripts/mlxcelverse/rocm_overlay.py` of lablup/mlxcel, which this repository does
not hold: give the path of a checkout's copy). Its overlay directory is laid out,
untimed, as such an overlay holds these records: every file the patched layer adds
to the pin or changes in it (108 backend and 15 core files at v0.32.1), with its
`UPSTREAM` record of the three commits. Timed as a whole process like overlay's
commands, in a fresh copy and a fresh store each time, with this interpreter:

* `rocm_overlay.py retarget --no-fetch --to 846d17622` from the v0.32.1 layout
  (`peer_retarget`; 3-way merges of the core files, `git merge-file` on temporary
  files). Target (issue 31): the whole `overlay --offline rebase --onto 846d17622`
  at most 1.0 of it (`rebase_command_over_peer`); served, for the record;
* `rocm_overlay.py sync --no-fetch --fork-commit F` from the layout of this
  repository's records (`peer_sync`; its own merge base, against upstream's `main`
  in the store). Target: the whole `overlay --offline sync --fork F` at most 1.0 of
  it (`sync_command_over_peer`).

Without `--peer` those figures are not recorded (`peer: null`).

Every target is checked on the median of --runs runs (benchmarks/_record.py),
recorded with their spread and the load.

Usage: python benchmarks/rebase_bench.py [--repeat N] [--runs N] [--out FILE] [--peer SCRIPT]
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _cpu import Served, bench_env, cpu_run, fresh_store, median, overlay_cmd  # noqa: E402
from _record import mirror_bench_parser, mirrors_missing, record, repeat_runs  # noqa: E402

from overlay.engine.forked import _carried_delta  # noqa: E402
from overlay.engine.layers import compute_layers, ensure_commits  # noqa: E402
from overlay.git.store import Store  # noqa: E402
from overlay.rebase.run import Rebase  # noqa: E402
from overlay.rebase.state import Bases  # noqa: E402
from overlay.records.manifest import load_manifest  # noqa: E402
from overlay.workspace import Workspace  # noqa: E402

TARGET = "846d176227a0ac13d2667e58d2bb68b322109ab0"  # MLX main after v0.32.1
TARGET_RATIO = 3.0
#: The whole command at most the import floor plus this many merge-trees (issue 31).
MERGE_TREES = 3
#: The file the sync's new fork commit adds (carried, touched by no patch).
SYNC_FILE = "mlx/backend/rocm/BENCHMARK_SYNC.md"


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


def upstream_refs(base: Store) -> bytes:
    """``update-ref --stdin`` lines for the base store's upstream branches and tags."""
    return subprocess.run(
        [
            "git",
            f"--git-dir={base.git_dir}",
            "for-each-ref",
            "--format=create %(refname) %(objectname)",
            "refs/remotes/upstream/",
            "refs/tags/",
        ],
        check=True,
        capture_output=True,
    ).stdout


def prepared(
    base: Store, tmp: str, name: str, rev: str | None = None, refs: bytes = b""
) -> tuple[str, Store]:
    """A copy of the overlay's records at ``rev`` (default: the v0.32.1 records) and a
    fresh store holding ``refs`` (``update-ref --stdin`` lines), in which `overlay
    verify` ran once."""
    root = copy_overlay(os.path.join(tmp, name), rev or start_records())
    store = Store(fresh_store(base.git_dir, os.path.join(tmp, name + ".git")))
    if refs:
        subprocess.run(
            ["git", f"--git-dir={store.git_dir}", "update-ref", "--stdin"],
            input=refs,
            check=True,
        )
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


def floor_commits(
    store: Store, m, fork: str | None = None, pin: str = TARGET
) -> tuple[str, str]:
    """The two commits `git merge-tree` merges in the bump (or a sync to ``fork``): the
    pin and the carried fork delta, both on the fork's merge base."""
    base_tree, _carried, _dropped, theirs = _carried_delta(
        store,
        m.merge_base,
        fork or m.fork_commit,
        m.carry,
        [list(m.carry.include), list(m.carry.exclude)],
    )
    _c_base, ours, theirs_c = store.commit_chain(
        [
            (base_tree, [], "base"),
            (store.tree_of(pin), [0], "pin"),
            (theirs, [0], "fork delta"),
        ]
    )
    return ours, theirs_c


def whole(kind: str, root: str, store: Store, fork: str | None = None) -> list[str]:
    """The command a user types: ``overlay --offline rebase --onto TARGET`` or
    ``overlay --offline sync --fork FORK`` (a new fork commit, see :func:`sync_fork`)."""
    if kind == "rebase":
        return overlay_cmd("-C", root, "--offline", "rebase", "--onto", TARGET)
    if fork is None:  # the warm-up: the new fork commit made here
        fork = sync_fork(store, load_manifest(root).fork_commit)
    return overlay_cmd("-C", root, "--offline", "sync", "--fork", fork)


def sync_fork(store: Store, fork: str) -> str:
    """Write into ``store`` the sync's new fork commit: ``fork`` plus :data:`SYNC_FILE`
    (fixed identity and date, so the same name every run); return its name."""
    blob = store.hash_blob(b"A file the fork added (overlay's sync benchmark).\n")
    tree = store.edit_tree(store.tree_of(fork), {SYNC_FILE: ("100644", blob)})
    return store.commit_chain([(tree, [fork], "benchmark: the fork adds a file")])[0]


def peer_layout(store: Store, root: str, dest: str) -> str:
    """Lay out in ``dest`` the peer's overlay directory for the records at ``root``, as
    a whole-file overlay holds them: every file the patched layer adds to the pin or
    changes in it (a deletion has no file to hold), and ``UPSTREAM`` with the fork,
    its merge base and the pin (the peer's record of the three commits).

    Returns:
        ``dest``.
    """
    m = load_manifest(root)
    layers = compute_layers(store, m, root)
    names = store.git(
        "diff-tree",
        "-r",
        "-z",
        "--no-renames",
        "--name-only",
        "--diff-filter=AM",
        layers.pin,
        layers.patched,
    ).stdout.decode("utf-8", "surrogateescape")
    for rel in filter(None, names.split("\0")):
        path = os.path.join(dest, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(store.git("cat-file", "blob", f"{layers.patched}:{rel}").stdout)
    with open(os.path.join(dest, "UPSTREAM"), "w", encoding="utf-8") as fh:
        fh.write(
            f"source: {m.fork_url}\nbranch: {m.fork_branch}\ncommit: {m.fork_commit}\n"
            f"fork_upstream_merge_base: {m.merge_base}\nretargeted_to_mlx_pin: {m.pin}\n"
        )
    return dest


def peer_cmd(script: str, layout: str, store: Store, *args: str) -> list[str]:
    """The peer's command on its overlay directory ``layout`` and ``store`` (its git
    cache), never fetching."""
    return [
        sys.executable,
        script,
        "--overlay-dir",
        layout,
        args[0],
        "--git-dir",
        store.git_dir,
        "--no-fetch",
        *args[1:],
    ]


def _sha256_file(path: str) -> str:
    """The sha256 of the file at ``path`` (which copy of the peer was timed)."""
    import hashlib

    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def merge_tree(store: Store, commits: tuple[str, str]) -> list[str]:
    """The floor: one ``git merge-tree --write-tree`` of ``commits`` in ``store``."""
    return [
        "git",
        f"--git-dir={store.git_dir}",
        "merge-tree",
        "--write-tree",
        "-z",
        *commits,
    ]


#: The program of the lower bound: import the modules named in the file ``argv[1]``
#: (one a line, in the order the command imported them), then run ``argv[2:]``.
#: A name that is not a module here (``sitecustomize``) is skipped; the merge-tree's
#: exit status 1 (a conflict) is its answer, not a failure.
IMPORTS_THEN_RUN = """
import importlib, subprocess, sys
with open(sys.argv[1]) as fh:
    names = fh.read().split()
for name in names:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
sys.exit(subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL).returncode > 1)
"""


def imported_modules(cmd: list[str], env: dict[str, str], dest: str) -> str:
    """Run ``cmd`` once with ``PYTHONPROFILEIMPORTTIME`` (untimed) and write the names
    of the modules it imported, in the order Python reports them, one a line, to
    ``dest`` (``__main__`` left out).

    Returns:
        ``dest``.
    Raises:
        SystemExit: the command failed, or reported no import.
    """
    proc = subprocess.run(
        cmd, env={**env, "PYTHONPROFILEIMPORTTIME": "1"}, capture_output=True
    )
    names = [
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.decode("utf-8", "replace").splitlines()
        if line.startswith("import time:")
        and line.count("|") == 2
        and "self [us]" not in line  # the header
    ]
    names = [n for n in names if n and n != "__main__"]
    if proc.returncode != 0 or not names:
        raise SystemExit(f"{cmd!r}: no import list ({proc.returncode})")
    with open(dest, "w", encoding="utf-8") as fh:
        fh.write("\n".join(names) + "\n")
    return dest


def main() -> int:
    ap = mirror_bench_parser(__doc__, "rebase.json", repeat=15)
    ap.add_argument(
        "--peer",
        metavar="SCRIPT",
        help="the peer's scripts/mlxcelverse/rocm_overlay.py (lablup/mlxcel): time its "
        "retarget and sync beside overlay's rebase and sync",
    )
    args = ap.parse_args()
    if args.peer and not os.path.isfile(args.peer):
        ap.error(f"--peer {args.peer}: no such file")
    if mirrors_missing():
        return 2
    base = Store()
    with tempfile.TemporaryDirectory(prefix="overlay-rebase-bench-") as tmp:
        manifest = load_manifest(copy_overlay(os.path.join(tmp, "m"), start_records()))
    ensure_commits(base, manifest)
    base.ensure_commit(TARGET, ["upstream"])
    base.refresh_upstream_refs()  # online, untimed: branches, tags, commit-graph
    refs = upstream_refs(base)
    py = sys.executable
    head_manifest = load_manifest(ROOT)
    ensure_commits(base, head_manifest)
    report: dict = {}
    with tempfile.TemporaryDirectory(prefix="overlay-rebase-bench-") as tmp:
        root, store = prepared(base, tmp, "warmup", refs=refs)
        bump(root, store)  # imports and first-use costs of this process, untimed
        for kind in ("rebase", "sync"):  # untimed: fills the bytecode cache (bench_env)
            rev = None if kind == "rebase" else "HEAD"
            root, store = prepared(base, tmp, f"warmup-{kind}", rev, refs)
            cpu_run(
                whole(kind, root, store), env=bench_env(OVERLAY_GIT_DIR=store.git_dir)
            )
        cpu_run([py, "-c", "import overlay.cli"], env=bench_env())
        modules: dict[str, str] = {}  # kind -> the file of its command's imports
        for kind in ("rebase", "sync"):
            rev = None if kind == "rebase" else "HEAD"
            root, store = prepared(base, tmp, f"warmup-imports-{kind}", rev, refs)
            modules[kind] = imported_modules(
                whole(kind, root, store),
                bench_env(OVERLAY_GIT_DIR=store.git_dir),
                os.path.join(tmp, f"{kind}-modules.txt"),
            )
        server = Served(bench_env())
        for kind in ("rebase", "sync"):  # untimed: the server's first workers
            rev = None if kind == "rebase" else "HEAD"
            root, store = prepared(base, tmp, f"warmup-served-{kind}", rev, refs)
            server.cpu_run(
                whole(kind, root, store), env=bench_env(OVERLAY_GIT_DIR=store.git_dir)
            )
        peer_dirs: dict[str, str] = {}
        if args.peer:  # the peer's overlay directories, laid out once
            for kind in ("rebase", "sync"):
                root, store = prepared(
                    base,
                    tmp,
                    f"peer-{kind}",
                    None if kind == "rebase" else "HEAD",
                    refs,
                )
                peer_dirs[kind] = peer_layout(
                    store, root, os.path.join(tmp, f"peer-{kind}-layout")
                )
        count = [0]

        def fresh(kind: str) -> tuple[str, Store]:
            count[0] += 1
            rev = None if kind == "rebase" else "HEAD"
            return prepared(base, tmp, f"{kind}{count[0]}", rev, refs)

        def peer_run(kind: str) -> float:
            """The peer's retarget (``kind`` "rebase") or sync, in a fresh copy of its
            overlay directory and a fresh store: its CPU."""
            count[0] += 1
            layout = os.path.join(tmp, f"peer{count[0]}")
            shutil.copytree(peer_dirs[kind], layout)
            _root, store = fresh(kind)
            if kind == "rebase":
                cmd = peer_cmd(args.peer, layout, store, "retarget", "--to", TARGET)
            else:
                new_fork = sync_fork(store, head_manifest.fork_commit)
                cmd = peer_cmd(
                    args.peer, layout, store, "sync", "--fork-commit", new_fork
                )
            return cpu_run(cmd, env=bench_env())

        def one_run(_run: int) -> dict:
            t: dict[str, list[float]] = {
                k: []
                for k in (
                    "bump",
                    "merge_tree",
                    "rebase_command",
                    "import_floor",
                    "imports_and_merge_tree",
                    "sync_command",
                    "sync_imports_and_merge_tree",
                    "sync_merge_tree",
                    "rebase_served",
                    "sync_served",
                    *(("peer_retarget", "peer_sync") if args.peer else ()),
                )
            }
            for i in range(args.repeat):
                root, store = fresh("rebase")
                floor = merge_tree(store, floor_commits(store, manifest))
                if i % 2:
                    t["merge_tree"].append(cpu_run(floor, check=False))
                    cost, report["rebase"] = bump(root, store)
                else:
                    cost, report["rebase"] = bump(root, store)
                    t["merge_tree"].append(cpu_run(floor, check=False))
                t["bump"].append(cost)
                root, store = fresh("rebase")
                t["rebase_command"].append(
                    cpu_run(
                        whole("rebase", root, store),
                        env=bench_env(OVERLAY_GIT_DIR=store.git_dir),
                    )
                )
                t["import_floor"].append(
                    cpu_run([py, "-c", "import overlay.cli"], env=bench_env())
                )
                t["imports_and_merge_tree"].append(
                    cpu_run(
                        [py, "-c", IMPORTS_THEN_RUN, modules["rebase"], *floor],
                        env=bench_env(),
                    )
                )
                root, store = fresh("rebase")
                t["rebase_served"].append(
                    server.cpu_run(
                        whole("rebase", root, store),
                        env=bench_env(OVERLAY_GIT_DIR=store.git_dir),
                    )
                )
                root, store = fresh("sync")
                new_fork = sync_fork(store, head_manifest.fork_commit)
                sync_floor = merge_tree(
                    store,
                    floor_commits(
                        store, head_manifest, fork=new_fork, pin=head_manifest.pin
                    ),
                )
                t["sync_merge_tree"].append(cpu_run(sync_floor, check=False))
                t["sync_imports_and_merge_tree"].append(
                    cpu_run(
                        [py, "-c", IMPORTS_THEN_RUN, modules["sync"], *sync_floor],
                        env=bench_env(),
                    )
                )
                t["sync_command"].append(
                    cpu_run(
                        whole("sync", root, store, new_fork),
                        env=bench_env(OVERLAY_GIT_DIR=store.git_dir),
                    )
                )
                if args.peer:
                    t["peer_retarget"].append(peer_run("rebase"))
                    t["peer_sync"].append(peer_run("sync"))
                root, store = fresh("sync")
                new_fork = sync_fork(store, head_manifest.fork_commit)
                t["sync_served"].append(
                    server.cpu_run(
                        whole("sync", root, store, new_fork),
                        env=bench_env(OVERLAY_GIT_DIR=store.git_dir),
                    )
                )
            med = {k: round(median(v), 4) for k, v in t.items()}
            peer = (
                {
                    "rebase_command_over_peer": round(
                        med["rebase_command"] / med["peer_retarget"], 3
                    ),
                    "rebase_served_over_peer": round(
                        med["rebase_served"] / med["peer_retarget"], 3
                    ),
                    "sync_command_over_peer": round(
                        med["sync_command"] / med["peer_sync"], 3
                    ),
                    "sync_served_over_peer": round(
                        med["sync_served"] / med["peer_sync"], 3
                    ),
                }
                if args.peer
                else {}
            )
            return {
                **peer,
                "median_cpu_s": med,
                "bump_ratio": round(med["bump"] / med["merge_tree"], 2),
                "rebase_command_ratio": round(
                    med["rebase_command"] / med["merge_tree"], 2
                ),
                "rebase_command_over_floors": round(
                    med["rebase_command"]
                    / (med["import_floor"] + MERGE_TREES * med["merge_tree"]),
                    3,
                ),
                "rebase_imports_and_merge_tree_over_floors": round(
                    med["imports_and_merge_tree"]
                    / (med["import_floor"] + MERGE_TREES * med["merge_tree"]),
                    3,
                ),
                "sync_command_over_floors": round(
                    med["sync_command"]
                    / (med["import_floor"] + MERGE_TREES * med["sync_merge_tree"]),
                    3,
                ),
                "sync_imports_and_merge_tree_over_floors": round(
                    med["sync_imports_and_merge_tree"]
                    / (med["import_floor"] + MERGE_TREES * med["sync_merge_tree"]),
                    3,
                ),
                "rebase_served_over_floors": round(
                    med["rebase_served"]
                    / (med["import_floor"] + MERGE_TREES * med["merge_tree"]),
                    3,
                ),
                "sync_served_over_floors": round(
                    med["sync_served"]
                    / (med["import_floor"] + MERGE_TREES * med["sync_merge_tree"]),
                    3,
                ),
            }

        summary = repeat_runs(
            one_run,
            args.runs,
            {
                "bump_ratio": TARGET_RATIO,
                "rebase_command_over_floors": 1.0,
                "sync_command_over_floors": 1.0,
                "rebase_served_over_floors": 1.0,
                "sync_served_over_floors": 1.0,
                **(
                    {"rebase_command_over_peer": 1.0, "sync_command_over_peer": 1.0}
                    if args.peer
                    else {}
                ),
            },
        )
        server.close()
    rebased = report["rebase"]
    out = {
        "what": "overlay rebase --onto 846d17622 from v0.32.1 (3 resolutions, 10 patches, "
        "no stop) in-process and as the whole command, and the whole overlay sync to the "
        "fork plus one added file, vs one git merge-tree --write-tree of the fork delta "
        "onto the pin and the import of overlay.cli; CPU, children included",
        "repeat": args.repeat,
        "outcome": {
            "resolutions": {r["path"]: r["status"] for r in rebased["resolutions"]},
            "patches": {
                status: sum(p["status"] == status for p in rebased["patches"])
                for status in sorted({p["status"] for p in rebased["patches"]})
            },
        },
        "merge_trees_in_target": MERGE_TREES,
        "peer": (
            "scripts/mlxcelverse/rocm_overlay.py of lablup/mlxcel (sha256 "
            f"{_sha256_file(args.peer)}): retarget from the v0.32.1 layout, sync from "
            "this repository's, each in a fresh copy and store"
            if args.peer
            else None
        ),
        **summary,
    }
    return record(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
