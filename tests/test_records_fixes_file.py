"""LOCAL_FIXES.md's bytes (overlay/records/fixes/file.py): read as they are, read as a
record, written whole; and read without loading the parser."""

from __future__ import annotations

import os

import pytest
from gitfixtures import fresh_python

from overlay.fs.reading import RecordError, RecordMissing
from overlay.records.fixes.file import fixes_bytes, fixes_record, write_fixes

TEXT = "\ufeff# Local changes relative to NripeshN/mlx@75915908\r\n\r\n- `a.cpp`: kept.\r\n"


def test_the_bytes_come_back_as_they_are(tmp_path):
    (tmp_path / "LOCAL_FIXES.md").write_bytes(TEXT.encode())
    assert fixes_bytes(str(tmp_path)) == TEXT.encode()  # byte-order mark and CRLF kept
    assert fixes_record(str(tmp_path)) == TEXT.encode()


def test_no_regular_file_is_none_and_a_record_read_says_why(tmp_path):
    assert fixes_bytes(str(tmp_path)) is None
    with pytest.raises(RecordMissing):
        fixes_record(str(tmp_path))
    (tmp_path / "LOCAL_FIXES.md").mkdir()
    assert fixes_bytes(str(tmp_path)) is None
    os.rmdir(tmp_path / "LOCAL_FIXES.md")
    os.mkfifo(tmp_path / "LOCAL_FIXES.md")  # a read would wait on it
    assert fixes_bytes(str(tmp_path)) is None


def test_a_record_read_refuses_what_is_not_utf8(tmp_path):
    (tmp_path / "LOCAL_FIXES.md").write_bytes(b"# Local changes \xff\n")
    assert fixes_bytes(str(tmp_path)) == b"# Local changes \xff\n"
    with pytest.raises(RecordError, match="UTF-8"):
        fixes_record(str(tmp_path))


def test_a_write_replaces_the_file_whole(tmp_path):
    (tmp_path / "LOCAL_FIXES.md").write_bytes(b"old\n")
    write_fixes(str(tmp_path), TEXT.encode())
    assert (tmp_path / "LOCAL_FIXES.md").read_bytes() == TEXT.encode()
    assert sorted(os.listdir(tmp_path)) == ["LOCAL_FIXES.md"]  # no temp file left


def test_reading_the_bytes_loads_no_parser(tmp_path):
    (tmp_path / "LOCAL_FIXES.md").write_bytes(TEXT.encode())
    code = (
        "import sys\n"
        "from overlay.records import fixes\n"
        f"data = fixes.fixes_bytes({str(tmp_path)!r})\n"
        "print(len(data), sorted(m for m in sys.modules if m.startswith('overlay.records.fixes.')))\n"
    )
    assert (
        fresh_python(code) == f"{len(TEXT.encode())} ['overlay.records.fixes.file']\n"
    )
