"""Resolving a user-given commit (overlay/git/fetch.py): a full SHA the remotes lack is
said to be missing from them, and the network hint stays for remotes that cannot be
reached."""

from __future__ import annotations

import pytest

from overlay.errors import GitError
from overlay.git.store import Store


def test_a_wrong_full_sha_says_the_remotes_lack_it(overlay, world):
    from overlay.records.manifest import load_manifest

    store = Store()
    store.set_remotes(load_manifest(str(overlay.root)).remote_urls())
    with pytest.raises(GitError) as err:
        store.resolve("0123456789abcdef0123456789abcdef01234567")
    assert "is not in upstream" in err.value.message
    assert "network" not in (err.value.hint or "")


def test_a_wrong_full_sha_with_unreachable_remotes_keeps_the_network_hint(tmp_path):
    store = Store()
    store.set_remotes(
        {"upstream": str(tmp_path / "gone"), "fork": str(tmp_path / "gone")}
    )
    with pytest.raises(GitError) as err:
        store.resolve("0123456789abcdef0123456789abcdef01234567")
    assert "could not be reached" in err.value.message
    assert "OVERLAY_UPSTREAM_URL" in (err.value.hint or "")


def test_a_fetch_leaves_the_store_a_commit_graph(tmp_path, w):
    # git's commit-graph answers the ancestry questions (is a pin on an upstream ref?)
    # from generation numbers; every fetch of the store keeps it up to date.
    store = Store(str(tmp_path / "store.git"))
    store.set_remotes({"upstream": str(w.upstream.path), "fork": str(w.fork.path)})
    # git writes it incrementally: a chain of graph files (--split)
    chain = (
        tmp_path
        / "store.git"
        / "objects"
        / "info"
        / "commit-graphs"
        / "commit-graph-chain"
    )
    assert not chain.exists()
    store.ensure_commit(w.pin_clean, ["upstream"])
    assert chain.is_file()
    first = chain.read_text()
    w.upstream.commit({"docs/index.md": "docs, later\n"})
    store.refresh_upstream_refs()
    assert chain.read_text() != first  # the new upstream commit is in the graph
    assert store.git("commit-graph", "verify").returncode == 0
