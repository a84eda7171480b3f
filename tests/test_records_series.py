"""The series file and its patch files (overlay/records/series.py): every writer of the
series keeps the file's own line ending (a rebase that drops a patch keeps a CRLF
series too); on hostile input (an entry that is not a regular file, a name too long, a
series that is not UTF-8, a patch that is a symlink) each read is one line or a
finding."""

from __future__ import annotations

import os

import pytest
from fuzzlib import failure_line, guarded_cli, hang_guard, verify_codes
from gitfixtures import PATCH, cli, lines
from seriesfixtures import add_patch, write_fixes

from overlay.fs.reading import RecordError
from overlay.records import series
from overlay.records.series import load_patch, read_series


@pytest.mark.parametrize("kind", ["fifo", "directory", "loop", "dirlink"])
def test_series_entry_that_is_not_a_file(clean, kind):
    """A series entry that is a directory or a symlink loop is one line, not a traceback."""
    path = clean.root / "patches-rocm" / PATCH
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(PATCH)
    else:
        path.symlink_to(".")
    with hang_guard():
        with pytest.raises(RecordError):
            load_patch(str(clean.root), PATCH)
    result = guarded_cli(clean.root, "status")
    assert result.exit_code == 2 and PATCH in failure_line(result)
    assert ("SER014", f"patches-rocm/{PATCH}") in verify_codes(clean.root)


def test_series_entry_name_too_long(clean):
    clean.write_series(["x" * 300 + ".patch"])
    result = guarded_cli(clean.root, "status")
    assert result.exit_code == 2 and "too long" in failure_line(result)
    assert "SER001" in [
        c for c, _p in verify_codes(clean.root)
    ]  # such a file cannot exist


def test_non_utf8_series_is_one_line(clean):
    """A series that is not UTF-8 is one line, not a traceback."""
    (clean.root / "patches-rocm" / "series").write_bytes(
        PATCH.encode() + b"\n\xff\xfe\n"
    )
    result = guarded_cli(clean.root, "status")
    assert result.exit_code == 2
    assert failure_line(result) == (
        "overlay: patches-rocm/series: series is not UTF-8: invalid start byte "
        f"at byte {len(PATCH) + 1} (line 2)"
    )
    assert ("SER014", "patches-rocm/series") in verify_codes(clean.root)
    with pytest.raises(RecordError):
        read_series(str(clean.root))


def test_patch_symlinked_inside_the_repository_is_refused(clean):
    """A patch may not be a symlink at all: refresh would replace the link by a file."""
    real = clean.root / "kept.patch.txt"
    path = clean.root / "patches-rocm" / PATCH
    real.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(real)
    assert ("SER014", f"patches-rocm/{PATCH}") in verify_codes(clean.root)


CRLF = "# the fixes\r\n0001-a.patch\r\n\r\n0002-b.patch  # b\r\n"


@pytest.mark.parametrize("text", [CRLF, CRLF.replace("\r\n", "\n")])
def test_every_writer_keeps_the_series_line_ending(text):
    nl = "\r\n" if "\r\n" in text else "\n"
    added = series.series_with(text, "0003-c.patch", "0001-a.patch")
    assert added.splitlines(keepends=True)[2] == "0003-c.patch" + nl
    assert series.series_with(text, "0003-c.patch", None).endswith(
        "0002-b.patch  # b" + nl + "0003-c.patch" + nl
    )
    assert series.series_renamed(text, "0002-b.patch", "0002-bb.patch") == text.replace(
        "0002-b.patch", "0002-bb.patch"
    )
    assert series.series_keeping(text, {"0002-b.patch"}) == text.replace(
        "0001-a.patch" + nl, ""
    )
    with pytest.raises(series.OverlayError):
        series.series_renamed(text, "0009-x.patch", "y.patch")


def test_a_rebase_that_drops_a_patch_keeps_a_crlf_series(ov, w):
    device = "mlx/backend/rocm/device.cpp"
    data = add_patch(
        ov, "0001-device.patch", {device: lines("device", change={9: "d9"})}
    )
    ov.add_patch("0002-again.patch", data.replace(b"Local-Fix: 1", b"Local-Fix: 2"))
    write_fixes(ov, [("Device.", [device]), ("Again.", [device])])
    path = ov.root / "patches-rocm" / "series"
    path.write_bytes(b"# ours\r\n0001-device.patch\r\n0002-again.patch\r\n")
    done = cli(ov, "rebase", "--onto", w.pin_clean)
    assert done.exit_code == 0, done.output
    assert path.read_bytes() == b"# ours\r\n0001-device.patch\r\n"
