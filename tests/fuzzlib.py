"""Mutations of the overlay's records and one checked run of the commands on them.

Shared by ``tests/test_fuzz.py`` (hypothesis, a few dozen examples in the suite)
and ``tools/fuzz_records.py`` (the long campaign recorded in ``docs/fuzz.md``).

A mutation is a list of plain tuples (see :func:`apply_ops`), so hypothesis can
draw and shrink them and the campaign can draw them from a seeded
:class:`random.Random`. A *run* is one command on one mutated overlay; it is
bad when it exits with a code other than 0, 1 or 2, prints a traceback or an
``overlay: internal error`` line (a bug caught by the root group), or blocks
longer than the hang guard.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import shutil
import signal
import sys
from pathlib import Path

from click.testing import CliRunner
from gitfixtures import CLOSING, Overlay, lines, make_patch

from overlay.checks.verify import verify
from overlay.cli import main
from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records import fixes
from overlay.records.manifest import load_manifest
from overlay.workspace import Workspace

PATCH = "0001-rocm-lock-the-device.patch"

#: Record kind -> its path in the fixture overlay.
RECORDS = {
    "manifest": "patches-rocm/overlay.toml",
    "series": "patches-rocm/series",
    "patch": f"patches-rocm/{PATCH}",
    "fixes": "LOCAL_FIXES.md",
    "suites": "patches-rocm/suites/suites.toml",
}

#: Commands each record kind is fed through (``{dest}`` is a fresh export directory).
COMMANDS = {
    "manifest": (["verify"], ["status"], ["export", "{dest}"]),
    "series": (["verify"], ["status"], ["export", "{dest}"]),
    "patch": (["verify"], ["status"], ["export", "{dest}"]),
    "fixes": (["verify"], ["fix", "list"]),
    "suites": (
        ["suite", "list"],
        ["suite", "run", "--runs", "1", "--results", "{dest}"],
    ),
}

SUITES = """\
[suites.quick]
description = "a child that prints its marker"
child = ["python3", "-c", "print('overlay-suite: done')"]
runs = 3
deadline = 30
backend = "any"
hardware = "none"
proves = 1

[[suites.quick.markers]]
stream = "stdout"
text = "overlay-suite: done"
expect = "exactly 1"
"""

#: Byte strings the mutations insert: what broke overlay before, and what breaks parsers.
TOKENS = (
    b"\x00",
    b"\xff\xfe",
    b"\xc3",
    b"\x1b[1m",
    b"\r",
    b"\r\n",
    b"\n",
    b"\t",
    b"\x01",
    b"\x7f",
    b"*" * 20,
    b"9" * 5000,
    b"20261201",
    b"-1",
    b"0",
    b"[" * 3000,
    b"{" * 500,
    b"@@ -1,3 +1,4 @@\n",
    b"@@ -99999,1 +1 @@\n",
    b"@@ -1," + b"1" * 4400 + b" +1 @@\n",
    b"diff --git a/x b/x\n",
    b"diff --git a/../../etc/passwd b/../../etc/passwd\n",
    b"--- /dev/null\n",
    b"+++ b/mlx/evil\n",
    b"GIT binary patch\n",
    b"index 0000000..1111111 100644\n",
    b"new file mode 120000\n",
    b"##",
    b"### ",
    b"## Fixes to the fork's kernels\n",
    b"##Fixes to the fork's build\n",
    b"# Local changes relative to x/y@00000000\n",
    b"1. **T.** ",
    b"- `",
    b"`",
    b"```\n",
    b"<<<<<<< ours\n",
    b"=======\n",
    b"Local-Fix: 99999999999\n",
    b"Forwarded:\n",
    b"../",
    b"/etc/passwd",
    b".git/config",
    b"\\",
    b'"',
    b"'''",
    b'"""',
    b"= ",
    b"=",
    b"[carry]\n",
    b"[suites.x]\n",
    b"[[suites.quick.markers]]\n",
    b"runs = 0\n",
    b"deadline = -1e999\n",
    b"inf",
    b"nan",
    "é".encode(),
    "\u202e".encode(),
    b"\xed\xa0\x80",
    b" " * 200,
    b"x" * 5000,
)

#: Mutation operators and how many arguments each draws.
OPS = ("flip", "insert", "delete", "dupline", "swaplines", "truncate", "token_line")


def apply_ops(data: bytes, ops) -> bytes:
    """``data`` with each op applied in turn (positions taken modulo the current length).

    Ops: ``("flip", pos, byte)``, ``("insert", pos, token_index)``,
    ``("delete", pos, length)``, ``("dupline", line)``, ``("swaplines", i, j)``,
    ``("truncate", pos)``, ``("token_line", line, token_index)`` (a token as a
    line of its own).
    """
    for op in ops:
        kind = op[0]
        n = max(len(data), 1)
        if kind == "flip":
            pos = op[1] % n
            data = data[:pos] + bytes([op[2] % 256]) + data[pos + 1 :]
        elif kind == "insert":
            pos = op[1] % (len(data) + 1)
            data = data[:pos] + TOKENS[op[2] % len(TOKENS)] + data[pos:]
        elif kind == "delete":
            pos = op[1] % n
            data = data[:pos] + data[pos + 1 + op[2] % 64 :]
        elif kind == "truncate":
            data = data[: op[1] % n]
        else:
            rows = data.split(b"\n")
            i = op[1] % len(rows)
            if kind == "dupline":
                rows.insert(i, rows[i])
            elif kind == "swaplines":
                j = op[2] % len(rows)
                rows[i], rows[j] = rows[j], rows[i]
            elif kind == "token_line":
                rows.insert(i, TOKENS[op[2] % len(TOKENS)].rstrip(b"\n"))
            data = b"\n".join(rows)
    return data


def random_ops(rnd: random.Random) -> list[tuple]:
    """One to four ops drawn from ``rnd`` (the campaign's generator)."""
    out = []
    for _ in range(rnd.randint(1, 4)):
        kind = rnd.choice(OPS)
        out.append((kind, rnd.randrange(1 << 20), rnd.randrange(1 << 16)))
    return out


def build_fixture(root: Path, world) -> Path:
    """A verify-clean overlay at ``root``: one patch, its LOCAL_FIXES entry, a suites.toml."""
    overlay = Overlay(root, world)
    store = Store()
    layers = compute_layers(store, load_manifest(str(root)), str(root))
    patch, _ = make_patch(
        store,
        layers.forked,
        {"mlx/backend/rocm/device.cpp": lines("device", change={3: "device 3 locked"})},
        subject="rocm: lock the device",
    )
    overlay.add_patch(PATCH, patch)
    repo = fixes.fork_repo_from_url(str(world.fork.path))
    (root / "LOCAL_FIXES.md").write_text(
        f"# Local changes relative to {repo}@{world.fork_commit[:8]}\n\n"
        f"## Retarget onto the MLX pin ({world.base[:8]})\n\n## Fixes to the fork's kernels\n\n"
        f"1. **Lock the device.** `mlx/backend/rocm/device.cpp` now locks. {CLOSING}\n\n"
        "## Dropped from the vendored set\n\n- `docs/rocm.md`: docs.\n- `mlx/backend/metal/kernels.cpp`: Metal.\n"
    )
    (root / "patches-rocm" / "suites").mkdir()
    (root / "patches-rocm" / "suites" / "suites.toml").write_text(SUITES)
    return root


class Hang(BaseException):
    """Raised by the hang guard; a BaseException so no ``except Exception`` in overlay swallows it."""


@contextlib.contextmanager
def hang_guard(seconds: int = 60):
    """Raise :class:`Hang` when the body runs longer than ``seconds`` (main thread only)."""

    def boom(signum, frame):
        raise Hang(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@dataclasses.dataclass
class Run:
    """One command on one mutated overlay: its exit code and what was wrong, if anything."""

    record: str
    command: str
    exit_code: int | None
    problem: str | None
    output: str


def run_mutation(
    template: Path, work: Path, record: str, ops, *, hang_s: int = 60
) -> list[Run]:
    """Copy ``template`` to ``work``, mutate ``record`` with ``ops``, run its commands.

    Returns:
        One :class:`Run` per command of :data:`COMMANDS` ``[record]``; ``problem``
        is ``None`` for a good run, else ``"traceback"``, ``"internal error"``,
        ``"exit N"`` or ``"hang"``.
    """
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(template, work, symlinks=True)
    path = work / RECORDS[record]
    path.write_bytes(apply_ops(path.read_bytes(), ops))
    runs = []
    for number, command in enumerate(COMMANDS[record]):
        args = [a.replace("{dest}", str(work / f"export-{number}")) for a in command]
        try:
            with hang_guard(hang_s):
                result = CliRunner().invoke(main, ["-C", str(work), *args])
        except Hang:
            runs.append(Run(record, " ".join(command), None, "hang", ""))
            continue
        output = result.output
        problem = None
        if result.exception is not None and not isinstance(
            result.exception, SystemExit
        ):
            problem = "traceback"
            import traceback

            output += "".join(traceback.format_exception(result.exception))
        elif "Traceback (most recent call last)" in output:
            problem = "traceback"
        elif "overlay: internal error" in output:
            problem = "internal error"
        elif result.exit_code not in (0, 1, 2):
            problem = f"exit {result.exit_code}"
        runs.append(Run(record, " ".join(command), result.exit_code, problem, output))
    return runs


def isolate_git(home: Path, environ) -> None:
    """The environment ``tests/conftest.py`` gives each test: own HOME, git config and store."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / ".gitconfig"
    config.write_text(
        "[user]\n\tname = Overlay Tests\n\temail = tests@overlay.invalid\n"
        "[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n"
        '[protocol "file"]\n\tallow = always\n'
    )
    for key in list(environ):
        if key.startswith(("GIT_", "OVERLAY_")):
            del environ[key]
    environ.update(
        {
            "HOME": str(home),
            "GIT_CONFIG_GLOBAL": str(config),
            "GIT_CONFIG_NOSYSTEM": "1",
            "XDG_CACHE_HOME": str(home / "cache"),
            "OVERLAY_GIT_DIR": str(home / "store.git"),
            "GIT_AUTHOR_DATE": "1600000000 +0000",
            "GIT_COMMITTER_DATE": "1600000000 +0000",
        }
    )


def guarded_cli(root, *args):
    """``overlay -C ROOT ARGS`` under the hang guard; asserts no traceback and no exception
    but ``SystemExit``."""
    with hang_guard():
        result = CliRunner().invoke(main, ["-C", str(root), *args])
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return result


def failure_line(result) -> str:
    """The single ``overlay:`` line of a failed command (a ``hint:`` line may follow)."""
    out = [ln for ln in result.output.splitlines() if ln.strip()]
    assert out and out[0].startswith("overlay: "), result.output
    assert all(ln.startswith("hint: ") for ln in out[1:]), result.output
    return out[0]


def verify_codes(root):
    """``(code, path)`` of each finding of ``verify`` on the overlay at ``root`` (hang guard on)."""
    with hang_guard():
        return [(f.code, f.path) for f in verify(Workspace(str(root))).findings]


__all__ = [
    "COMMANDS",
    "OPS",
    "RECORDS",
    "TOKENS",
    "Hang",
    "Run",
    "apply_ops",
    "build_fixture",
    "failure_line",
    "guarded_cli",
    "hang_guard",
    "isolate_git",
    "random_ops",
    "run_mutation",
    "sys",
    "verify_codes",
]
