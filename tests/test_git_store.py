"""The store (overlay/git/store.py) made by several processes at once: each makes it
beside its place and renames it in whole (``create_bare_repo``), so that two
repositories' first commands on one new store both succeed and the loser of the rename
keeps the winner's store. No network; no timing assertion: the processes are only
started together, and each must succeed. And what the store answers without git: an
object's kind from its loose file, the changes between two trees a command kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gitfixtures import git_calls

from overlay.git import run as gitrun
from overlay.git.store import EMPTY_TREE, Store

ROOT = Path(__file__).resolve().parent.parent

#: Wait on a shared pipe so that every child calls Store() at the same moment.
_CHILD = """
import sys
sys.stdin.read()
from overlay.git.store import Store
Store(sys.argv[1]).git("rev-parse", "--git-dir")
"""


def test_processes_creating_one_new_store_at_once_all_succeed(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for attempt in range(5):
        git_dir = tmp_path / f"cache{attempt}" / "store.git"
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _CHILD, str(git_dir)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
            for _ in range(6)
        ]
        for child in children:  # every child is ready to go; release them together
            child.stdin.close()
        results = [(c.wait(), c.stderr.read().decode()) for c in children]
        for child in children:
            child.stdout.close()
            child.stderr.close()
        assert all(rc == 0 for rc, _ in results), results
        assert (git_dir / "HEAD").is_file()
        leftovers = [p.name for p in git_dir.parent.iterdir() if p.name != "store.git"]
        assert leftovers == [], leftovers


def test_the_loser_of_the_rename_keeps_the_winners_store(tmp_path, monkeypatch):
    git_dir = str(tmp_path / "store.git")
    real = os.rename

    def another_process_first(src, dst):
        if dst == git_dir:
            monkeypatch.setattr(gitrun.os, "rename", real)
            Store(git_dir).git("update-ref", "refs/overlay/winner", _a_commit(git_dir))
        return real(src, dst)

    monkeypatch.setattr(gitrun.os, "rename", another_process_first)
    store = Store(git_dir)
    assert store.git("rev-parse", "refs/overlay/winner").returncode == 0
    assert sorted(os.listdir(tmp_path)) == ["store.git"]


def test_an_empty_directory_becomes_the_store(tmp_path):
    git_dir = tmp_path / "store.git"
    git_dir.mkdir()
    Store(str(git_dir))
    assert (git_dir / "HEAD").is_file()


def _a_commit(git_dir: str) -> str:
    return Store(git_dir).commit_tree(EMPTY_TREE, (), "x")


def test_has_object_reads_a_loose_objects_type_and_asks_git_otherwise(
    tmp_path, monkeypatch
):
    store = Store(str(tmp_path / "store.git"))
    blob = store.hash_blob(b"a file\n")
    tree = store.out("mktree", input=f"100644 blob {blob}\tf\n".encode())
    (commit,) = store.commit_chain([(tree, [], "one")])
    real = Store.git
    asked = git_calls(monkeypatch)
    # Loose, of the kind asked: no git process.
    assert store.has_object(tree, "tree") and store.has_object(blob, "blob")
    assert asked == []
    # Another kind, absent, or not a name: git answers (a commit peels to its tree).
    assert store.has_object(commit, "tree")
    assert not store.has_object(blob, "tree")
    assert not store.has_object("0" * 40, "tree")
    assert not store.has_object("not-a-name", "tree")
    assert len(asked) == 4
    # Packed (the loose files gone): git answers, and finds it.
    real(store, "update-ref", "refs/heads/kept", commit)
    real(store, "repack", "-a", "-d", "-q")
    real(store, "prune-packed")
    assert not (Path(store.git_dir) / "objects" / tree[:2] / tree[2:]).exists()
    asked.clear()
    assert store.has_object(tree, "tree") and asked


def test_kept_changes_are_gits_and_a_damaged_record_is_asked_again(tmp_path):
    store = Store(str(tmp_path / "store.git"))
    blobs = [store.hash_blob(b"%d\n" % i) for i in range(3)]
    old = store.out(
        "mktree",
        input=f"100644 blob {blobs[0]}\ta\n100644 blob {blobs[1]}\tb\n".encode(),
    )
    new = store.out(
        "mktree",
        input=f"100755 blob {blobs[0]}\ta\n100644 blob {blobs[2]}\tc\n".encode(),
    )
    git_rows = store.diff_tree(old, new)
    assert [r[4] for r in git_rows] == ["M", "D", "A"]
    assert store.kept_diff(old, new) is None
    store.keep_diff(old, new)
    assert store.kept_diff(old, new) == git_rows
    assert store.kept_diff(new, old) is None  # kept for the pair in that order only
    (kept,) = (Path(store.git_dir) / "overlay-diffs").glob("*/*.json")
    for damage in (b"", b"{", b'{"rows": [["M"]]}', b'{"rows": [[1, 2, 3, 4, 5, 6]]}'):
        kept.write_bytes(damage)
        assert store.kept_diff(old, new) is None
        assert store.diff_tree(old, new) == git_rows  # asked of git again
    # Kept rows are what diff_tree answers, without git.
    kept.write_text(json.dumps({"rows": [list(r) for r in git_rows]}))
    store.git("update-ref", "refs/heads/x", store.commit_chain([(old, [], "x")])[0])
    assert store.diff_tree(old, new) == git_rows
