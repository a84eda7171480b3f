"""Step 2 of a run, the series carried (overlay/rebase/patches.py): a patch that repeats
an earlier one is said to be that one's, and a patch whose recorded blobs cannot be
found is never carried by its text."""

from __future__ import annotations

from gitfixtures import cli, lines
from seriesfixtures import add_patch, made_elsewhere, patch_bytes, write_fixes


def test_a_patch_repeating_an_earlier_one_is_said_to_be_that_ones(ov, w):
    device = "mlx/backend/rocm/device.cpp"
    data = add_patch(
        ov, "0001-device.patch", {device: lines("device", change={9: "d9"})}
    )
    # 0002 holds the same change, made on the pin below the series (as a colleague's
    # copy of the fix would be): empty once 0001 is carried.
    ov.add_patch("0002-again.patch", data.replace(b"Local-Fix: 1", b"Local-Fix: 2"))
    write_fixes(ov, [("Device.", [device]), ("Again.", [device])])
    done = cli(ov, "rebase", "--onto", w.pin_clean)
    assert done.exit_code == 0, done.output
    assert "0001-device.patch, earlier in the series" in done.output, done.output
    assert "already upstream" not in done.output


def test_rebase_never_carries_an_unverified_patch_by_its_text(ov, w, tmp_path):
    base = lines("core", change={1: "elsewhere 1", 5: "core 5 // rocm hook"})
    data = made_elsewhere(
        ov, tmp_path, "mlx/core.cpp", base, base.replace("core 20\n", "core 20 fixed\n")
    )
    stopped = cli(ov, "rebase", "--onto", w.pin_clean)
    assert stopped.exit_code == 1, stopped.output
    assert "not in the git store" in stopped.output, stopped.output
    assert "--accept-text" in stopped.output
    assert cli(ov, "rebase", "--abort").exit_code == 0
    assert patch_bytes(ov, "0001-elsewhere.patch") == data
