"""The truth model (overlay/engine/records.py, docs/engine.md): a patch's recorded blobs
decide, its text renders them.

Each test builds a real upstream + fork (``build_world``) and an overlay, edits a patch
file by hand the way a user (or another tool) would, and runs the commands that read or
write records as a user would. Where both recorded blobs are in the store, the change
*is* pre-image blob -> post-image blob, whatever the ``@@`` headers say; where a recorded
blob cannot be found, the patch is unverifiable (SER017) and no command rewrites it on
its text alone unless told to (``--accept-text``)."""

from __future__ import annotations

import re

from gitfixtures import cli, lines
from seriesfixtures import (
    add_patch,
    assert_verify_clean,
    blocks_overlay,
    made_elsewhere,
    patch_bytes,
    patched_blob,
    two_blocks,
    write_fixes,
)

PDIR = "patches-rocm"


def _shift_hunk_headers(data: bytes, by: int) -> bytes:
    """The patch with every ``@@ -a,b +c,d @@`` header moved ``by`` lines (a hand edit)."""

    def move(m: re.Match) -> bytes:
        a, b, c, d = (int(x) for x in m.groups())
        return b"@@ -%d,%d +%d,%d @@" % (a + by, b, c + by, d)

    return re.sub(rb"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@", move, data, flags=re.M)


def _blocks_overlay(ov, w):
    """:func:`seriesfixtures.blocks_overlay`, verified clean first."""
    pin_a, data = blocks_overlay(ov, w)
    assert_verify_clean(ov)
    return pin_a, data


# -- an @@ header edited to point at an identical block elsewhere -------------------
def test_refresh_rerenders_a_moved_hunk_header_from_the_recorded_blobs(ov, w):
    _pin, data = _blocks_overlay(ov, w)
    # The blocks are 7 lines apart: the edited header points at the first block, whose
    # lines are the same, so `git apply` alone would change the first block.
    edited = _shift_hunk_headers(data, -7)
    assert edited != data
    (ov.root / PDIR / "0001-second-block.patch").write_bytes(edited)
    refused = cli(ov, "verify")
    assert refused.exit_code == 1 and "SER010" in refused.output, refused.output
    done = cli(ov, "refresh")
    assert done.exit_code == 0, done.output
    assert "recorded blobs" in done.output, done.output
    # The header is a rendering of the recorded pair: refresh gives the original back.
    assert patch_bytes(ov, "0001-second-block.patch") == data
    assert patched_blob(ov, "mlx/blocks.cpp").decode() == two_blocks(
        second="state = 2;"
    )
    assert_verify_clean(ov)


def test_rebase_carries_a_moved_hunk_header_by_its_recorded_post_image(ov, w):
    _pin, data = _blocks_overlay(ov, w)
    (ov.root / PDIR / "0001-second-block.patch").write_bytes(
        _shift_hunk_headers(data, -7)
    )
    pin_b = w.upstream.commit(
        {"mlx/blocks.cpp": two_blocks(inserted=3)}, "upstream inserts 3 lines"
    )
    done = cli(ov, "rebase", "--onto", pin_b)
    assert done.exit_code == 0, done.output
    # The hunk lands on the block the recorded post-image changed (the second).
    assert patched_blob(ov, "mlx/blocks.cpp").decode() == two_blocks(
        inserted=3, second="state = 2;"
    )
    assert_verify_clean(ov)


# -- a pre-image blob the store lacks never switches the post-image check off -------
def _missing_preimage(data: bytes) -> bytes:
    """The patch with its ``index`` pre-image replaced by a blob name no store holds."""
    return re.sub(
        rb"^index [0-9a-f]{40}\.\.",
        b"index " + b"1234567" * 5 + b"12345..",
        data,
        flags=re.M,
    )


def test_missing_preimage_blob_with_a_moved_header_is_refused_everywhere(
    ov, w, tmp_path
):
    _pin, data = _blocks_overlay(ov, w)
    edited = _missing_preimage(_shift_hunk_headers(data, -7))
    (ov.root / PDIR / "0001-second-block.patch").write_bytes(edited)
    dest = tmp_path / "dest"
    export = cli(ov, "export", str(dest))
    assert export.exit_code == 1, export.output
    assert not dest.exists() or not (dest / "mlx" / "blocks.cpp").exists()
    status = cli(ov, "status")
    assert "[exact]" not in status.output, status.output
    verify = cli(ov, "verify")
    assert verify.exit_code == 1
    assert "SER017" in verify.output and "1234567123" in verify.output, verify.output
    # refresh has nothing true to render from: it refuses and writes nothing.
    refresh = cli(ov, "refresh")
    assert refresh.exit_code != 0, refresh.output
    assert patch_bytes(ov, "0001-second-block.patch") == edited


# -- an abbreviated index line names the one blob it abbreviates ---------------------
def _abbreviate(data: bytes) -> bytes:
    """The patch with 7-hex ``index`` lines, as ``git format-patch`` writes by default."""
    return re.sub(
        rb"^index ([0-9a-f]{7})[0-9a-f]{33}\.\.([0-9a-f]{7})[0-9a-f]{33}",
        rb"index \1..\2",
        data,
        flags=re.M,
    )


def test_abbreviated_index_lines_block_no_later_patch_and_refresh_restores_them(ov, w):
    device = "mlx/backend/rocm/device.cpp"
    first = add_patch(
        ov, "0001-first.patch", {device: lines("device", change={3: "d3"})}
    )
    second = add_patch(
        ov,
        "0002-second.patch",
        {device: lines("device", change={3: "d3", 20: "d20"})},
        fix=2,
    )
    write_fixes(ov, [("First.", [device]), ("Second.", [device])])
    assert_verify_clean(ov)
    short = _abbreviate(first)
    assert short != first
    (ov.root / PDIR / "0001-first.patch").write_bytes(short)
    verify = cli(ov, "verify")
    assert verify.exit_code == 1
    assert "SER008" in verify.output, verify.output
    # The later patch sits on the very blob the abbreviation names: no SER010 for it.
    assert "SER010" not in verify.output, verify.output
    # A unique start of the name will do, and the rewrite says why.
    done = cli(ov, "refresh", "0001")
    assert done.exit_code == 0, done.output
    assert "rewrote 0001-first.patch: index lines made full-length\n" in done.output, (
        done.output
    )
    assert patch_bytes(ov, "0001-first.patch") == first
    assert patch_bytes(ov, "0002-second.patch") == second
    assert_verify_clean(ov)


# -- shared case 7 under the truth model: made elsewhere, unverifiable until accepted -------
def test_patch_made_elsewhere_is_unverified_until_its_text_is_accepted(ov, w, tmp_path):
    device = "mlx/backend/rocm/device.cpp"
    # Elsewhere the file differed at line 1, far from the hunk.
    data = made_elsewhere(
        ov,
        tmp_path,
        device,
        lines("device", change={1: "elsewhere 1"}),
        lines("device", change={1: "elsewhere 1", 20: "d20 fixed"}),
    )
    status = cli(ov, "status")
    assert "[unverified]" in status.output, status.output
    verify = cli(ov, "verify")
    assert verify.exit_code == 1 and "SER017" in verify.output, verify.output
    assert "pre-image blob" in verify.output and "--accept-text" in verify.output
    refused = cli(ov, "refresh")
    assert refused.exit_code == 1, refused.output
    assert "unverifiable" in refused.output and "--accept-text" in refused.output
    assert patch_bytes(ov, "0001-elsewhere.patch") == data
    accepted = cli(ov, "refresh", "--accept-text", "0001-elsewhere.patch")
    assert accepted.exit_code == 0, accepted.output
    assert "rewrote 0001-elsewhere.patch" in accepted.output
    assert patched_blob(ov, device).decode() == lines(
        "device", change={20: "d20 fixed"}
    )
    assert_verify_clean(ov)
    unknown = cli(ov, "refresh", "--accept-text", "0009-nope.patch")
    assert unknown.exit_code == 2, unknown.output
    assert "0009-nope.patch is not in patches-rocm/series" in unknown.output
    assert "hint: name a patch of the series" in unknown.output
