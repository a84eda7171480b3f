"""A cold export written by git (overlay/export/checkout.py: a scratch index,
``read-tree``, ``checkout-index -a``), byte for byte, that stays a resumable transaction
when git or overlay is killed while git writes; a tree or store with attributes is
written by Python instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from exportfixtures import ROOT, T1, T2, T3, assert_equals_tree, killed_export, mktree

from overlay import layout
from overlay.errors import GitError, UnsafePath
from overlay.export import checkout as export_checkout
from overlay.export import edited_files, export_tree
from overlay.fs.locks import LockBusy, flocked
from overlay.git.store import Store

#: Content git's checkout would change under ``* text eol=crlf ident``: LF line ends, $Id$.
CONVERTIBLE = {
    **T1,
    "dir/id.txt": ("100644", b"$Id$\nline two\n"),
}


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store.git"))


@pytest.fixture
def checkouts(monkeypatch):
    """The git commands the export's checkout ran (their arguments)."""
    seen: list[list[str]] = []
    real = export_checkout.run_git

    def spy(args, **kwargs):
        seen.append(list(args))
        return real(args, **kwargs)

    monkeypatch.setattr(export_checkout, "run_git", spy)
    return seen


@pytest.fixture
def rewrites(monkeypatch):
    """The files the check after git's checkout wrote again (paths)."""
    seen: list[str] = []
    real = export_checkout.replace_file

    def spy(full, path, data, mode):
        seen.append(path)
        return real(full, path, data, mode)

    monkeypatch.setattr(export_checkout, "replace_file", spy)
    return seen


def _git_wrapper(tmp_path, action: str) -> str:
    """A PATH whose ``git`` runs the shell ``action`` for ``checkout-index`` (``$GIT`` is the
    real git), else the real git."""
    real = shutil.which("git")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "git"
    script.write_text(
        f'#!/bin/sh\nGIT={real}\ncase " $* " in *" checkout-index "*) {action} ;; esac\n'
        'exec "$GIT" "$@"\n'
    )
    script.chmod(0o755)
    return f"{bindir}{os.pathsep}{os.environ['PATH']}"


def test_a_cold_export_is_one_git_checkout_and_stamps_what_is_on_disk(
    store, tmp_path, checkouts, rewrites
):
    t1, t2 = (mktree(store, t, tmp_path) for t in (T1, T2))
    dest = tmp_path / "dest"
    result = export_tree(store, t1, str(dest))
    assert checkouts == [["checkout-index", "-a"]] and rewrites == []
    assert result.written == sorted(T1) and result.previous is None
    assert_equals_tree(store, t1, dest)
    stamp = json.loads((dest / layout.EXPORT_STAMP).read_text())
    for path, (size, mtime_ns, blob) in stamp["files"].items():
        st = os.lstat(dest / path)
        assert [size, mtime_ns] == [st.st_size, st.st_mtime_ns]
        assert blob == store.out("rev-parse", f"{t1}:{path}")
    # the later exports see the stat data as they did: no edit, then one
    assert (
        edited_files(str(dest)) == [] and export_tree(store, t1, str(dest)).edited == []
    )
    (dest / "b.txt").write_bytes(b"edited by hand\n")
    result = export_tree(store, t2, str(dest))
    assert result.edited == ["b.txt"] and checkouts == [["checkout-index", "-a"]]


@pytest.mark.parametrize("where", [".gitattributes", "dir/sub/.gitattributes", "store"])
def test_attributes_in_the_tree_or_the_store_make_python_write_the_files(
    store, tmp_path, checkouts, where
):
    rules = b"* text eol=crlf ident\n"
    files = dict(CONVERTIBLE)
    if where == "store":
        os.makedirs(os.path.join(store.git_dir, "info"), exist_ok=True)
        with open(os.path.join(store.git_dir, "info", "attributes"), "wb") as fh:
            fh.write(rules)
    else:
        files[where] = ("100644", rules)
    tree = mktree(store, files, tmp_path)
    export_tree(store, tree, str(tmp_path / "dest"))
    assert checkouts == []
    assert_equals_tree(store, tree, tmp_path / "dest")  # byte for byte: LF, $Id$ as is


def test_the_users_attributes_file_does_not_change_a_byte(
    store, tmp_path, monkeypatch, checkouts, rewrites
):
    config = tmp_path / "xdg" / "git"
    config.mkdir(parents=True)
    (config / "attributes").write_bytes(b"* text eol=crlf ident\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path))
    tree = mktree(store, CONVERTIBLE, tmp_path)
    export_tree(store, tree, str(tmp_path / "dest"))
    assert checkouts == [["checkout-index", "-a"]] and rewrites == []  # git wrote them
    assert_equals_tree(store, tree, tmp_path / "dest")


def test_git_writes_exact_modes_whatever_the_umask(store, tmp_path, rewrites):
    tree = mktree(store, T1, tmp_path)
    old = os.umask(0o077)
    try:
        export_tree(store, tree, str(tmp_path / "dest"))
    finally:
        os.umask(old)
    assert (
        rewrites == []
    )  # git made them 0644 and 0755 (not a chmod or a rewrite after)
    assert (tmp_path / "dest" / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "dest" / "dir").stat().st_mode & 0o777 == 0o700
    assert_equals_tree(store, tree, tmp_path / "dest")


def test_a_file_git_wrote_otherwise_is_written_again(
    store, tmp_path, monkeypatch, rewrites
):
    # As if git had converted a file after all: a .gitattributes let through on purpose.
    monkeypatch.setattr(export_checkout, "git_may_write", lambda store, entries: True)
    files = {**CONVERTIBLE, ".gitattributes": ("100644", b"dir/id.txt text eol=crlf\n")}
    tree = mktree(store, files, tmp_path)
    dest = tmp_path / "dest"
    export_tree(store, tree, str(dest))
    assert rewrites == ["dir/id.txt"]
    assert_equals_tree(store, tree, dest)
    assert edited_files(str(dest)) == []


def test_a_file_git_left_out_is_written(store, tmp_path, monkeypatch):
    # git exits with an error having written all but one file: the check finds it missing.
    path = _git_wrapper(tmp_path, '"$GIT" "$@"; rm "$GIT_WORK_TREE/dir/c.txt"; exit 1')
    monkeypatch.setenv("PATH", path)
    tree = mktree(store, T1, tmp_path)
    export_tree(store, tree, str(tmp_path / "dest"))
    monkeypatch.undo()
    assert_equals_tree(store, tree, tmp_path / "dest")


def test_a_hostile_link_is_refused_before_git_writes(store, tmp_path, checkouts):
    tree = mktree(store, {**T1, "evil": ("120000", b"../../outside")}, tmp_path)
    dest = tmp_path / "dest"
    with pytest.raises(UnsafePath, match="evil"):
        export_tree(store, tree, str(dest))
    assert checkouts == [] and sorted(os.listdir(dest)) == [layout.EXPORT_LOCK]


def test_git_killed_in_the_middle_of_a_file_then_plain_export_completes(
    store, tmp_path, monkeypatch
):
    # A file-size limit of 512 bytes: git writes a.txt and b.txt, then dies of SIGXFSZ
    # half-way into dir/big.bin (the index's order); the rest is never written.
    files = {**T1, "dir/big.bin": ("100644", os.urandom(1 << 16))}
    tree, t3 = mktree(store, files, tmp_path), mktree(store, T3, tmp_path)
    monkeypatch.setenv("PATH", _git_wrapper(tmp_path, "ulimit -f 1"))
    dest = tmp_path / "dest"
    with pytest.raises(GitError, match="checkout-index was killed"):
        export_tree(store, tree, str(dest))
    monkeypatch.undo()
    assert 0 < (dest / "dir/big.bin").stat().st_size < len(files["dir/big.bin"][1])
    assert not (dest / "run.sh").exists()
    assert (
        json.loads((dest / layout.EXPORT_STAMP).read_text())["pending"]["direct"]
        is True
    )
    other = tmp_path / "other"
    shutil.copytree(dest, other, symlinks=True)
    result = export_tree(store, tree, str(dest))
    assert result.edited == [] and "dir/big.bin" in result.written
    assert "a.txt" not in result.written  # git's complete files are adopted
    assert_equals_tree(store, tree, dest)
    export_tree(store, t3, str(other))  # or resumed towards another tree
    assert_equals_tree(store, t3, other)


def test_overlay_killed_while_git_writes_leaves_git_the_lock(store, tmp_path):
    tree = mktree(store, T1, tmp_path)
    dest = tmp_path / "dest"
    # git's parent (overlay) is SIGKILLed as git starts; git goes on writing, holding the lock
    env = dict(
        os.environ,
        PATH=_git_wrapper(tmp_path, "kill -9 $PPID; sleep 3"),
        PYTHONPATH=str(ROOT),
    )
    code = (
        "import sys; from overlay.git.store import Store; from overlay.export import "
        "export_tree; export_tree(Store(sys.argv[1]), sys.argv[2], sys.argv[3])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, store.git_dir, tree, str(dest)],
        env=env,
        capture_output=True,
    )
    assert proc.returncode == -9, proc.stderr.decode()
    with pytest.raises(LockBusy), flocked(dest / layout.EXPORT_LOCK, wait=False):
        pass  # the next export waits for git to end
    with flocked(dest / layout.EXPORT_LOCK):
        pass
    result = export_tree(store, tree, str(dest))
    assert result.written == [] and result.edited == []  # git wrote them all
    assert_equals_tree(store, tree, dest)


def test_every_state_a_killed_checkout_leaves_is_completed(store, tmp_path):
    t1, t3 = (mktree(store, t, tmp_path) for t in (T1, T3))
    journaled = tmp_path / "journaled"
    # killed after the journal (n blob checks, three stamp points), before git starts
    assert killed_export(store, t1, journaled, str(len(T1) + 3)) == -9
    order = sorted(T1, key=os.fsencode)  # the index's order, git's
    for k in range(len(order) + 1):
        for target in (t1, t3):
            dest = tmp_path / f"k{k}-{target[:8]}"
            shutil.copytree(journaled, dest, symlinks=True)
            # git wrote the files before the k-th whole and was killed half-way into it
            for i, path in enumerate(order[: k + 1]):
                mode, data = T1[path]
                full = dest / path
                full.parent.mkdir(parents=True, exist_ok=True)
                if mode == "120000":
                    if i < k:
                        os.symlink(data, full)
                    continue
                full.write_bytes(data if i < k else data[: len(data) // 2])
                full.chmod(0o755 if mode == "100755" else 0o644)
            result = export_tree(store, target, str(dest))
            assert result.edited == []
            assert_equals_tree(store, target, dest)
