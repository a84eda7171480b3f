"""The journalled write of the records (overlay/edit/writes.py): a record is all or
nothing across its files. A kill at any point, then the documented way out (a re-run of
``record``, ``edit``, ``edit --abort``), ends with the records as before or as recorded,
one entry, no temp file, the user's edit intact; a lock a killed git left does not block
the next command. Kills are real SIGKILLs of a child ``overlay`` process, placed by hooks
installed in the child (``os.replace`` of one file, a work-tree removal) so that the same
test means the same moment whatever the code's own kill points are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gitfixtures import PATCH, cli, lines, overlay_lines, records_hash
from test_edit import DEVICE, HEADER, two_patches, verify_clean, workdir_of

from overlay.edit.writes import SPARE
from overlay.records import fixes

ROOT = Path(__file__).resolve().parent.parent
PDIR = "patches-rocm"

#: Runs ``overlay`` in a child with a kill installed: before the ``os.replace`` whose
#: destination ends with KILL_REPLACE, or after KILL_RMTREE files of a removal of a
#: work tree under ``.overlay/edit/`` (the rest of the tree stays on disk).
_CHILD = r"""
import os, shutil, signal, sys
target = os.environ.get("KILL_REPLACE")
after = int(os.environ.get("KILL_RMTREE", "0"))
real_replace, real_rmtree = os.replace, shutil.rmtree
def replace(src, dst, *a, **kw):
    if target and str(dst).endswith(target):
        os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(src, dst, *a, **kw)
def rmtree(path, *a, **kw):
    if after and "/.overlay/edit/" in str(path) and os.path.isdir(path):
        done = 0
        for top, _dirs, files in os.walk(path):
            for name in files:
                os.unlink(os.path.join(top, name))
                done += 1
                if done == after:
                    os.kill(os.getpid(), signal.SIGKILL)
    return real_rmtree(path, *a, **kw)
os.replace, shutil.rmtree = replace, rmtree
from overlay.cli import main
sys.exit(main(sys.argv[1:], prog_name="overlay"))
"""


def killed(o, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``overlay -C ROOT ARGS`` in a child that kills itself where ``env`` says."""
    full = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    return subprocess.run(
        [sys.executable, "-c", _CHILD, "-C", str(o.root), *args],
        env=full,
        capture_output=True,
        text=True,
    )


NEW = ("record", "-m", "rocm: check the header", "--description", "Why.")


def new_edit(o) -> Path:
    """An edit of a new patch 0002-x with one changed file; returns its work tree."""
    assert cli(o, "edit", "--new", "0002-x").exit_code == 0
    work = o.root / ".overlay" / "edit" / "0002-x"
    (work / HEADER).write_text("#pragma once\n// checked\n")
    return work


def entries(o) -> list[int]:
    return [e.number for e in fixes.load(o.root / "LOCAL_FIXES.md").entries()]


def no_temps(o) -> list[str]:
    """Temp names (``.NAME.XXXXXXXX.tmp``) and half-removed trees anywhere in the repository."""
    return sorted(
        str(p.relative_to(o.root))
        for p in o.root.rglob("*")
        if (p.name.startswith(".") and p.name.endswith(".tmp"))
        or p.name.startswith(".removing-")
        or p.name.startswith("record-journal")
    )


# -- a record is all or nothing ------------------------------------------------------


def test_record_killed_between_the_entry_and_the_series_is_completed_by_a_rerun(
    clean,
):
    new_edit(clean)
    proc = killed(clean, *NEW, KILL_REPLACE=f"{PDIR}/series")
    assert proc.returncode == -9, proc.stderr
    again = cli(clean, *NEW)
    assert again.exit_code == 0, again.output
    assert "completed the interrupted `overlay record` of 0002-x.patch" in again.output
    assert entries(clean) == [1, 2]  # one entry for the fix, not 2 and 3
    assert (clean.root / PDIR / "series").read_text() == f"{PATCH}\n0002-x.patch\n"
    assert not (clean.root / ".overlay" / "edit" / "0002-x").exists()
    assert not (clean.root / ".overlay" / "edit.json").exists()
    assert no_temps(clean) == []
    verify_clean(clean)


def test_record_of_an_existing_patch_killed_before_the_carried_patch_is_written(clean):
    two_patches(clean)
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)

    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 locked", 10: "device 10 too"})
    )
    proc = killed(clean, "record", KILL_REPLACE="0002-twenty.patch")
    assert proc.returncode == -9, proc.stderr
    shown = cli(clean, "edit")  # the other way back in: plain `edit` completes it too
    assert shown.exit_code == 0, shown.output
    assert "completed the interrupted `overlay record`" in shown.output
    assert b"+device 10 too" in (clean.root / PDIR / PATCH).read_bytes()
    assert entries(clean) == [1, 2] and no_temps(clean) == []
    verify_clean(clean)


# -- a lock a killed git left, and --abort of what it cannot read ---------------------


def test_a_lock_left_by_a_killed_git_add_does_not_block_edit_or_record(clean):
    work = new_edit(clean)
    # What a process-group kill during `git add` of the private index leaves: git's
    # lock of that index (the older name without a pid, and a dead pid's).
    (work / ".git" / "overlay-record.index.lock").write_bytes(b"")
    (work / ".git" / "overlay-record-999999999.index.lock").write_bytes(b"")
    shown = cli(clean, "edit")
    assert shown.exit_code == 0 and f"1 file(s) changed: {HEADER}" in shown.output, (
        shown.output
    )
    done = cli(clean, *NEW)
    assert done.exit_code == 0, done.output
    assert entries(clean) == [1, 2]


def test_abort_never_deletes_a_work_tree_whose_changes_it_cannot_read(clean):
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    (work / DEVICE).write_text("my precious change\n")
    (work / ".git" / "index").write_bytes(b"not an index")
    before = records_hash(clean)
    refused = cli(clean, "edit", "--abort")
    assert refused.exit_code == 2, refused.output
    (line,) = overlay_lines(refused.output)
    assert "cannot read the changes in the work tree" in line, line
    assert "remove that directory yourself" in refused.output
    assert (work / DEVICE).read_text() == "my precious change\n"
    assert (clean.root / ".overlay" / "edit.json").is_file()
    assert records_hash(clean) == before
    # The way out it names: the user takes the tree away, then --abort ends the edit.
    subprocess.run(["rm", "-rf", str(work)], check=True)
    assert cli(clean, "edit", "--abort").exit_code == 0
    assert not (clean.root / ".overlay" / "edit.json").exists()


# -- temp files and a kill inside the work tree's removal -----------------------------


def test_a_successful_record_removes_the_temp_files_a_killed_one_left(clean):
    new_edit(clean)
    stray = [
        clean.root / ".LOCAL_FIXES.md.k3j9x_2q.tmp",
        clean.root / PDIR / ".series.k3j9x_2q.tmp",
        clean.root / PDIR / ".0002-x.patch.k3j9x_2q.tmp",
        clean.root / ".overlay" / ".edit.json.k3j9x_2q.tmp",
    ]
    for path in stray:
        path.write_bytes(b"half")
    done = cli(clean, *NEW)
    assert done.exit_code == 0, done.output
    assert [p for p in stray if p.exists()] == []


def test_a_kill_inside_the_work_tree_removal_is_described_right(clean):
    new_edit(clean)
    # A spare work tree is kept already: the record removes this one (renamed aside
    # first), where the kill comes.
    subprocess.run(
        ["git", "init", "-q", str(clean.root / ".overlay" / "edit" / SPARE)],
        check=True,
    )
    proc = killed(clean, *NEW, KILL_RMTREE="3")
    assert proc.returncode == -9, proc.stderr
    after = records_hash(clean)
    shown = cli(clean, "edit")
    assert shown.exit_code == 0, shown.output
    # Not "N file(s) changed" for the files the removal had deleted: the record had
    # written everything, only the removal was cut short.
    assert "file(s) changed" not in shown.output, shown.output
    assert "completed the interrupted `overlay record` of 0002-x.patch" in shown.output
    assert records_hash(clean) == after and entries(clean) == [1, 2]
    assert not (clean.root / ".overlay" / "edit" / "0002-x").exists()
    assert no_temps(clean) == []
    again = cli(clean, "record")
    assert again.exit_code == 2 and "no edit in progress" in again.output
    assert "start again" not in again.output
