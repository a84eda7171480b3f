"""The command server: one warm process that forks a worker per ``overlay`` command.

Started by ``overlay server start`` (:func:`overlay.server.control.start`), it
imports every module of overlay and the libraries its commands load, compiles
overlay's regular expressions (:func:`overlay.lazy.compile_all`), freezes them out
of the garbage collector's way (``gc.freeze``: a worker's collections never write to the pages it
shares with the server), binds its socket and waits. Per command
(:class:`Server`):

1. it accepts a connection from a process of its own user (``SO_PEERCRED``), reads
   the request and the caller's standard streams;
2. it declines (the caller runs the command itself) when the caller's interpreter
   settings differ from its own (:func:`overlay.server.wire.interpreter_identity`),
   or when overlay's code or the installed packages changed since it started (it
   then stops: the next ``overlay server start`` loads the new code);
3. it forks; the worker becomes the command (:mod:`overlay.server.worker`) and the
   server tells the caller its pid;
4. it passes each signal the caller reports on to the worker's process group, and a
   SIGHUP when the caller goes away (as a terminal's hang-up would);
5. when the worker ends it sends the caller the worker's status and writes one log
   line: the command, its status, the worker's CPU (its children's included) and
   the server's own for this command.

It stops on ``overlay server stop``, SIGTERM, SIGINT or SIGHUP, or after
``idle`` seconds with no command (default 30 minutes): it removes its socket at
once, so new commands run on their own, and ends when its last worker has.
"""

import gc
import importlib
import os
import pkgutil
import resource
import select
import signal
import socket
import struct
import sys
import sysconfig
import time
from dataclasses import dataclass, field

import overlay
from overlay import lazy
from overlay.__main__ import run
from overlay.server import wire, worker

#: Libraries the commands import when they run (not at the import of overlay's
#: modules); the server loads them once for every worker.
LIBRARIES = ("jinja2", "rich.console", "rich.progress", "tomlkit", "difflib", "json")
#: Signals held back while a worker is forked: those a caller passes on
#: (:data:`overlay.server.client.FORWARDED`) and the server's own SIGCHLD.
_BLOCKED = {
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGTSTP,
    signal.SIGCONT,
    signal.SIGWINCH,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCHLD,
}
#: A log larger than this is moved to ``.log.old`` when a server starts.
LOG_LIMIT = 1 << 20
#: ``struct ucred`` of ``SO_PEERCRED``: pid, uid, gid.
_UCRED = struct.Struct("3i")


class _BecomeWorker(BaseException):
    """Raised in a fresh fork to leave the server's loop (its frames unwind, the
    server's ``finally`` blocks see they are not in the server) and become the
    command: see :func:`main`."""

    def __init__(self, request: dict, fds: list[int], conn_fd: int, mask: set):
        super().__init__()
        self.args_ = (request, fds, conn_fd, mask)


@dataclass
class _Job:
    """A command being served: its caller's connection (``None`` once the caller
    went away), its argument list, and the server's CPU spent on it so far."""

    conn: socket.socket | None
    argv: list[str]
    started: float
    server_cpu: float = 0.0


def _cpu() -> float:
    """This process's own CPU seconds (user + system)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def preload() -> list[str]:
    """Import every module of overlay and :data:`LIBRARIES`, then compile overlay's
    regular expressions (:func:`overlay.lazy.compile_all`: a worker finds them
    compiled); returns the names that failed (logged; a command that needs one imports
    or compiles it itself, and fails there as it would without a server)."""
    failed = []
    names = [m.name for m in pkgutil.walk_packages(overlay.__path__, "overlay.")]
    for name in [*names, *LIBRARIES]:
        if name.endswith("__main__"):
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - logged, the command meets it itself
            failed.append(name)
    try:
        lazy.compile_all()
    except Exception:  # noqa: BLE001 - as above: the command meets it itself
        failed.append("overlay.lazy.compile_all")
    return failed


def code_files() -> list[str]:
    """The files whose change means the code a worker would run is not what the server
    loaded: every loaded module's file under overlay's package, and the first file of
    every other top-level package loaded from outside the standard library (click,
    jinja2, ...: an upgrade rewrites it). Not the directories on ``sys.path``: a
    checkout's root is one, and every record a command writes there changes its time.
    Fixed once the server has preloaded: the server itself imports nothing after."""
    package = os.path.dirname(os.path.abspath(overlay.__file__))
    paths = sysconfig.get_paths()
    stdlib = (paths["stdlib"], paths["platstdlib"])
    return [
        f
        for name, m in list(sys.modules.items())
        if (f := getattr(m, "__file__", None))
        and (f.startswith(package) or ("." not in name and not f.startswith(stdlib)))
    ]


def fingerprint(files: list[str]) -> dict[str, tuple[int, int]]:
    """Modification time and size of each of ``files`` (``(-1, -1)``: gone)."""
    out = {}
    for p in files:
        try:
            st = os.stat(p)
        except OSError:
            out[p] = (-1, -1)
        else:
            out[p] = (st.st_mtime_ns, st.st_size)
    return out


@dataclass
class Server:
    """The listening server (see the module docstring).

    Attributes:
        directory: the directory of the socket and the log.
        idle_s: seconds without a command before it stops.
    """

    directory: str
    idle_s: float
    identity: tuple = ()
    files: list[str] = field(default_factory=list)
    code: dict = field(default_factory=dict)
    jobs: dict[int, _Job] = field(default_factory=dict)
    served: int = 0
    stopping: bool = False
    started_at: float = field(default_factory=time.time)
    ready: bool = False
    last_active: float = field(default_factory=time.monotonic)
    _pid: int = field(default_factory=os.getpid)

    def run(self, ready_fd: int | None = None) -> None:
        """Bind, tell ``ready_fd`` (``ok`` or one error line), serve until stopped.

        Raises:
            _BecomeWorker: in a fork (see :func:`main`).
        """
        self.identity = wire.interpreter_identity(os.environ)
        failed = preload()
        self.files = code_files()
        self.code = fingerprint(self.files)
        gc.collect()
        gc.freeze()
        log = wire.log_path(self.directory)
        try:
            if os.path.getsize(log) > LOG_LIMIT:
                os.replace(log, log + ".old")
        except OSError:
            pass
        self.log = open(log, "a", buffering=1)  # noqa: SIM115
        self._say(f"started pid={self._pid} idle_s={self.idle_s:g}")
        if failed:
            self._say(f"could not preload: {' '.join(failed)}")
        self.path = wire.socket_path(self.directory)
        self.listen: socket.socket | None = self._bind()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        self.wake = wake_r
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_stop)
        self._wake_w = wake_w
        if ready_fd is not None:
            os.write(ready_fd, b"ok\n")
            os.close(ready_fd)
            self.ready = True
        try:
            self._loop()
        finally:
            if os.getpid() == self._pid:
                self._close_listen()
                self._say("stopped")

    # -- the socket ---------------------------------------------------------------

    def _bind(self) -> socket.socket:
        """A listening socket at :attr:`path`: bound under a temporary name and renamed
        into place, so a caller never connects to a half-made one and two servers
        started at once end with one socket (the later rename wins; the other
        server's socket is gone and it ends when idle)."""
        tmp = f"{self.path}.{self._pid}.tmp"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        sock.bind(tmp)
        sock.listen(16)
        os.rename(tmp, self.path)
        self._inode = os.stat(self.path).st_ino
        return sock

    def _close_listen(self) -> None:
        """Stop listening and remove the socket, if it is still this server's."""
        listen = getattr(self, "listen", None)
        if listen is None:
            return
        try:
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except OSError:
            pass
        listen.close()
        self.listen = None

    def _leave(self) -> None:
        """In a fresh fork: close what is the server's (its socket, wake-up pipe, log
        and the other callers' connections), each through the object that owns it,
        so nothing closes a descriptor twice when the worker ends."""
        signal.set_wakeup_fd(-1)
        if self.listen is not None:
            self.listen.close()
        for fd in (self.wake, self._wake_w):
            os.close(fd)
        for job in self.jobs.values():
            if job.conn is not None:
                job.conn.close()
        self.log.close()

    def _on_stop(self, signum: int, _frame: object) -> None:
        self.stopping = True

    # -- the loop ------------------------------------------------------------------

    def _loop(self) -> None:
        assert self.listen is not None  # bound by run()
        poller = select.poll()
        poller.register(self.listen.fileno(), select.POLLIN)
        poller.register(self.wake, select.POLLIN)
        by_fd: dict[int, int] = {}
        while True:
            if self.stopping and self.listen is not None:
                poller.unregister(self.listen.fileno())
                self._close_listen()
            if self.stopping and not self.jobs:
                return
            timeout = None
            if not self.jobs and not self.stopping:
                left = self.idle_s - (time.monotonic() - self.last_active)
                if left <= 0:
                    self._say("idle: stopping")
                    self.stopping = True
                    continue
                timeout = int(min(left, 3600.0) * 1000) + 1  # poll takes 32 bits of ms
            for fd, _events in poller.poll(timeout):
                if fd == self.wake:
                    try:
                        while os.read(self.wake, 512):
                            pass
                    except BlockingIOError:
                        pass
                elif self.listen is not None and fd == self.listen.fileno():
                    self._accept(poller, by_fd)
                elif fd in by_fd:
                    self._from_caller(fd, by_fd, poller)
            self._reap(by_fd, poller)

    def _accept(self, poller: select.poll, by_fd: dict[int, int]) -> None:
        """Take one connection and answer or serve its request."""
        before = _cpu()
        if self.listen is None:
            return
        try:
            conn, _ = self.listen.accept()
        except OSError:
            return
        try:
            conn.settimeout(5.0)  # a caller sends its request at once
            _pid, uid, _gid = _UCRED.unpack(
                conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
            )
            if uid != os.getuid():
                conn.close()
                return
            data, fds, _flags, _addr = socket.recv_fds(conn, wire.MAX_MESSAGE, 3)
            message = wire.decode(data)
        except (OSError, ValueError):
            conn.close()
            return
        self.last_active = time.monotonic()
        kind = message[0]
        if kind == "status":
            self._send(conn, ("status", self.facts()))
        elif kind == "stop":
            self._say("stop requested")
            self.stopping = True
            self._send(conn, ("stopping", len(self.jobs)))
        elif kind == "run" and isinstance(message[1], dict):
            self._serve(conn, message[1], fds, poller, by_fd, before)
            return
        for fd in fds:
            os.close(fd)
        conn.close()

    def _serve(
        self,
        conn: socket.socket,
        request: dict,
        fds: list[int],
        poller: select.poll,
        by_fd: dict[int, int],
        before: float,
    ) -> None:
        """Fork a worker for ``request``, or decline it."""
        reason = None
        if len(fds) != 3:
            reason = "standard streams missing"
        elif self.stopping:
            reason = "stopping"
        elif tuple(request.get("identity", ())) != tuple(self.identity):
            reason = "another interpreter's settings"
        elif (now := fingerprint(self.files)) != self.code:
            reason = "overlay's code or packages changed since the server started"
            changed = [f for f in self.files if now[f] != self.code.get(f)]
            more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
            self._say(f"{reason}: stopping ({changed[0]}{more})")
            self.stopping = True
        if reason is not None:
            self._send(conn, ("declined", reason))
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        # Blocked over the fork: a signal the caller passes on before the worker has
        # its own process group and default handlers waits for them, instead of being
        # taken by the server's handlers in the fork, or missing the group.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
        try:
            pid = os.fork()
        except OSError as exc:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self._say(f"cannot fork: {exc}")
            self._send(conn, ("declined", f"cannot fork: {exc.strerror}"))
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        if pid == 0:
            self._leave()
            raise _BecomeWorker(request, fds, conn.detach(), mask)
        try:
            os.setpgid(pid, pid)  # as the worker does: whichever runs first
        except OSError:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in fds:
            os.close(fd)
        conn.settimeout(None)
        self.served += 1
        job = _Job(conn, list(request.get("argv", [])), time.monotonic())
        self.jobs[pid] = job
        if not self._send(conn, ("started", pid)):
            job.conn = None
            conn.close()
            _killpg(pid, signal.SIGHUP)
        else:
            by_fd[conn.fileno()] = pid
            poller.register(conn.fileno(), select.POLLIN)
        job.server_cpu += _cpu() - before

    def _from_caller(self, fd: int, by_fd: dict[int, int], poller: select.poll) -> None:
        """A caller's message (a signal to pass on) or its end (a hang-up)."""
        pid = by_fd[fd]
        job = self.jobs.get(pid)
        before = _cpu()
        conn = job.conn if job else None
        try:
            data = conn.recv(wire.MAX_MESSAGE) if conn else b""
        except OSError:
            data = b""
        if not data:
            poller.unregister(fd)
            del by_fd[fd]
            if job is not None and job.conn is not None:
                job.conn.close()
                job.conn = None
                _killpg(pid, signal.SIGHUP)
            return
        try:
            message = wire.decode(data)
        except ValueError:
            return
        if message[0] == "signal" and isinstance(message[1], int):
            _killpg(pid, message[1])
        if job is not None:
            job.server_cpu += _cpu() - before

    def _reap(self, by_fd: dict[int, int], poller: select.poll) -> None:
        """Report every worker that ended to its caller, and log it."""
        while self.jobs:
            before = _cpu()
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job = self.jobs.pop(pid, None)
            if job is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            if job.conn is not None:
                fd = job.conn.fileno()
                self._send(job.conn, ("exit", code))
                if by_fd.pop(fd, None) is not None:
                    poller.unregister(fd)
                job.conn.close()
            self.last_active = time.monotonic()
            job.server_cpu += _cpu() - before
            self._say(
                f"served pid={pid} status={code} "
                f"worker_cpu_s={usage.ru_utime + usage.ru_stime:.4f} "
                f"server_cpu_s={job.server_cpu:.4f} minflt={usage.ru_minflt} "
                f"wall_s={time.monotonic() - job.started:.3f} argv={job.argv!r}"
            )

    # -- helpers -------------------------------------------------------------------

    def facts(self) -> dict:
        """What ``overlay server status`` shows."""
        return {
            "pid": self._pid,
            "started": self.started_at,
            "served": self.served,
            "running": len(self.jobs),
            "idle_s": self.idle_s,
            "socket": self.path,
            "log": wire.log_path(self.directory),
        }

    def _send(self, conn: socket.socket, message: tuple) -> bool:
        try:
            conn.send(wire.encode(message))
        except OSError:
            return False
        return True

    def _say(self, line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        try:
            self.log.write(f"{stamp} {line}\n")
        except (OSError, ValueError):
            pass


def _killpg(pid: int, signum: int) -> None:
    """Send ``signum`` to worker ``pid``'s process group (its own: it made it)."""
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _run_command() -> None:
    """The command line of the caller (``sys.argv``, set by the worker)."""
    run()


def main(argv: list[str] | None = None) -> None:
    """The server process: ``python -c '...; from overlay.server.daemon import main;
    main()' DIRECTORY IDLE_S READY_FD`` (what :func:`overlay.server.control.start`
    runs). In a worker it runs the command instead and ends with its status."""
    args = sys.argv[1:] if argv is None else argv
    directory, idle_s, ready_fd = args[0], float(args[1]), int(args[2])
    server = Server(directory, idle_s)
    try:
        server.run(ready_fd)
    except _BecomeWorker as become:
        request, fds, conn_fd, mask = become.args_
        try:
            worker.become(request, fds, conn_fd)
        except OSError as exc:
            sys.stderr.write(f"overlay: cannot start the command here: {exc}\n")
            sys.exit(2)
        worker.finish(_run_command, mask)
    except OSError as exc:
        if not server.ready:  # the starter waits for this line
            os.write(ready_fd, f"{exc}\n".encode())
        sys.exit(2)
