"""``overlay status`` (overlay/cli/status.py) against an export: the hand edits it names
are the ones ``export`` names, after the layer changed."""

from __future__ import annotations

from gitfixtures import cli, lines
from seriesfixtures import add_patch


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
    note = f"warning: {dest}: 1 file(s) edited or deleted by hand since the export were left as they are: mlx/ops.cpp"
    assert note in status.output and "stale" in status.output  # device.h is not an edit
    exported = cli(ov, "export", str(dest))
    assert exported.exit_code == 0 and note in exported.output, exported.output
    assert "1 written" in exported.output  # device.cpp; device.h already held it
    again = cli(ov, "status", "--dest", str(dest))
    assert note in again.output and "up to date" not in again.output
    assert "(the layer's tree, 1 file(s) edited or deleted by hand," in again.output
    (dest / "mlx/ops.cpp").unlink()  # the edit undone: export restores the file
    assert cli(ov, "export", "--force", str(dest)).exit_code == 0
    clean = cli(ov, "status", "--dest", str(dest))
    assert "(up to date," in clean.output and "warning" not in clean.output


def test_status_names_files_no_export_wrote_as_export_does(ov, tmp_path):
    """A file DEST holds that no export wrote is built with DEST: status says so, with
    the warning export gives, instead of "up to date"."""
    dest = tmp_path / "dest"
    assert cli(ov, "export", str(dest)).exit_code == 0
    (dest / "mlx" / "extra.txt").write_text("added by hand\n")
    status = cli(ov, "status", "--dest", str(dest))
    assert status.exit_code == 0, status.output
    assert "(the layer's tree, 1 file(s) the layer does not have," in status.output
    note = f"warning: {dest}: 1 file(s) that the layer does not have were left as they are: mlx/extra.txt"
    assert note in status.output and "up to date" not in status.output
    exported = cli(ov, "export", str(dest))
    assert note in exported.output  # the same line as export's
    (dest / "mlx" / "extra.txt").unlink()
    assert "(up to date," in cli(ov, "status", "--dest", str(dest)).output
