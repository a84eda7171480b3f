"""What a completed run writes (overlay/rebase/commit.py): the range-diff of the last
rebase names patches by file and Local-Fix number; resolutions that are no longer wanted
go while git-ignored files stay; a sync killed after its manifest write completes with
one review mark."""

from __future__ import annotations

import re

from gitfixtures import cli, git, lines
from seriesfixtures import PDIR, add_patch, write_fixes


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


def test_resolutions_at_commit_unwanted_deleted_ignored_kept(ov, w):
    """The commit asks git's ignore rules only about files that are not wanted: an
    unwanted record still goes, an ignored file still stays."""
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp"
    work.write_text(lines("core", change={5: "core 5 both", 25: "core 25 upstream"}))
    assert cli(ov, "rebase", "--continue").exit_code == 0
    resolved = ov.root / "patches-rocm" / "resolved"
    git(ov.root, "init", "-q")  # ignore rules need a work tree
    (ov.root / ".gitignore").write_text(".DS_Store\n")
    (resolved / ".DS_Store").write_bytes(b"finder\n")
    back = cli(ov, "rebase", "--onto", w.base)  # no conflict: the resolution goes
    assert back.exit_code == 0 and "resolution mlx/core.cpp: removed" in back.output
    assert not (resolved / "mlx" / "core.cpp").exists()
    assert (resolved / ".DS_Store").read_bytes() == b"finder\n"


def test_a_sync_killed_after_its_manifest_write_completes_with_one_review_mark(ov, w):
    from gitfixtures import overlay_process

    device = "mlx/backend/rocm/device.cpp"
    add_patch(ov, "0001-device.patch", {device: lines("device", change={9: "d9"})})
    write_fixes(ov, [("Device.", [device])])
    fork2 = w.fork.commit({"docs/rocm.md": "fork docs, new page\n"}, "fork docs")
    killed = overlay_process(
        ov, "sync", "--fork", fork2, env={"OVERLAY_TEST_KILL_AT": "commit"}
    )
    assert killed.returncode == -9, killed.stderr
    manifest = (ov.root / PDIR / "overlay.toml").read_text()
    assert manifest.count("uncarried-reviewed") == 1, manifest
    done = cli(ov, "sync", "--continue")
    assert done.exit_code == 0, done.output
    assert "not carried: the fork changed 1 path(s)" in done.output, done.output
    manifest = (ov.root / PDIR / "overlay.toml").read_text()
    assert manifest.count("uncarried-reviewed") == 1
    assert f'uncarried-reviewed = "{w.fork_commit}"' in manifest
    assert f'commit = "{fork2}"' in manifest
