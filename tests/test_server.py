"""The command server (overlay/server/): a served command is the command run in its own
process, byte for byte and status for status; what it cannot serve it leaves to the
caller; the caller's signals and its end reach the worker and the worker's children;
the server stops when told, when idle, and when overlay's code changes under it.

Each test starts a real server (``overlay server start``) in the test's own server
directory (conftest sets ``OVERLAY_SERVER_DIR``) and runs ``python -m overlay`` as a
user runs ``overlay``."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gitfixtures import records_hash
from procfixtures import default_signals, gone, reader_leaves_mid_write

from overlay.server import wire

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.update(extra)
    return env


def overlay(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """``python -m overlay ARGS`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "overlay", *args],
        env=env or _env(),
        capture_output=True,
        text=True,
        **kw,
    )


class Served:
    """A running server of this interpreter and package, and its log."""

    def __init__(self, pid: int, log: Path, sock: Path):
        self.pid, self.log, self.sock = pid, log, sock

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def served(self) -> int:
        return sum(" served pid=" in line for line in self.lines())

    def wait_served(self, count: int, wait_s: float = 10.0) -> None:
        end = time.monotonic() + wait_s
        while self.served() < count:
            assert time.monotonic() < end, self.lines()
            time.sleep(0.02)


def start_server(env: dict | None = None, idle: str = "1", **kw) -> Served:
    proc = overlay("server", "start", "--idle", idle, env=env, **kw)
    assert proc.returncode == 0, proc.stderr
    pid = int(re.search(r"server pid (\d+)", proc.stdout).group(1))
    sock = Path(re.search(r"socket: (.+)", proc.stdout).group(1))
    log = Path(re.search(r"log: (.+)", proc.stdout).group(1))
    return Served(pid, log, sock)


@pytest.fixture
def server():
    s = start_server()
    yield s
    overlay("server", "stop")
    if not gone(s.pid, 10):
        os.kill(s.pid, signal.SIGKILL)
        pytest.fail("the server did not stop")


def test_served_commands_match_their_own_process(clean, server, tmp_path):
    root = str(clean.root)
    runs = [
        ["-C", root, "--offline", "verify"],
        ["-C", root, "--offline", "status"],
        ["-C", root, "--offline", "tree", "--layer", "patched"],
        ["-C", root, "--offline", "diff"],
        ["-C", root, "--offline", "rebase", "--status"],
        ["-C", root, "--offline", "rebase", "--continue"],  # none in progress: 2
        ["--version"],
        ["nosuch"],
        ["-C", str(tmp_path / "none"), "verify"],  # no manifest: 2
    ]
    for n, args in enumerate(runs, 1):
        served = overlay(*args)
        server.wait_served(n)
        alone = overlay(*args, env=_env(OVERLAY_SERVER="off"))
        assert (served.returncode, served.stdout, served.stderr) == (
            alone.returncode,
            alone.stdout,
            alone.stderr,
        ), args
    assert server.served() == len(runs)
    statuses = re.findall(r" status=(-?\d+) ", "\n".join(server.lines()))
    assert "2" in statuses and "0" in statuses


def test_a_stopped_run_is_shown_and_aborted_served_as_in_its_own_process(ov, w, server):
    """A pin bump that stops on a conflict: `rebase --status` and `rebase --abort`
    served print and exit as they do in their own process, and the abort leaves the
    records byte for byte."""
    root = str(ov.root)
    before = records_hash(ov)
    outcomes = []
    for env in (_env(), _env(OVERLAY_SERVER="off")):
        stopped = overlay("-C", root, "rebase", "--onto", w.pin_conflict)
        assert stopped.returncode == 1, stopped.stderr
        shown = overlay("-C", root, "rebase", "--status", env=env)
        aborted = overlay("-C", root, "rebase", "--abort", env=env)
        assert aborted.returncode == 0, aborted.stderr
        assert records_hash(ov) == before
        outcomes.append(
            [(p.returncode, p.stdout, p.stderr) for p in (stopped, shown, aborted)]
        )
    assert outcomes[0] == outcomes[1]
    assert "mlx/core.cpp" in outcomes[0][1][1]  # --status names the stop
    # the first round's stop, --status and --abort were served, and the second's stop
    server.wait_served(4)
    time.sleep(0.2)
    assert server.served() == 4


@pytest.mark.parametrize("unbuffered", ["", "1"], ids=["buffered", "unbuffered"])
def test_a_served_command_whose_reader_leaves_mid_write_ends_141(ov, w, unbuffered):
    """The worker's stdout is buffered as the caller's own would be (not at all under
    PYTHONUNBUFFERED), and a reader leaving in the middle of a large write ends the
    served command as it ends its own process: 141, nothing on stderr."""
    big = w.fork.commit(
        {"mlx/backend/rocm/big.cpp": "".join(f"line {i}\n" for i in range(40_000))},
        "a large file",
    )
    ov.write_manifest(w.base, fork=big)
    env = _env(PYTHONUNBUFFERED=unbuffered)
    served = start_server(env=env)
    try:
        args = ["-C", str(ov.root), "diff", "--from", "pin", "--to", "forked"]
        status, err = reader_leaves_mid_write(
            [sys.executable, "-m", "overlay", *args], env
        )
        assert (status, err) == (141, "")
        served.wait_served(1)
    finally:
        overlay("server", "stop", env=env)
        assert gone(served.pid, 10)


def test_a_served_export_writes_what_its_own_process_writes(clean, server, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert overlay("-C", str(clean.root), "--offline", "export", str(a)).returncode == 0
    server.wait_served(1)
    off = _env(OVERLAY_SERVER="off")
    assert (
        overlay(
            "-C", str(clean.root), "--offline", "export", str(b), env=off
        ).returncode
        == 0
    )
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files:
        if rel.name != ".overlay-export.json":  # the stamp holds each file's stat data
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
        assert (a / rel).stat().st_mode == (b / rel).stat().st_mode, rel


def test_the_worker_runs_in_the_callers_directory_umask_and_environment(
    clean, server, tmp_path
):
    """``-C`` absent: the manifest is found from the caller's directory; the export's
    directories take the caller's umask (docs/export: as Python makes them);
    ``OVERLAY_GIT_DIR`` is the caller's."""
    modes = []
    for n, dest in enumerate((tmp_path / "served", tmp_path / "alone")):
        proc = subprocess.run(
            [sys.executable, "-m", "overlay", "--offline", "export", str(dest)],
            cwd=clean.root,
            env=_env(OVERLAY_SERVER="off") if n else _env(),
            capture_output=True,
            text=True,
            preexec_fn=lambda: os.umask(0o077),
        )
        assert proc.returncode == 0, proc.stderr
        modes.append(
            {
                str(p.relative_to(dest)): p.stat().st_mode & 0o777
                for p in dest.rglob("*")
            }
        )
    server.wait_served(1)
    assert modes[0] == modes[1]
    assert 0o700 in modes[0].values()  # a directory, under umask 077
    missing = overlay(
        "-C",
        str(clean.root),
        "--offline",
        "tree",
        env=_env(OVERLAY_GIT_DIR=str(tmp_path / "empty.git")),
    )
    server.wait_served(2)
    assert server.served() == 2
    assert missing.returncode == 2 and missing.stderr.startswith("overlay: "), (
        missing.stderr
    )


def test_off_and_other_interpreter_settings_run_in_their_own_process(clean, server):
    assert overlay("--version", env=_env(OVERLAY_SERVER="off")).returncode == 0
    other = overlay("--version", env=_env(PYTHONHASHSEED="7"))
    assert other.returncode == 0 and other.stdout.startswith("overlay, version")
    time.sleep(0.2)
    assert server.served() == 0
    assert overlay("server", "status").returncode == 0  # still running, and serves
    server.wait_served(1)


def test_an_unbuffered_caller_is_not_served_by_a_buffered_server():
    """``python -u`` shows in no ``sys.flags`` field: the identity carries it, so a
    caller whose output must not be buffered runs its command itself."""
    env = {k: v for k, v in _env().items() if k != "PYTHONUNBUFFERED"}
    served = start_server(env=env)
    try:
        proc = subprocess.run(
            [sys.executable, "-u", "-m", "overlay", "--version"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0 and proc.stdout.startswith("overlay, version")
        assert overlay("--version", env=env).returncode == 0
        served.wait_served(1)
        time.sleep(0.2)
        assert served.served() == 1  # the second call only
    finally:
        overlay("server", "stop", env=env)
        assert gone(served.pid, 10)


def test_a_directory_others_can_enter_is_not_used(clean, tmp_path):
    d = tmp_path / "shared"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    env = _env(OVERLAY_SERVER_DIR=str(d))
    proc = overlay("server", "start", env=env)
    assert proc.returncode == 2
    assert proc.stderr.startswith("overlay: ") and "0700" in proc.stderr
    assert not any(d.iterdir())
    # and a socket there (a server of another user's making) is never connected to
    d.chmod(0o700)
    s = start_server(env)
    try:
        d.chmod(0o755)
        assert overlay("--version", env=env).returncode == 0
        time.sleep(0.2)
        assert s.served() == 0
        # status and stop do not claim that no server runs: they say why they cannot ask
        for verb in ("status", "stop"):
            proc = overlay("server", verb, env=env)
            assert proc.returncode == 2 and proc.stdout == "", proc
            assert proc.stderr.startswith(f"overlay: {d} must be private to you")
            assert f"hint: `chmod 700 {d}`" in proc.stderr
    finally:
        d.chmod(0o700)
        overlay("server", "stop", env=env)
        assert gone(s.pid, 10)


def test_start_status_stop(tmp_path):
    assert overlay("server", "status").returncode == 1
    assert overlay("server", "stop").returncode == 1
    s = start_server()
    try:
        again = overlay("server", "start")
        assert again.returncode == 2
        assert again.stderr == f"overlay: a server runs already (pid {s.pid})\n"
        status = overlay("server", "status")
        assert status.returncode == 0 and f"server pid {s.pid}" in status.stdout
        assert ", 0 running;" in status.stdout  # served itself, it counts the others
    finally:
        stop = overlay("server", "stop")
    assert stop.returncode == 0 and stop.stdout == "server stopping\n"
    assert gone(s.pid, 10)
    assert not s.sock.exists()
    assert overlay("server", "status").returncode == 1


def test_an_idle_server_ends(tmp_path):
    s = start_server(idle="0.02")  # 1.2 s
    assert gone(s.pid, 15)
    assert not s.sock.exists()
    assert any("idle: stopping" in x for x in s.lines())
    assert overlay("--version").returncode == 0  # runs on its own


def _blocking_git(tmp_path: Path) -> tuple[dict, Path]:
    """An environment whose ``git`` writes its pid to a file and sleeps: a command
    that asks git anything stops there, with a child of its own running."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    pidfile = tmp_path / "git.pid"
    script = bindir / "git"
    script.write_text(f"#!/bin/sh\necho $$ > '{pidfile}'\nexec sleep 60\n")
    script.chmod(0o755)
    return _env(PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}"), pidfile


def _started(proc: subprocess.Popen, pidfile: Path) -> int:
    end = time.monotonic() + 20
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "git never started"
        time.sleep(0.02)
    return int(pidfile.read_text())


def _blocked_verify(root, tmp_path: Path, **popen) -> tuple[subprocess.Popen, int]:
    """A served ``overlay verify`` of ``root`` stopped in its first git child (which
    sleeps, :func:`_blocking_git`); the process and that child's pid."""
    env, pidfile = _blocking_git(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "overlay", "-C", str(root), "--offline", "verify"],
        env=env,
        **popen,
    )
    return proc, _started(proc, pidfile)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_callers_signal_reaches_the_worker_and_its_children(
    clean, server, tmp_path, signum
):
    proc, git = _blocked_verify(
        clean.root,
        tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    proc.send_signal(signum)
    _out, err = proc.communicate(timeout=20)
    assert gone(git)
    server.wait_served(1)
    if signum == signal.SIGINT:  # overlay's own ending: one line, 130
        assert proc.returncode == 130 and err.endswith("overlay: interrupted\n"), err
    else:  # ended by the signal, as a command of its own is
        assert proc.returncode == -signal.SIGTERM, (proc.returncode, err)
    status = "130" if signum == signal.SIGINT else f"-{int(signum)}"
    assert f"status={status} " in server.lines()[-1]


def test_a_caller_that_goes_away_hangs_up_its_worker(clean, server, tmp_path):
    proc, git = _blocked_verify(
        clean.root, tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    proc.kill()
    proc.wait()
    assert gone(git)
    server.wait_served(1)
    assert f"status=-{int(signal.SIGHUP)} " in server.lines()[-1]


def test_stop_lets_a_running_command_finish(clean, server, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    real = shutil.which("git")
    (bindir / "git").write_text(f"#!/bin/sh\nsleep 0.05\nexec '{real}' \"$@\"\n")
    (bindir / "git").chmod(0o755)
    env = _env(PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    args = [sys.executable, "-m", "overlay", "-C", str(clean.root), "--offline"]
    proc = subprocess.Popen(
        [*args, "verify"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    while server.served() == 0 and "running" not in overlay("server", "status").stdout:
        time.sleep(0.01)
    stop = overlay("server", "stop", env=_env(OVERLAY_SERVER="off"))
    assert stop.returncode == 0
    assert not server.sock.exists()
    out, err = proc.communicate(timeout=60)
    alone = subprocess.run(
        [*args, "verify"], env=_env(OVERLAY_SERVER="off"), capture_output=True
    )
    assert (proc.returncode, out, err) == (alone.returncode, alone.stdout, alone.stderr)
    assert gone(server.pid, 10)


def test_a_change_to_overlays_code_stops_the_server(tmp_path):
    """A server keeps the code it loaded; a caller of changed code runs it itself and
    the server ends (the next start loads the new code)."""
    copy = tmp_path / "pkg"
    shutil.copytree(ROOT / "overlay", copy / "overlay")
    env = _env(PYTHONPATH=str(copy))
    s = start_server(env, cwd=tmp_path)
    try:
        version = overlay("--version", env=env, cwd=tmp_path)
        assert version.stdout.startswith("overlay, version 0.1.0")
        s.wait_served(1)
        init = copy / "overlay" / "__init__.py"
        init.write_text(init.read_text().replace('"0.1.0"', '"0.1.1"'))
        os.utime(init, ns=(time.time_ns(), time.time_ns() + 10**9))
        changed = overlay("--version", env=env, cwd=tmp_path)
        assert changed.stdout.startswith("overlay, version 0.1.1")
        assert gone(s.pid, 10)
        assert s.served() == 1
        assert any(
            "changed since the server started" in x and f"({init})" in x
            for x in s.lines()
        ), s.lines()  # the log names the file that changed
    finally:
        if not gone(s.pid, 0):
            os.kill(s.pid, signal.SIGKILL)


def test_messages_and_descriptors():
    message = ("run", {"argv": ["verify"], "umask": 0o22})
    assert wire.decode(wire.encode(message)) == message
    for bad in (b"", b"\x00garbage", wire.encode(["run"]), wire.encode(())):
        with pytest.raises(ValueError):
            wire.decode(bad)
    assert wire.fds_from(wire.fds_bytes([0, 1, 2, 1023])) == [0, 1, 2, 1023]


def test_record_at_a_terminal_is_handed_back_to_its_caller(clean, server):
    """``record`` may open $EDITOR, which wants the terminal the worker lacks: at a
    terminal the worker hands it back (and ends, status 0 in the log) and the caller
    runs it; through pipes it is served. Either way the same outcome (no edit in
    progress: 2)."""
    import pty

    args = [sys.executable, "-m", "overlay", "-C", str(clean.root), "record"]
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            args, env=_env(), stdin=slave, stdout=slave, stderr=subprocess.PIPE
        )
        os.close(slave)
        _out, err = proc.communicate(timeout=60)
    finally:
        os.close(master)
    assert proc.returncode == 2 and err.startswith(b"overlay: "), err
    server.wait_served(1)
    assert " status=0 " in server.lines()[-1]  # the worker's hand-back
    piped = overlay("-C", str(clean.root), "record")
    assert piped.returncode == 2 and piped.stderr.encode() == err
    server.wait_served(2)
    assert " status=2 " in server.lines()[-1]


def test_the_benchmarks_count_the_caller_the_worker_and_the_server(tmp_path):
    """``benchmarks/_cpu.Served``: a served command's CPU is the caller's plus the
    worker's and the server's part from the log; a command the server declines is an
    error, not a figure."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _cpu import Served, bench_env, cpu_run, overlay_cmd
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    env = bench_env()
    served = Served(env)
    try:
        cost = served.cpu_run(overlay_cmd("--version"), env=env)
        line = served._lines()[-1]
        worker = float(re.search(r"worker_cpu_s=([\d.]+)", line).group(1))
        assert worker > 0 and cost > worker
        with pytest.raises(SystemExit, match="was not served"):
            served.cpu_run(overlay_cmd("--version"), env={**env, "PYTHONHASHSEED": "3"})
        assert cpu_run(overlay_cmd("--version"), env=env) > 0  # OVERLAY_SERVER=off
        assert len(served._lines()) == 1
    finally:
        served.close()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def _until(pid: int, states: str) -> str:
    end = time.monotonic() + 10
    while (state := _state(pid)) not in states and time.monotonic() < end:
        time.sleep(0.02)
    return state


def test_ctrl_z_stops_the_worker_with_its_caller_and_fg_resumes_both(
    clean, server, tmp_path
):
    proc, git = _blocked_verify(
        clean.root,
        tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=default_signals,
    )
    try:
        proc.send_signal(signal.SIGTSTP)
        assert _until(proc.pid, "T") == "T"
        assert _until(git, "T") == "T"
        proc.send_signal(signal.SIGCONT)
        assert _until(proc.pid, "SR") in "SR"
        assert _until(git, "SR") in "SR"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    assert gone(git)


def test_a_long_log_is_moved_aside_when_a_server_starts():
    log = Path(wire.log_path(os.environ["OVERLAY_SERVER_DIR"]))
    log.parent.mkdir(mode=0o700)
    log.write_text("x" * (2 << 20))
    s = start_server()
    try:
        assert (log.parent / (log.name + ".old")).stat().st_size == 2 << 20
        assert log.stat().st_size < 1000 and "started pid=" in log.read_text()
    finally:
        overlay("server", "stop")
        assert gone(s.pid, 10)


def test_records_written_beside_the_code_do_not_stop_the_server(tmp_path):
    """A checkout's root is on the server's path (``server start`` puts it first):
    files a command writes there (``.overlay/``, ``LOCAL_FIXES.md``) are not code."""
    copy = tmp_path / "pkg"
    shutil.copytree(ROOT / "overlay", copy / "overlay")
    env = _env(PYTHONPATH=str(copy))
    s = start_server(env, cwd=tmp_path)
    try:
        assert overlay("--version", env=env, cwd=tmp_path).returncode == 0
        (copy / "LOCAL_FIXES.md").write_text("a record, not code\n")
        (copy / ".overlay").mkdir()
        assert overlay("--version", env=env, cwd=tmp_path).returncode == 0
        s.wait_served(2)
        assert not any("changed since" in x for x in s.lines())
    finally:
        overlay("server", "stop", env=env, cwd=tmp_path)
        assert gone(s.pid, 10)
