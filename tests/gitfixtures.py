"""Real git repositories for tests: an upstream MLX stand-in, a fork, an overlay.

Everything runs with a fixed identity and an isolated global config (see
``conftest.py``); nothing touches the network: remotes are local paths.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

from overlay.git.store import EMPTY_TREE, Store, git_env
from overlay.records import fixes
from overlay.records.patchfmt import format_patch, tree_diff

CLOSING = "Applies to the fork; kept in mlxcelverse under the 2026-10-06 fork policy, not proposed there."


def git(cwd: Path | str, *args: str, input: bytes | None = None) -> str:
    """Run git in ``cwd``; return stripped stdout; raise on failure."""
    env = git_env(
        {
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_DATE": "1600000000 +0000",
            "GIT_COMMITTER_DATE": "1600000000 +0000",
        }
    )
    ident = [
        "-c",
        "user.name=Overlay Tests",
        "-c",
        "user.email=tests@overlay.invalid",
        "-c",
        "commit.gpgsign=false",
        "-c",
        "init.defaultBranch=main",
        "-c",
        "protocol.file.allow=always",
    ]
    proc = subprocess.run(
        ["git", *ident, *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        check=False,
        env=env,
    )
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr.decode()}")
    return proc.stdout.decode().strip()


class WorkRepo:
    """A non-bare repository with a helper to commit a dict of file contents."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @classmethod
    def init(cls, path: Path, branch: str = "main") -> WorkRepo:
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", branch)
        return cls(path)

    @classmethod
    def clone(cls, src: WorkRepo, path: Path, branch: str) -> WorkRepo:
        git(path.parent, "clone", "-q", str(src.path), str(path))
        git(path, "checkout", "-q", "-b", branch)
        return cls(path)

    def commit(
        self,
        files: dict[str, bytes | str | None],
        message: str = "change",
        modes: dict[str, str] | None = None,
    ) -> str:
        """Write (or delete, for ``None``) files, commit, return the commit SHA."""
        for rel, content in files.items():
            full = self.path / rel
            if content is None:
                git(self.path, "rm", "-q", "--", rel)
                continue
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_bytes(content.encode() if isinstance(content, str) else content)
            git(self.path, "add", "--", rel)
        for rel, mode in (modes or {}).items():
            git(
                self.path,
                "update-index",
                f"--chmod={'+x' if mode == '100755' else '-x'}",
                "--",
                rel,
            )
        git(self.path, "commit", "-q", "--allow-empty", "-m", message)
        return git(self.path, "rev-parse", "HEAD")

    def checkout(self, ref: str) -> None:
        git(self.path, "checkout", "-q", ref)


def lines(prefix: str, n: int = 30, change: dict[int, str] | None = None) -> str:
    """``n`` numbered lines ``<prefix> i``; ``change`` replaces line i (1-based)."""
    change = change or {}
    return "".join(f"{change.get(i, f'{prefix} {i}')}\n" for i in range(1, n + 1))


@dataclasses.dataclass
class World:
    """Upstream and fork repositories with named commits.

    Attributes:
        upstream, fork: the work repositories (their paths serve as remote URLs).
        base: the fork's merge base (first upstream commit).
        fork_commit: the fork's ROCm commit.
        pin_clean: an upstream commit the fork delta merges onto cleanly.
        pin_conflict: an upstream commit that conflicts with the fork in ``mlx/core.cpp``.
    """

    upstream: WorkRepo
    fork: WorkRepo
    base: str
    fork_commit: str
    pin_clean: str
    pin_conflict: str


def build_world(tmp: Path) -> World:
    """Create the upstream and fork repositories under ``tmp``."""
    up = WorkRepo.init(tmp / "upstream")
    base = up.commit(
        {
            "CMakeLists.txt": "project(mlx)\noption(MLX_BUILD_METAL on)\n",
            "mlx/core.cpp": lines("core"),
            "mlx/ops.cpp": lines("ops"),
            "mlx/backend/metal/kernels.cpp": "metal\n",
            "docs/index.md": "docs\n",
        },
        "base",
    )
    fork = WorkRepo.clone(up, tmp / "fork", "rocm-support")
    fork_commit = fork.commit(
        {
            "CMakeLists.txt": "project(mlx)\noption(MLX_BUILD_METAL on)\noption(MLX_BUILD_ROCM off)\n",
            "mlx/core.cpp": lines("core", change={5: "core 5 // rocm hook"}),
            "mlx/backend/rocm/device.cpp": lines("device"),
            "mlx/backend/rocm/device.h": "#pragma once\n",
            "mlx/backend/metal/kernels.cpp": "metal from fork\n",
            "docs/rocm.md": "fork docs\n",
        },
        "rocm backend",
    )
    pin_clean = up.commit(
        {
            "mlx/ops.cpp": lines("ops", change={2: "ops 2 upstream"}),
            "mlx/core.cpp": lines("core", change={25: "core 25 upstream"}),
        },
        "upstream work",
    )
    pin_conflict = up.commit(
        {
            "mlx/core.cpp": lines(
                "core", change={5: "core 5 upstream rewrite", 25: "core 25 upstream"}
            )
        },
        "upstream rewrites core 5",
    )
    return World(up, fork, base, fork_commit, pin_clean, pin_conflict)


MANIFEST = """\
# test manifest
[upstream]
url = "{upstream}"
pin = "{pin}"   # the pin

[fork]
url = "{fork_url}"
branch = "rocm-support"
commit = "{fork}"
merge-base = "{base}"

[carry]
include = ["CMakeLists.txt", "mlx/**"]
exclude = ["mlx/backend/cuda/**", "mlx/backend/metal/**"]

[backend]
cmake-option = "MLX_BUILD_ROCM"
architectures = ["gfx1030"]

[policy]
closing-sentence = "{closing}"
"""


class Overlay:
    """An overlay repository directory (manifest, series, patches, resolutions)."""

    def __init__(self, root: Path, world: World, pin: str | None = None):
        self.root = Path(root)
        self.world = world
        (self.root / "patches-rocm").mkdir(parents=True, exist_ok=True)
        self.write_manifest(pin or world.base)
        self.write_series([])

    def write_manifest(
        self, pin: str, fork: str | None = None, base: str | None = None
    ) -> None:
        w = self.world
        text = MANIFEST.format(
            upstream=w.upstream.path,
            fork_url=w.fork.path,
            pin=pin,
            fork=fork or w.fork_commit,
            base=base or w.base,
            closing=CLOSING,
        )
        (self.root / "patches-rocm" / "overlay.toml").write_text(text)

    def write_series(self, names: list[str]) -> None:
        (self.root / "patches-rocm" / "series").write_text(
            "".join(f"{n}\n" for n in names)
        )

    def add_patch(self, name: str, data: bytes, *, listed: bool = True) -> Path:
        path = self.root / "patches-rocm" / name
        path.write_bytes(data)
        if listed:
            series = self.root / "patches-rocm" / "series"
            series.write_text(series.read_text() + name + "\n")
        return path

    def add_resolution(self, path: str, content: str | bytes) -> None:
        full = self.root / "patches-rocm" / "resolved" / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(content.encode() if isinstance(content, str) else content)


def make_patch(
    store: Store,
    base_tree: str,
    edits: dict[str, bytes | str | None],
    *,
    subject: str = "rocm: a fix",
    fix: int | None = 1,
    modes: dict[str, str] | None = None,
    description: str = "Why the change is needed.",
) -> tuple[bytes, str]:
    """A byte-stable patch that turns ``base_tree`` into ``base_tree`` + ``edits``.

    Returns:
        ``(patch_bytes, new_tree)``.
    """
    changes = {}
    for path, content in edits.items():
        if content is None:
            changes[path] = None
        else:
            data = content.encode() if isinstance(content, str) else content
            changes[path] = ((modes or {}).get(path, "100644"), store.hash_blob(data))
    new_tree = store.edit_tree(base_tree, changes)
    trailers = [("Local-Fix", str(fix))] if fix is not None else []
    trailers.append(("Forwarded", "not-needed"))
    return format_patch(
        subject, description, trailers, tree_diff(store, base_tree, new_tree)
    ), new_tree


def read_blob(store: Store, tree: str, path: str) -> bytes:
    """Content of ``path`` in ``tree``."""
    return store.git("cat-file", "blob", f"{tree}:{path}").stdout


def tree_paths(store: Store, tree: str) -> set[str]:
    return {e[3] for e in store.ls_tree(tree)}


def env_path_without_git(tmp: Path) -> str:
    """A PATH whose directories hold no ``git`` (for the missing-git test)."""
    empty = tmp / "nogit-bin"
    empty.mkdir(exist_ok=True)
    return str(empty)


__all__ = [
    "CLOSING",
    "PATCH",
    "local_fixes",
    "Overlay",
    "World",
    "WorkRepo",
    "build_world",
    "git",
    "lines",
    "make_patch",
    "read_blob",
    "tree_paths",
    "env_path_without_git",
    "fresh_python",
    "os",
]


def overlay_process(
    o: Overlay,
    *args: str,
    env: dict[str, str] | None = None,
    merged: bool = False,
) -> subprocess.CompletedProcess:
    """``overlay -C <o.root> ARGS`` in a process of its own (text output); for kills and
    races. ``merged``: stderr goes into stdout, one stream in the order it was written
    (as a CI log takes ``2>&1``); ``stderr`` is then ``None``."""
    import sys

    root = Path(__file__).resolve().parent.parent
    full = dict(os.environ, PYTHONPATH=str(root), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "overlay.cli", "-C", str(o.root), *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merged else subprocess.PIPE,
        text=True,
    )


def fresh_python(code: str) -> str:
    """The standard output of ``code`` run in a new interpreter from the checkout's root
    (what a command's own process imports, untouched by the test process's); it must
    exit 0."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def refusal_line(stderr: str) -> str:
    """The ``overlay:`` line of a refused command; asserts the rest is at most ``hint:`` lines."""
    assert "Traceback" not in stderr, stderr
    out = [ln for ln in stderr.splitlines() if ln.strip()]
    assert out and out[0].startswith("overlay: "), stderr
    assert all(ln.startswith("hint: ") for ln in out[1:]), stderr
    return out[0]


def records_hash(o: Overlay) -> str:
    """A digest of the overlay's records: every file of ``o.root`` outside ``.overlay/``
    (what a refused command, a failed record or an ``--abort`` must leave byte for byte)."""
    import hashlib

    h = hashlib.sha256()
    for path in sorted(
        p for p in o.root.rglob("*") if p.is_file() and ".overlay" not in p.parts
    ):
        h.update(str(path.relative_to(o.root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def cli(o: Overlay, *args: str, **kw):
    """``overlay -C <o.root> ARGS`` through click's test runner; returns the result.

    Every ``rebase``, ``sync`` or ``import`` that reports success is followed by a
    ``verify`` (:func:`assert_run_left_verify_clean`): the one place the suite holds
    each of those runs to "verify is clean right after it".
    """
    from click.testing import CliRunner

    from overlay.cli import main

    writes = bool(args) and args[0] in ("rebase", "sync", "import")
    before = _error_keys(o) if writes else set()
    result = CliRunner().invoke(main, ["-C", str(o.root), *args], **kw)
    if writes and result.exit_code == 0 and _completed(args, result.output):
        assert_run_left_verify_clean(o, args, result.output, before)
    return result


def _completed(args: tuple[str, ...], output: str) -> bool:
    """Whether ``overlay ARGS`` said it completed a run (an import always does)."""
    return args[0] == "import" or "complete" in output


def _verify_rows(o: Overlay, *extra: str) -> tuple[int, list[dict]]:
    """``overlay verify --format json``: its exit code and its findings."""
    import json

    from click.testing import CliRunner

    from overlay.cli import main

    res = CliRunner().invoke(
        main, ["-C", str(o.root), "verify", "--format", "json", *extra]
    )
    try:
        return res.exit_code, json.loads(res.stdout)["findings"]
    except (ValueError, KeyError):
        return res.exit_code, []


def _error_keys(o: Overlay) -> set[tuple[str, str]]:
    """``(code, path)`` of every error ``verify`` reports now (nothing when the overlay
    is not yet one, as before an import)."""
    if not (o.root / "patches-rocm" / "overlay.toml").is_file():
        return set()
    _code, rows = _verify_rows(o)
    return {(f["code"], f["path"] or "") for f in rows if f["severity"] == "error"}


def assert_run_left_verify_clean(
    o: Overlay, args: tuple[str, ...], output: str, before: set[tuple[str, str]]
) -> None:
    """``verify`` is clean right after every run that reports
    success, without a ``refresh``: every family, no error the records did not hold
    before the run (``before``: what a test chose to write, such as a fixture's FIX
    finding), and none at all of the engine's SER and LAY families. A submodule the
    run left for the user (a submodule carried into the patched tree, a new resolution
    that needs its entry) may stay only when the run's own output names its code."""
    import re

    announced = set(re.findall(r"\b(?:MAN|SER|LAY|FIX)\d{3}\b", output))
    _code, rows = _verify_rows(o)
    new = [
        f
        for f in rows
        if f["severity"] == "error"
        and f["code"] not in announced
        and (
            f["code"][:3] in ("SER", "LAY")
            or (f["code"], f["path"] or "") not in before
        )
    ]
    assert not new, f"verify after `overlay {' '.join(args)}`:\n" + "\n".join(
        f"{f['code']} {f['path']}: {f['message']}" for f in new
    )


# The verify-clean overlay of tests/conftest.py's `clean` fixture: its one patch and
# its LOCAL_FIXES.md.
PATCH = "0001-rocm-lock-the-device.patch"


def local_fixes(
    world,
    fork_commit=None,
    pin=None,
    entry_files="`mlx/backend/rocm/device.cpp`",
    closing=CLOSING,
    extra="",
) -> str:
    repo = fixes.fork_repo_from_url(str(world.fork.path))
    return (
        f"# Local changes relative to {repo}@{(fork_commit or world.fork_commit)[:8]}\n\n"
        f"## Retarget onto the MLX pin ({(pin or world.base)[:8]})\n\n"
        "## Fixes to the fork's kernels\n\n"
        f"1. **Lock the device.** The handle was shared; {entry_files} now owns it under a lock. "
        f"{closing}\n{extra}\n"
        "## Dropped from the vendored set\n\n"
        "- `docs/rocm.md`: fork documentation.\n"
        "- `mlx/backend/metal/kernels.cpp`: Metal is not carried.\n"
    )


def overlay_lines(output: str) -> list[str]:
    """The ``overlay:`` lines of a command's output."""
    return [ln for ln in output.splitlines() if ln.startswith("overlay:")]


#: Files of every kind a tree holds (executable, symlink, a space and a non-ASCII byte in
#: a name, a name sorting between a file and its directory), as ``{path: (data, mode)}``.
EVERY_KIND = {
    "a.txt": (b"one\n", "100644"),
    "a-b.txt": (b"dash\n", "100644"),
    "a/b.c": (b"int b;\n", "100644"),
    "a/sub/c.h": (b"#pragma once\n", "100644"),
    "a/run.sh": (b"#!/bin/sh\n", "100755"),
    "name with space.txt": (b"spaced\n", "100644"),
    "na\u00efve.hip": (b"unicode\n", "100644"),
    "link": (b"a.txt", "120000"),
}
GITLINK = "d" * 40


def tree_of_every_kind(store: Store) -> str:
    """A tree of :data:`EVERY_KIND` and a submodule (``vendor/mod`` at :data:`GITLINK`)."""
    changes: dict[str, tuple[str, str] | None] = {
        path: (mode, store.hash_blob(data)) for path, (data, mode) in EVERY_KIND.items()
    }
    changes["vendor/mod"] = ("160000", GITLINK)
    return store.edit_tree(EMPTY_TREE, changes)


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def scratch_leftovers(tmp: Path) -> Path:
    """A dead process's scratch directory, a day-old one from before names had a pid
    (both swept), and a fresh one without a pid (kept); returns the one kept."""
    dead = tmp / f"overlay-commits-{dead_pid()}-abcdefgh"
    dead.mkdir()
    (dead / "0").write_text("x")
    legacy = tmp / "overlay-idx-k3j9x_2q"
    legacy.mkdir()
    old = time.time() - 2 * 86400
    os.utime(legacy, (old, old))
    fresh_legacy = tmp / "overlay-idx-a1b2c3d4"
    fresh_legacy.mkdir()
    return fresh_legacy


def git_calls(monkeypatch) -> list[tuple]:
    """The arguments of every git process a :class:`Store` starts from here on (through
    :meth:`Store.git`), in order."""
    seen: list[tuple] = []
    real = Store.git
    monkeypatch.setattr(
        Store,
        "git",
        lambda self, *args, **kw: seen.append(args) or real(self, *args, **kw),
    )
    return seen
