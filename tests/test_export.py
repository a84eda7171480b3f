"""Incremental export and hostile tree entries."""

from __future__ import annotations

import json
import os

import pytest

from overlay import layout
from overlay.errors import OverlayError, UnsafePath
from overlay.export import export_tree
from overlay.git.store import Store


def blob(store: Store, data: bytes) -> str:
    return store.hash_blob(data)


def mktree(store: Store, files: dict[str, tuple[str, bytes]], tmp_path) -> str:
    changes = {p: (mode, blob(store, data)) for p, (mode, data) in files.items()}
    from overlay.git.store import EMPTY_TREE

    return store.edit_tree(EMPTY_TREE, changes)


def raw_tree(store: Store, entries: list[tuple[str, str, str]]) -> str:
    """A tree object written byte by byte (git's own tools refuse these names)."""
    data = b"".join(
        mode.encode() + b" " + name.encode() + b"\0" + bytes.fromhex(oid)
        for mode, name, oid in entries
    )
    return store.out(
        "hash-object", "-t", "tree", "-w", "--literally", "--stdin", input=data
    )


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store.git"))


def test_cold_then_incremental_export(store, tmp_path):
    dest = tmp_path / "dest"
    t1 = mktree(
        store,
        {
            "a.txt": ("100644", b"a1\n"),
            "dir/b.txt": ("100644", b"b1\n"),
            "dir/sub/c.txt": ("100644", b"c1\n"),
            "run.sh": ("100755", b"#!/bin/sh\n"),
            "link": ("120000", b"dir/b.txt"),
        },
        tmp_path,
    )
    first = export_tree(store, t1, str(dest))
    assert first.previous is None
    assert first.written == ["a.txt", "dir/b.txt", "dir/sub/c.txt", "link", "run.sh"]
    assert os.access(dest / "run.sh", os.X_OK) and not os.access(
        dest / "a.txt", os.X_OK
    )
    assert os.readlink(dest / "link") == "dir/b.txt"
    mtimes = {p: (dest / p).stat().st_mtime_ns for p in ("a.txt", "dir/b.txt")}

    again = export_tree(store, t1, str(dest))
    assert again.written == [] and again.removed == [] and again.unchanged == 5

    t2 = mktree(
        store,
        {
            "a.txt": ("100644", b"a1\n"),
            "dir/b.txt": ("100644", b"b2\n"),
            "new.txt": ("100644", b"n\n"),
            "run.sh": ("100755", b"#!/bin/sh\n"),
            "link": ("120000", b"dir/b.txt"),
        },
        tmp_path,
    )
    second = export_tree(store, t2, str(dest))
    assert second.written == ["dir/b.txt", "new.txt"]
    assert second.removed == ["dir/sub/c.txt"]
    assert second.unchanged == 3
    assert not (dest / "dir" / "sub").exists()  # emptied directory removed
    assert (dest / "a.txt").stat().st_mtime_ns == mtimes["a.txt"]
    assert (dest / "dir/b.txt").read_bytes() == b"b2\n"
    assert json.loads((dest / layout.EXPORT_STAMP).read_text())["tree"] == t2


def test_file_to_directory_and_back(store, tmp_path):
    dest = tmp_path / "dest"
    t1 = mktree(store, {"x": ("100644", b"file\n")}, tmp_path)
    t2 = mktree(store, {"x/y": ("100644", b"nested\n")}, tmp_path)
    export_tree(store, t1, str(dest))
    export_tree(store, t2, str(dest))
    assert (dest / "x" / "y").read_bytes() == b"nested\n"
    export_tree(store, t1, str(dest))
    assert (dest / "x").read_bytes() == b"file\n"


def test_refuses_a_directory_it_did_not_create(store, tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "mine.txt").write_text("user data")
    t1 = mktree(store, {"a": ("100644", b"a\n")}, tmp_path)
    with pytest.raises(OverlayError, match="holds no overlay export stamp"):
        export_tree(store, t1, str(dest))
    assert sorted(os.listdir(dest)) == [".overlay-export.lock", "mine.txt"]
    export_tree(store, t1, str(dest), force=True)
    assert (dest / "a").read_bytes() == b"a\n"
    assert (dest / "mine.txt").read_text() == "user data"


def test_never_overwrites_a_hand_edit(store, tmp_path):
    dest = tmp_path / "dest"
    t1 = mktree(store, {"a": ("100644", b"a1\n"), "b": ("100644", b"b1\n")}, tmp_path)
    t2 = mktree(store, {"a": ("100644", b"a2\n"), "b": ("100644", b"b2\n")}, tmp_path)
    export_tree(store, t1, str(dest))
    (dest / "a").write_text("edited by hand, longer\n")
    with pytest.raises(OverlayError, match="edited since the last export"):
        export_tree(store, t2, str(dest))
    assert (dest / "a").read_text() == "edited by hand, longer\n"
    assert (dest / "b").read_bytes() == b"b1\n"  # nothing half-written
    same = export_tree(store, t1, str(dest))
    assert same.edited == ["a"]


@pytest.mark.parametrize("name", ["..", ".git", ".GIT", "a\\b"])
def test_hostile_names_are_refused(store, tmp_path, name):
    oid = blob(store, b"evil\n")
    tree = raw_tree(store, [("100644", name, oid)])
    dest = tmp_path / "dest"
    with pytest.raises(UnsafePath):
        export_tree(store, tree, str(dest))
    assert os.listdir(dest) == [".overlay-export.lock"]


def test_hostile_nested_dotdot_is_refused(store, tmp_path):
    oid = blob(store, b"evil\n")
    inner = raw_tree(store, [("100644", "passwd", oid)])
    tree = raw_tree(store, [("40000", "..", inner)])
    with pytest.raises(UnsafePath, match="component '..'"):
        export_tree(store, tree, str(tmp_path / "dest"))


@pytest.mark.parametrize(
    "target", ["/etc/passwd", "../../outside", "../sub/../../x", "../.git/config"]
)
def test_symlink_escape_is_refused(store, tmp_path, target):
    tree = mktree(store, {"sub/link": ("120000", target.encode())}, tmp_path)
    dest = tmp_path / "dest"
    with pytest.raises(UnsafePath, match="symlink"):
        export_tree(store, tree, str(dest))
    assert not (dest / "sub").exists()


def test_absolute_path_is_refused():
    from overlay.fs.paths import check_path

    with pytest.raises(UnsafePath, match="absolute"):
        check_path("/etc/passwd")


def test_symlink_chain_escape_is_refused(store, tmp_path):
    # Each link alone stays inside; followed through sub/up, d/l1 climbs out.
    tree = mktree(
        store,
        {
            "sub/up": ("120000", b".."),
            "d/l1": ("120000", b"../sub/up/.."),
            "d/ok": ("120000", b"../sub/up/d"),
        },
        tmp_path,
    )
    with pytest.raises(UnsafePath, match="'d/l1'"):
        export_tree(store, tree, str(tmp_path / "dest"))


def test_symlink_inside_the_tree_is_exported(store, tmp_path):
    tree = mktree(
        store,
        {"sub/up": ("120000", b".."), "d/ok": ("120000", b"../sub/up/d")},
        tmp_path,
    )
    export_tree(store, tree, str(tmp_path / "dest"))
    assert os.readlink(tmp_path / "dest" / "d" / "ok") == "../sub/up/d"
