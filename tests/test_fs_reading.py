"""Every record is read through one function (``overlay.fs.atomic.read_record``), issue 13 item 2 and 6.

Each test builds a real overlay (``gitfixtures``) and breaks one record the way
the fuzz campaign did: a symlink out of the repository, ``/dev/zero``, a FIFO, a
directory, a loop, a name too long, bytes that are not UTF-8. Every case must
end in one ``overlay:`` line (exit 2) or, inside ``verify``, a finding; never a
traceback, a MemoryError or a hang. ``hang_guard`` is only a guard: a blocked
read fails the test instead of stalling the suite.
"""

from __future__ import annotations

import hashlib
import os

import pytest
from click.testing import CliRunner
from fuzzlib import hang_guard
from gitfixtures import PATCH

from overlay.checks.verify import verify
from overlay.cli import main
from overlay.errors import ManifestError, PatchFormatError
from overlay.fs import reading as records
from overlay.fs.reading import (
    RecordError,
    RecordMissing,
    read_record,
    read_record_dir,
    scan_record_dir,
)
from overlay.git.store import Store
from overlay.records.manifest import load_manifest
from overlay.records.series import load_patch, read_series
from overlay.workspace import Workspace


def run(root, *args):
    with hang_guard():
        result = CliRunner().invoke(main, ["-C", str(root), *args])
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return result


def one_line(result) -> str:
    """The single ``overlay:`` line of a failed command (a ``hint:`` line may follow)."""
    out = [ln for ln in result.output.splitlines() if ln.strip()]
    assert out and out[0].startswith("overlay: "), result.output
    assert all(ln.startswith("hint: ") for ln in out[1:]), result.output
    return out[0]


def codes(root):
    with hang_guard():
        return [(f.code, f.path) for f in verify(Workspace(str(root))).findings]


# --------------------------------------------------------------------------- read_record itself


def test_read_record_regular_file_and_inside_symlink(tmp_path):
    (tmp_path / "a").write_bytes(b"data\n")
    (tmp_path / "link").symlink_to("a")
    assert read_record(tmp_path, "a") == b"data\n"
    assert read_record(tmp_path, "link") == b"data\n"
    with pytest.raises(RecordError, match="link: patch is a symlink"):
        read_record(tmp_path, "link", what="patch", allow_symlink=False)
    with pytest.raises(RecordMissing):
        read_record(tmp_path, "absent")
    with pytest.raises(RecordMissing):
        read_record(tmp_path, "a/below")  # a parent that is a file


@pytest.mark.parametrize(
    "target,message",
    [
        ("/etc/passwd", "outside the repository"),
        ("/dev/zero", "outside the repository"),
        ("../outside", "outside the repository"),
    ],
)
def test_read_record_refuses_links_out(tmp_path, target, message):
    repo = tmp_path / "repo"
    repo.mkdir()
    (tmp_path / "outside").write_text("secret\n")
    (repo / "rec").symlink_to(target)
    with pytest.raises(RecordError, match=message):
        read_record(repo, "rec")


def test_read_record_refuses_special_files_loops_and_long_names(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "dirlink").symlink_to("dir")
    with hang_guard():
        with pytest.raises(RecordError, match="fifo: record is a FIFO"):
            read_record(tmp_path, "fifo")
    with pytest.raises(RecordError, match="a directory"):
        read_record(tmp_path, "dir")
    with pytest.raises(RecordError, match="loop"):
        read_record(tmp_path, "loop")
    with pytest.raises(RecordError, match="a directory"):
        read_record(tmp_path, "dirlink")
    with pytest.raises(RecordError, match="name is too long|not found"):
        read_record(tmp_path, "x" * 5000)


def test_read_record_size_cap(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 101)
    assert len(read_record(tmp_path, "big", max_bytes=101)) == 101
    with pytest.raises(RecordError, match="101 bytes, more than the 100-byte limit"):
        read_record(tmp_path, "big", max_bytes=100)


def test_decode_error_names_file_and_offset():
    with pytest.raises(
        RecordError,
        match=r"^patches-rocm/series: series is not UTF-8: .* at byte 6 \(line 2\)$",
    ):
        records.decode_record(b"a.pat\n\xff\n", "patches-rocm/series", what="series")


def test_scan_record_dir_refuses_links_and_special_files(tmp_path):
    base = tmp_path / "patches-rocm" / "resolved"
    (base / "mlx").mkdir(parents=True)
    (base / "mlx" / "ok.cpp").write_text("ok\n")
    (base / "mlx" / "passwd").symlink_to("/etc/passwd")
    (base / "mlx" / "inside").symlink_to("ok.cpp")
    (base / "linkdir").symlink_to(tmp_path)
    os.mkfifo(base / "fifo")
    with hang_guard():
        files, errors = scan_record_dir(
            tmp_path, "patches-rocm/resolved", what="resolution"
        )
    assert files == {"mlx/ok.cpp": b"ok\n"}
    assert sorted(e.rel for e in errors) == [
        "patches-rocm/resolved/fifo",
        "patches-rocm/resolved/linkdir",
        "patches-rocm/resolved/mlx/inside",
        "patches-rocm/resolved/mlx/passwd",
    ]
    with pytest.raises(RecordError):
        read_record_dir(tmp_path, "patches-rocm/resolved")
    assert scan_record_dir(tmp_path, "absent") == ({}, [])


# --------------------------------------------------------------------------- through the commands


def test_resolution_symlink_to_etc_passwd_is_not_read(clean, world):
    """Issue 13 item 2: a resolution linking to /etc/passwd passed verify and landed in the store."""
    clean.write_manifest(world.pin_conflict)
    res = clean.root / "patches-rocm" / "resolved" / "mlx"
    res.mkdir(parents=True)
    (res / "core.cpp").symlink_to("/etc/passwd")
    found = codes(clean.root)
    assert ("LAY006", "patches-rocm/resolved/mlx/core.cpp") in found
    result = run(clean.root, "verify")
    assert result.exit_code == 1 and "is a symlink (-> /etc/passwd)" in result.output
    # Nothing of /etc/passwd reached the git store: verify did not compute the layers.
    with open("/etc/passwd", "rb") as fh:
        data = fh.read()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert Store().git("cat-file", "-e", blob, check=False).returncode != 0


@pytest.mark.parametrize(
    "record",
    [
        "patches-rocm/series",
        "patches-rocm/overlay.toml",
        "LOCAL_FIXES.md",
        f"patches-rocm/{PATCH}",
    ],
)
def test_record_symlinked_to_dev_zero_is_one_line(clean, record):
    """Issue 13 item 2: a record linked to /dev/zero was read until MemoryError."""
    path = clean.root / record
    path.unlink()
    path.symlink_to("/dev/zero")
    commands = (
        [["fix", "list"]]
        if record == "LOCAL_FIXES.md"
        else [["status"], ["export", str(clean.root / "out")]]
    )
    for command in commands:
        result = run(clean.root, *command)
        assert result.exit_code == 2, result.output
        assert "outside the repository" in one_line(result) or "symlink" in one_line(
            result
        )
    result = run(clean.root, "verify")
    assert result.exit_code in (1, 2), result.output
    if result.exit_code == 2:
        one_line(result)


@pytest.mark.parametrize("kind", ["fifo", "directory", "loop", "dirlink"])
def test_series_entry_that_is_not_a_file(clean, kind):
    """Issue 13 item 6: IsADirectoryError / ELOOP tracebacks in series.load_patch."""
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
    result = run(clean.root, "status")
    assert result.exit_code == 2 and PATCH in one_line(result)
    assert ("SER014", f"patches-rocm/{PATCH}") in codes(clean.root)


def test_series_entry_name_too_long(clean):
    clean.write_series(["x" * 300 + ".patch"])
    result = run(clean.root, "status")
    assert result.exit_code == 2 and "too long" in one_line(result)
    assert "SER001" in [c for c, _p in codes(clean.root)]  # such a file cannot exist


def test_non_utf8_series_is_one_line(clean):
    """Issue 13 item 6: a non-UTF-8 series gave a UnicodeDecodeError traceback."""
    (clean.root / "patches-rocm" / "series").write_bytes(
        PATCH.encode() + b"\n\xff\xfe\n"
    )
    result = run(clean.root, "status")
    assert result.exit_code == 2
    assert one_line(result) == (
        "overlay: patches-rocm/series: series is not UTF-8: invalid start byte "
        f"at byte {len(PATCH) + 1} (line 2)"
    )
    assert ("SER014", "patches-rocm/series") in codes(clean.root)
    with pytest.raises(RecordError):
        read_series(str(clean.root))


def test_patch_symlinked_inside_the_repository_is_refused(clean):
    """A patch may not be a symlink at all: refresh would replace the link by a file."""
    real = clean.root / "kept.patch.txt"
    path = clean.root / "patches-rocm" / PATCH
    real.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(real)
    assert ("SER014", f"patches-rocm/{PATCH}") in codes(clean.root)


def test_manifest_and_local_fixes_symlinked_inside_are_followed(clean):
    for rel in ("patches-rocm/overlay.toml", "LOCAL_FIXES.md"):
        path = clean.root / rel
        kept = clean.root / ("kept-" + path.name)
        kept.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(os.path.relpath(kept, path.parent))
    assert codes(clean.root) == []


def test_manifest_not_utf8_and_nested_toml(clean):
    manifest = clean.root / "patches-rocm" / "overlay.toml"
    text = manifest.read_bytes()
    manifest.write_bytes(text + b"# \xff\n")
    with pytest.raises(
        ManifestError, match=r"not UTF-8: invalid start byte at byte \d+ \(line \d+\)"
    ):
        load_manifest(str(clean.root))
    manifest.write_bytes(text + b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n")
    result = run(clean.root, "verify")
    assert result.exit_code == 2 and "nested too deeply" in one_line(result)
    manifest.write_bytes(text + b"[extra]\nn = " + b"7" * 5000 + b"\n")
    result = run(clean.root, "status")
    assert result.exit_code == 2 and "4300 digits" in one_line(result)


def test_hunk_header_number_of_5000_digits_is_one_line(clean):
    """Issue 13 item 6: ValueError from unidiff on a hunk header number past 4,300 digits."""
    path = clean.root / "patches-rocm" / PATCH
    data = path.read_bytes()
    start = data.index(b"@@ -") + 4
    comma = data.index(b",", start)
    path.write_bytes(data[:start] + b"1" * 5000 + data[comma:])
    with pytest.raises(PatchFormatError):
        load_patch(str(clean.root), PATCH)
    result = run(clean.root, "status")
    assert result.exit_code == 2
    one_line(result)
    assert ("SER004", f"patches-rocm/{PATCH}") in codes(clean.root)


def test_suites_toml_symlinked_out_and_nested(tmp_path):
    from overlay.suites.config import SuiteConfigError, load_suites

    repo = tmp_path / "repo"
    (repo / "patches-rocm" / "suites").mkdir(parents=True)
    path = repo / "patches-rocm" / "suites" / "suites.toml"
    path.symlink_to("/dev/zero")
    with hang_guard():
        with pytest.raises(SuiteConfigError, match="outside the repository"):
            load_suites(str(path), str(repo))
    path.unlink()
    path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(SuiteConfigError, match="nested too deeply"):
        load_suites(str(path), str(repo))
