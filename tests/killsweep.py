"""A kill-point sweep of ``overlay record`` and ``overlay import whole-file``:
the library behind ``tools/fuzz_kills.py`` and ``tests/test_kill_sweep.py``.

A scenario is a repository in its *before* state and one command. The command is
run once uninterrupted (the *after* state), then once per write point N with
``OVERLAY_TEST_KILL_AT=<family>:N`` (``fs.atomic.counted_kill_point``: SIGKILL at the
Nth write point) on a fresh copy of the before state, until a run is no longer
killed. After each kill, a documented way out is run:

* ``rerun``: the same command again;
* ``show``: plain ``overlay edit`` (it completes an interrupted record), then ``record``;
* ``abort``: ``overlay edit --abort``.

and the result is checked: the records (``LOCAL_FIXES.md`` and ``patches-rocm/**``)
are byte for byte the before or the after state (``rerun``/``show``: the after
state), the series names each patch once, no temp file (``.NAME.XXXXXXXX.tmp``), no
journal and no half-removed work tree is left, and the user's edit is intact: in the
recorded patch, or still in the work tree when the records are as before. Real git
repositories in a temporary directory, commands in child processes, no network.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

from gitfixtures import PATCH, build_world, lines, make_patch

from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest

ROOT = Path(__file__).resolve().parent.parent
DEVICE = "mlx/backend/rocm/device.cpp"
HEADER = "mlx/backend/rocm/device.h"
_TEMP = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
#: Past this many write points a command is taken to loop (a bug of the sweep's hook).
MAX_POINTS = 40


@dataclasses.dataclass
class Scenario:
    """A repository before the command, and the command.

    Attributes:
        name: ``record-new``, ``record-carry`` or ``import``.
        before: the repository in its before state (copied for each run).
        args: the command's arguments after ``-C ROOT``.
        family: the kill-point family (``record``, ``import``).
        ways: the ways out to try after a kill.
        edit: ``(work tree path, bytes)`` the user wrote, for a record.
    """

    name: str
    before: Path
    args: list[str]
    family: str
    ways: tuple[str, ...]
    edit: tuple[str, bytes] | None = None


def run(root: Path, *args: str, kill: str | None = None) -> subprocess.CompletedProcess:
    """``overlay -C root ARGS`` in a child process (killed at ``kill`` when given)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("OVERLAY_TEST_KILL_AT", None)
    if kill:
        env["OVERLAY_TEST_KILL_AT"] = kill
    return subprocess.run(
        [sys.executable, "-m", "overlay.cli", "-C", str(root), *args],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def records(root: Path) -> dict[str, bytes]:
    """The records: ``LOCAL_FIXES.md`` and every file under ``patches-rocm/``."""
    out = {}
    lf = root / "LOCAL_FIXES.md"
    if lf.is_file():
        out["LOCAL_FIXES.md"] = lf.read_bytes()
    pdir = root / "patches-rocm"
    if pdir.is_dir():
        for path in sorted(pdir.rglob("*")):
            if path.is_file():
                out[str(path.relative_to(root))] = path.read_bytes()
    return out


def leftovers(root: Path) -> list[str]:
    """Temp files, journals and half-removed work trees anywhere in the repository
    (a work tree's own ``.git`` is git's business and is not looked at)."""
    found = []
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in dirs + files:
            if (
                _TEMP.match(name)
                or name.startswith((".removing-", "record-journal"))
                or (name.startswith("import-") and name.endswith(".tmp"))
            ):
                found.append(os.path.relpath(os.path.join(top, name), root))
    return sorted(found)


def _problems(
    sc: Scenario, work: Path, before: dict, after: dict, way: str, outs: list
) -> list[str]:
    """What is wrong with ``work`` after a kill and the way out ``way``."""
    bad = []
    for proc in outs:
        if proc.returncode not in (0,) or "Traceback" in proc.stderr:
            bad.append(f"{way}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    now = records(work)
    state = "after" if now == after else "before" if now == before else None
    if state is None:
        changed = sorted(k for k in set(now) | set(after) if now.get(k) != after.get(k))
        bad.append(f"{way}: records are neither before nor after ({changed})")
    elif state == "before" and way in ("rerun", "show"):
        bad.append(f"{way}: the records are as before, the record was lost")
    series = now.get("patches-rocm/series", b"").split()
    if len(series) != len(set(series)):
        bad.append(f"{way}: a patch is listed twice")
    if left := leftovers(work):
        bad.append(f"{way}: left {left}")
    if sc.edit is not None and state == "before" and way != "abort":
        rel, data = sc.edit
        path = work / rel
        if not path.is_file() or path.read_bytes() != data:
            bad.append(f"{way}: the user's edit in {rel} is gone")
    return bad


def sweep(sc: Scenario, scratch: Path) -> dict:
    """Kill ``sc``'s command at every write point and check every way out.

    Returns:
        ``{"scenario", "points", "runs", "problems": [...]}``.
    """
    ref = scratch / f"{sc.name}-after"
    shutil.copytree(sc.before, ref, symlinks=True)
    first = run(ref, *sc.args)
    problems = [] if first.returncode == 0 else [f"uninterrupted: {first.stderr}"]
    before, after = records(sc.before), records(ref)
    runs, point = 1, 0
    while point < MAX_POINTS:
        point += 1
        ended = False
        for way in sc.ways:
            work = scratch / f"{sc.name}-{point}-{way}"
            shutil.copytree(sc.before, work, symlinks=True)
            killed = run(work, *sc.args, kill=f"{sc.family}:{point}")
            runs += 1
            if killed.returncode != -9:
                # past the last write point: this run was the whole command
                if killed.returncode != 0 or records(work) != after:
                    problems.append(f"point {point}: unkilled run: {killed.stderr}")
                ended = True
                break
            outs = []
            if way == "rerun":
                outs.append(run(work, *sc.args))
            elif way == "show":
                outs.append(run(work, "edit"))
                if (work / ".overlay" / "edit.json").exists() and records(
                    work
                ) != after:
                    outs.append(run(work, *sc.args))
            else:
                outs.append(run(work, "edit", "--abort"))
            runs += len(outs)
            problems += [
                f"point {point}: {p}"
                for p in _problems(sc, work, before, after, way, outs)
            ]
            shutil.rmtree(work, ignore_errors=True)
        if ended:
            break
    return {
        "scenario": sc.name,
        "points": point - 1,
        "runs": runs,
        "problems": problems,
    }


# -- the scenarios ------------------------------------------------------------------------


def _overlay_with_patches(root: Path, world, *, carried: bool) -> None:
    """The fuzz fixture's overlay; with ``carried``, a second patch on the same file."""
    import fuzzlib
    from gitfixtures import CLOSING

    fuzzlib.build_fixture(root, world)
    if not carried:
        return
    store = Store()
    layers = compute_layers(store, load_manifest(str(root)), str(root))
    second, _ = make_patch(
        store,
        layers.patched,
        {DEVICE: lines("device", change={3: "device 3 locked", 20: "device 20 on"})},
        subject="rocm: check twenty",
        fix=2,
    )
    (root / "patches-rocm" / "0002-twenty.patch").write_bytes(second)
    (root / "patches-rocm" / "series").write_text(f"{PATCH}\n0002-twenty.patch\n")
    lf = root / "LOCAL_FIXES.md"
    text = lf.read_text().replace(
        "\n## Dropped",
        f"2. **Check twenty.** `{DEVICE}` checks line twenty. {CLOSING}\n\n## Dropped",
    )
    lf.write_text(text)


def record_scenarios(scratch: Path, world, seed: int) -> list[Scenario]:
    """``record`` of a new patch (``--keep`` or not, by the seed) and of an existing
    patch whose later patch is carried; the user's edit drawn from the seed."""
    rnd = random.Random(f"{seed}:record")
    out = []
    new = scratch / "record-new-before"
    _overlay_with_patches(new, world, carried=False)
    assert run(new, "edit", "--new", "0002-x").returncode == 0
    header = f"#pragma once\n// checked {rnd.randrange(10**6)}\n".encode()
    (new / ".overlay/edit/0002-x" / HEADER).write_bytes(header)
    args = ["record", "-m", "rocm: check the header", "--description", "Why."]
    if rnd.random() < 0.5:
        args.append("--keep")
    out.append(
        Scenario(
            "record-new",
            new,
            args,
            "record",
            ("rerun", "show", "abort"),
            (f".overlay/edit/0002-x/{HEADER}", header),
        )
    )
    carry = scratch / "record-carry-before"
    _overlay_with_patches(carry, world, carried=True)
    assert run(carry, "edit", PATCH).returncode == 0
    line = rnd.choice([8, 9, 10, 11, 12])
    device = lines(
        "device", change={3: "device 3 locked", line: f"device {line} seeded"}
    ).encode()
    stem = PATCH[: -len(".patch")]
    (carry / ".overlay/edit" / stem / DEVICE).write_bytes(device)
    out.append(
        Scenario(
            "record-carry",
            carry,
            ["record"],
            "record",
            ("rerun", "show", "abort"),
            (f".overlay/edit/{stem}/{DEVICE}", device),
        )
    )
    return out


def import_scenario(scratch: Path) -> Scenario:
    """``import whole-file`` of the import tests' team overlay into an empty repository."""
    from test_importer import Team

    w = build_world(scratch / "import-world")
    (scratch / "import-team").mkdir()
    team = Team(scratch / "import-team", w)
    return Scenario(
        "import",
        team.root,
        [
            "import",
            "whole-file",
            str(team.dir),
            "--upstream-url",
            str(w.upstream.path),
        ],
        "import",
        ("rerun",),
    )
