"""``overlay export`` (overlay/export/run.py): an incremental, resumable
transaction. A cold export then incremental ones, a file becoming a directory and back,
hostile tree entries refused; a SIGKILL at every checkpoint (or twice, or a Ctrl-C)
followed by a plain export ends equal to the tree; a hand edit is never overwritten and
is reported (``--strict`` fails on it, and on a file the layer does not have), ``--force``
restores what was deleted or edited and removes a killed run's temp files.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from exportfixtures import ROOT, T1, T2, T3, assert_equals_tree, killed_export, mktree
from gitfixtures import cli

from overlay import layout
from overlay.cli import main
from overlay.errors import OverlayError, UnsafePath
from overlay.export import edited_files, export_tree
from overlay.git.store import Store, zsplit


def blob(store: Store, data: bytes) -> str:
    return store.hash_blob(data)


def raw_tree(store: Store, entries: list[tuple[str, str, str]]) -> str:
    """A tree object written byte by byte (git's own tools refuse these names)."""
    data = b"".join(
        mode.encode() + b" " + name.encode() + b"\0" + bytes.fromhex(oid)
        for mode, name, oid in entries
    )
    return store.out(
        "hash-object", "-t", "tree", "-w", "--literally", "--stdin", input=data
    )


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store.git"))


def test_cold_then_incremental_export(store, tmp_path):
    dest = tmp_path / "dest"
    t1 = mktree(
        store,
        {
            "a.txt": ("100644", b"a1\n"),
            "dir/b.txt": ("100644", b"b1\n"),
            "dir/sub/c.txt": ("100644", b"c1\n"),
            "run.sh": ("100755", b"#!/bin/sh\n"),
            "link": ("120000", b"dir/b.txt"),
        },
        tmp_path,
    )
    first = export_tree(store, t1, str(dest))
    assert first.previous is None
    assert first.written == ["a.txt", "dir/b.txt", "dir/sub/c.txt", "link", "run.sh"]
    assert os.access(dest / "run.sh", os.X_OK) and not os.access(
        dest / "a.txt", os.X_OK
    )
    assert os.readlink(dest / "link") == "dir/b.txt"
    mtimes = {p: (dest / p).stat().st_mtime_ns for p in ("a.txt", "dir/b.txt")}

    again = export_tree(store, t1, str(dest))
    assert again.written == [] and again.removed == [] and again.unchanged == 5

    t2 = mktree(
        store,
        {
            "a.txt": ("100644", b"a1\n"),
            "dir/b.txt": ("100644", b"b2\n"),
            "new.txt": ("100644", b"n\n"),
            "run.sh": ("100755", b"#!/bin/sh\n"),
            "link": ("120000", b"dir/b.txt"),
        },
        tmp_path,
    )
    second = export_tree(store, t2, str(dest))
    assert second.written == ["dir/b.txt", "new.txt"]
    assert second.removed == ["dir/sub/c.txt"]
    assert second.unchanged == 3
    assert not (dest / "dir" / "sub").exists()  # emptied directory removed
    assert (dest / "a.txt").stat().st_mtime_ns == mtimes["a.txt"]
    assert (dest / "dir/b.txt").read_bytes() == b"b2\n"
    assert json.loads((dest / layout.EXPORT_STAMP).read_text())["tree"] == t2


def test_file_to_directory_and_back(store, tmp_path):
    dest = tmp_path / "dest"
    t1 = mktree(store, {"x": ("100644", b"file\n")}, tmp_path)
    t2 = mktree(store, {"x/y": ("100644", b"nested\n")}, tmp_path)
    export_tree(store, t1, str(dest))
    export_tree(store, t2, str(dest))
    assert (dest / "x" / "y").read_bytes() == b"nested\n"
    export_tree(store, t1, str(dest))
    assert (dest / "x").read_bytes() == b"file\n"


def test_refuses_a_directory_it_did_not_create(store, tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "mine.txt").write_text("user data")
    t1 = mktree(store, {"a": ("100644", b"a\n")}, tmp_path)
    with pytest.raises(OverlayError, match="holds no overlay export stamp"):
        export_tree(store, t1, str(dest))
    assert sorted(os.listdir(dest)) == ["mine.txt"]  # not even the lock file
    export_tree(store, t1, str(dest), force=True)
    assert (dest / "a").read_bytes() == b"a\n"
    assert (dest / "mine.txt").read_text() == "user data"


def test_never_overwrites_a_hand_edit(store, tmp_path):
    dest = tmp_path / "dest"
    t1 = mktree(store, {"a": ("100644", b"a1\n"), "b": ("100644", b"b1\n")}, tmp_path)
    t2 = mktree(store, {"a": ("100644", b"a2\n"), "b": ("100644", b"b2\n")}, tmp_path)
    export_tree(store, t1, str(dest))
    (dest / "a").write_text("edited by hand, longer\n")
    with pytest.raises(OverlayError, match="edited since the last export"):
        export_tree(store, t2, str(dest))
    assert (dest / "a").read_text() == "edited by hand, longer\n"
    assert (dest / "b").read_bytes() == b"b1\n"  # nothing half-written
    same = export_tree(store, t1, str(dest))
    assert same.edited == ["a"]


@pytest.mark.parametrize("name", ["..", ".git", ".GIT", "a\\b"])
def test_hostile_names_are_refused(store, tmp_path, name):
    oid = blob(store, b"evil\n")
    tree = raw_tree(store, [("100644", name, oid)])
    dest = tmp_path / "dest"
    with pytest.raises(UnsafePath):
        export_tree(store, tree, str(dest))
    assert os.listdir(dest) == [".overlay-export.lock"]


def test_hostile_nested_dotdot_is_refused(store, tmp_path):
    oid = blob(store, b"evil\n")
    inner = raw_tree(store, [("100644", "passwd", oid)])
    tree = raw_tree(store, [("40000", "..", inner)])
    with pytest.raises(UnsafePath, match="component '..'"):
        export_tree(store, tree, str(tmp_path / "dest"))


@pytest.mark.parametrize(
    "target", ["/etc/passwd", "../../outside", "../sub/../../x", "../.git/config"]
)
def test_symlink_escape_is_refused(store, tmp_path, target):
    tree = mktree(store, {"sub/link": ("120000", target.encode())}, tmp_path)
    dest = tmp_path / "dest"
    with pytest.raises(UnsafePath, match="symlink"):
        export_tree(store, tree, str(dest))
    assert not (dest / "sub").exists()


def test_absolute_path_is_refused():
    from overlay.fs.paths import check_path

    with pytest.raises(UnsafePath, match="absolute"):
        check_path("/etc/passwd")


def test_symlink_chain_escape_is_refused(store, tmp_path):
    # Each link alone stays inside; followed through sub/up, d/l1 climbs out.
    tree = mktree(
        store,
        {
            "sub/up": ("120000", b".."),
            "d/l1": ("120000", b"../sub/up/.."),
            "d/ok": ("120000", b"../sub/up/d"),
        },
        tmp_path,
    )
    with pytest.raises(UnsafePath, match="'d/l1'"):
        export_tree(store, tree, str(tmp_path / "dest"))


def test_symlink_inside_the_tree_is_exported(store, tmp_path):
    tree = mktree(
        store,
        {"sub/up": ("120000", b".."), "d/ok": ("120000", b"../sub/up/d")},
        tmp_path,
    )
    export_tree(store, tree, str(tmp_path / "dest"))
    assert os.readlink(tmp_path / "dest" / "d" / "ok") == "../sub/up/d"


def test_a_trees_links_are_kept_in_the_store_and_read_back(
    store, tmp_path, monkeypatch
):
    # A tree never changes: its symlinks, listed once, are kept under its name and the
    # next question (status, verify) starts no git; the export lists the tree itself.
    from overlay.export import LINKS_CACHE, tree_links, unsafe_tree_links

    tree = mktree(
        store,
        {
            "sub/up": ("120000", b".."),
            "d/l1": ("120000", b"../sub/up/.."),
            "f": ("100644", b"x\n"),
        },
        tmp_path,
    )
    assert tree_links(store, tree) == {"sub/up": "..", "d/l1": "../sub/up/.."}
    assert store.cache_read(LINKS_CACHE, tree) == {
        "links": {"sub/up": "..", "d/l1": "../sub/up/.."}
    }
    started = []
    real = Store.git
    monkeypatch.setattr(
        Store, "git", lambda self, *a, **k: started.append(a[0]) or real(self, *a, **k)
    )
    monkeypatch.setattr(Store, "cat_file", lambda self: started.append("cat-file"))
    assert list(unsafe_tree_links(store, tree)) == ["d/l1"]
    assert started == []
    monkeypatch.undo()
    with pytest.raises(UnsafePath, match="'d/l1'"):  # the export's own listing
        export_tree(store, tree, str(tmp_path / "dest"))


def test_export_strict_fails_on_a_hand_edit(overlay, tmp_path):
    dest = tmp_path / "dest"
    assert cli(overlay, "export", str(dest)).exit_code == 0
    edited = next(
        p
        for p in sorted(dest.rglob("*"))
        if p.is_file() and "overlay-export" not in p.name
    )
    edited.write_text("edited by hand\n")
    plain = cli(overlay, "export", str(dest))
    assert plain.exit_code == 0 and "edited or deleted by hand" in plain.output
    strict = cli(overlay, "export", "--strict", str(dest))
    assert strict.exit_code == 1, strict.output
    assert "edited or deleted by hand" in strict.output
    assert "--force to restore" in strict.output  # the way out for an edit only
    assert "layer does not have" not in strict.output
    assert edited.read_text() == "edited by hand\n"


def test_export_names_a_file_the_layer_does_not_have_and_strict_fails(
    overlay, tmp_path
):
    """A file added to DEST by hand is never touched, but a build of DEST builds it:
    the export names it (as ``git status`` names an untracked file), ``--strict``
    fails on it, and removing it makes the export clean again."""
    dest = tmp_path / "dest"
    assert cli(overlay, "export", str(dest)).exit_code == 0
    stray = dest / "mlx" / "backend" / "rocm" / "stray.cpp"
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_text("int stray;\n")
    plain = cli(overlay, "export", str(dest))
    assert plain.exit_code == 0, plain.output
    assert (
        "warning: " + str(dest) + ": 1 file(s) that the layer does not have were left "
        "as they are: mlx/backend/rocm/stray.cpp"
    ) in plain.output
    strict = cli(overlay, "export", "--strict", str(dest))
    assert strict.exit_code == 1, strict.output
    assert "error: " in strict.output and "stray.cpp" in strict.output
    assert "hint: remove the files the layer does not have" in strict.output
    assert "--force" not in strict.output  # it never removes them
    assert stray.read_text() == "int stray;\n"
    forced = cli(overlay, "export", "--force", str(dest))
    assert forced.exit_code == 0 and stray.exists()  # never the export's to delete
    stray.unlink()
    clean = cli(overlay, "export", "--strict", str(dest))
    assert clean.exit_code == 0 and "layer does not have" not in clean.output


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
    note = f"warning: {dest}: 1 file(s) edited or deleted by hand since the export were left as they are: mlx/core.cpp"
    assert exported.exit_code == 0 and note in exported.output
    assert status.exit_code == 0 and note in status.output


def test_export_refuses_a_dest_it_cannot_make_in_one_line(overlay, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")
    for dest in (afile / "sub", dangling):
        result = cli(overlay, "export", str(dest))
        assert result.exit_code == 2, result.output
        assert "overlay: cannot make " + str(dest) in result.output
        assert "internal error" not in result.output
    assert afile.read_text() == "x\n" and dangling.is_symlink()
