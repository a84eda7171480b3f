"""The export's stamp (overlay/export/stamp.py): what counts as a hand edit (not a
touched file, not an edit equal to the new content), and a format-1 stamp read and
upgraded.
"""

from __future__ import annotations

import json
import os

import pytest
from exportfixtures import T1, T2, assert_equals_tree, mktree

from overlay import layout
from overlay.export import edited_files, export_tree
from overlay.fs.atomic import atomic_write
from overlay.git.store import Store


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store.git"))


def test_an_edit_equal_to_the_new_content_is_not_an_edit(store, tmp_path):
    t1, t2 = (mktree(store, t, tmp_path) for t in (T1, T2))
    dest = tmp_path / "dest"
    export_tree(store, t1, str(dest))
    (dest / "a.txt").write_bytes(T2["a.txt"][1])  # the hand edit the new patch makes
    mtime = (dest / "a.txt").stat().st_mtime_ns
    assert edited_files(str(dest)) == ["a.txt"]
    result = export_tree(store, t2, str(dest))
    assert "a.txt" not in result.written and result.edited == []
    assert (
        dest / "a.txt"
    ).stat().st_mtime_ns == mtime  # kept, so nothing rebuilds for it
    assert_equals_tree(store, t2, dest)
    assert edited_files(str(dest)) == []


def test_touched_but_unchanged_is_not_an_edit(store, tmp_path):
    t1, t2 = (mktree(store, t, tmp_path) for t in (T1, T2))
    dest = tmp_path / "dest"
    export_tree(store, t1, str(dest))
    os.utime(dest / "a.txt", ns=(1, 1))
    atomic_write(
        dest / "dir/c.txt", T1["dir/c.txt"][1]
    )  # rewritten with the same bytes
    assert edited_files(str(dest)) == []
    export_tree(store, t2, str(dest))
    assert_equals_tree(store, t2, dest)


def test_a_format_1_stamp_is_read_and_upgraded(store, tmp_path):
    t1, t2 = (mktree(store, t, tmp_path) for t in (T1, T2))
    dest = tmp_path / "dest"
    export_tree(store, t1, str(dest))
    stamp = json.loads((dest / layout.EXPORT_STAMP).read_text())
    old = {
        "format": 1,
        "tree": t1,
        "files": {p: rec[:2] for p, rec in stamp["files"].items()},
    }
    (dest / layout.EXPORT_STAMP).write_text(
        json.dumps(old)
    )  # as the exports before stamps held blobs
    os.utime(dest / "a.txt", ns=(1, 1))  # touched, same content: not an edit
    (dest / "b.txt").write_bytes(b"edited\n")
    result = export_tree(store, t2, str(dest))
    assert result.edited == ["b.txt"] and "a.txt" in result.written
    assert json.loads((dest / layout.EXPORT_STAMP).read_text())["format"] == 2
    (dest / "b.txt").write_bytes(T2["b.txt"][1])
    assert edited_files(str(dest)) == []


def _walk_strays(dest: str, files: dict) -> list[str]:
    """The strays as os.walk finds them (the definition the scandir walk keeps)."""
    from overlay.export.stamp import OURS
    from overlay.fs.atomic import temp_owner

    out = []
    for top, _dirs, names in os.walk(dest):
        rel = os.path.relpath(top, dest)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        out += [
            prefix + n
            for n in names
            if prefix + n not in files
            and not (not prefix and n in OURS)
            and not temp_owner(n)
        ]
    return sorted(out)


def test_strays_are_the_files_os_walk_finds_beside_the_stamp(tmp_path):
    from overlay.export.stamp import stray_files

    dest = tmp_path / "dest"
    for rel in ["a.txt", "d/b.txt", "d/e/c.txt", "d/e/f/g.txt", "top.cpp"]:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(rel)
    (dest / "d" / "to-dir").symlink_to(dest / "d" / "e")  # a directory: not entered
    (dest / "d" / "to-file").symlink_to(dest / "a.txt")  # a file
    (dest / "broken").symlink_to(dest / "nowhere")  # a file too
    (dest / "empty").mkdir()
    (dest / layout.EXPORT_STAMP).write_text("{}")  # overlay's own name
    files = {"a.txt": [], "d/e/c.txt": []}
    got = stray_files(str(dest), files)
    assert got == _walk_strays(str(dest), files)
    assert got == ["broken", "d/b.txt", "d/e/f/g.txt", "d/to-file", "top.cpp"]
    assert stray_files(str(dest), None) == []
    assert stray_files(str(tmp_path / "absent"), {}) == []
