"""Trees to export and what an export must leave: three trees of every kind of change
(a file becoming a directory and back, a mode change, a symlink retargeted), the tree
written to a store, DEST compared with the tree byte for byte, and an export killed at
one of its checkpoints in a child process."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from overlay import layout
from overlay.fs.atomic import TEMP_RE
from overlay.git.store import EMPTY_TREE, Store, zsplit

ROOT = Path(__file__).resolve().parents[1]

#: Three trees as ``{path: (mode, bytes)}``; each export of one over another changes
#: every kind of entry.
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


def mktree(store: Store, files: dict[str, tuple[str, bytes]], tmp_path) -> str:
    """The tree of ``files`` (``{path: (mode, bytes)}``), written to ``store``."""
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
