"""One file's diff (overlay/records/filediff.py) on hostile input: a hunk header number
too long to be an integer is one line, not a traceback."""

from __future__ import annotations

import pytest
from fuzzlib import failure_line, guarded_cli, verify_codes
from gitfixtures import PATCH

from overlay.errors import PatchFormatError
from overlay.records.series import load_patch


def test_hunk_header_number_of_5000_digits_is_one_line(clean):
    """A hunk header number past 4,300 digits (past what ``int()`` converts) is one line."""
    path = clean.root / "patches-rocm" / PATCH
    data = path.read_bytes()
    start = data.index(b"@@ -") + 4
    comma = data.index(b",", start)
    path.write_bytes(data[:start] + b"1" * 5000 + data[comma:])
    with pytest.raises(PatchFormatError):
        load_patch(str(clean.root), PATCH)
    result = guarded_cli(clean.root, "status")
    assert result.exit_code == 2
    failure_line(result)
    assert ("SER004", f"patches-rocm/{PATCH}") in verify_codes(clean.root)
