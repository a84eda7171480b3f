"""The one lock of the records and the rebase state (overlay/fs/records_lock.py,
``.overlay/rebase.lock``): a command that changes them is refused while another holds
it, readers (``verify``, ``status``) share it and writers wait for no reader, two
commands at once never tear the state, and a start killed before its state is in place
leaves no run.

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
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gitfixtures import lines, records_hash
from gitfixtures import overlay_process as run
from gitfixtures import refusal_line as one_line_refusal
from seriesfixtures import manifest_text, stopped_run

from overlay import layout
from overlay.rebase.ondisk import inspect_state

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
