"""The objects overlay writes and reads without git (overlay/git/loose.py): a few written
as loose files git reads, many as one pack, a killed writer's leftovers no obstacle;
loose objects read back from their files as git reads them, whoever wrote them, and
anything else left to git."""

from __future__ import annotations

import os
from hashlib import sha1

import pytest
from gitfixtures import tree_of_every_kind

from overlay.git import loose
from overlay.git.loose import write_loose, write_typed
from overlay.git.store import Store
from overlay.git.treemodel import blob_name


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store.git"))


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
    objects = _objects(loose.LOOSE_LIMIT, b"many")
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
        assert loose.read_loose(store.git_dir, name) == ("blob", data)
        assert loose.loose_header(store.git_dir, name) == ("blob", len(data))
    assert loose.loose_kind(store.git_dir, names[0]) == "blob"
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
    assert loose.read_loose(store.git_dir, names[0]) is None
    with store.reading() as reader:
        assert store.object_sizes(names) == [len(big), len(small)]
        assert reader.read(names[0]) == ("blob", big)
    assert loose.read_loose(store.git_dir, blob_name(b"absent\n")) is None
    # Damaged: a file that does not inflate, or whose header lies about the size.
    bad = blob_name(b"bad\n")
    path = os.path.join(store.git_dir, "objects", bad[:2], bad[2:])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(b"not zlib")
    assert loose.read_loose(store.git_dir, bad) is None
    assert loose.loose_header(store.git_dir, bad) is None
    import zlib

    with open(path, "wb") as fh:
        fh.write(zlib.compress(b"blob 99\0bad\n"))
    assert loose.read_loose(store.git_dir, bad) is None
