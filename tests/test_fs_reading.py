"""Every record is read through one function (overlay/fs/reading.py): a symlink out of
the repository, ``/dev/zero``, a FIFO, a directory, a loop, a name too long, bytes that
are not UTF-8 each end in one ``overlay:`` line (exit 2) or, inside ``verify``, a
finding, never a traceback, a MemoryError or a hang; files git ignores beside the
records are no records. ``hang_guard`` is only a guard: a blocked read fails the test
instead of stalling the suite."""

from __future__ import annotations

import hashlib
import os

import pytest
from fuzzlib import failure_line, guarded_cli, hang_guard, verify_codes
from gitfixtures import PATCH, git

from overlay.checks.verify import verify
from overlay.fs import reading as records
from overlay.fs.reading import (
    RecordError,
    RecordMissing,
    read_record,
    read_record_dir,
    scan_record_dir,
)
from overlay.git.store import Store
from overlay.workspace import Workspace

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
    """A resolution linking to /etc/passwd is refused by verify and never reaches the store."""
    clean.write_manifest(world.pin_conflict)
    res = clean.root / "patches-rocm" / "resolved" / "mlx"
    res.mkdir(parents=True)
    (res / "core.cpp").symlink_to("/etc/passwd")
    found = verify_codes(clean.root)
    assert ("LAY006", "patches-rocm/resolved/mlx/core.cpp") in found
    result = guarded_cli(clean.root, "verify")
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
    """A record linked to /dev/zero is one line: nothing reads it to the end."""
    path = clean.root / record
    path.unlink()
    path.symlink_to("/dev/zero")
    commands = (
        [["fix", "list"]]
        if record == "LOCAL_FIXES.md"
        else [["status"], ["export", str(clean.root / "out")]]
    )
    for command in commands:
        result = guarded_cli(clean.root, *command)
        assert result.exit_code == 2, result.output
        assert "outside the repository" in failure_line(
            result
        ) or "symlink" in failure_line(result)
    result = guarded_cli(clean.root, "verify")
    assert result.exit_code in (1, 2), result.output
    if result.exit_code == 2:
        failure_line(result)


def test_manifest_and_local_fixes_symlinked_inside_are_followed(clean):
    for rel in ("patches-rocm/overlay.toml", "LOCAL_FIXES.md"):
        path = clean.root / rel
        kept = clean.root / ("kept-" + path.name)
        kept.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(os.path.relpath(kept, path.parent))
    assert verify_codes(clean.root) == []


def _git_repo(root) -> None:
    git(root, "init", "-q")


def test_ignored_file_beside_the_resolutions_is_no_record(clean):
    resolved = clean.root / "patches-rocm" / "resolved"
    resolved.mkdir()
    (resolved / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (clean.root / "patches-rocm" / "old.patch").write_text("leftover\n")
    found = [f.code for f in verify(Workspace(str(clean.root))).findings]
    assert {"LAY002", "FIX023", "SER002"} <= set(
        found
    )  # not a git repository: no ignore rules
    _git_repo(clean.root)
    (clean.root / ".gitignore").write_text(".DS_Store\n*.orig\nold.patch\n")
    assert verify(Workspace(str(clean.root))).findings == []


def test_ignored_through_the_users_excludes_file(clean, isolated_git):
    resolved = clean.root / "patches-rocm" / "resolved" / "mlx"
    resolved.mkdir(parents=True)
    (resolved / ".DS_Store").write_bytes(b"\x00")
    _git_repo(clean.root)
    excludes = isolated_git / "excludes"
    excludes.write_text(".DS_Store\n")
    with open(isolated_git / ".gitconfig", "a") as fh:
        fh.write(f"[core]\n\texcludesFile = {excludes}\n")
    assert verify(Workspace(str(clean.root))).findings == []


def test_a_tracked_file_counts_even_where_ignored(clean):
    resolved = clean.root / "patches-rocm" / "resolved"
    resolved.mkdir()
    (resolved / ".DS_Store").write_bytes(b"\x00")
    _git_repo(clean.root)
    (clean.root / ".gitignore").write_text(".DS_Store\n")
    git(clean.root, "add", "-f", "patches-rocm/resolved/.DS_Store")
    assert "LAY002" in [f.code for f in verify(Workspace(str(clean.root))).findings]


def test_scan_record_dir_lists_what_it_left_out(clean):
    from overlay.fs.reading import scan_record_dir

    resolved = clean.root / "patches-rocm" / "resolved" / "mlx"
    resolved.mkdir(parents=True)
    (resolved / "core.cpp").write_text("x\n")
    (resolved / "notes.swp").write_text("x\n")
    _git_repo(clean.root)
    (clean.root / ".gitignore").write_text("*.swp\n")
    left: list[str] = []
    out, errors = scan_record_dir(clean.root, "patches-rocm/resolved", ignored=left)
    assert (list(out), errors, left) == (["mlx/core.cpp"], [], ["mlx/notes.swp"])
    out, _ = scan_record_dir(clean.root, "patches-rocm/resolved", skip_ignored=False)
    assert list(out) == ["mlx/core.cpp", "mlx/notes.swp"]


def test_a_directory_git_ignores_as_a_whole_keeps_its_records(tmp_path):
    from overlay.fs.reading import scan_record_dir

    # An overlay kept under an ignored directory (a copy staged under .overlay/, a
    # checkout under build/): the rules say nothing about single records there.
    git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("/build/\n")
    resolved = tmp_path / "build" / "ov" / "patches-rocm" / "resolved" / "mlx"
    resolved.mkdir(parents=True)
    (resolved / "core.cpp").write_text("x\n")
    out, errors = scan_record_dir(tmp_path / "build" / "ov", "patches-rocm/resolved")
    assert (list(out), errors) == (["mlx/core.cpp"], [])
