"""The export as a resumable transaction: kills, Ctrl-C, temp files, --force, hand edits."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from overlay import layout
from overlay.cli import main
from overlay.errors import OverlayError
from overlay.export import edited_files, export_tree
from overlay.fs.atomic import TEMP_RE, atomic_write
from overlay.git.store import EMPTY_TREE, Store, zsplit

ROOT = Path(__file__).resolve().parents[1]

T1 = {
    "a.txt": ("100644", b"a1\n"),
    "b.txt": ("100644", b"b1\n"),
    "dir/c.txt": ("100644", b"c1\n"),
    "dir/sub/d.txt": ("100644", b"d1\n"),
    "run.sh": ("100755", b"#!/bin/sh\necho 1\n"),
    "link": ("120000", b"dir/c.txt"),
    "x": ("100644", b"x is a file\n"),
}
T2 = {
    "a.txt": ("100644", b"a2\n"),
    "b.txt": ("100644", b"b1\n"),
    "dir/c.txt": ("100644", b"c2\n"),
    "run.sh": ("100644", b"#!/bin/sh\necho 1\n"),
    "link": ("120000", b"a.txt"),
    "x/y.txt": ("100644", b"x is a directory\n"),
    "new/e.txt": ("100644", b"e\n"),
}
T3 = {
    "a.txt": ("100644", b"a3\n"),
    "b.txt": ("100644", b"b3\n"),
    "dir/sub/d.txt": ("100644", b"d1\n"),
    "run.sh": ("100755", b"#!/bin/sh\necho 3\n"),
    "x": ("100644", b"x is a file\n"),
}


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store.git"))


def mktree(store: Store, files: dict[str, tuple[str, bytes]], tmp_path) -> str:
    changes = {p: (mode, store.hash_blob(data)) for p, (mode, data) in files.items()}
    return store.edit_tree(EMPTY_TREE, changes)


def assert_equals_tree(store: Store, tree: str, dest: Path) -> None:
    """DEST holds exactly the tree (bytes and modes), the stamp and the lock; no temp files."""
    want = {}
    for rec in zsplit(store.git("ls-tree", "-r", "-z", "--full-tree", tree).stdout):
        meta, path = rec.split("\t", 1)
        mode, _kind, oid = meta.split()
        want[path] = (mode, store.git("cat-file", "blob", oid).stdout)
    have = {}
    for top, dirs, files in os.walk(dest):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            full = os.path.join(top, name)
            rel = os.path.relpath(full, dest)
            assert not TEMP_RE.match(name), f"temp file left: {rel}"
            if rel in (layout.EXPORT_STAMP, layout.EXPORT_LOCK):
                continue
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                have[rel] = ("120000", os.fsencode(os.readlink(full)))
            else:
                have[rel] = (
                    "100755" if st.st_mode & 0o100 else "100644",
                    Path(full).read_bytes(),
                )
    assert have == want
    stamp = json.loads((dest / layout.EXPORT_STAMP).read_text())
    assert stamp["tree"] == tree and "pending" not in stamp
    assert sorted(stamp["files"]) == sorted(want)


def killed_export(store: Store, tree: str, dest: Path, point: str) -> int:
    """Run export_tree in a child that the test hook kills at checkpoint ``point``; its exit status."""
    env = dict(os.environ, OVERLAY_TEST_KILL_AT=f"export:{point}", PYTHONPATH=str(ROOT))
    code = (
        "import sys; from overlay.git.store import Store; from overlay.export import export_tree; "
        "export_tree(Store(sys.argv[1]), sys.argv[2], sys.argv[3])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, store.git_dir, tree, str(dest)],
        env=env,
        capture_output=True,
    )
    assert proc.returncode in (0, -9), proc.stderr.decode()
    return proc.returncode


def _kill_everywhere(store, base, tree, tmp_path, name, also=None):
    """Kill an export of ``tree`` over ``base`` (a finished export or None) at every checkpoint in
    turn; after each kill a plain re-export must end equal to the tree. Returns the number of points."""
    point = 0
    while True:
        point += 1
        dest = tmp_path / f"{name}-{point}"
        if base is not None:
            export_tree(store, base, str(dest))
        if killed_export(store, tree, dest, str(point)) == 0:
            assert_equals_tree(store, tree, dest)
            return point - 1
        if also is not None:  # the same killed state, resumed towards another tree
            other = tmp_path / f"{name}-{point}-other"
            shutil.copytree(dest, other, symlinks=True)
            export_tree(store, also, str(other))
            assert_equals_tree(store, also, other)
        result = export_tree(store, tree, str(dest))
        assert result.edited == []
        assert_equals_tree(store, tree, dest)


def test_sigkill_at_every_point_then_plain_export_completes(store, tmp_path):
    t1, t2, t3 = (mktree(store, t, tmp_path) for t in (T1, T2, T3))
    # T1 with a .gitattributes: its cold export is written by Python, file by file
    attrs = {**T1, ".gitattributes": ("100644", b"*.sh -text\n")}
    ta = mktree(store, attrs, tmp_path)
    cold = _kill_everywhere(store, None, t1, tmp_path, "cold", also=t3)
    cold_python = _kill_everywhere(store, None, ta, tmp_path, "cold-py", also=t3)
    incremental = _kill_everywhere(store, t1, t2, tmp_path, "incr", also=t3)
    # every blob read, both stamps (before and after their rename), every removal, and every file
    # write before and after its rename; a cold export written by git: the blob reads, the
    # journal, the point after git's checkout, the last stamp (the kills inside git's
    # checkout: tests/test_export_checkout.py)
    assert cold == len(T1) + 6
    assert cold_python >= 20 and incremental >= 20


def test_killed_twice_then_plain_export_completes(store, tmp_path):
    t1, t2, t3 = (mktree(store, t, tmp_path) for t in (T1, T2, T3))
    for first, second in [(12, 5), (14, 9), (17, 12), (20, 14)]:
        dest = tmp_path / f"twice-{first}-{second}"
        export_tree(store, t1, str(dest))
        assert killed_export(store, t2, dest, str(first)) == -9
        assert killed_export(store, t3, dest, str(second)) == -9
        export_tree(store, t3, str(dest))
        assert_equals_tree(store, t3, dest)


def test_a_hand_edit_during_an_interrupted_run_is_still_refused(store, tmp_path):
    t1, t2 = (mktree(store, t, tmp_path) for t in (T1, T2))
    dest = tmp_path / "dest"
    export_tree(store, t1, str(dest))
    assert killed_export(store, t2, dest, "12") == -9
    assert json.loads((dest / layout.EXPORT_STAMP).read_text())["pending"]["tree"] == t2
    (dest / "dir/c.txt").write_bytes(b"my own edit\n")
    with pytest.raises(OverlayError, match="edited since the last export.*dir/c.txt"):
        export_tree(store, t2, str(dest))
    assert (dest / "dir/c.txt").read_bytes() == b"my own edit\n"
    export_tree(store, t2, str(dest), force=True)
    assert_equals_tree(store, t2, dest)


def test_temp_files_of_a_killed_run_are_removed_by_force(store, tmp_path):
    t1 = mktree(store, T1, tmp_path)
    dest = tmp_path / "dest"
    export_tree(store, t1, str(dest))
    for tmp in (
        "dir/.c.txt.k3j9x_2q.tmp",
        ".a.txt.abcdefgh.tmp",
        f".{layout.EXPORT_STAMP}.q1w2e3r4.tmp",
    ):
        (dest / tmp).write_bytes(b"half")
    (dest / ".notes.txt").write_bytes(b"mine")  # not a temp name of ours: kept
    export_tree(store, t1, str(dest), force=True)
    assert sorted(os.listdir(dest / "dir")) == ["c.txt", "sub"]
    assert (dest / ".notes.txt").read_bytes() == b"mine"
    os.unlink(dest / ".notes.txt")
    assert_equals_tree(store, t1, dest)


def test_a_killed_stamp_write_into_an_empty_dest_is_not_a_foreign_file(store, tmp_path):
    t1 = mktree(store, T1, tmp_path)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / f".{layout.EXPORT_STAMP}.q1w2e3r4.tmp").write_bytes(b"{")
    export_tree(store, t1, str(dest))
    assert_equals_tree(store, t1, dest)


def test_force_restores_deleted_and_edited_files_when_the_tree_is_unchanged(
    store, tmp_path
):
    t1 = mktree(store, T1, tmp_path)
    dest = tmp_path / "dest"
    export_tree(store, t1, str(dest))
    os.unlink(dest / "dir/sub/d.txt")
    (dest / "a.txt").write_bytes(b"edited\n")
    os.chmod(dest / "run.sh", 0o644)
    plain = export_tree(store, t1, str(dest))
    assert plain.edited == ["a.txt", "dir/sub/d.txt"] and plain.written == []
    assert (dest / "a.txt").read_bytes() == b"edited\n"
    forced = export_tree(store, t1, str(dest), force=True)
    assert (
        forced.written == ["a.txt", "dir/sub/d.txt", "run.sh"] and forced.edited == []
    )
    assert_equals_tree(store, t1, dest)


def test_an_edit_equal_to_the_new_content_is_not_an_edit(store, tmp_path):
    t1, t2 = (mktree(store, t, tmp_path) for t in (T1, T2))
    dest = tmp_path / "dest"
    export_tree(store, t1, str(dest))
    (dest / "a.txt").write_bytes(T2["a.txt"][1])  # the hand edit the new patch makes
    mtime = (dest / "a.txt").stat().st_mtime_ns
    assert edited_files(str(dest)) == ["a.txt"]
    result = export_tree(store, t2, str(dest))
    assert "a.txt" not in result.written and result.edited == []
    assert (
        dest / "a.txt"
    ).stat().st_mtime_ns == mtime  # kept, so nothing rebuilds for it
    assert_equals_tree(store, t2, dest)
    assert edited_files(str(dest)) == []


def test_touched_but_unchanged_is_not_an_edit(store, tmp_path):
    t1, t2 = (mktree(store, t, tmp_path) for t in (T1, T2))
    dest = tmp_path / "dest"
    export_tree(store, t1, str(dest))
    os.utime(dest / "a.txt", ns=(1, 1))
    atomic_write(
        dest / "dir/c.txt", T1["dir/c.txt"][1]
    )  # rewritten with the same bytes
    assert edited_files(str(dest)) == []
    export_tree(store, t2, str(dest))
    assert_equals_tree(store, t2, dest)


def test_every_export_reports_the_hand_edits_it_leaves(store, tmp_path):
    t1, t2 = (mktree(store, t, tmp_path) for t in (T1, T2))
    dest = tmp_path / "dest"
    export_tree(store, t1, str(dest))
    (dest / "b.txt").write_bytes(b"b edited by hand\n")  # t2 leaves b.txt as it was
    result = export_tree(store, t2, str(dest))
    assert result.edited == ["b.txt"] and "b.txt" not in result.written
    assert (dest / "b.txt").read_bytes() == b"b edited by hand\n"
    assert (
        export_tree(store, t2, str(dest)).edited == ["b.txt"] == edited_files(str(dest))
    )
    assert export_tree(store, t1, str(dest)).edited == ["b.txt"]


def test_a_format_1_stamp_is_read_and_upgraded(store, tmp_path):
    t1, t2 = (mktree(store, t, tmp_path) for t in (T1, T2))
    dest = tmp_path / "dest"
    export_tree(store, t1, str(dest))
    stamp = json.loads((dest / layout.EXPORT_STAMP).read_text())
    old = {
        "format": 1,
        "tree": t1,
        "files": {p: rec[:2] for p, rec in stamp["files"].items()},
    }
    (dest / layout.EXPORT_STAMP).write_text(
        json.dumps(old)
    )  # as the exports before stamps held blobs
    os.utime(dest / "a.txt", ns=(1, 1))  # touched, same content: not an edit
    (dest / "b.txt").write_bytes(b"edited\n")
    result = export_tree(store, t2, str(dest))
    assert result.edited == ["b.txt"] and "a.txt" in result.written
    assert json.loads((dest / layout.EXPORT_STAMP).read_text())["format"] == 2
    (dest / "b.txt").write_bytes(T2["b.txt"][1])
    assert edited_files(str(dest)) == []


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


# -- through the CLI ----------------------------------------------------------------------


def _cli(overlay, *args, kill_at=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if kill_at:
        env["OVERLAY_TEST_KILL_AT"] = f"export:{kill_at}"
    return subprocess.run(
        [sys.executable, "-m", "overlay.cli", "-C", str(overlay.root), *args],
        env=env,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    "point, signal_, state",
    [
        ("read", ":INT", "is as it was"),
        ("stamped", ":INT", "partial export"),
        ("written", "", None),
    ],
)
def test_cli_interrupt_and_kill_then_plain_export(
    overlay, tmp_path, point, signal_, state
):
    dest = tmp_path / "out"
    tree = _cli(overlay, "tree").stdout.strip()
    n = len(zsplit(Store().git("ls-tree", "-r", "-z", tree).stdout))
    # checkpoints of a cold export: n blob reads, then before/at/after the stamp, then git's
    # checkout has written the files (the last stamp not yet)
    kill_at = {"read": 1, "stamped": n + 3, "written": n + 4}[point]
    proc = _cli(overlay, "export", str(dest), kill_at=f"{kill_at}{signal_}")
    if state is None:
        assert proc.returncode == -9
    else:
        assert proc.returncode == 130, proc.stderr
        lines = proc.stderr.splitlines()
        assert (
            len(lines) == 1
            and lines[0].startswith("overlay: interrupted")
            and state in lines[0]
        )
        assert f"`overlay export {dest}`" in lines[0]
        with open(dest / layout.EXPORT_LOCK) as fh:  # the destination lock was released
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if state != "is as it was":
        status = _cli(overlay, "status", "--dest", str(dest))
        assert f"export    {dest}: interrupted export of {tree}" in status.stdout
    done = _cli(overlay, "export", str(dest))
    assert done.returncode == 0, done.stderr
    assert_equals_tree(Store(), tree, dest)


def test_cli_export_and_status_list_the_same_hand_edits(overlay, tmp_path):
    dest = tmp_path / "out"
    runner = CliRunner()
    assert (
        runner.invoke(main, ["-C", str(overlay.root), "export", str(dest)]).exit_code
        == 0
    )
    (dest / "mlx/core.cpp").write_text("edited by hand\n")
    exported = runner.invoke(main, ["-C", str(overlay.root), "export", str(dest)])
    status = runner.invoke(
        main, ["-C", str(overlay.root), "status", "--dest", str(dest)]
    )
    note = f"warning: {dest}: 1 file(s) edited by hand since the export were left as they are: mlx/core.cpp"
    assert exported.exit_code == 0 and note in exported.output
    assert status.exit_code == 0 and note in status.output
