"""The series file and its patch files (overlay/records/series.py) on hostile input:
an entry that is not a regular file, a name too long, a series that is not UTF-8, a
patch that is a symlink; each is one line or a finding."""

from __future__ import annotations

import os

import pytest
from fuzzlib import failure_line, guarded_cli, hang_guard, verify_codes
from gitfixtures import PATCH

from overlay.fs.reading import RecordError
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
