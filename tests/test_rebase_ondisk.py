"""The stumbles of a first week (issue 17): each test failed before its fix.

Set-up within reach (1), root discovery (2), pin sanity (3, 4), interrupts (5),
a run in progress named (9), --abort after a completed run and --skip that asks
for --drop (6), export and status --dest naming the same hand edits (7), reports
naming patches by file and Local-Fix number (8), a hand-broken patch (10), a CI
gate that checked nothing (11). The edit loop (item 1) is tests/test_edit.py.
Real git fixture repositories, no network, no timing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from gitfixtures import cli, git, lines
from test_rebase import add_patch  # noqa: E402  (one way to add a fixture patch)

from overlay.cli import main

ROOT = Path(__file__).resolve().parent.parent


def overlay_lines(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.startswith("overlay:")]


# -- 1. set-up puts `overlay` within reach ---------------------------------------------


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def test_readme_setup_puts_overlay_on_path():
    setup = (
        _readme()
        .split("## Set-up on a fresh machine", 1)[1]
        .split("```sh", 1)[1]
        .split("```", 1)[0]
    )
    assert ". .venv/bin/activate" in setup
    dry = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "run"],
        capture_output=True,
        text=True,
        env=dict(os.environ, MAKEFLAGS=""),
    )
    if dry.returncode != 0 and "No rule" in dry.stderr:
        pytest.fail(dry.stderr)
    assert ". .venv/bin/activate" in dry.stdout  # make run says how to reach `overlay`


def test_every_readme_command_exists():
    text = _readme()
    commands = set(main.list_commands(None))
    shown = set(re.findall(r"`overlay ([a-z]+)", text))
    assert shown and shown <= commands, shown - commands
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.M))
    shown_make = set(re.findall(r"`make ([a-z][a-z-]*)`", text)) | set(
        re.findall(r"^make ([a-z-]+)", text, re.M)
    )
    assert shown_make and shown_make <= targets, shown_make - targets


# -- 2. root discovery ------------------------------------------------------------------


def test_root_is_found_upwards_from_a_subdirectory(overlay, monkeypatch):
    expected = CliRunner().invoke(
        main, ["-C", str(overlay.root), "tree", "--layer", "pin"]
    )
    assert expected.exit_code == 0, expected.output
    sub = overlay.root / "patches-rocm" / "deeper"
    sub.mkdir()
    monkeypatch.chdir(sub)
    found = CliRunner().invoke(main, ["tree", "--layer", "pin"])
    assert found.exit_code == 0, found.output
    assert found.output == expected.output
    # -C changes where the search starts, as git -C does.
    monkeypatch.chdir(overlay.root.parent)
    via_c = CliRunner().invoke(main, ["-C", str(sub), "tree", "--layer", "pin"])
    assert via_c.exit_code == 0 and via_c.output == expected.output


def test_no_root_names_where_it_looked(tmp_path, monkeypatch):
    start = tmp_path / "a" / "b"
    start.mkdir(parents=True)
    monkeypatch.chdir(start)
    result = CliRunner().invoke(main, ["tree"])
    assert result.exit_code == 2
    (line,) = overlay_lines(result.output)
    assert f"not found in {start} or any parent directory up to /" in line
    assert "Traceback" not in result.output
    missing = CliRunner().invoke(main, ["-C", str(tmp_path / "nope"), "tree"])
    assert missing.exit_code == 2 and "no such directory" in missing.output


def test_doctor_and_suite_still_run_outside_an_overlay(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doctor = CliRunner().invoke(main, ["doctor", "--no-network"])
    assert "manifest" in doctor.output and "Traceback" not in doctor.output


# -- 3/4. pin sanity --------------------------------------------------------------------


def test_rebase_onto_the_fork_commit_is_refused_without_force(ov, w):
    refused = cli(ov, "rebase", "--onto", w.fork_commit)
    assert refused.exit_code == 2, refused.output
    assert "is the fork commit" in refused.output and "--force" in refused.output
    assert not (ov.root / ".overlay" / "rebase").exists()
    forced = cli(ov, "rebase", "--onto", w.fork_commit, "--force")
    assert "accepted because of --force" in forced.output
    assert "refusing" not in forced.output


def test_rebase_onto_a_commit_on_no_upstream_branch_is_refused(ov, w):
    up = w.upstream.path
    git(up, "checkout", "-q", "--detach", w.pin_clean)
    pr = w.upstream.commit(
        {"mlx/ops.cpp": lines("ops", change={3: "ops 3 pull request"})}, "unmerged PR"
    )
    git(up, "update-ref", "refs/pull/7/head", pr)
    git(up, "checkout", "-q", "main")
    refused = cli(ov, "rebase", "--onto", pr)
    assert refused.exit_code == 2, refused.output
    (line,) = overlay_lines(refused.output)
    assert "no upstream branch or tag contains it" in line
    assert "pass --force" in refused.output
    assert cli(ov, "rebase", "--onto", pr, "--force").exit_code == 0


def test_backwards_pin_names_patches_citing_commits_the_pin_lacks(ov, w):
    ov.write_manifest(w.pin_clean)
    add_patch(
        ov,
        "0001-follow.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={3: "d3"})},
        fix=1,
    )
    add_patch(
        ov,
        "0002-other.patch",
        {"mlx/backend/rocm/device.h": "#pragma once\n// other\n"},
        fix=2,
    )
    (ov.root / "LOCAL_FIXES.md").write_text(
        textwrap.dedent(f"""\
        # Local changes relative to x/fork@{w.fork_commit[:8]}

        ## Retarget onto the MLX pin ({w.pin_clean[:8]})

        1. **Follow upstream ops.** Upstream {w.pin_clean[:9]} (upstream work) changed
           ops; `mlx/backend/rocm/device.cpp` follows it.

        2. **Older work.** Upstream {w.base[:10]} is the merge base; `mlx/backend/rocm/device.h`.

        """)
    )
    back = cli(ov, "rebase", "--onto", w.base)
    assert back.exit_code == 0, back.output
    warned = [ln for ln in back.output.splitlines() if "which the new pin lacks" in ln]
    assert len(warned) == 1, back.output
    assert (
        "0001-follow.patch (LOCAL_FIXES entry 1)" in warned[0]
        and w.pin_clean[:9] in warned[0]
    )


# -- 5. interrupts ----------------------------------------------------------------------


def _interrupt(*_a, **_k):
    raise KeyboardInterrupt


def test_ctrl_c_mid_rebase_says_continue_or_abort(ov, w, monkeypatch):
    add_patch(
        ov,
        "0001-device.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={9: "d9"})},
    )
    from overlay.rebase.run import Rebase

    original = Rebase._apply_patches
    monkeypatch.setattr(Rebase, "_apply_patches", _interrupt)
    stopped = cli(ov, "rebase", "--onto", w.pin_clean)
    assert stopped.exit_code == 130, stopped.output
    assert "Aborted!" not in stopped.output
    (line,) = overlay_lines(stopped.output)
    assert (
        "stopped and resumable with `overlay rebase --continue`" in line
        and "--abort" in line
    )
    monkeypatch.setattr(Rebase, "_apply_patches", original)
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output


def test_ctrl_c_after_the_run_completed_says_so(ov, w, monkeypatch):
    monkeypatch.setattr("overlay.rebase.report.render", _interrupt)
    late = cli(ov, "rebase", "--onto", w.pin_clean)
    assert late.exit_code == 130 and "Aborted!" not in late.output
    (line,) = overlay_lines(late.output)
    assert "after the rebase had completed" in line
    assert (
        f'pin = "{w.pin_clean}"'
        in (ov.root / "patches-rocm" / "overlay.toml").read_text()
    )


def test_ctrl_c_in_any_command_is_exit_130_one_line(overlay, monkeypatch):
    monkeypatch.setattr("overlay.engine.layers.compute_layers", _interrupt)
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "tree"])
    assert result.exit_code == 130 and "Aborted!" not in result.output
    assert overlay_lines(result.output) == ["overlay: interrupted"]


def test_real_sigint_mid_sync_in_a_fresh_process(ov, w):
    new_fork = w.fork.commit(
        {"mlx/backend/rocm/device.h": "#pragma once\n// newer\n"}, "fork moves on"
    )
    script = textwrap.dedent("""\
        import os, signal, sys
        import overlay.rebase.run as r
        r.Rebase._apply_patches = lambda self: os.kill(os.getpid(), signal.SIGINT)
        from overlay.cli import main
        main(sys.argv[1:], prog_name="overlay")
        """)
    proc = subprocess.run(
        [sys.executable, "-c", script, "-C", str(ov.root), "sync", "--fork", new_fork],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 130, proc.stderr
    assert "Aborted!" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "overlay: interrupted: the sync is stopped and resumable with `overlay sync --continue`, or undone "
        "with `overlay sync --abort` (`--status` shows where it stands)"
    ]
    assert cli(ov, "sync", "--abort").exit_code == 0


def test_sigint_while_the_records_are_written_lets_them_finish(ov, w):
    """Ctrl-C during the write phase is held back until the records are whole: the
    line then says the run completed, and it is true (a new user once got "stopped
    and resumable" with three records already rewritten)."""
    new_fork = w.fork.commit(
        {"mlx/backend/rocm/device.h": "#pragma once\n// newer\n"}, "fork moves on"
    )
    script = textwrap.dedent("""\
        import os, signal, sys
        import overlay.rebase.run as r
        real = r.Rebase._commit
        def commit(self, *args):
            os.kill(os.getpid(), signal.SIGINT)  # lands while the records are being written
            return real(self, *args)
        r.Rebase._commit = commit
        from overlay.cli import main
        main(sys.argv[1:], prog_name="overlay")
        """)
    proc = subprocess.run(
        [sys.executable, "-c", script, "-C", str(ov.root), "sync", "--fork", new_fork],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 130, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("overlay: interrupted after the sync had completed"), line
    assert (
        f'commit = "{new_fork}"'
        in (ov.root / "patches-rocm" / "overlay.toml").read_text()
    )
    assert not (ov.root / ".overlay" / "rebase").exists()
    assert cli(ov, "verify", "--only", "SER", "--only", "LAY").exit_code == 0


def test_interrupts_deferred_raises_after_the_block(tmp_path):
    script = textwrap.dedent("""\
        import os, signal, sys
        from overlay.rebase.ondisk import interrupts_deferred
        done = []
        try:
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                done.append("block finished")
            done.append("not reached")
        except KeyboardInterrupt:
            done.append("interrupted after")
        print(" / ".join(done))
        """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
    )
    assert proc.stdout.strip() == "block finished / interrupted after", proc.stderr


# -- 9. a run in progress is named ------------------------------------------------------


def test_onto_the_current_pin_during_a_run_names_the_run(ov, w):
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    again = cli(ov, "rebase", "--onto", w.base)  # the manifest still holds the old pin
    assert again.exit_code == 2, again.output
    assert "nothing to do" not in again.output
    assert "a rebase is in progress" in again.output and "--continue" in again.output


# -- 6. --abort after a completed run ---------------------------------------------------


def test_abort_after_a_completed_run_says_how_to_undo_it(ov, w):
    add_patch(
        ov,
        "0001-ops.patch",
        {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})},
        fix=7,
    )
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 1
    assert (
        cli(ov, "rebase", "--drop").exit_code == 0
    )  # the last stop: the run completes
    late = cli(ov, "rebase", "--abort")
    assert late.exit_code == 2
    assert "no rebase or sync in progress" in late.output
    assert "git diff --stat -- patches-rocm LOCAL_FIXES.md" in late.output
    assert "git checkout -- patches-rocm LOCAL_FIXES.md" in late.output
    assert (
        "patches-rocm/0001-ops.patch (deleted)" in late.output
        and "patches-rocm/series" in late.output
    )
    assert "LOCAL_FIXES.md (the pins in its headings)" in late.output


def test_abort_after_a_run_undone_with_git_does_not_quote_the_old_report(ov, w):
    manifest = ov.root / "patches-rocm" / "overlay.toml"
    before = manifest.read_bytes()
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 0
    manifest.write_bytes(
        before
    )  # the user undid it (`git checkout -- patches-rocm ...`)
    late = cli(ov, "rebase", "--abort")
    assert late.exit_code == 2 and "no rebase or sync in progress" in late.output
    assert (
        "is not what the manifest holds now" in late.output
        and "undone or superseded" in late.output
    )
    assert "git checkout" not in late.output


def test_continue_skip_drop_without_a_run_name_themselves(ov):
    for action in ("continue", "skip", "drop"):
        result = cli(ov, "rebase", f"--{action}")
        assert result.exit_code == 2
        assert (
            f"there is nothing for --{action} to" in result.output
            and "--abort" not in result.output
        )
        assert "overlay rebase --onto SHA" in result.output


def test_a_target_with_an_action_is_refused(ov, w):
    for args in (
        ("rebase", "--onto", w.pin_clean, "--abort"),
        ("sync", "--fork", w.base, "--continue"),
    ):
        result = cli(ov, *args)
        assert result.exit_code == 2, result.output
        assert "starts a run" in result.output and "give one of them" in result.output


def test_sync_to_an_older_fork_commit_says_backwards(ov, w):
    older = cli(ov, "sync", "--fork", w.base)
    assert older.exit_code == 2
    assert "older than the current" in older.output and "backwards" in older.output
    assert "rewritten" not in older.output


# -- 11. a CI gate that checked nothing -------------------------------------------------


def test_verify_strict_fails_on_warnings(ov):
    lenient = CliRunner().invoke(
        main, ["-C", str(ov.root), "--offline", "verify", "--only", "MAN"]
    )
    assert lenient.exit_code == 0 and "MAN002" in lenient.output
    strict = CliRunner().invoke(
        main, ["-C", str(ov.root), "--offline", "verify", "--only", "MAN", "--strict"]
    )
    assert strict.exit_code == 1 and "MAN002" in strict.output


def test_ci_fails_verify_when_the_layers_were_not_checked(ov):
    fixes = ov.root / "LOCAL_FIXES.md"
    fixes.write_text(
        fixes.read_text().replace("x/fork@", "world/fork@")
    )  # no error finding at all
    result = CliRunner().invoke(
        main, ["-C", str(ov.root), "--offline", "ci", "--only", "verify"]
    )
    assert result.exit_code == 1, result.output
    assert re.search(
        r"^verify\s+FAILED\s+the layers could not be checked \(MAN002",
        result.output,
        re.M,
    )
    assert (
        CliRunner().invoke(main, ["-C", str(ov.root), "--offline", "verify"]).exit_code
        == 0
    )  # verify alone passes


# -- 6. --skip that would delete a patch asks, as an emptied patch does ----------------------


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


# -- 7. export truth: status --dest and export name the same hand edits -----------------------


def test_status_and_export_agree_when_the_layer_changed(ov, w, tmp_path):
    dest = tmp_path / "export"
    assert cli(ov, "export", str(dest)).exit_code == 0
    new_h = "#pragma once\n// the new patch\n"
    (dest / "mlx/backend/rocm/device.h").write_text(
        new_h
    )  # what the new patch will write
    (dest / "mlx/ops.cpp").write_text("edited by hand\n")  # an edit no layer writes
    add_patch(
        ov,
        "0001-h.patch",
        {
            "mlx/backend/rocm/device.h": new_h,
            "mlx/backend/rocm/device.cpp": lines("device", change={1: "d1"}),
        },
    )
    status = cli(ov, "status", "--dest", str(dest))
    assert status.exit_code == 0, status.output
    note = f"warning: {dest}: 1 file(s) edited by hand since the export were left as they are: mlx/ops.cpp"
    assert note in status.output and "stale" in status.output  # device.h is not an edit
    exported = cli(ov, "export", str(dest))
    assert exported.exit_code == 0 and note in exported.output, exported.output
    assert "1 written" in exported.output  # device.cpp; device.h already held it
    again = cli(ov, "status", "--dest", str(dest))
    assert note in again.output and "up to date" in again.output


# -- 8. reports name patches by file name and Local-Fix number -------------------------------


def _range_diff(o) -> str:
    report = (o.root / ".overlay" / "last-rebase.md").read_text()
    section = report.split("### Range-diff", 1)[1].split("```")[1]
    assert not re.search(r"^\s*\d+:", section, re.M), section  # no series positions
    return section


def test_last_rebase_range_diff_names_patches(ov, w):
    add_patch(
        ov,
        "0001-device.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={9: "d9"})},
        fix=4,
    )
    assert (
        cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 0
    )  # every patch clean: the summary
    assert "0001-device.patch (fix 4) = 0001-device.patch (fix 4)" in _range_diff(ov)
    add_patch(
        ov,
        "0002-core.patch",
        {
            "mlx/core.cpp": lines(
                "core",
                change={
                    5: "core 5 // rocm hook",
                    20: "core 20 ours",
                    25: "core 25 upstream",
                },
            )
        },
        fix=5,
    )
    up = w.upstream.path
    git(up, "checkout", "-q", "--detach", w.pin_clean)
    side = w.upstream.commit(
        {
            "mlx/core.cpp": lines(
                "core", change={25: "core 25 upstream", 28: "core 28 up"}
            )
        },
        "upstream edits core.cpp again",
    )
    git(up, "update-ref", "refs/heads/side", side)
    git(up, "checkout", "-q", "main")
    done = cli(
        ov, "rebase", "--onto", side
    )  # 0002's pre-image changed: merged, git's range-diff runs
    assert done.exit_code == 0 and "0002-core.patch: merged" in done.output, done.output
    section = _range_diff(ov)
    assert "0001-device.patch (fix 4) = 0001-device.patch (fix 4)" in section
    assert re.search(
        r"^0002-core\.patch \(fix 5\) [=!] 0002-core\.patch \(fix 5\)$", section, re.M
    ), section


# -- 10. a hand-broken patch: its line, git's reason, no misleading FIX024 -------------------


def test_hand_broken_patch_gives_the_line_and_gits_reason_and_no_fix024(ov, w):
    from overlay.checks.verify import verify
    from overlay.workspace import Workspace

    data = add_patch(
        ov,
        "0001-device.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={3: "device 3 locked"})},
        fix=1,
    )
    (ov.root / "LOCAL_FIXES.md").write_text(
        (ov.root / "LOCAL_FIXES.md").read_text()
        + "1. **Lock.** `mlx/backend/rocm/device.cpp` is locked. "
        "Applies to the fork; kept in mlxcelverse under the 2026-10-06 fork policy, not proposed there.\n"
    )
    broken = data.replace(
        b"+device 3 locked\n", b"+device 3 locked\n+a line typed by hand\n"
    )
    (ov.root / "patches-rocm" / "0001-device.patch").write_bytes(broken)
    hunk_line = (
        broken.split(b"\n").index(
            next(ln for ln in broken.split(b"\n") if ln.startswith(b"@@"))
        )
        + 1
    )
    found = verify(Workspace(str(ov.root))).findings
    (ser004,) = [f for f in found if f.code == "SER004"]
    assert ser004.line == hunk_line and ser004.path == "patches-rocm/0001-device.patch"
    assert "hunk header says -6 +6 lines" in ser004.message
    assert "(git apply: corrupt patch at line" in ser004.message
    assert "refresh` cannot" in ser004.hint
    assert not [f for f in found if f.code == "FIX024"], found
    row = next(
        ln
        for ln in (ROOT / "docs" / "findings.md").read_text().splitlines()
        if ln.startswith("| SER004")
    )
    fix_column = row.rstrip(" |").rsplit(" | ", 1)[1]
    assert "refresh" not in fix_column or "cannot" in fix_column, row
