"""What DEST holds and the writers that stay inside it (overlay/export/disk.py): a first
export into an empty directory writes each file in place (no temp file and rename),
streams the blobs, and stays a resumable transaction; the stat check picks exactly the
stamp entries that ``disk_state`` must still look at.

A first export is written by git (``checkout-index``, tests/test_export_checkout.py) unless
the tree holds a ``.gitattributes``: ``TA`` is such a tree, and these tests of the files
Python writes in place use it; those that hold for both writers run with both trees.
"""

from __future__ import annotations

import json
import os

import pytest
from exportfixtures import T1, T2, assert_equals_tree, killed_export, mktree

from overlay import layout
from overlay.errors import OverlayError
from overlay.export import export_tree
from overlay.export import run as export_mod
from overlay.git.store import Store

#: T1 with attributes git's checkout would convert its files by (CRLF line ends, $Id$):
#: written by Python, byte for byte.
TA = {
    **T1,
    ".gitattributes": ("100644", b"* text eol=crlf ident\n"),
    "dir/id.txt": ("100644", b"$Id$\n"),
}


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store.git"))


def _killed_direct(store, tree, dest, after_files: int) -> dict:
    """A direct export of ``tree`` (of TA) killed once ``after_files`` files are written by
    Python; its stamp."""
    n = len(TA)
    # n object checks, three stamp points, then two points per file
    assert killed_export(store, tree, dest, str(n + 3 + 2 * after_files)) == -9
    return json.loads((dest / layout.EXPORT_STAMP).read_text())


@pytest.mark.parametrize("files", [T1, TA], ids=["git", "python"])
def test_a_cold_export_into_an_empty_directory_is_direct_and_uses_no_temp_file(
    store, tmp_path, monkeypatch, files
):
    t1 = mktree(store, files, tmp_path)
    dest = tmp_path / "dest"
    stamp = _killed_direct(store, t1, dest, 0)
    assert stamp["pending"]["direct"] is True and stamp["tree"] is None
    renamed = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: renamed.append(b) or real(a, b))
    fresh = tmp_path / "fresh"
    export_tree(store, t1, str(fresh))
    assert [os.path.basename(p) for p in renamed if str(p).startswith(str(fresh))] == [
        layout.EXPORT_STAMP,
        layout.EXPORT_STAMP,
    ]  # in DEST only the stamp, twice (the store keeps the tree's links: its own file)
    assert_equals_tree(store, t1, fresh)


def test_a_file_cut_short_by_a_kill_is_completed(store, tmp_path):
    t1 = mktree(store, TA, tmp_path)
    dest = tmp_path / "dest"
    _killed_direct(store, t1, dest, 2)
    written = sorted(p for p in TA if TA[p][0] != "120000" and (dest / p).is_file())
    assert written
    cut = dest / written[-1]
    cut.write_bytes(
        TA[written[-1]][1][:1]
    )  # as if the kill came in the middle of its write
    export_tree(store, t1, str(dest))
    assert_equals_tree(store, t1, dest)


def test_a_hand_edit_in_an_interrupted_direct_export_is_refused(store, tmp_path):
    t1 = mktree(store, TA, tmp_path)
    dest = tmp_path / "dest"
    _killed_direct(store, t1, dest, 2)
    (dest / "a.txt").write_bytes(b"not the start of a1\n")
    with pytest.raises(OverlayError, match="edited since the last export.*a.txt"):
        export_tree(store, t1, str(dest))
    assert (dest / "a.txt").read_bytes() == b"not the start of a1\n"
    export_tree(store, t1, str(dest), force=True)
    assert_equals_tree(store, t1, dest)


@pytest.mark.parametrize("files", [T1, TA], ids=["git", "python"])
def test_direct_files_have_exact_modes_whatever_the_umask(store, tmp_path, files):
    t1 = mktree(store, files, tmp_path)
    old = os.umask(0o077)
    try:
        export_tree(store, t1, str(tmp_path / "dest"))
    finally:
        os.umask(old)
    assert (tmp_path / "dest" / "a.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "dest" / "run.sh").stat().st_mode & 0o777 == 0o755
    # directories as the umask makes them, whichever writer made them
    assert (tmp_path / "dest" / "dir" / "sub").stat().st_mode & 0o777 == 0o700
    assert_equals_tree(store, t1, tmp_path / "dest")


def test_a_directory_with_anything_in_it_is_not_direct(store, tmp_path):
    t1, t2 = (mktree(store, t, tmp_path) for t in (T1, T2))
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "mine.txt").write_text("mine\n")
    seen = []
    real, real_git = export_mod.write_new, export_mod.check_out
    export_mod.write_new = lambda *a: seen.append(a) or real(*a)
    export_mod.check_out = lambda *a, **k: seen.append(a) or real_git(*a, **k)
    try:
        export_tree(store, t1, str(dest), force=True)
        export_tree(store, t2, str(dest))
    finally:
        export_mod.write_new, export_mod.check_out = real, real_git
    assert seen == []
    os.unlink(dest / "mine.txt")
    assert_equals_tree(store, t2, dest)


def test_a_missing_object_stops_the_export_before_anything_is_written(store, tmp_path):
    t1 = mktree(store, T1, tmp_path)
    blob = store.out("rev-parse", f"{t1}:a.txt")
    path = os.path.join(store.git_dir, "objects", blob[:2], blob[2:])
    os.chmod(path, 0o644)
    os.unlink(path)
    dest = tmp_path / "dest"
    with pytest.raises(OverlayError, match="missing"):
        export_tree(store, t1, str(dest))
    assert sorted(os.listdir(dest)) == [layout.EXPORT_LOCK]


def _rec(path) -> list:
    st = os.lstat(path)
    return [st.st_size, st.st_mtime_ns, "0" * 40]


def test_stat_changed_leaves_out_only_regular_files_with_their_recorded_stat(tmp_path):
    from overlay.export.disk import disk_state, is_recorded, stat_changed

    dest = tmp_path / "dest"
    (dest / "d").mkdir(parents=True)
    for name in ("same", "d/same", "grown", "touched", "gone", "now-a-dir"):
        (dest / name).write_text("x\n")
    recorded = {name: _rec(dest / name) for name in ("same", "d/same", "grown")}
    recorded["touched"] = _rec(dest / "touched")
    recorded["gone"] = _rec(dest / "gone")
    recorded["now-a-dir"] = _rec(dest / "now-a-dir")
    (dest / "grown").write_text("x\ny\n")
    os.utime(dest / "touched", ns=(0, recorded["touched"][1] + 10**9))
    (dest / "gone").unlink()
    (dest / "now-a-dir").unlink()
    (dest / "now-a-dir").mkdir()
    # A link whose own size and mtime equal a file's record is still no file.
    os.symlink("xy", dest / "link")
    link = os.lstat(dest / "link")
    recorded["link"] = [link.st_size, link.st_mtime_ns, "0" * 40]
    # Entries of another shape (a stamp edited by hand) are left to disk_state, which
    # takes any: none of them stops the check.
    for name in ("short", "null", "dict"):
        (dest / name).write_text("x\n")
    recorded.update(short=[2], null=None, dict={"size": 2})
    changed = stat_changed(str(dest), list(recorded.items()))
    assert [p for p, _rec in changed] == [
        "grown",
        "touched",
        "gone",
        "now-a-dir",
        "link",
        "short",
        "null",
        "dict",
    ]
    # What it leaves out, disk_state would have called recorded anyway.
    for path in ("same", "d/same"):
        assert is_recorded(disk_state(str(dest), path, recorded[path]), recorded[path])
    # DEST that cannot be opened as a directory: every entry is left to disk_state.
    assert stat_changed(str(dest / "same"), list(recorded.items())) == list(
        recorded.items()
    )
