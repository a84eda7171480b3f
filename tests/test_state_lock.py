"""The rebase lock, wedged rebase states and the sweep of what killed commands
leave behind (issue 13, items 4 and 5).

Concurrency is tested with real processes: the test process holds
``.overlay/rebase.lock`` as the protocol says (``flock``, ``"<pid> <command>"``
written by an exclusive holder), or two overlay processes race.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gitfixtures import (
    cli,
    lines,
    make_patch,
    records_hash,
)
from gitfixtures import (
    overlay_process as run,
)
from gitfixtures import (
    refusal_line as one_line_refusal,
)

from overlay import layout
from overlay.engine.layers import compute_layers
from overlay.fs.atomic import TEMP_RE, sweep_scratch_dirs
from overlay.git.store import Store
from overlay.rebase.ondisk import inspect_state
from overlay.records.manifest import load_manifest

ROOT = Path(__file__).resolve().parent.parent
RESOLVED = lines(
    "core", change={5: "core 5 upstream rewrite // rocm hook", 25: "core 25 upstream"}
)


def spawn(o, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "overlay.cli", "-C", str(o.root), *args],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def snapshot(o) -> str:
    """Every file under the overlay (the rebase state included), but the lock file."""
    h = hashlib.sha256()
    for path in sorted(p for p in o.root.rglob("*") if p.is_file() or p.is_symlink()):
        rel = str(path.relative_to(o.root))
        if rel == layout.REBASE_LOCK:
            continue
        h.update(
            rel.encode()
            + b"\0"
            + (os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
        )
    return h.hexdigest()


def manifest_text(o) -> str:
    return (o.root / "patches-rocm" / "overlay.toml").read_text()


@contextlib.contextmanager
def holding(o, command: str = "rebase --continue", *, shared: bool = False):
    """Hold the rebase lock from the test process, as a running overlay command would."""
    (o.root / ".overlay").mkdir(exist_ok=True)
    fd = os.open(o.root / layout.REBASE_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        if not shared:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {command}\n".encode())
        yield
    finally:
        os.close(fd)


def stopped_run(ov, w) -> None:
    """A rebase stopped on the fork-delta conflict in mlx/core.cpp, its work file resolved."""
    stop = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert stop.exit_code == 1, stop.output
    (ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp").write_text(RESOLVED)


# -- 1. the lock ------------------------------------------------------------------------------


def test_every_command_on_the_state_is_refused_while_another_holds_the_lock(ov, w):
    before_run = records_hash(ov)
    stopped_run(ov, w)
    before = snapshot(ov)
    commands = [
        ("rebase", "--abort"),
        ("rebase", "--continue"),
        ("rebase", "--skip"),
        ("rebase", "--drop"),
        ("sync", "--abort"),
        ("sync", "--continue"),
        ("rebase", "--onto", w.pin_clean),
        ("sync", "--fork", w.fork_commit),
        ("rebase", "--forget", "mlx/core.cpp"),
        ("refresh",),
        ("refresh", "--check"),
        ("verify",),
        ("status",),
        (
            "fix",
            "new",
            "--section",
            "kernels",
            "--title",
            "T.",
            "--file",
            "mlx/ops.cpp",
        ),
    ]
    with holding(ov, "rebase --continue"):
        for args in commands:
            proc = run(ov, *args)
            assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
            line = one_line_refusal(proc.stderr)
            assert (
                f"`overlay rebase --continue` (pid {os.getpid()}) is running on this overlay"
                in line
            ), line
            assert "is refused" in line
            assert snapshot(ov) == before, (
                args
            )  # not one byte of the state or the records moved
        status = run(ov, "rebase", "--status")
        assert status.returncode == 0, status.stderr
        assert (
            f"`overlay rebase --continue` (pid {os.getpid()}) is working on the rebase state right now"
            in status.stdout
        )
    # The holder gone, the state is whole and the run finishes.
    assert inspect_state(str(ov.root)).problem is None
    done = run(ov, "rebase", "--abort")
    assert done.returncode == 0, done.stderr
    assert (
        records_hash(ov) == before_run
        and not (ov.root / ".overlay" / "rebase").exists()
    )


def test_readers_share_the_lock_and_writers_wait_for_no_reader(ov, w):
    stopped_run(ov, w)
    before = snapshot(ov)
    with holding(ov, shared=True):  # e.g. a verify reading the records
        status = run(ov, "rebase", "--status")
        assert (
            status.returncode == 0
            and "stopped at resolution mlx/core.cpp" in status.stdout
        )
        verify = run(ov, "verify", "--only", "SER")
        assert verify.returncode == 0, verify.stderr
        abort = run(ov, "rebase", "--abort")
        assert abort.returncode == 2
        assert (
            "another overlay command (a verify or status reading the records)"
            in one_line_refusal(abort.stderr)
        )
    assert snapshot(ov) == before


def test_verify_during_a_stopped_run_says_which_command_continues_or_aborts_it(ov, w):
    stopped_run(ov, w)
    result = run(ov, "verify", "--only", "SER", "--format", "json")
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)  # the note goes to stderr, the report stays parseable
    assert "a rebase is in progress" in result.stderr
    assert (
        "`overlay rebase --continue` finishes it, `overlay rebase --abort` undoes it"
        in result.stderr
    )
    status = run(ov, "status")
    assert "note: a rebase is in progress" in status.stdout


@pytest.mark.parametrize(
    "first, second",
    [
        ("--continue", "--abort"),
        ("--continue", "--continue"),
        ("--abort", "--abort"),
        ("--onto", "--onto"),
    ],
)
def test_two_commands_at_once_never_tear_the_state(ov, w, first, second):
    before = records_hash(ov)
    for _round in range(2):
        if first != "--onto":
            stopped_run(ov, w)
        args = [
            ("rebase", "--onto", w.pin_clean) if a == "--onto" else ("rebase", a)
            for a in (first, second)
        ]
        procs = [spawn(ov, *a) for a in args]
        outs = [p.communicate(timeout=120) for p in procs]
        for proc, (out, err), a in zip(procs, outs, args, strict=True):
            assert proc.returncode in (0, 2), (a, out, err)
            assert "Traceback" not in err and "internal error" not in err, err
            if proc.returncode == 2:
                one_line_refusal(err)
        info = inspect_state(str(ov.root))
        assert not info.present, (
            info
        )  # both finished: completed or aborted, never half of either
        if first == "--onto":
            assert f'pin = "{w.pin_clean}"' in manifest_text(ov)
            assert sorted(p.returncode for p in procs) in (
                [0, 0],
                [0, 2],
            )  # the second: refused or nothing to do
        elif f'pin = "{w.pin_conflict}"' in manifest_text(ov):  # completed
            assert (
                ov.root / "patches-rocm" / "resolved" / "mlx" / "core.cpp"
            ).read_text() == RESOLVED
        else:  # aborted: exactly as before
            assert records_hash(ov) == before
        # Back to the start for the next round (the rr-cache would resolve the conflict by itself).
        shutil.rmtree(ov.root / "patches-rocm" / "resolved", ignore_errors=True)
        shutil.rmtree(ov.root / ".overlay" / "rr-cache", ignore_errors=True)
        ov.write_manifest(w.base)
        (ov.root / "LOCAL_FIXES.md").write_text(
            f"# Local changes relative to x/fork@{w.fork_commit[:8]}\n\n"
            f"## Retarget onto the MLX pin ({w.base[:8]})\n\n## Fixes to the fork's kernels\n\n"
        )
        assert records_hash(ov) == before


def test_a_start_killed_before_its_state_is_in_place_leaves_no_run(ov, w):
    before = records_hash(ov)
    proc = run(
        ov, "rebase", "--onto", w.pin_conflict, env={"OVERLAY_TEST_KILL_AT": "start"}
    )
    assert proc.returncode == -9
    assert not (ov.root / ".overlay" / "rebase").exists()  # appears whole or not at all
    assert (ov.root / ".overlay" / "rebase.tmp-new" / "state.json").exists()
    assert "no rebase or sync in progress" in run(ov, "rebase", "--status").stdout
    assert records_hash(ov) == before
    again = run(ov, "rebase", "--onto", w.pin_conflict)
    assert (
        again.returncode == 1 and "fork delta conflicts" in again.stdout + again.stderr
    )
    assert not (ov.root / ".overlay" / "rebase.tmp-new").exists()  # swept


# -- 2. wedged states ---------------------------------------------------------------------------


def _no_backup(state_dir: Path) -> None:
    shutil.rmtree(state_dir / "backup")


def _no_state(state_dir: Path) -> None:
    (state_dir / "state.json").unlink()


def _half_state(state_dir: Path) -> None:
    data = (state_dir / "state.json").read_bytes()
    (state_dir / "state.json").write_bytes(data[: len(data) // 2])


def _wrong_state(state_dir: Path) -> None:
    (state_dir / "state.json").write_text("[]")


def _hostile_state(state_dir: Path) -> None:
    state = json.loads((state_dir / "state.json").read_text())
    state["backup"].append("../../outside.txt")
    (state_dir / "state.json").write_text(json.dumps(state))


@pytest.mark.parametrize(
    "wedge, says",
    [
        (_no_backup, "is there but its backup"),
        (_no_state, "holds its backup but no state.json"),
        (_half_state, "is not valid JSON"),
        (_wrong_state, "does not hold an object"),
        (_hostile_state, "unsafe backed-up file"),
    ],
)
def test_a_wedged_state_is_recognized_and_abort_recovers_it(ov, w, wedge, says):
    ov.add_resolution("mlx/backend/rocm/device.h", "kept\n")
    before = records_hash(ov)
    stopped_run(ov, w)
    wedge(ov.root / ".overlay" / "rebase")

    status = run(ov, "rebase", "--status")
    assert status.returncode == 0, status.stderr
    assert "rebase state is wedged" in status.stdout and says in status.stdout
    assert "`overlay rebase --abort` recovers it" in status.stdout
    for args in (
        ("rebase", "--continue"),
        ("rebase", "--skip"),
        ("rebase", "--onto", w.pin_clean),
    ):
        refused = run(ov, *args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert "wedged" in one_line_refusal(refused.stderr)
        assert "--abort` recovers it" in refused.stderr
    assert "is wedged" in run(ov, "verify", "--only", "SER").stderr

    aborted = run(ov, "rebase", "--abort")
    assert aborted.returncode == 0, aborted.stderr
    assert (
        "Traceback" not in aborted.stderr
        and "aborted the wedged rebase state" in aborted.stdout
    )
    assert not (ov.root / ".overlay" / "rebase").exists()
    assert records_hash(ov) == before
    assert not (ov.root.parent / "outside.txt").exists()
    assert "no rebase or sync in progress" in run(ov, "rebase", "--status").stdout
    assert (
        run(ov, "rebase", "--onto", w.pin_conflict).returncode == 1
    )  # a new run starts


def test_abort_of_a_wedged_state_killed_mid_commit_keeps_what_it_cannot_restore(ov, w):
    store = Store()
    layers = compute_layers(store, load_manifest(str(ov.root)), str(ov.root))
    data, _ = make_patch(
        store,
        layers.patched,
        {"mlx/backend/rocm/device.cpp": lines("device", change={9: "d9"})},
    )
    ov.add_patch("0001-device.patch", data)
    before_series = (ov.root / "patches-rocm" / "series").read_bytes()
    killed = run(
        ov, "rebase", "--onto", w.pin_clean, env={"OVERLAY_TEST_KILL_AT": "commit"}
    )
    assert killed.returncode == -9
    assert f'pin = "{w.pin_clean}"' in manifest_text(ov)  # the commit had begun
    (
        ov.root / ".overlay" / "rebase" / "backup" / "patches-rocm" / "overlay.toml"
    ).unlink()
    assert "the backup lacks 1 of the" in run(ov, "rebase", "--status").stdout
    aborted = run(ov, "rebase", "--abort")
    assert aborted.returncode == 0, aborted.stderr
    assert (
        "no backup copy, left as the run wrote them: patches-rocm/overlay.toml"
        in aborted.stderr
    )
    assert f'pin = "{w.pin_clean}"' in manifest_text(ov)  # kept, and said so
    assert (ov.root / "patches-rocm" / "series").read_bytes() == before_series
    assert (ov.root / "patches-rocm" / "0001-device.patch").read_bytes() == data
    assert not (ov.root / ".overlay" / "rebase").exists()


# -- 3. what killed commands leave behind ------------------------------------------------------


def _refreshable(ov) -> Path:
    """A patch whose refresh changes bytes (a Date: header, which refresh drops)."""
    store = Store()
    layers = compute_layers(store, load_manifest(str(ov.root)), str(ov.root))
    data, _ = make_patch(
        store, layers.patched, {"mlx/ops.cpp": lines("ops", change={3: "ops 3 fixed"})}
    )
    data = data.replace(
        b"Subject:", b"Date: Mon, 1 Jan 2024 00:00:00 +0000\nSubject:", 1
    )
    return ov.add_patch("0001-a.patch", data)


def _temps(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if TEMP_RE.match(p.name)
    )


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_refresh_killed_before_its_rename_leaves_nothing_after_the_next_run(
    ov, tmp_path
):
    patch = _refreshable(ov)
    before = patch.read_bytes()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # A run killed inside a scratch directory (its index) leaves it, named with its pid.
    killed = run(
        ov, "refresh", env={"OVERLAY_TEST_KILL_AT": "scratch-idx", "TMPDIR": str(tmp)}
    )
    assert killed.returncode == -9
    left = [p.name for p in tmp.iterdir() if p.name.startswith("overlay-idx-")]
    assert left and all(re.match(r"overlay-idx-\d+-", n) for n in left)
    # A run killed just before it renames the rewritten patch into place leaves its temp file.
    killed = run(
        ov, "refresh", env={"OVERLAY_TEST_KILL_AT": "refresh", "TMPDIR": str(tmp)}
    )
    assert killed.returncode == -9
    assert patch.read_bytes() == before
    assert _temps(ov.root) and all(
        t.startswith("patches-rocm/.0001-a.patch.") for t in _temps(ov.root)
    )
    live = tmp / f"overlay-merge-{os.getpid()}-abcdefgh"  # this process is alive: kept
    live.mkdir()
    other = tmp / "overlay-notes"  # not ours: kept
    other.mkdir()

    done = run(ov, "refresh", env={"TMPDIR": str(tmp)})
    assert done.returncode == 0, done.stderr
    assert "rewrote 0001-a.patch" in done.stdout and b"Date:" not in patch.read_bytes()
    assert _temps(ov.root) == []
    assert sorted(p.name for p in tmp.iterdir()) == sorted([live.name, other.name])


def _scratch_leftovers(tmp: Path) -> Path:
    """A dead process's scratch directory, a day-old one from before names had a pid
    (both swept), and a fresh one without a pid (kept); returns the one kept."""
    dead = tmp / f"overlay-commits-{_dead_pid()}-abcdefgh"
    dead.mkdir()
    (dead / "0").write_text("x")
    legacy = tmp / "overlay-idx-k3j9x_2q"
    legacy.mkdir()
    old = time.time() - 2 * 86400
    os.utime(legacy, (old, old))
    fresh_legacy = tmp / "overlay-idx-a1b2c3d4"
    fresh_legacy.mkdir()
    return fresh_legacy


@pytest.mark.parametrize(
    "command", [("rebase", "--abort"), ("rebase", "--onto", "PIN")]
)
def test_rebase_and_abort_sweep_record_temps_and_dead_scratch_dirs(
    ov, w, tmp_path, command
):
    if command[1] == "--abort":
        stopped_run(ov, w)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    kept = _scratch_leftovers(tmp)
    (ov.root / "patches-rocm" / "resolved" / "mlx").mkdir(parents=True, exist_ok=True)
    for path in (
        ov.root / "patches-rocm" / ".series.k3j9x_2q.tmp",
        ov.root / ".LOCAL_FIXES.md.abcdefgh.tmp",
        ov.root / "patches-rocm" / ".0001-x.patch.zzzzzzzz.tmp",
        ov.root / "patches-rocm" / "resolved" / "mlx" / ".core.cpp.q1w2e3r4.tmp",
    ):
        path.write_text(
            "half-written\n"
        )  # what a kill just before atomic_write's rename leaves
    result = run(
        ov,
        *[w.pin_clean if a == "PIN" else a for a in command],
        env={"TMPDIR": str(tmp)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert _temps(ov.root) == []  # --abort's "as it was before the run" is true
    assert sorted(p.name for p in tmp.iterdir()) == [kept.name]


def test_export_sweeps_dead_scratch_dirs(ov, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    kept = _scratch_leftovers(tmp)
    result = run(ov, "export", str(tmp_path / "dest"), env={"TMPDIR": str(tmp)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in tmp.iterdir()) == [kept.name]


def test_sweep_scratch_dirs_keeps_live_and_foreign_directories(tmp_path):
    dead = tmp_path / f"overlay-idx-{_dead_pid()}-abcdefgh"
    live = tmp_path / f"overlay-idx-{os.getpid()}-abcdefgh"
    foreign = (
        tmp_path / "overlay-idx-1234567890123-abcdefgh"
    )  # no pid of ours can be that long
    for d in (dead, live, foreign):
        d.mkdir()
    link = tmp_path / f"overlay-merge-{_dead_pid()}-linkxxxx"
    link.symlink_to(live)
    assert sweep_scratch_dirs(str(tmp_path)) == [dead.name]
    assert live.is_dir() and foreign.is_dir() and link.is_symlink()
