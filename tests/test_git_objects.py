"""Reading git objects in Python (overlay/git/objects.py): tree objects and their
entries read as ``ls-tree`` lists them, and the object questions asked inside one
``Store.reading()`` answered as git answers them, for objects present and missing;
the persistent ``cat-file --batch`` closes without hanging when its output is not
drained."""

from __future__ import annotations

import os
import threading

import pytest
from gitfixtures import tree_of_every_kind

from overlay.git.loose import write_typed
from overlay.git.objects import parse_ls_tree, parse_tree_object
from overlay.git.store import Store
from overlay.git.treemodel import blob_name, listing


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store.git"))


def test_tree_objects_read_as_ls_tree_lists_them(store):
    tree = tree_of_every_kind(store)
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
    tree = tree_of_every_kind(store)
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
    tree = tree_of_every_kind(store)
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
    tree = tree_of_every_kind(store)
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


def test_catfile_close_does_not_hang_when_output_is_not_drained(store):
    oid = store.hash_blob(os.urandom(1 << 22))
    cat = store.cat_file()
    cat._proc.stdin.write(
        oid.encode() + b"\n"
    )  # as if Ctrl-C hit read() after the request
    cat._proc.stdin.flush()
    cat._proc.stdout.readline()
    closer = threading.Thread(target=cat.close, daemon=True)
    closer.start()
    closer.join(60)  # a hang guard, not a timing assertion
    hung = closer.is_alive()
    if hung:
        cat._proc.kill()
    assert not hung
    assert cat._proc.returncode is not None


def test_object_sizes_inside_and_outside_reading_are_what_git_says(store):
    # export's object check asks the run's reader for every blob's size.
    tree = tree_of_every_kind(store)
    blobs = [oid for _m, kind, oid, _p in listing(store, tree) if kind == "blob"]
    absent = blob_name(b"not in the store\n")
    want = [int(store.git("cat-file", "-s", oid).stdout) for oid in blobs]
    assert store.object_sizes([*blobs, absent]) == [*want, None]  # one --batch-check
    with store.reading():
        assert store.object_sizes([*blobs, absent]) == [*want, None]  # the reader
