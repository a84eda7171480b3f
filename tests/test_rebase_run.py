"""The resumable run (overlay/rebase/run.py): ``--skip`` that would delete a patch asks
for ``--drop`` and deletes nothing, while an emptied patch is dropped by either."""

from __future__ import annotations

from gitfixtures import cli, lines, overlay_lines
from seriesfixtures import add_patch


def test_skip_on_the_last_stop_asks_for_drop_and_deletes_nothing(ov, w):
    add_patch(
        ov,
        "0001-ops.patch",
        {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})},
        fix=7,
    )
    assert (
        cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 1
    )  # the only (last) stop
    asked = cli(ov, "rebase", "--skip")
    assert asked.exit_code == 1, asked.output
    (line,) = overlay_lines(asked.output)
    assert (
        "--skip would delete patches-rocm/0001-ops.patch" in line
        and "LOCAL_FIXES entry 7 stays" in line
    )
    assert "`overlay rebase --drop` drops it" in line and "--abort" in line
    assert (ov.root / "patches-rocm" / "0001-ops.patch").exists()
    assert (
        "stopped at patch 0001-ops.patch" in cli(ov, "rebase", "--status").output
    )  # still resumable
    assert (
        cli(ov, "rebase", "--abort").exit_code == 0
    )  # and --abort still restores everything
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 1
    dropped = cli(ov, "rebase", "--drop")
    assert (
        dropped.exit_code == 0
        and "0001-ops.patch: skipped (dropped by --drop" in dropped.output
    )
    assert not (ov.root / "patches-rocm" / "0001-ops.patch").exists()


def test_skip_on_a_patch_that_changes_nothing_still_drops_it(ov, w):
    add_patch(
        ov, "0001-h.patch", {"mlx/backend/rocm/device.h": "#pragma once\n// patched\n"}
    )
    new_fork = w.fork.commit({"mlx/backend/rocm/device.h": None}, "fork drops device.h")
    assert cli(ov, "sync", "--fork", new_fork).exit_code == 1
    (
        ov.root
        / ".overlay"
        / "rebase"
        / "work"
        / "mlx"
        / "backend"
        / "rocm"
        / "device.h"
    ).unlink()
    empty = cli(ov, "sync", "--continue")  # the emptied patch: the run asks here
    assert (
        empty.exit_code == 1 and "`overlay sync --drop` (or `--skip`)" in empty.output
    )
    assert cli(ov, "sync", "--skip").exit_code == 0  # the answer
    assert not (ov.root / "patches-rocm" / "0001-h.patch").exists()
