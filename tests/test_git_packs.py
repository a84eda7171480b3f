"""The git store's packs rolled up past git's limit (overlay/git/packs.py): every
object kept, reachable or not; a roll-up another process holds is not waited for."""

from __future__ import annotations

import pytest

from overlay.fs.locks import flocked
from overlay.git import packs
from overlay.git.loose import LOOSE_LIMIT, write_typed
from overlay.git.packs import pack_count, tidy_packs
from overlay.git.store import Store
from overlay.git.treemodel import blob_name


def _pack_of_blobs(store: Store, tag: int) -> list[str]:
    """Write LOOSE_LIMIT new blobs, none of them referenced: one pack."""
    blobs = {}
    for i in range(LOOSE_LIMIT):
        data = b"blob %d of pack %d\n" % (i, tag)
        blobs[blob_name(data)] = ("blob", data)
    write_typed(store.git_dir, blobs)
    return list(blobs)


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "store.git"))
    s.git("rev-parse", "--git-dir")  # made
    return s


def test_packs_past_the_limit_are_rolled_up_and_every_object_kept(store, monkeypatch):
    monkeypatch.setattr(packs, "PACK_LIMIT", 3)
    written = []
    for tag in range(3):
        written += _pack_of_blobs(store, tag)
    assert pack_count(store.git_dir) == 3  # at the limit: left as they are
    written += _pack_of_blobs(store, 3)  # the fourth pack takes it past
    assert pack_count(store.git_dir) == 1
    # Unreferenced objects too: a layer's trees are named by caches, not by refs.
    assert store.missing_objects(written) == []
    assert store.git("fsck", "--no-dangling").returncode == 0


def test_a_roll_up_another_process_runs_is_not_waited_for(store):
    for tag in range(3):
        _pack_of_blobs(store, tag)
    with flocked(f"{store.git_dir}/overlay-repack.lock"):
        assert tidy_packs(store.git_dir, limit=1) is False
    assert pack_count(store.git_dir) == 3
    assert tidy_packs(store.git_dir, limit=1) is True
    assert pack_count(store.git_dir) == 1


def test_a_fetch_rolls_up_the_packs_past_the_limit(tmp_path, w, monkeypatch):
    store = Store(str(tmp_path / "store.git"))
    store.set_remotes({"upstream": str(w.upstream.path), "fork": str(w.fork.path)})
    written = [b for tag in range(2) for b in _pack_of_blobs(store, tag)]
    monkeypatch.setattr(packs, "PACK_LIMIT", 1)
    assert pack_count(store.git_dir) == 2
    # A small fetch leaves its objects loose (git's fetch.unpackLimit); the roll-up
    # after it packs them with the rest.
    store.refresh_upstream_refs()
    assert pack_count(store.git_dir) == 1
    assert store.missing_objects([*written, w.pin_clean, w.pin_conflict]) == []
