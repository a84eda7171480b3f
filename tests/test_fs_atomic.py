"""Scratch directories (overlay/fs/atomic.py): those of dead overlay processes, and old
ones from before their names had a pid, are swept (by an export too); a live
process's and anything not overlay's are kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from gitfixtures import dead_pid, scratch_leftovers
from gitfixtures import overlay_process as run

from overlay.fs.atomic import (
    _temp_file,
    atomic_write,
    input_files,
    remove_dir,
    scratch_dir,
    sweep_scratch_dirs,
    temp_dir,
    temp_owner,
)


def test_export_sweeps_dead_scratch_dirs(ov, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    kept = scratch_leftovers(tmp)
    result = run(ov, "export", str(tmp_path / "dest"), env={"TMPDIR": str(tmp)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in tmp.iterdir()) == [kept.name]


def test_sweep_scratch_dirs_keeps_live_and_foreign_directories(tmp_path):
    dead = tmp_path / f"overlay-idx-{dead_pid()}-abcdefgh"
    live = tmp_path / f"overlay-idx-{os.getpid()}-abcdefgh"
    foreign = (
        tmp_path / "overlay-idx-1234567890123-abcdefgh"
    )  # no pid of ours can be that long
    for d in (dead, live, foreign):
        d.mkdir()
    link = tmp_path / f"overlay-merge-{dead_pid()}-linkxxxx"
    link.symlink_to(live)
    assert sweep_scratch_dirs(str(tmp_path)) == [dead.name]
    assert live.is_dir() and foreign.is_dir() and link.is_symlink()


def test_temp_dir_is_where_tempfile_makes_scratch_directories(tmp_path, monkeypatch):
    # The sweep looks where scratch_dir makes them, as tempfile would choose.
    import tempfile

    mine = tmp_path / "mine"
    mine.mkdir()
    monkeypatch.setenv("TMPDIR", str(mine))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile caches its choice
    assert temp_dir() == tempfile.gettempdir() == str(mine)
    with scratch_dir("idx") as made:
        assert os.path.dirname(made) == str(mine)
        assert os.path.basename(made).startswith(f"overlay-idx-{os.getpid()}-")
    # A TMPDIR that is not a writable directory is passed over, as tempfile does.
    monkeypatch.setenv("TMPDIR", str(tmp_path / "absent"))
    monkeypatch.setenv("TEMP", str(mine))
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert temp_dir() == tempfile.gettempdir() == str(mine)
    if os.geteuid() != 0:  # root may write anywhere
        mine.chmod(0o500)
        try:
            assert temp_dir() != str(mine)
        finally:
            mine.chmod(0o700)


def test_atomic_write_leaves_one_file_of_the_mode_asked_and_no_temp(tmp_path):
    target = tmp_path / "record.toml"
    atomic_write(target, b"a = 1\n", mode=0o640)
    assert target.read_bytes() == b"a = 1\n"
    assert target.stat().st_mode & 0o777 == 0o640
    atomic_write(target, b"a = 2\n")  # the mode of the file it replaces
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.toml"]
    # A temp name is found again as this record's (remove_stale_temps after a kill).
    fd, tmp = _temp_file(str(tmp_path), "record.toml")
    os.close(fd)
    assert temp_owner(os.path.basename(tmp)) == "record.toml"
    assert oct(os.stat(tmp).st_mode & 0o777) == oct(0o600)


def _merge_file_of(paths, fds):
    """``git merge-file -p`` on ``paths`` (ours, base, theirs) as the rebase runs it."""
    from overlay.git.run import run_git

    return run_git(
        ["merge-file", "-p", "-L", "o", "-L", "b", "-L", "t", *paths],
        check=False,
        pass_fds=fds,
    )


def test_input_files_give_git_merge_file_its_three_texts_and_leave_nothing(
    tmp_path, monkeypatch
):
    # Large enough that a short write would show; a conflict after a megabyte and a
    # change of theirs at the end, so all of each text is read.
    head = b"".join(b"line %d\n" % n for n in range(100_000))
    ours = head + b"ours\nend\n"
    base = head + b"base\nend\n"
    theirs = head + b"theirs\nEND\n"
    expected = head + b"<<<<<<< o\nours\nend\n=======\ntheirs\nEND\n>>>>>>> t\n"
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with input_files((ours, base, theirs)) as (paths, fds):
        if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
            assert len(fds) == 3 and not os.listdir(tmp_path)  # nothing on disk
        proc = _merge_file_of(paths, fds)
    assert (proc.returncode, proc.stdout) == (1, expected)
    assert not os.listdir(tmp_path)
    if fds:
        for fd in fds:  # closed with the block
            try:
                os.fstat(fd)
            except OSError:
                continue
            raise AssertionError(f"descriptor {fd} still open")


def test_input_files_fall_back_to_a_scratch_directory_without_memory_files(
    tmp_path, monkeypatch
):
    def refused(*_args):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "memfd_create", refused, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with input_files((b"x\n", b"y\n", b"z\n")) as (paths, fds):
        assert fds == ()
        assert [os.path.dirname(p) for p in paths] == [os.path.dirname(paths[0])] * 3
        assert os.path.basename(os.path.dirname(paths[0])).startswith(
            f"overlay-merge-{os.getpid()}-"
        )
        proc = _merge_file_of(paths, fds)
    assert (
        proc.returncode == 1 and b"<<<<<<< o\nx\n=======\nz\n>>>>>>> t\n" in proc.stdout
    )
    assert not os.listdir(tmp_path)


def test_remove_dir_unlinks_a_flat_directory_without_shutil_and_a_nested_one_with_it(
    tmp_path,
):
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("index", "index.lock"):
        (flat / name).write_bytes(b"x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_bytes(b"kept")
    (flat / "link").symlink_to(outside)
    code = (
        "import sys; from overlay.fs.atomic import remove_dir; "
        f"remove_dir({str(flat)!r}); print('shutil' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert proc.stdout.strip() == "False"  # a flat directory needs no shutil
    assert not flat.exists() and (outside / "kept").read_bytes() == b"kept"
    nested = tmp_path / "nested"
    (nested / "a" / "b").mkdir(parents=True)
    (nested / "a" / "b" / "f").write_bytes(b"x")
    (nested / "g").write_bytes(b"x")
    remove_dir(str(nested))
    assert not nested.exists()
    remove_dir(str(nested))  # gone already: nothing to do, no error


def test_remove_dir_leaves_a_link_to_a_directory_and_what_it_points_to(tmp_path):
    # A state directory's name may be a link (.overlay/rebase.tmp-new -> elsewhere):
    # nothing behind it may go, as shutil.rmtree refuses one.
    target = tmp_path / "target"
    target.mkdir()
    (target / "kept").write_bytes(b"kept")
    link = tmp_path / "link"
    link.symlink_to(target)
    remove_dir(str(link))
    assert link.is_symlink() and (target / "kept").read_bytes() == b"kept"


@pytest.mark.parametrize(
    "name, owner",
    [
        (".a.txt.k3j9x_2q.tmp", "a.txt"),
        (".a.txt.k3j9x_2q.tmp\n", "a.txt"),  # as the pattern reads one
        (".a.txt.K3J9X_2Q.tmp", None),
        ("a.txt.k3j9x_2q.tmp", None),
        (".a.txt.k3j9x_2q.tmpx", None),
        (".a.txt", None),
        ("main.cpp", None),
        ("", None),
    ],
)
def test_temp_owner_names_the_file_a_temp_name_belongs_to(name, owner):
    assert temp_owner(name) == owner
