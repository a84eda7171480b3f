"""Resolving a user-given commit (overlay/git/fetch.py): a full SHA the remotes lack is
said to be missing from them, and the network hint stays for remotes that cannot be
reached."""

from __future__ import annotations

import contextlib

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


def test_names_resolve_inside_a_reading_block_as_rev_parse_resolves_them(
    tmp_path, w, monkeypatch
):
    # The run's cat-file answers what three rev-parse processes did (a remote branch,
    # then a tag, then the name as given): the same commit for each name, and none
    # where rev-parse finds none.
    from gitfixtures import git, git_calls

    store = Store(str(tmp_path / "store.git"), offline=True)
    store.set_remotes({"upstream": str(w.upstream.path), "fork": str(w.fork.path)})
    up = str(w.upstream.path)
    git(up, "tag", "light", w.pin_clean)
    git(up, "tag", "-a", "-m", "annotated", "annotated", w.pin_conflict)
    git(up, "branch", "light-branch", w.base)
    git(up, "tag", "light-branch", w.pin_clean)  # the branch wins, as in rev-parse
    online = Store(str(tmp_path / "store.git"))
    online.set_remotes({"upstream": up, "fork": str(w.fork.path)})
    online.refresh_upstream_refs()
    online.ensure_commit(w.fork_commit, ["fork"])
    tree = online.tree_of(w.pin_clean)
    names = [
        "main",
        "light",
        "annotated",
        "light-branch",
        w.pin_clean[:9],
        w.fork_commit[:12],
        f"{w.pin_clean}~1",
        "main^",
        tree,
        tree[:10],
        "no-such-name",
        "refs/tags/light",
        "HEAD",
        "main@{0}",
        "a b",
        "tab\tname",
        "é",
        "0",
        "light^{tree}",
    ]

    def outside(name):
        try:
            return store.resolve(name, ["upstream", "fork"])
        except GitError:
            return None

    expected = {n: outside(n) for n in names}
    assert expected["annotated"] == w.pin_conflict
    assert expected["light-branch"] == w.base
    assert expected["no-such-name"] is None and expected[tree] is None
    calls = git_calls(monkeypatch)
    with store.reading():
        got = {n: outside(n) for n in names}
    assert got == expected
    # Only the names the reader's one line cannot hold started a git process.
    assert {c[-1].removesuffix("^{commit}").split("/")[-1] for c in calls} == {
        "a b",
        "tab\tname",
    }


def test_a_full_sha_of_a_tree_or_blob_is_named_as_such_online_and_offline(tmp_path, w):
    # Not "is not in upstream: no branch or tag there holds it" for an object the
    # store holds: what it is, and what to give instead.
    online = Store(str(tmp_path / "store.git"))
    online.set_remotes({"upstream": str(w.upstream.path), "fork": str(w.fork.path)})
    online.refresh_upstream_refs()
    tree = online.tree_of(w.pin_clean)
    blob = online.hash_blob(b"a blob\n")
    for store in (online, Store(str(tmp_path / "store.git"), offline=True)):
        store.set_remotes({"upstream": str(w.upstream.path), "fork": str(w.fork.path)})
        for oid, kind in ((tree, "tree"), (blob, "blob")):
            with pytest.raises(GitError) as err:
                store.resolve(oid, ["upstream"])
            assert (
                err.value.message == f"{oid} is a {kind} in the git store, not a commit"
            )
        assert store.resolve(w.pin_clean, ["upstream"]) == w.pin_clean


def test_an_ambiguous_short_sha_is_named_with_the_commits_it_could_be(tmp_path):
    # Two commits whose names start with the same four characters: "ambiguous", with
    # both, not "unknown ref".
    from overlay.digests import sha1
    from overlay.git.loose import write_loose
    from overlay.git.run import EMPTY_TREE

    store = Store(str(tmp_path / "store.git"), offline=True)
    store.git("rev-parse", "--git-dir")
    seen: dict[str, tuple[str, bytes]] = {}
    for i in range(100_000):
        body = (
            f"tree {EMPTY_TREE}\nauthor A <a@b> 1 +0000\ncommitter A <a@b> 1 +0000\n"
            f"\ncommit {i}\n"
        ).encode()
        oid = sha1(b"commit %d\0" % len(body) + body).hexdigest()
        if oid[:4] in seen:
            first, first_body = seen[oid[:4]]
            break
        seen[oid[:4]] = (oid, body)
    write_loose(store.git_dir, {first: ("commit", first_body), oid: ("commit", body)})
    for reading in (False, True):
        with store.reading() if reading else contextlib.nullcontext():
            with pytest.raises(GitError) as err:
                store.resolve(oid[:4], ["upstream"])
        message = err.value.message
        assert message.startswith(f"ambiguous ref {oid[:4]!r}: commits "), message
        assert all(o[:7] in message for o in (first, oid)), message
        assert err.value.hint == "give more characters of the SHA"
    assert store.resolve(oid[:12], ["upstream"]) == oid
