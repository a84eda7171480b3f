"""Shared measuring of the benchmark scripts: CPU time, git processes, peak memory.

The benchmark machine has two cores shared with other work, so wall time says
little: every figure here is CPU time (user + system) of a process and all the
children it waited for, read from ``getrusage(RUSAGE_CHILDREN)`` around one run.
Runs of the compared commands are interleaved and the median is taken, and every
ratio is against a floor measured in the same run.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_run(
    cmd: list[str] | str,
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    shell: bool = False,
    check: bool = True,
) -> float:
    """Run ``cmd`` to completion; return the CPU seconds (user + sys) it and its children used.

    Args:
        cmd: the command (a string with ``shell``).
        env, cwd: as for :func:`subprocess.run`.
        shell: run through ``/bin/sh`` (the shell's own few hundred microseconds count).
        check: raise ``SystemExit`` with its output when it fails.
    Returns:
        Seconds of CPU, from ``RUSAGE_CHILDREN`` before and after (every descendant the
        command waited for is included: git children of overlay, tar of a pipe).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        cmd,
        env=env,
        cwd=cwd,
        shell=shell,
        capture_output=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and proc.returncode != 0:
        raise SystemExit(
            f"{cmd!r} failed ({proc.returncode}):\n{proc.stdout.decode()}{proc.stderr.decode()}"
        )
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median(values: list[float]) -> float:
    """The median (``statistics.median``)."""
    return statistics.median(values)


class GitCounter:
    """A directory holding a ``git`` wrapper that appends one line per invocation to a
    log, then execs the real git: put it first on PATH to count git processes.

    Used only in runs that are not timed (the wrapper's shell costs CPU of its own).
    """

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="overlay-gitcount-")
        self.log = os.path.join(self.dir, "log")
        real = shutil.which("git")
        if real is None:
            raise SystemExit("git not found on PATH")
        script = os.path.join(self.dir, "git")
        with open(script, "w") as fh:
            fh.write(f"#!/bin/sh\necho x >> '{self.log}'\nexec '{real}' \"$@\"\n")
        os.chmod(script, 0o755)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with the wrapper first on PATH."""
        return {**base, "PATH": self.dir + os.pathsep + base.get("PATH", "")}

    def count(
        self, cmd: list[str], *, env: dict[str, str], cwd: str | None = None
    ) -> int:
        """Run ``cmd`` with the wrapper on PATH; the number of git processes it started."""
        try:
            os.unlink(self.log)
        except FileNotFoundError:
            pass
        proc = subprocess.run(
            cmd,
            env=self.env(env),
            cwd=cwd,
            capture_output=True,
        )
        if proc.returncode != 0:
            raise SystemExit(
                f"{cmd!r} failed:\n{proc.stdout.decode()}{proc.stderr.decode()}"
            )
        try:
            with open(self.log) as fh:
                return sum(1 for _ in fh)
        except FileNotFoundError:
            return 0

    def close(self) -> None:
        """Remove the wrapper directory."""
        shutil.rmtree(self.dir, ignore_errors=True)


def fresh_store(base_git_dir: str, where: str) -> str:
    """A new, empty bare store at ``where`` that borrows ``base_git_dir``'s objects
    (``objects/info/alternates``): every pinned commit is there, but no layer cache and
    nothing a run writes lands in the base store.

    Returns:
        The new store's path.
    """
    subprocess.run(
        ["git", "init", "-q", "--bare", where], check=True, stdout=subprocess.DEVNULL
    )
    with open(os.path.join(where, "objects", "info", "alternates"), "w") as fh:
        fh.write(os.path.join(os.path.abspath(base_git_dir), "objects") + "\n")
    return where


def overlay_cmd(*args: str) -> list[str]:
    """``overlay ARGS`` as a user types it: the ``overlay`` command installed beside
    this interpreter (``bin/overlay``; ``bench_env`` puts the checkout first on the
    path, so it runs the checkout's code). Where there is none, ``python -m
    overlay ARGS``, the same entry point through ``runpy``, which costs about 6 ms
    more of CPU here (measured 2026-12-03 evening: 25.1 against 18.8 ms for a served
    ``--version``)."""
    script = os.path.join(os.path.dirname(sys.executable), "overlay")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return [script, *args]
    return [sys.executable, "-m", "overlay", *args]


_PYCACHE: list[str] = []


def _pycache() -> str:
    """A bytecode cache directory of this benchmark process (removed at its exit)."""
    if not _PYCACHE:
        import atexit

        _PYCACHE.append(tempfile.mkdtemp(prefix="overlay-bench-pycache-"))
        atexit.register(shutil.rmtree, _PYCACHE[0], True)
    return _PYCACHE[0]


def bench_env(**extra: str) -> dict[str, str]:
    """The environment for timed runs of Python (overlay and the import floors): ours,
    the checkout first on PYTHONPATH, and bytecode cached as on an installed copy.

    pip compiles a package's modules when it installs it, so a user's overlay never
    compiles its source at start-up. A checkout run with ``PYTHONDONTWRITEBYTECODE``
    set (as some containers and CI images do) compiles every module it imports on
    every run: 0.09 s of a 0.3 s command here, the same for every command. So the
    variable is dropped and the bytecode goes to a directory of this benchmark
    (``PYTHONPYCACHEPREFIX``), filled by each script's untimed warm-up run; nothing
    is written into the checkout.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = _pycache()
    # Each command in its own process, even where the user runs a command server;
    # the served figures use a server of the benchmark's own (:class:`Served`).
    env["OVERLAY_SERVER"] = "off"
    env.update(extra)
    return env


class Served:
    """A command server of this benchmark's own (``overlay server start``, in a
    directory of its own), and what a command it serves costs.

    A served command's CPU is spread over three processes: the caller (the client a
    user's ``overlay`` is), the worker the server forks (with its git children), and
    the server itself (the request, the code check, the fork, the reaping). The
    caller's is read from ``RUSAGE_CHILDREN`` as for any command; the other two from
    the server's log line for the command (``worker_cpu_s``, from ``wait4``, and
    ``server_cpu_s``; docs/server.md). The sum is the figure.

    Args:
        env: the benchmark's environment (:func:`bench_env`); the server starts with
            it, so a caller with it has the server's interpreter settings.
    """

    def __init__(self, env: dict[str, str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="overlay-bench-server-")
        self.env = self.env_for(env)
        proc = subprocess.run(
            overlay_cmd("server", "start", "--idle", "60"),
            env=self.env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise SystemExit(f"overlay server start failed: {proc.stderr}")
        self.log = proc.stdout.split("log: ", 1)[1].strip()

    def env_for(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` for a caller of this server."""
        out = {k: v for k, v in env.items() if k != "OVERLAY_SERVER"}
        out["OVERLAY_SERVER_DIR"] = self.dir
        return out

    def _lines(self) -> list[str]:
        with open(self.log) as fh:
            return [line for line in fh if " served pid=" in line]

    def cpu_run(self, cmd: list[str], *, env: dict[str, str]) -> float:
        """Run ``cmd`` (an ``overlay`` command) as a caller of this server; the CPU
        seconds of the caller, its worker and the server's part.

        Raises:
            SystemExit: the command failed, or was not served (declined: the log
                has no line for it).
        """
        before = len(self._lines())
        caller = cpu_run(cmd, env=self.env_for(env))
        lines = self._lines()
        for _ in range(200):  # the server logs right after it reaps the worker
            if len(lines) > before:
                break
            time.sleep(0.01)
            lines = self._lines()
        else:
            raise SystemExit(f"{cmd!r} was not served: see {self.log}")
        fields = dict(
            f.split("=", 1) for f in lines[before].split() if f.count("=") == 1
        )
        return caller + float(fields["worker_cpu_s"]) + float(fields["server_cpu_s"])

    def close(self) -> None:
        """Stop the server and remove its directory."""
        subprocess.run(overlay_cmd("server", "stop"), env=self.env, capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
