"""What a completed run rewrites in LOCAL_FIXES.md (overlay/records/fixes/rewrite.py):
the paths an entry names after a followed upstream rename (shared case 15), and the
headings' commits, keeping a byte-order mark and CRLF line ends."""

from __future__ import annotations

import pytest
from gitfixtures import Overlay, cli, git, lines, read_blob, tree_paths
from seriesfixtures import (
    add_patch,
    assert_verify_clean,
    fixes_text,
    layers_of,
    patch_bytes,
    upstream_branch,
    write_fixes,
)


@pytest.fixture
def ov(tmp_path, w):
    """An overlay on the merge base, empty series, a verify-clean LOCAL_FIXES.md."""
    o = Overlay(tmp_path / "overlay", w)
    write_fixes(o)
    return o


@pytest.mark.parametrize(
    "upstream_edit", [False, True], ids=["rename-100", "rename-with-edit"]
)
def test_case15_fix_follows_an_upstream_rename(ov, w, upstream_edit):
    add_patch(
        ov,
        "0001-ops.patch",
        {"mlx/ops.cpp": lines("ops", change={20: "ops 20 fixed"})},
        fix=1,
    )
    write_fixes(ov, [("Fix ops 20.", ["mlx/ops.cpp"])])
    assert_verify_clean(ov)
    upstream_branch(w, "rename", w.base)
    git(w.upstream.path, "mv", "mlx/ops.cpp", "mlx/operations.cpp")
    renamed = (
        lines("ops", change={2: "ops 2 upstream"}) if upstream_edit else lines("ops")
    )
    new_pin = w.upstream.commit(
        {"mlx/operations.cpp": renamed}, "upstream renames ops.cpp"
    )
    done = cli(ov, "rebase", "--onto", new_pin)
    assert done.exit_code == 0, done.output
    # The fix landed in the renamed file; the old name is gone.
    store, layers = layers_of(ov)
    expected = lines(
        "ops",
        change={2: "ops 2 upstream", 20: "ops 20 fixed"}
        if upstream_edit
        else {20: "ops 20 fixed"},
    )
    assert read_blob(store, layers.patched, "mlx/operations.cpp") == expected.encode()
    assert "mlx/ops.cpp" not in tree_paths(store, layers.patched)
    data = patch_bytes(ov, "0001-ops.patch")
    assert (
        b"+++ b/mlx/operations.cpp" in data
        and b"mlx/ops.cpp" not in data.split(b"\n---\n", 1)[1]
    )
    assert "followed a rename: now changes mlx/operations.cpp" in done.output
    # The run owns the entry's file names it moved: the entry names the new path, and
    # verify is clean right after, with no hand edit.
    assert "LOCAL_FIXES.md entry 1 now names mlx/operations.cpp" in done.output
    assert (ov.root / "LOCAL_FIXES.md").read_text() == fixes_text(
        ov, [("Fix ops 20.", ["mlx/operations.cpp"])]
    )
    assert_verify_clean(ov)


def bom_crlf_run(ov, w, *, bom: bool, verify: bool) -> None:
    """A rebase then a sync with LOCAL_FIXES.md written with CRLF line ends (and a BOM when
    ``bom``); after each, the file keeps both and names the new pin / fork commit; with
    ``verify``, `overlay verify` exits 0 before and after each run."""
    add_patch(
        ov,
        "0001-device.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={9: "d9"})},
    )
    lf = ov.root / "LOCAL_FIXES.md"
    prefix = b"\xef\xbb\xbf" if bom else b""

    def write(**kw):
        text = fixes_text(ov, [("Device fix.", ["mlx/backend/rocm/device.cpp"])], **kw)
        lf.write_bytes(prefix + text.replace("\n", "\r\n").encode())

    def check(fork: str, pin: str) -> None:
        data = lf.read_bytes()
        assert data.startswith(prefix + b"# Local changes relative to ")
        assert data.count(b"\n") == data.count(b"\r\n") and b"\r\r" not in data
        assert (
            f"@{fork[:8]}\r\n".encode() in data
            and f"MLX pin ({pin[:8]})\r\n".encode() in data
        )
        write(fork=fork, pin=pin)  # what the file must now hold, byte for byte
        assert lf.read_bytes() == data

    write()
    if verify:
        assert_verify_clean(ov)
    done = cli(ov, "rebase", "--onto", w.pin_clean)
    assert done.exit_code == 0, done.output
    check(w.fork_commit, w.pin_clean)
    if verify:
        assert_verify_clean(ov)
    fork2 = w.fork.commit(
        {"mlx/backend/rocm/other.cpp": "other\n"}, "fork adds other.cpp"
    )
    synced = cli(ov, "sync", "--fork", fork2)
    assert synced.exit_code == 0, synced.output
    check(fork2, w.pin_clean)
    if verify:
        assert_verify_clean(ov)


def test_local_fixes_bom_and_crlf_survive_rebase_and_sync(ov, w):
    # verify is asserted in the BOM test further down (kept apart: it failed on a BOM, FIX001).
    bom_crlf_run(ov, w, bom=True, verify=False)


def test_local_fixes_crlf_verify_clean_through_rebase_and_sync(ov, w):
    bom_crlf_run(ov, w, bom=False, verify=True)


def test_local_fixes_with_a_bom_verify_clean_through_rebase_and_sync(ov, w):
    bom_crlf_run(ov, w, bom=True, verify=True)
