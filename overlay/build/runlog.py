"""The build log and the processes whose output goes into it."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import threading
from collections.abc import Callable, Sequence

from overlay.build.toolchain import ToolchainError
from overlay.parallel import child, foreground


class BuildLog:
    """The build log: every command and its output, written whole by each thread
    (a lock keeps parallel units' output apart).
    """

    def __init__(self, path: str):
        self.fh = open(path, "w", encoding="utf-8", errors="replace")
        self.lock = threading.Lock()

    def write(self, text: str) -> None:
        """Append ``text`` and flush (the log is read while the build runs)."""
        with self.lock:
            self.fh.write(text)
            self.fh.flush()

    def close(self) -> None:
        """Close the file."""
        self.fh.close()


def run_logged(
    argv: Sequence[str],
    log: BuildLog,
    *,
    cwd: str | None = None,
    env: dict | None = None,
    on_line: Callable[[str], None] | None = None,
) -> tuple[int, str]:
    """Run ``argv``, stream stdout+stderr into ``log``; return ``(status, output)``.

    Started through :func:`overlay.parallel.child`, as a run of one
    (:func:`overlay.parallel.foreground`) or inside a parallel run (the ninja batch
    of ``build --check``): a Ctrl-C or a SIGTERM of overlay stops it too (ninja and
    CMake stop their own children).
    """
    return foreground(lambda: _run_logged(argv, log, cwd, env, on_line))


def _run_logged(
    argv: Sequence[str],
    log: BuildLog,
    cwd: str | None,
    env: dict | None,
    on_line: Callable[[str], None] | None,
) -> tuple[int, str]:
    """:func:`run_logged` in the calling thread."""
    log.write("$ " + " ".join(shlex.quote(a) for a in argv) + "\n")
    chunks = []
    with contextlib.ExitStack() as stack:
        try:
            proc = stack.enter_context(
                child(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
        except OSError as exc:
            raise ToolchainError(f"cannot run {argv[0]}: {exc.strerror}") from None
        assert proc.stdout is not None
        for raw in proc.stdout:
            text = raw.decode("utf-8", "replace")
            chunks.append(text)
            log.write(text)
            if on_line is not None:
                on_line(text.rstrip("\n"))
        status = proc.wait()
    log.write(f"[exit {status}]\n")
    return status, "".join(chunks)
