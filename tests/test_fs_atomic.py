"""Scratch directories (overlay/fs/atomic.py): those of dead overlay processes, and old
ones from before their names had a pid, are swept (by an export too); a live
process's and anything not overlay's are kept."""

from __future__ import annotations

import os

from gitfixtures import dead_pid, scratch_leftovers
from gitfixtures import overlay_process as run

from overlay.fs.atomic import sweep_scratch_dirs


def test_export_sweeps_dead_scratch_dirs(ov, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    kept = scratch_leftovers(tmp)
    result = run(ov, "export", str(tmp_path / "dest"), env={"TMPDIR": str(tmp)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in tmp.iterdir()) == [kept.name]


def test_sweep_scratch_dirs_keeps_live_and_foreign_directories(tmp_path):
    dead = tmp_path / f"overlay-idx-{dead_pid()}-abcdefgh"
    live = tmp_path / f"overlay-idx-{os.getpid()}-abcdefgh"
    foreign = (
        tmp_path / "overlay-idx-1234567890123-abcdefgh"
    )  # no pid of ours can be that long
    for d in (dead, live, foreign):
        d.mkdir()
    link = tmp_path / f"overlay-merge-{dead_pid()}-linkxxxx"
    link.symlink_to(live)
    assert sweep_scratch_dirs(str(tmp_path)) == [dead.name]
    assert live.is_dir() and foreign.is_dir() and link.is_symlink()
