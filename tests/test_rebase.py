"""`overlay rebase` / `overlay sync` on real fixture repositories."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gitfixtures import cli, lines, records_hash
from seriesfixtures import add_patch, core_resolved_run, manifest_text

ROOT = Path(__file__).resolve().parent.parent


def test_clean_rebase_moves_the_pin_and_keeps_comments(ov, w):
    patch = add_patch(
        ov,
        "0001-device.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={9: "d9"})},
    )
    result = cli(ov, "rebase", "--onto", w.pin_clean)
    assert result.exit_code == 0, result.output
    text = manifest_text(ov)
    assert f'pin = "{w.pin_clean}"   # the pin' in text and text.startswith(
        "# test manifest"
    )
    assert (
        ov.root / "patches-rocm" / "0001-device.patch"
    ).read_bytes() == patch  # unchanged bytes
    assert "patch 0001-device.patch: clean" in result.output
    report = (ov.root / ".overlay" / "last-rebase.md").read_text()
    assert (
        f"`{w.pin_clean}`" in report and "| `0001-device.patch` | 1 | clean |" in report
    )
    assert "Range-diff" in report
    assert f"({w.pin_clean[:8]})" in (ov.root / "LOCAL_FIXES.md").read_text()
    assert not (ov.root / ".overlay" / "rebase").exists()
    assert cli(ov, "tree").exit_code == 0


def test_conflict_markers_continue_and_recorded_resolution(ov, w):
    first = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert (
        first.exit_code == 1
        and "mlx/core.cpp: the fork delta conflicts" in first.output
    )
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp"
    text = work.read_text()
    assert (
        f"<<<<<<< pin {w.pin_conflict[:8]}" in text
        and f">>>>>>> fork {w.fork_commit[:8]}" in text
    )
    assert f"||||||| merge base {w.base[:8]}" in text
    assert manifest_text(ov).count(w.base) == 2  # nothing written yet
    still = cli(ov, "rebase", "--continue")
    assert still.exit_code == 1 and "core.cpp:5: conflict marker left" in still.output
    status = cli(ov, "rebase", "--status")
    assert "stopped at resolution mlx/core.cpp" in status.output
    assert status.output.endswith(  # no --skip; then the file to edit
        "then --continue (or --abort)\n  edit .overlay/rebase/work/mlx/core.cpp\n"
    )
    # The series waits for the fork layer: --status says so rather than list nothing.
    assert "patches: not carried yet (the fork delta is settled first)" in status.output
    resolved = lines(
        "core",
        change={5: "core 5 upstream rewrite // rocm hook", 25: "core 25 upstream"},
    )
    work.write_text(resolved)
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output
    assert (
        ov.root / "patches-rocm" / "resolved" / "mlx" / "core.cpp"
    ).read_text() == resolved
    assert f'pin = "{w.pin_conflict}"' in manifest_text(ov)
    assert "resolution mlx/core.cpp: resolved" in done.output

    # Upstream moves on elsewhere in the file: the recorded resolution is carried 3-way.
    newer = w.upstream.commit(
        {
            "mlx/core.cpp": lines(
                "core",
                change={
                    5: "core 5 upstream rewrite",
                    25: "core 25 upstream",
                    29: "core 29 new",
                },
            )
        },
        "upstream edits line 29",
    )
    again = cli(ov, "rebase", "--onto", newer)
    assert again.exit_code == 0, again.output
    assert "resolution mlx/core.cpp: carried" in again.output
    carried = (ov.root / "patches-rocm" / "resolved" / "mlx" / "core.cpp").read_text()
    assert (
        "core 5 upstream rewrite // rocm hook" in carried and "core 29 new" in carried
    )


def test_rr_cache_reuses_a_recorded_resolution(ov, w):
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp"
    resolved = lines("core", change={5: "core 5 both", 25: "core 25 upstream"})
    work.write_text(resolved)
    assert cli(ov, "rebase", "--continue").exit_code == 0
    back = cli(ov, "rebase", "--onto", w.base)  # back to the merge base: no conflict
    assert back.exit_code == 0 and "resolution mlx/core.cpp: removed" in back.output
    assert not (ov.root / "patches-rocm" / "resolved").exists()
    again = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert again.exit_code == 0, again.output
    assert (
        "resolution mlx/core.cpp: reused" in again.output and "rr-cache" in again.output
    )
    assert (
        ov.root / "patches-rocm" / "resolved" / "mlx" / "core.cpp"
    ).read_text() == resolved


def test_a_removed_resolution_is_remembered_for_the_way_back(ov, w):
    """A resolution that comes with the records (a fresh clone: no rr-cache) and goes
    because its path stops conflicting is kept in the rr-cache, so the run back onto
    the same conflict restores it byte for byte instead of stopping."""
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp"
    resolved = lines(
        "core", change={5: "core 5 both \xe9 latin-1", 25: "core 25 upstream"}
    ).encode("latin-1")
    work.write_bytes(resolved)
    assert cli(ov, "rebase", "--continue").exit_code == 0
    shutil.rmtree(
        ov.root / ".overlay" / "rr-cache"
    )  # as in a clone that got the records from git
    back = cli(ov, "rebase", "--onto", w.base)
    assert back.exit_code == 0 and "resolution mlx/core.cpp: removed" in back.output
    assert not (ov.root / "patches-rocm" / "resolved").exists()
    report = (ov.root / ".overlay" / "last-rebase.md").read_text()
    assert "stays in the rr-cache" in report
    again = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert again.exit_code == 0, again.output
    assert "resolution mlx/core.cpp: reused" in again.output
    assert (
        ov.root / "patches-rocm" / "resolved" / "mlx" / "core.cpp"
    ).read_bytes() == resolved


def test_an_aborted_run_forgets_the_resolutions_it_remembered(ov, w):
    """--abort forgets what the run put in the rr-cache, removed resolutions included."""
    shutil.rmtree(core_resolved_run(ov, w))
    add_patch(
        ov, "0001-ops.patch", {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})}
    )
    stop = cli(
        ov, "rebase", "--onto", w.base
    )  # core.cpp stops conflicting; the patch's line 2 does
    assert stop.exit_code == 1, stop.output
    assert "resolution mlx/core.cpp: removed" in cli(ov, "rebase", "--status").output
    assert any(
        p.suffix != ".path" for p in (ov.root / ".overlay" / "rr-cache").iterdir()
    )
    aborted = cli(ov, "rebase", "--abort")
    assert aborted.exit_code == 0
    # and says so: a next run does not replay it (the removed resolution itself is
    # back in patches-rocm/resolved/ with the rest of the records)
    assert (
        "forgot the 1 resolution(s) this run recorded in .overlay/rr-cache/: "
        "a next run does not replay them" in aborted.output
    ), aborted.output
    assert (ov.root / "patches-rocm" / "resolved" / "mlx" / "core.cpp").exists()
    # the run's entries were all it held: the git-ignored directory goes with them
    assert not (ov.root / ".overlay" / "rr-cache").exists()


def test_an_abort_keeps_the_rr_cache_entries_of_earlier_runs(ov, w):
    """--abort removes only what the run recorded: an earlier run's entry, and with it
    the rr-cache directory, stays."""
    cache = core_resolved_run(ov, w)
    # An earlier run's entry for another conflict, in place of this run's own (which
    # the next run then records again, as the test above has it).
    shutil.rmtree(cache)
    cache.mkdir()
    (cache / ("e" * 64)).write_text("an earlier resolution\n")
    (cache / ("e" * 64 + ".path")).write_text("mlx/other.cpp")
    earlier = sorted(p.name for p in cache.iterdir())
    add_patch(
        ov, "0001-ops.patch", {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})}
    )
    assert cli(ov, "rebase", "--onto", w.base).exit_code == 1
    assert sorted(p.name for p in cache.iterdir()) != earlier
    assert cli(ov, "rebase", "--abort").exit_code == 0
    assert sorted(p.name for p in cache.iterdir()) == earlier


def test_patch_conflict_skip_names_the_entry(ov, w):
    add_patch(
        ov,
        "0001-ops.patch",
        {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})},
        fix=7,
    )
    stop = cli(ov, "rebase", "--onto", w.pin_clean)
    assert (
        stop.exit_code == 1
        and "patch 0001-ops.patch conflicts with the new base" in stop.output
    )
    assert (
        "mlx/ops.cpp (CONFLICT (contents))" in stop.output
        and "LOCAL_FIXES entry 7 stays" in stop.output
    )
    work = (ov.root / ".overlay" / "rebase" / "work" / "mlx" / "ops.cpp").read_text()
    assert "<<<<<<< new base" in work and "||||||| patch pre-image" in work
    assert ">>>>>>> patch 0001-ops.patch" in work
    skipped = cli(
        ov, "rebase", "--drop"
    )  # a conflict stop: --skip would ask for this word
    assert skipped.exit_code == 0, skipped.output
    assert "dropped by --drop; move or delete LOCAL_FIXES entry 7" in skipped.output
    assert not (ov.root / "patches-rocm" / "0001-ops.patch").exists()
    assert (ov.root / "patches-rocm" / "series").read_text() == ""


def test_patch_conflict_continue_refreshes_the_patch(ov, w):
    add_patch(
        ov, "0001-ops.patch", {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})}
    )
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 1
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "ops.cpp"
    work.write_text(lines("ops", change={2: "ops 2 upstream and ours"}))
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output
    patch = (ov.root / "patches-rocm" / "0001-ops.patch").read_text()
    assert "-ops 2 upstream\n+ops 2 upstream and ours" in patch
    assert cli(ov, "verify", "--only", "SER").exit_code == 0


def test_abort_restores_byte_for_byte(ov, w):
    add_patch(
        ov, "0001-ops.patch", {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})}
    )
    ov.add_resolution("mlx/backend/rocm/device.h", "stale\n")
    before = records_hash(ov)
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 1
    aborted = cli(ov, "rebase", "--abort")
    assert aborted.exit_code == 0 and "as it was before the run" in aborted.output
    assert records_hash(ov) == before
    idle = cli(ov, "rebase", "--status")
    assert idle.exit_code == 0 and "no rebase or sync in progress" in idle.output
    again = cli(ov, "rebase", "--abort")
    # an aborted run completed nothing: no undo is named for it
    assert again.exit_code == 2 and "no completed run is recorded here" in again.output
    assert "git checkout" not in again.output


def _run_killed(o, *args, kill_at):
    env = dict(os.environ, OVERLAY_TEST_KILL_AT=kill_at, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "overlay.cli", "-C", str(o.root), *args],
        env=env,
        capture_output=True,
    )


@pytest.mark.parametrize("finish", ["--continue", "--abort"])
def test_sigkill_mid_commit_then_continue_or_abort(ov, w, finish):
    add_patch(
        ov,
        "0001-device.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={9: "d9"})},
    )
    before = records_hash(ov)
    proc = _run_killed(ov, "rebase", "--onto", w.pin_clean, kill_at="commit")
    assert proc.returncode == -9
    assert f'pin = "{w.pin_clean}"' in manifest_text(
        ov
    )  # killed after the manifest was written
    result = cli(ov, "rebase", finish)
    assert result.exit_code == 0, result.output
    if finish == "--abort":
        assert records_hash(ov) == before
    else:
        assert f'pin = "{w.pin_clean}"' in manifest_text(ov)
        assert cli(ov, "tree").exit_code == 0


def test_sigkill_between_patches_then_continue(ov, w):
    add_patch(
        ov,
        "0001-a.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={9: "d9"})},
    )
    # Upstream's pin_clean changes core.cpp line 25: this one needs a merge, after the
    # exact batch of 0001 (the first checkpoint).
    add_patch(
        ov,
        "0002-b.patch",
        {
            "mlx/core.cpp": lines(
                "core", change={5: "core 5 // rocm hook", 22: "core 22 fixed"}
            )
        },
        fix=2,
    )
    proc = _run_killed(ov, "rebase", "--onto", w.pin_clean, kill_at="patch")
    assert proc.returncode == -9
    status = cli(ov, "rebase", "--status").output
    assert "0001-a.patch: clean" in status and "0002-b.patch: pending" in status
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output
    assert (
        "0001-a.patch: clean" in done.output and "0002-b.patch: merged" in done.output
    )
    check = cli(
        ov, "verify", "--only", "SER", "--only", "LAY"
    )  # the fixture has no full LOCAL_FIXES.md
    assert check.exit_code == 0, check.output


def test_patch_already_upstream_is_dropped_and_named(ov, w):
    edits = {"mlx/ops.cpp": lines("ops", change={12: "ops 12 fixed"})}
    add_patch(ov, "0001-ops.patch", edits, fix=4)
    from gitfixtures import git

    git(w.upstream.path, "checkout", "-q", "-b", "release", w.pin_clean)
    picked = w.upstream.commit(
        {"mlx/ops.cpp": lines("ops", change={2: "ops 2 upstream", 12: "ops 12 fixed"})},
        "cherry-pick of the fix",
    )
    done = cli(ov, "rebase", "--onto", picked)
    assert done.exit_code == 0, done.output
    assert "patch 0001-ops.patch: upstream" in done.output
    assert not (ov.root / "patches-rocm" / "0001-ops.patch").exists()
    report = (ov.root / ".overlay" / "last-rebase.md").read_text()
    assert "| `0001-ops.patch` | 4 | upstream |" in report


def test_sync_to_a_fork_that_deletes_a_patched_file(ov, w):
    add_patch(
        ov, "0001-h.patch", {"mlx/backend/rocm/device.h": "#pragma once\n// patched\n"}
    )
    new_fork = w.fork.commit({"mlx/backend/rocm/device.h": None}, "fork drops device.h")
    stop = cli(ov, "sync", "--fork", new_fork)
    assert (
        stop.exit_code == 1
        and "patch 0001-h.patch conflicts with the new base" in stop.output
    )
    assert "device.h (CONFLICT (modify/delete): gone from the new base" in stop.output
    work = (
        ov.root
        / ".overlay"
        / "rebase"
        / "work"
        / "mlx"
        / "backend"
        / "rocm"
        / "device.h"
    )
    assert work.read_text() == "#pragma once\n// patched\n"  # what the patch wanted
    work.unlink()  # accept the fork's deletion: the patch becomes empty
    empty = cli(ov, "sync", "--continue")
    assert empty.exit_code == 1 and "changes nothing on the new base" in empty.output
    assert "--skip" in empty.output
    assert cli(ov, "sync", "--continue").exit_code == 1  # still no word: still stopped
    assert (ov.root / "patches-rocm" / "0001-h.patch").exists()
    done = cli(ov, "sync", "--skip")
    assert done.exit_code == 0, done.output
    assert (
        "0001-h.patch: skipped" in done.output
        and not (ov.root / "patches-rocm" / "0001-h.patch").exists()
    )
    assert f'commit = "{new_fork}"' in manifest_text(ov)
    assert f"@{new_fork[:8]}" in (ov.root / "LOCAL_FIXES.md").read_text()


def test_sync_to_a_fork_that_adds_the_file_a_patch_creates(ov, w):
    add_patch(
        ov,
        "0001-new.patch",
        {"mlx/backend/rocm/extra.cpp": "int extra() { return 1; }\n"},
    )
    same = w.fork.commit(
        {"mlx/backend/rocm/extra.cpp": "int extra() { return 1; }\n"},
        "fork adds extra.cpp",
    )
    done = cli(ov, "sync", "--fork", same)
    assert done.exit_code == 0, done.output
    assert "0001-new.patch: upstream" in done.output


def test_sync_refuses_a_fork_that_does_not_descend(ov, w):
    w.fork.checkout(w.base)
    rewritten = w.fork.commit(
        {"mlx/backend/rocm/device.h": "#pragma once\n// rewritten\n"},
        "a rewritten fork",
    )
    result = cli(ov, "sync", "--fork", rewritten)
    assert result.exit_code == 2 and "does not descend from" in result.output
    assert "rewritten on purpose" in result.output
    assert cli(ov, "rebase", "--onto", "--evil").exit_code == 2


def test_nothing_to_do(ov, w):
    result = cli(ov, "rebase", "--onto", w.base)
    assert result.exit_code == 0 and "nothing to do" in result.output


def test_recorded_resolution_that_no_longer_merges_is_shown(ov, w):
    ov.write_manifest(w.pin_conflict)
    ov.add_resolution(
        "mlx/core.cpp", lines("core", change={5: "core 5 mine", 25: "core 25 upstream"})
    )
    newer = w.upstream.commit(
        {
            "mlx/core.cpp": lines(
                "core", change={5: "core 5 rewritten again", 25: "core 25 upstream"}
            )
        },
        "rewrite again",
    )
    stop = cli(ov, "rebase", "--onto", newer)
    assert stop.exit_code == 1 and "no longer merges cleanly" in stop.output
    recorded = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp.recorded"
    assert "core 5 mine" in recorded.read_text()


def test_backwards_pin_warns_and_next_steps_name_resolutions(ov, w):
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    status = cli(ov, "rebase", "--status").output
    assert "stopped at resolution mlx/core.cpp" in status, status
    assert "  edit .overlay/rebase/work/mlx/core.cpp\n" in status, status
    (ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp").write_text(
        lines("core", change={5: "core 5 both", 25: "core 25 upstream"})
    )
    done = cli(ov, "rebase", "--continue")
    assert (
        "review the retarget entries of LOCAL_FIXES.md for mlx/core.cpp" in done.output
    )
    back = cli(ov, "rebase", "--onto", w.pin_clean)
    assert "does not descend from the current pin" in back.output
    # The warning reaches the report a reviewer reads, not only this terminal, and
    # the next steps check the units before the full build (the user guide's order).
    md = (ov.root / ".overlay" / "last-rebase.md").read_text()
    assert "\n### Warnings\n\n- pin " in md, md
    assert "does not descend from the current pin" in md.split("### Resolutions")[0]
    last = json.loads((ov.root / ".overlay" / "last-rebase.json").read_text())
    assert any("does not descend" in line for line in last["warnings"])
    steps = md.split("### Next steps\n\n", 1)[1]
    assert steps.endswith(
        "- `overlay verify`\n- `overlay build --backend rocm --check`\n"
        "- `overlay build --backend rocm`\n- `overlay suite run`\n\n"
    )


def test_sigkill_after_the_stale_resolutions_are_remembered_keeps_the_series(ov, w):
    """A kill between the save that remembers a removed resolution and the save of the
    pending series leaves a state whose fork layer is done: --continue carries the
    series (it never writes an empty series file)."""
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp"
    work.write_text(lines("core", change={5: "core 5 both", 25: "core 25 upstream"}))
    assert cli(ov, "rebase", "--continue").exit_code == 0
    add_patch(
        ov,
        "0001-device.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={9: "d9"})},
    )
    series = (ov.root / "patches-rocm" / "series").read_text()
    # Back to the base: core.cpp stops conflicting, so its resolution is removed.
    proc = _run_killed(ov, "rebase", "--onto", w.base, kill_at="stale-remembered")
    assert proc.returncode == -9, proc.stderr
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output
    assert "patch 0001-device.patch: clean" in done.output
    assert (ov.root / "patches-rocm" / "series").read_text() == series
    assert not (ov.root / "patches-rocm" / "resolved" / "mlx" / "core.cpp").exists()
