"""Trees computed in Python (overlay/git/treemodel.py): ``edit_tree`` gives the tree
git's index way gives, and goes the index way where the model refuses an edit."""

from __future__ import annotations

import pytest
from gitfixtures import git_calls, tree_of_every_kind
from hypothesis import example, given, settings
from hypothesis import strategies as st

from overlay.git import objects
from overlay.git.objects import parse_diff_tree
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


#: Paths an edit may touch: files of the tree, new ones, a file under a file (git's
#: index way then replaces the file by a directory), a directory made a file, the
#: submodule.
_EDIT_PATHS = [
    "a.txt",
    "a.txt/under",
    "a/b.c",
    "a/sub",
    "a/sub/c.h",
    "a/sub/d/e.cpp",
    "a/run.sh",
    "link",
    "na\u00efve.hip",
    "new/deep/file.txt",
    "vendor/mod",
    "z",
]
_ENTRY = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(["100644", "100755", "120000", "160000"]),
        st.sampled_from([b"one\n", b"two\n", b"#!/bin/sh\n"]),
    ),
)


@settings(max_examples=40, deadline=None)
# Each kind of difference once, whatever the random draws: a mode alone, a file made
# a directory and a directory a file, a submodule moved, a symlink, a deletion.
@example(left={}, right={"a/b.c": ("100755", b"int b;\n")})
@example(left={}, right={"a.txt/under": ("100644", b"one\n")})
@example(left={"a/sub": ("100644", b"two\n")}, right={})
@example(left={"vendor/mod": ("160000", b"")}, right={"vendor/mod": None})
@example(left={"link": ("120000", b"two\n")}, right={"a/sub/d/e.cpp": None})
@given(
    left=st.dictionaries(st.sampled_from(_EDIT_PATHS), _ENTRY, max_size=5),
    right=st.dictionaries(st.sampled_from(_EDIT_PATHS), _ENTRY, max_size=5),
)
def test_diff_tree_rows_read_through_the_reader_are_gits(tmp_path_factory, left, right):
    """Two trees made from one by random edits (git's index way: a file replaced by a
    directory, a directory by a file, modes, a submodule): the rows `Store.diff_tree`
    reads through the reader are git's `diff-tree -r` rows, in git's order, both ways
    round and for the commits of the trees too, and their paths the ones `git
    diff-tree -r --name-only --no-renames` prints."""
    store = Store(str(tmp_path_factory.mktemp("changed") / "store.git"))
    base = tree_of_every_kind(store)

    def edited(edits):
        changes: dict[str, tuple[str, str] | None] = {}
        for path, entry in edits.items():
            if entry is None:
                changes[path] = None
            elif entry[0] == "160000":
                changes[path] = ("160000", "e" * 40)
            else:
                changes[path] = (entry[0], store.hash_blob(entry[1]))
        return store.edit_tree(base, changes)

    old, new = edited(left), edited(right)
    out = store.git("diff-tree", "-r", "-z", "--name-only", "--no-renames", old, new)
    want = sorted(p for p in out.stdout.decode().split("\0") if p)
    commits = (store.commit_tree(old, message="old"), store.commit_tree(new))
    rows = {
        (a, b): parse_diff_tree(
            store.git(
                "diff-tree", "-r", "-z", "--no-renames", "--full-index", a, b
            ).stdout
        )
        for a, b in ((old, new), (new, old), (base, new), commits)
    }
    assert sorted({row[5] for row in store.diff_tree(old, new)}) == want  # git's
    with store.reading():
        assert sorted({row[5] for row in store.diff_tree(old, new)}) == want
        for (a, b), by_git in rows.items():
            assert store.diff_tree(a, b) == by_git


def test_diff_tree_past_its_budget_leaves_the_question_to_git(store, monkeypatch):
    tree = tree_of_every_kind(store)
    other = store.edit_tree(tree, {"a/sub/c.h": None, "a.txt": None})
    with store.reading():
        calls = git_calls(monkeypatch)
        by_reader = store.diff_tree(tree, other)
        assert calls == []  # read through the reader
        monkeypatch.setattr(objects, "TREE_WALK_TREES", 3)  # root, a, a/sub: 5 reads
        assert store.diff_tree(tree, other) == by_reader  # git's, past the budget
        assert [c[0] for c in calls] == ["diff-tree"]
    assert [row[4:] for row in by_reader] == [("D", "a.txt"), ("D", "a/sub/c.h")]
