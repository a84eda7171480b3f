"""Reading git objects in Python (overlay/git/objects.py): tree objects and their
entries read as ``ls-tree`` lists them, and the object questions asked inside one
``Store.reading()`` answered as git answers them, for objects present and missing;
the persistent ``cat-file --batch`` closes without hanging when its output is not
drained."""

from __future__ import annotations

import os
import threading
from hashlib import sha1

import pytest
from gitfixtures import tree_of_every_kind

from overlay.git import objects as gitobjects
from overlay.git.objects import (
    parse_ls_tree,
    parse_tree_object,
    write_loose,
    write_typed,
)
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


def _objects(n: int, salt: bytes = b"") -> dict[str, tuple[str, bytes]]:
    return {
        blob_name(b"%s%d\n" % (salt, k)): ("blob", b"%s%d\n" % (salt, k))
        for k in range(n)
    }


def test_few_objects_are_written_loose_as_git_reads_them(store):
    tree = tree_of_every_kind(store)
    commit_body = (
        b"tree %s\nauthor a <a@b> 0 +0000\ncommitter a <a@b> 0 +0000\n\nm\n"
        % (tree.encode())
    )
    commit = sha1(b"commit %d\0" % len(commit_body) + commit_body).hexdigest()
    objects = {**_objects(3), commit: ("commit", commit_body)}
    packs = os.listdir(os.path.join(store.git_dir, "objects", "pack"))
    write_typed(store.git_dir, objects)
    for name, (kind, body) in objects.items():
        assert store.git("cat-file", "-t", name).stdout.strip() == kind.encode()
        assert store.git("cat-file", kind, name).stdout == body
        path = os.path.join(store.git_dir, "objects", name[:2], name[2:])
        assert os.stat(path).st_mode & 0o777 == 0o444  # as git leaves one
    assert os.listdir(os.path.join(store.git_dir, "objects", "pack")) == packs
    store.git("fsck", "--strict", "--no-dangling")  # raises on a damaged object
    assert not [
        n
        for d in os.listdir(os.path.join(store.git_dir, "objects"))
        if len(d) == 2
        for n in os.listdir(os.path.join(store.git_dir, "objects", d))
        if n.startswith("tmp_obj_")
    ]


def test_a_loose_object_already_there_is_left_as_it_is(store):
    objects = _objects(1, b"kept")
    (name,) = objects
    store.hash_blob(objects[name][1])  # git wrote it first
    path = os.path.join(store.git_dir, "objects", name[:2], name[2:])
    before = os.stat(path)
    write_loose(store.git_dir, objects)
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_temporary_file_a_killed_writer_left_does_not_stop_the_next(store):
    objects = _objects(1, b"stale")
    (name,) = objects
    fan = os.path.join(store.git_dir, "objects", name[:2])
    os.makedirs(fan, exist_ok=True)
    stale = os.path.join(fan, f"tmp_obj_{os.getpid()}_{name[2:10]}")
    with open(stale, "wb") as fh:
        fh.write(b"half")
    os.chmod(stale, 0o444)
    write_loose(store.git_dir, objects)
    assert store.git("cat-file", "blob", name).stdout == objects[name][1]
    assert not os.path.exists(stale)


def test_from_the_limit_on_the_objects_go_in_one_pack(store):
    objects = _objects(gitobjects.LOOSE_LIMIT, b"many")
    pack_dir = os.path.join(store.git_dir, "objects", "pack")
    packs = set(os.listdir(pack_dir))
    write_typed(store.git_dir, objects)
    new = set(os.listdir(pack_dir)) - packs
    assert len([n for n in new if n.endswith(".pack")]) == 1
    assert store.missing_objects(list(objects)) == []
    name = next(iter(objects))
    assert not os.path.exists(
        os.path.join(store.git_dir, "objects", name[:2], name[2:])
    )


def test_loose_objects_git_wrote_are_read_from_their_files_as_git_reads_them(store):
    """read_loose and loose_header read what `git hash-object -w` leaves (git's own
    deflate, whose code tables can come before the header's first byte), the same
    bytes, type and size as cat-file; a packed, absent or damaged object is left
    to git (None)."""
    import random
    import string

    rng = random.Random(7)
    # Source-like lines (identifiers of letters, digits and _): deflated with dynamic
    # code tables, the first 64 bytes of the file inflate to 9, fewer than the
    # header's 11 (zlib at git's loose level and at its default, measured).
    chars = (string.ascii_letters + string.digits + "_").encode()

    def ident() -> bytes:
        return bytes(rng.choice(chars) for _ in range(rng.randrange(3, 12)))

    big = b"".join(
        b"  %s %s = %s(%s, %d);  // %s\n"
        % (ident(), ident(), ident(), ident(), rng.randrange(1000), ident())
        for _ in range(400)
    )
    small = b"one line\n"
    names = []
    for data in (big, small):
        path = os.path.join(store.git_dir, "in")
        with open(path, "wb") as fh:
            fh.write(data)
        names.append(store.git("hash-object", "-w", path).stdout.decode().strip())
    for name, data in zip(names, (big, small), strict=True):
        assert gitobjects.read_loose(store.git_dir, name) == ("blob", data)
        assert gitobjects.loose_header(store.git_dir, name) == ("blob", len(data))
    assert gitobjects.loose_kind(store.git_dir, names[0]) == "blob"
    # Inside a run's reader: sizes and reads of loose objects start no cat-file.
    with store.reading() as reader:
        assert store.object_sizes(names) == [len(big), len(small)]
        assert reader.read(names[0]) == ("blob", big)
        assert store.has_object(names[1], "blob")
        assert reader._started is None
    # Packed: the file is gone, git answers.
    pack = os.path.join(store.git_dir, "objects", "pack", "pack")
    store.git("pack-objects", "-q", pack, input="\n".join(names).encode() + b"\n")
    store.git("prune-packed")
    assert gitobjects.read_loose(store.git_dir, names[0]) is None
    with store.reading() as reader:
        assert store.object_sizes(names) == [len(big), len(small)]
        assert reader.read(names[0]) == ("blob", big)
    assert gitobjects.read_loose(store.git_dir, blob_name(b"absent\n")) is None
    # Damaged: a file that does not inflate, or whose header lies about the size.
    bad = blob_name(b"bad\n")
    path = os.path.join(store.git_dir, "objects", bad[:2], bad[2:])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(b"not zlib")
    assert gitobjects.read_loose(store.git_dir, bad) is None
    assert gitobjects.loose_header(store.git_dir, bad) is None
    import zlib

    with open(path, "wb") as fh:
        fh.write(zlib.compress(b"blob 99\0bad\n"))
    assert gitobjects.read_loose(store.git_dir, bad) is None
