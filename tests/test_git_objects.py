"""Issue 14: a pin bump in fewer git processes, with the same results.

Each shortcut is compared with the way it replaced (``ls-tree``, ``cat-file -e``,
``rev-parse``, the index way of editing a tree, ``hash-object``), and every value kept
for a run is shown to follow a changed input: a kept conflict text for other blobs or
labels, a conflict whose blobs changed, a resolution file that is not wanted.
"""

from __future__ import annotations

import pytest
from gitfixtures import cli, git, lines

from overlay.git.objects import parse_ls_tree, parse_tree_object, write_typed
from overlay.git.store import EMPTY_TREE, Store
from overlay.git.treemodel import blob_name, edit_tree, listing
from overlay.rebase.base import RunBase
from overlay.rebase.state import Bases
from overlay.workspace import Workspace

FILES = {
    "a.txt": (b"one\n", "100644"),
    "a-b.txt": (b"dash\n", "100644"),
    "a/b.c": (b"int b;\n", "100644"),
    "a/sub/c.h": (b"#pragma once\n", "100644"),
    "a/run.sh": (b"#!/bin/sh\n", "100755"),
    "name with space.txt": (b"spaced\n", "100644"),
    "na\u00efve.hip": (b"unicode\n", "100644"),
    "link": (b"a.txt", "120000"),
}
GITLINK = "d" * 40


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store.git"))


def make_tree(store: Store) -> str:
    changes: dict[str, tuple[str, str] | None] = {
        path: (mode, store.hash_blob(data)) for path, (data, mode) in FILES.items()
    }
    changes["vendor/mod"] = ("160000", GITLINK)
    return store.edit_tree(EMPTY_TREE, changes)


def test_tree_objects_read_as_ls_tree_lists_them(store):
    tree = make_tree(store)
    for _mode, kind, oid, path in [("040000", "tree", tree, ""), *listing(store, tree)]:
        if kind != "tree":
            continue
        want = list(parse_ls_tree(store.git("ls-tree", "-z", oid).stdout))
        assert parse_tree_object(store.git("cat-file", "tree", oid).stdout) == want, (
            path
        )


PATHS = [
    "a",
    "a.txt",
    "a-b.txt",
    "a/b.c",
    "a/sub",
    "a/sub/c.h",
    "a/run.sh",
    "na\u00efve.hip",
    "name with space.txt",
    "link",
    "vendor/mod",
    "vendor/mod/inside",
    "a.txt/under",
    "absent",
    "a/absent/deeper",
]


def test_entries_from_the_reader_are_what_ls_tree_gives(store):
    tree = make_tree(store)
    outside = store.entries(tree, PATHS)
    with store.reading():
        inside = store.entries(tree, PATHS)
    assert list(inside.items()) == list(outside.items())  # same entries, same order
    assert set(outside) == set(PATHS) - {
        "vendor/mod/inside",
        "a.txt/under",
        "absent",
        "a/absent/deeper",
    }


def test_object_questions_inside_reading_answer_as_git_does(store):
    tree = make_tree(store)
    commit = store.commit_tree(tree)
    blob = store.hash_blob(b"one\n")
    questions = [
        (commit, "commit"),
        (commit, "tree"),
        (tree, "tree"),
        (tree, "commit"),
        (blob, "blob"),
        (blob, "tree"),
        ("f" * 40, "tree"),
    ]
    outside = [store.has_object(oid, kind) for oid, kind in questions]
    with store.reading() as reader:
        assert reader._started is None  # nothing asked yet: no process
        assert [store.has_object(oid, kind) for oid, kind in questions] == outside
        assert store.tree_of(commit) == tree
    assert store.tree_of(commit) == tree and store.reader is None


def test_missing_objects_inside_reading_answer_as_git_does(store):
    tree = make_tree(store)
    blobs = {blob_name(b"%d\n" % k): ("blob", b"%d\n" % k) for k in range(1200)}
    write_typed(
        store.git_dir, blobs
    )  # more names than one chunk of the reader's questions
    names = list(blobs)
    absent = ["f" * 40, "0123456789" * 4]
    asked = [tree, *names[:600], absent[0], *names[600:], absent[1]]
    assert store.missing_objects(asked) == absent  # one cat-file --batch-check
    with store.reading():
        assert store.missing_objects(asked) == absent  # the reader, chunk by chunk
        assert store.has_object(tree, "tree")  # still in step after the chunks
    assert store.missing_objects([]) == []


EDITS: list[dict[str, tuple[str, str] | None]] = [
    {"a/b.c": ("100644", "NEW")},
    {"a/sub/c.h": None, "new/dir/file.txt": ("100755", "NEW")},
    {"a/run.sh": ("100644", "NEW"), "absent/file": None, "a.txt": None},
    {"a/sub/c.h": None},  # the directory empties and goes
]


@pytest.mark.parametrize("edits", EDITS)
@pytest.mark.parametrize("in_reading", [False, True])
def test_edit_tree_in_python_is_the_index_way(store, edits, in_reading):
    tree = make_tree(store)
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
    tree = make_tree(store)
    oid = store.hash_blob(b"x\n")
    # A file under a file: the model refuses; git's index way decides (it replaces).
    changes: dict[str, tuple[str, str] | None] = {"a.txt/under": ("100644", oid)}
    with store.reading():
        assert edit_tree(store, tree, changes, {}) == store.edit_tree(tree, changes)


def test_a_kept_conflict_text_follows_every_input(store, tmp_path):
    run = RunBase(Workspace.of(str(tmp_path), store))
    base, ours, theirs, other = (
        store.hash_blob(b"a\nb\nc\n"),
        store.hash_blob(b"a\nB\nc\n"),
        store.hash_blob(b"a\nb2\nc\n"),
        store.hash_blob(b"a\nb3\nc\n"),
    )
    stages = {1: ("100644", base), 2: ("100644", ours), 3: ("100644", theirs)}
    first = run._labelled(stages, None)
    assert b"<<<<<<< pin" in first and b"b2" in first
    # Another blob on one side: merged again, not the kept text.
    changed = run._labelled({**stages, 3: ("100644", other)}, None)
    assert b"b3" in changed and b"b2" not in changed
    # A side missing: the empty text there.
    assert run._labelled({1: stages[1], 2: stages[2]}, None) != first
    # Other labels and the diff3 style: merged again.
    bases = Bases("1" * 40, "2" * 40, "3" * 40)
    labelled = run._labelled(stages, bases)
    assert (
        b"<<<<<<< pin 11111111" in labelled
        and b"||||||| merge base 33333333" in labelled
    )
    assert run._labelled(stages, None) == first
    run.close()


def test_a_conflict_whose_pin_side_changed_is_carried_not_unchanged(ov, w):
    """The 'same three blobs' shortcut is taken only for the same three blobs."""
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp"
    work.write_text(lines("core", change={5: "core 5 both", 25: "core 25 upstream"}))
    assert cli(ov, "rebase", "--continue").exit_code == 0
    elsewhere = w.upstream.commit({"docs/other.md": "other\n"}, "upstream: docs only")
    same = cli(ov, "rebase", "--onto", elsewhere)
    assert same.exit_code == 0 and "resolution mlx/core.cpp: unchanged" in same.output
    edited = w.upstream.commit(
        {
            "mlx/core.cpp": lines(
                "core",
                change={5: "core 5 upstream rewrite", 25: "core 25 upstream", 28: "x"},
            )
        },
        "upstream edits core 28",
    )
    moved = cli(ov, "rebase", "--onto", edited)
    assert moved.exit_code == 0 and "resolution mlx/core.cpp: carried" in moved.output
    resolved = ov.root / "patches-rocm" / "resolved" / "mlx" / "core.cpp"
    assert "core 5 both" in resolved.read_text() and "x\n" in resolved.read_text()


def test_resolutions_at_commit_unwanted_deleted_ignored_kept(ov, w):
    """The commit asks git's ignore rules only about files that are not wanted: an
    unwanted record still goes, an ignored file still stays."""
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp"
    work.write_text(lines("core", change={5: "core 5 both", 25: "core 25 upstream"}))
    assert cli(ov, "rebase", "--continue").exit_code == 0
    resolved = ov.root / "patches-rocm" / "resolved"
    git(ov.root, "init", "-q")  # ignore rules need a work tree
    (ov.root / ".gitignore").write_text(".DS_Store\n")
    (resolved / ".DS_Store").write_bytes(b"finder\n")
    back = cli(ov, "rebase", "--onto", w.base)  # no conflict: the resolution goes
    assert back.exit_code == 0 and "resolution mlx/core.cpp: removed" in back.output
    assert not (resolved / "mlx" / "core.cpp").exists()
    assert (resolved / ".DS_Store").read_bytes() == b"finder\n"
