"""What a run left, in words (overlay/rebase/ondisk.py): a Ctrl-C during a run says how
to continue or abort it, and one after it completed (or during its write phase, held
back until the records are whole) says so; ``--abort``, ``--continue``, ``--skip`` and
``--drop`` with no run in progress say what there is to undo, and how; what killed
commands leave (record temps, a refresh's temp, dead scratch directories) is swept by
the next run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from gitfixtures import cli, lines, make_patch, overlay_lines, scratch_leftovers
from gitfixtures import overlay_process as run
from seriesfixtures import add_patch, core_resolved_run, stopped_run

from overlay.engine.layers import compute_layers
from overlay.fs.atomic import TEMP_RE
from overlay.git.store import Store
from overlay.records.manifest import load_manifest

ROOT = Path(__file__).resolve().parent.parent


# -- a Ctrl-C during and after a run ------------------------------------------


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


def test_ctrl_c_while_a_run_starts_leaves_no_state_directory(ov, w, monkeypatch):
    from overlay.rebase import base

    monkeypatch.setattr(base, "write_backup", _interrupt)
    stopped = cli(ov, "rebase", "--onto", w.pin_clean)
    assert stopped.exit_code == 130, stopped.output
    (line,) = overlay_lines(stopped.output)
    assert "interrupted before the rebase started: nothing was changed" in line
    state = ov.root / ".overlay"
    assert not (state / "rebase.tmp-new").exists()
    assert not (state / "rebase").exists()
    status = cli(ov, "rebase", "--status")
    assert status.exit_code == 0 and "no rebase or sync in progress" in status.output


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
    line then says the run completed, and it is true (no "stopped and resumable"
    with records already rewritten)."""
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


# -- an action with no run in progress ------------------------------------------


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


def test_abort_after_a_committed_run_names_git_revert_not_checkout(ov, w):
    """Once the run's records are committed, `git checkout -- PATHS` would undo
    nothing: the hint names `git revert` instead; uncommitted, it names checkout."""

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=ov.root,
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "the records")
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 0
    uncommitted = cli(ov, "rebase", "--abort")
    assert uncommitted.exit_code == 2
    assert "git checkout -- patches-rocm LOCAL_FIXES.md" in uncommitted.output
    git("add", "-A")
    git("commit", "-q", "-m", "overlay rebase")
    late = cli(ov, "rebase", "--abort")
    assert late.exit_code == 2 and "no rebase or sync in progress" in late.output
    assert (
        "completed and is committed (its patches-rocm/overlay.toml is as in HEAD)"
        in late.output
    )
    assert "`git revert` of the commit that holds it" in late.output
    assert "git checkout" not in late.output
    # An edit of another record after the commit (a retarget entry's prose) does not
    # undo it: the checkout would throw that edit away and leave the run.
    with open(ov.root / "LOCAL_FIXES.md", "a") as fh:
        fh.write("A line written after the commit.\n")
    edited = cli(ov, "rebase", "--abort")
    assert "`git revert` of the commit that holds it" in edited.output
    assert "git checkout" not in edited.output


def _git_repo(ov) -> None:
    """The overlay's records committed in a git repository of their own."""
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "records"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=ov.root,
            check=True,
            capture_output=True,
        )


def test_abort_names_the_new_resolution_checkout_leaves_and_only_then(ov, w):
    """`git checkout -- PATHS` leaves a file git does not track: the hint names the
    resolution the run added by hand-removal, and says nothing of it when the run
    added none."""
    _git_repo(ov)
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 0
    clean = cli(ov, "rebase", "--abort")
    assert "git checkout -- patches-rocm LOCAL_FIXES.md" in clean.output
    assert "by hand" not in clean.output  # the run wrote no resolution
    subprocess.run(
        ["git", "checkout", "--", "patches-rocm", "LOCAL_FIXES.md"],
        cwd=ov.root,
        check=True,
    )
    core_resolved_run(ov, w)
    late = cli(ov, "rebase", "--abort")
    assert late.exit_code == 2, late.output
    assert (
        "then remove by hand what it added, which git does not track: "
        "patches-rocm/resolved/mlx/core.cpp"
    ) in late.output


def test_abort_where_no_run_ever_completed_names_no_undo(ov):
    never = cli(ov, "rebase", "--abort")
    assert never.exit_code == 2 and "no rebase or sync in progress" in never.output
    assert (
        "no completed run is recorded here either (.overlay/last-rebase.json)"
        in never.output
    )
    assert (
        "git checkout" not in never.output
        and "overlay rebase --onto SHA" in never.output
    )


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


# -- what killed commands leave behind, swept ---------------------------------


def _refreshable(ov) -> Path:
    """A patch whose refresh changes bytes (a Date: header, which refresh drops)."""
    store = Store()
    layers = compute_layers(store, load_manifest(str(ov.root)), str(ov.root))
    data, _ = make_patch(
        store, layers.patched, {"mlx/ops.cpp": lines("ops", change={3: "ops 3 fixed"})}
    )
    data = data.replace(
        b"Subject:", b"Date: Mon, 1 Jan 2024 00:00:00 +0000\nSubject:", 1
    )
    return ov.add_patch("0001-a.patch", data)


def _temps(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if TEMP_RE.match(p.name)
    )


def test_a_refresh_killed_before_its_rename_leaves_nothing_after_the_next_run(
    ov, tmp_path
):
    patch = _refreshable(ov)
    before = patch.read_bytes()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # A run killed inside a scratch directory (its index) leaves it, named with its pid.
    killed = run(
        ov, "refresh", env={"OVERLAY_TEST_KILL_AT": "scratch-idx", "TMPDIR": str(tmp)}
    )
    assert killed.returncode == -9
    left = [p.name for p in tmp.iterdir() if p.name.startswith("overlay-idx-")]
    assert left and all(re.match(r"overlay-idx-\d+-", n) for n in left)
    # A run killed just before it renames the rewritten patch into place leaves its temp file.
    killed = run(
        ov, "refresh", env={"OVERLAY_TEST_KILL_AT": "refresh", "TMPDIR": str(tmp)}
    )
    assert killed.returncode == -9
    assert patch.read_bytes() == before
    assert _temps(ov.root) and all(
        t.startswith("patches-rocm/.0001-a.patch.") for t in _temps(ov.root)
    )
    live = tmp / f"overlay-merge-{os.getpid()}-abcdefgh"  # this process is alive: kept
    live.mkdir()
    other = tmp / "overlay-notes"  # not ours: kept
    other.mkdir()

    done = run(ov, "refresh", env={"TMPDIR": str(tmp)})
    assert done.returncode == 0, done.stderr
    assert "rewrote 0001-a.patch" in done.stdout and b"Date:" not in patch.read_bytes()
    assert _temps(ov.root) == []
    assert sorted(p.name for p in tmp.iterdir()) == sorted([live.name, other.name])


@pytest.mark.parametrize(
    "command", [("rebase", "--abort"), ("rebase", "--onto", "PIN")]
)
def test_rebase_and_abort_sweep_record_temps_and_dead_scratch_dirs(
    ov, w, tmp_path, command
):
    if command[1] == "--abort":
        stopped_run(ov, w)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    kept = scratch_leftovers(tmp)
    (ov.root / "patches-rocm" / "resolved" / "mlx").mkdir(parents=True, exist_ok=True)
    for path in (
        ov.root / "patches-rocm" / ".series.k3j9x_2q.tmp",
        ov.root / ".LOCAL_FIXES.md.abcdefgh.tmp",
        ov.root / "patches-rocm" / ".0001-x.patch.zzzzzzzz.tmp",
        ov.root / "patches-rocm" / "resolved" / "mlx" / ".core.cpp.q1w2e3r4.tmp",
    ):
        path.write_text(
            "half-written\n"
        )  # what a kill just before atomic_write's rename leaves
    result = run(
        ov,
        *[w.pin_clean if a == "PIN" else a for a in command],
        env={"TMPDIR": str(tmp)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert _temps(ov.root) == []  # --abort's "as it was before the run" is true
    assert sorted(p.name for p in tmp.iterdir()) == [kept.name]
