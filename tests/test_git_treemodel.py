"""Trees computed in Python (overlay/git/treemodel.py): ``edit_tree`` gives the tree
git's index way gives, and goes the index way where the model refuses an edit."""

from __future__ import annotations

import pytest
from gitfixtures import tree_of_every_kind

from overlay.git.store import Store
from overlay.git.treemodel import blob_name, edit_tree


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store.git"))


EDITS: list[dict[str, tuple[str, str] | None]] = [
    {"a/b.c": ("100644", "NEW")},
    {"a/sub/c.h": None, "new/dir/file.txt": ("100755", "NEW")},
    {"a/run.sh": ("100644", "NEW"), "absent/file": None, "a.txt": None},
    {"a/sub/c.h": None},  # the directory empties and goes
]


@pytest.mark.parametrize("edits", EDITS)
@pytest.mark.parametrize("in_reading", [False, True])
def test_edit_tree_in_python_is_the_index_way(store, edits, in_reading):
    tree = tree_of_every_kind(store)
    data = b"new content %d\n" % len(edits)
    oid = blob_name(data)
    changes = {p: (e[0], oid) if e else None for p, e in edits.items()}
    if in_reading:
        with store.reading():
            got = edit_tree(store, tree, changes, {oid: data})
    else:
        got = edit_tree(store, tree, changes, {oid: data})
    assert store.hash_blob(data) == oid  # the name git gives, and the blob is written
    assert got == store.edit_tree(tree, changes)
    assert store.has_object(got, "tree")
    assert store.git("fsck", "--no-dangling", "--connectivity-only").returncode == 0


def test_edit_tree_git_refuses_goes_the_index_way(store):
    tree = tree_of_every_kind(store)
    oid = store.hash_blob(b"x\n")
    # A file under a file: the model refuses; git's index way decides (it replaces).
    changes: dict[str, tuple[str, str] | None] = {"a.txt/under": ("100644", oid)}
    with store.reading():
        assert edit_tree(store, tree, changes, {}) == store.edit_tree(tree, changes)
