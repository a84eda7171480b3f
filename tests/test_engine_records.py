"""The truth model (docs/engine.md): a patch's recorded blobs decide, its text renders them.

Each test builds a real upstream + fork (``build_world``) and an overlay, edits a patch
file by hand the way a user (or another tool) would, and runs the commands that read or
write records as a user would. Where both recorded blobs are in the store, the change
*is* pre-image blob -> post-image blob, whatever the ``@@`` headers say; where a recorded
blob cannot be found, the patch is unverifiable (SER017) and no command rewrites it on
its text alone unless told to (``--accept-text``).
"""

from __future__ import annotations

import re

from gitfixtures import cli, lines
from test_engine import (
    add_patch,
    assert_verify_clean,
    blocks_overlay,
    patch_bytes,
    patched_blob,
    two_blocks,
    upstream_branch,
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
    """:func:`test_engine.blocks_overlay`, verified clean first."""
    pin_a, data = blocks_overlay(ov, w)
    assert_verify_clean(ov)
    return pin_a, data


def _made_elsewhere(ov, tmp_path, path: str, before: str, after: str) -> bytes:
    """A patch of ``path`` from ``before`` to ``after`` made in another clone (its blobs
    are in no store of this test's), added to the series with a verify-clean entry;
    returns its bytes."""
    from overlay.git.store import EMPTY_TREE, Store
    from overlay.records.patchfmt import format_patch, tree_diff

    other = Store(str(tmp_path / "elsewhere.git"))
    trees = [
        other.edit_tree(EMPTY_TREE, {path: ("100644", other.hash_blob(t.encode()))})
        for t in (before, after)
    ]
    data = format_patch(
        "rocm: made elsewhere",
        "Made in another clone.",
        [("Local-Fix", "1"), ("Forwarded", "not-needed")],
        tree_diff(other, *trees),
    )
    ov.add_patch("0001-elsewhere.patch", data)
    write_fixes(ov, [("Elsewhere.", [path])])
    return data


# -- item 1: an @@ header edited to point at an identical block elsewhere -------------------
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


# -- item 2: a pre-image blob the store lacks never switches the post-image check off -------
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


# -- item 3: an abbreviated index line names the one blob it abbreviates ---------------------
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
    data = _made_elsewhere(
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
    assert unknown.exit_code == 2 and "not in series" in unknown.output


# -- item 4: one definition of an upstream commit: any upstream branch or tag, or the pin --
def _fork_merging_an_upstream_feature(w):
    """The fork merges a commit of an upstream feature branch (not on main); returns
    ``(feature commit, merged fork commit)``."""
    from gitfixtures import git

    upstream_branch(w, "feature", w.base)
    feature = w.upstream.commit(
        {"mlx/ops.cpp": lines("ops", change={15: "ops 15 feature"})},
        "upstream feature on its own branch",
    )
    git(w.upstream.path, "checkout", "-q", "main")
    git(w.fork.path, "fetch", "-q", "origin")
    git(w.fork.path, "merge", "-q", "--no-edit", feature)
    return feature, git(w.fork.path, "rev-parse", "HEAD")


def test_sync_refuses_a_fork_that_merged_a_commit_of_any_upstream_branch(ov, w):
    feature, merged = _fork_merging_an_upstream_feature(w)
    refused = cli(ov, "sync", "--fork", merged)
    assert refused.exit_code == 2, refused.output
    assert "1 upstream commit(s)" in refused.output, refused.output
    assert f"{feature[:12]} upstream feature on its own branch" in refused.output
    allowed = cli(ov, "sync", "--fork", merged, "--allow-fork-ahead")
    assert allowed.exit_code == 0, allowed.output
    # verify asks the same question of the manifest, by the same definition.
    verify = cli(ov, "verify", "--only", "MAN")
    assert verify.exit_code == 1 and "MAN004" in verify.output, verify.output
    assert feature[:12] in verify.output
    # A rebase is held to it too: the new pin lacks the merged commit...
    refused = cli(ov, "rebase", "--onto", w.pin_clean)
    assert refused.exit_code == 2, refused.output
    assert feature[:12] in refused.output and "--allow-fork-ahead" in refused.output
    # ...and the commit itself is an upstream commit, so it is accepted as a pin.
    moved = cli(ov, "rebase", "--onto", feature)
    assert moved.exit_code == 0, moved.output
    assert cli(ov, "verify", "--only", "MAN").exit_code == 0


def test_rebase_honours_allow_fork_ahead(ov, w):
    _feature, merged = _fork_merging_an_upstream_feature(w)
    assert cli(ov, "sync", "--fork", merged, "--allow-fork-ahead").exit_code == 0
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 2
    done = cli(ov, "rebase", "--onto", w.pin_clean, "--allow-fork-ahead")
    assert done.exit_code == 0, done.output


# -- item 8: a second start while a run is stopped is refused before anything is fetched --
def test_second_rebase_while_stopped_is_refused_before_resolving(ov, w):
    stopped = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert stopped.exit_code == 1, stopped.output
    again = cli(ov, "rebase", "--onto", "ab" * 20)
    assert again.exit_code == 2, again.output
    assert "in progress" in again.output, again.output
    assert "not found" not in again.output and "fetch" not in again.output


# -- item 5: the ancestry findings never depend on the layers ------------------------------
def test_man003_is_reported_when_the_layers_fail_and_no_hint_sends_to_refresh(ov, w):
    core = "mlx/core.cpp"
    ov.write_manifest(w.pin_clean)
    hooked = lines("core", change={5: "core 5 // rocm hook", 25: "core 25 upstream"})
    assert patched_blob(ov, core).decode() == hooked
    data = add_patch(
        ov,
        "0001-core.patch",
        {
            core: lines(
                "core",
                change={5: "core 5 // rocm hook", 20: "c20", 25: "core 25 upstream"},
            )
        },
    )
    write_fixes(ov, [("Core.", [core])], pin=w.pin_clean)
    assert_verify_clean(ov)
    # A merge base that is not an ancestor of the fork commit: the fork delta from it
    # undoes upstream's line 25, so the patch no longer sits on its pre-image.
    ov.write_manifest(w.pin_clean, base=w.pin_clean)
    only = cli(ov, "verify", "--only", "MAN")
    assert only.exit_code == 1 and "MAN003" in only.output, only.output
    full = cli(ov, "verify")
    assert "MAN003" in full.output and "SER010" in full.output, full.output
    assert "overlay refresh" not in full.output, full.output
    # Findings the wrong merge base makes by itself send nobody to delete records.
    assert "delete it" not in full.output and "add under" not in full.output
    refused = cli(ov, "refresh")
    assert refused.exit_code == 2, refused.output
    assert "not an ancestor" in refused.output and "overlay sync" in refused.output
    assert patch_bytes(ov, "0001-core.patch") == data


# -- item 8: SER004's hint fits an empty patch and a combined diff -------------------------
def test_ser004_hint_names_what_an_empty_patch_and_a_combined_diff_need(ov):
    head = b"From: A <a@b>\nSubject: [PATCH] rocm: x\n\nWhy.\n\nLocal-Fix: 1\n---\n"
    ov.add_patch("0001-empty.patch", head)
    ov.add_patch(
        "0002-merge.patch",
        head + b"diff --cc mlx/core.cpp\nindex 1111111,2222222..3333333\n"
        b"--- a/mlx/core.cpp\n+++ b/mlx/core.cpp\n@@@ -1,1 -1,1 +1,1 @@@\n- a\n -b\n++c\n",
    )
    out = cli(ov, "verify", "--only", "SER").output
    assert "hunk's header counts" not in out, out
    assert "an empty patch changes nothing" in out, out
    assert "combined diff" in out and "overlay edit --new" in out, out


# -- item 8: a patch that repeats an earlier one is named for it, not for upstream ---------
def test_a_patch_repeating_an_earlier_one_is_said_to_be_that_ones(ov, w):
    device = "mlx/backend/rocm/device.cpp"
    data = add_patch(
        ov, "0001-device.patch", {device: lines("device", change={9: "d9"})}
    )
    # 0002 holds the same change, made on the pin below the series (as a colleague's
    # copy of the fix would be): empty once 0001 is carried.
    ov.add_patch("0002-again.patch", data.replace(b"Local-Fix: 1", b"Local-Fix: 2"))
    write_fixes(ov, [("Device.", [device]), ("Again.", [device])])
    done = cli(ov, "rebase", "--onto", w.pin_clean)
    assert done.exit_code == 0, done.output
    assert "0001-device.patch, earlier in the series" in done.output, done.output
    assert "already upstream" not in done.output


# -- item 8: `fix new` keeps a byte-order mark (and CRLF), as a rebase does ----------------
def test_fix_new_keeps_the_byte_order_mark_and_crlf(ov):
    path = ov.root / "LOCAL_FIXES.md"
    text = path.read_text().replace("\n", "\r\n")
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    done = cli(
        ov,
        "fix",
        "new",
        "--section",
        "kernels",
        "--title",
        "Lock it",
        "--file",
        "mlx/backend/rocm/device.cpp",
    )
    assert done.exit_code == 0, done.output
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf# Local changes"), data[:40]
    assert b"**Lock it.**" in data and b"\n" not in data.replace(b"\r\n", b"")


# -- item 6: what a sync does not take is said, and stays said until acknowledged ---------
def test_sync_names_fork_changes_outside_carry_until_acknowledged(ov, w):
    device = "mlx/backend/rocm/device.cpp"
    add_patch(ov, "0001-device.patch", {device: lines("device", change={9: "d9"})})
    write_fixes(ov, [("Device.", [device])])
    assert_verify_clean(ov)
    fork2 = w.fork.commit(
        {"docs/rocm.md": "fork docs, new page\n", "python/rocm.py": "x = 1\n"},
        "fork documents and binds",
    )
    done = cli(ov, "sync", "--fork", fork2)
    assert done.exit_code == 0, done.output
    assert "not carried: the fork changed 2 path(s) outside [carry]" in done.output
    assert f"docs/rocm.md ({fork2[:12]} fork documents and binds)" in done.output
    assert "overlay sync --ack-uncarried" in done.output
    report = (ov.root / ".overlay" / "last-rebase.md").read_text()
    assert "### Not carried" in report and "`python/rocm.py`" in report
    manifest = (ov.root / PDIR / "overlay.toml").read_text()
    assert f'uncarried-reviewed = "{w.fork_commit}"' in manifest
    # verify says it (info: it does not fail) until the team acknowledges it.
    found = cli(ov, "verify", "--only", "MAN")
    assert found.exit_code == 0 and "MAN005" in found.output, found.output
    assert "2 path(s) outside [carry]" in found.output
    ack = cli(ov, "sync", "--ack-uncarried")
    assert ack.exit_code == 0 and "acknowledged" in ack.output, ack.output
    assert "uncarried-reviewed" not in (ov.root / PDIR / "overlay.toml").read_text()
    assert "# test manifest" in (ov.root / PDIR / "overlay.toml").read_text()
    assert "MAN005" not in cli(ov, "verify", "--only", "MAN").output
    again = cli(ov, "sync", "--ack-uncarried")
    assert again.exit_code == 0 and "nothing to acknowledge" in again.output


def test_edit_refuses_to_rest_on_an_unverified_patch(ov, w, tmp_path):
    _made_elsewhere(
        ov,
        tmp_path,
        "mlx/backend/rocm/device.cpp",
        lines("device", change={1: "elsewhere 1"}),
        lines("device", change={1: "elsewhere 1", 20: "d20"}),
    )
    for args in (
        ("edit", "0001-elsewhere.patch"),
        ("edit", "--new", "0002-more.patch"),
    ):
        refused = cli(ov, *args)
        assert refused.exit_code == 2, refused.output
        assert "unverifiable" in refused.output and "--accept-text" in refused.output
    assert not (ov.root / ".overlay" / "edit").exists() or not any(
        (ov.root / ".overlay" / "edit").iterdir()
    )


def test_rebase_never_carries_an_unverified_patch_by_its_text(ov, w, tmp_path):
    base = lines("core", change={1: "elsewhere 1", 5: "core 5 // rocm hook"})
    data = _made_elsewhere(
        ov, tmp_path, "mlx/core.cpp", base, base.replace("core 20\n", "core 20 fixed\n")
    )
    stopped = cli(ov, "rebase", "--onto", w.pin_clean)
    assert stopped.exit_code == 1, stopped.output
    assert "not in the git store" in stopped.output, stopped.output
    assert "--accept-text" in stopped.output
    assert cli(ov, "rebase", "--abort").exit_code == 0
    assert patch_bytes(ov, "0001-elsewhere.patch") == data


def test_a_sync_killed_after_its_manifest_write_completes_with_one_review_mark(ov, w):
    from gitfixtures import overlay_process

    device = "mlx/backend/rocm/device.cpp"
    add_patch(ov, "0001-device.patch", {device: lines("device", change={9: "d9"})})
    write_fixes(ov, [("Device.", [device])])
    fork2 = w.fork.commit({"docs/rocm.md": "fork docs, new page\n"}, "fork docs")
    killed = overlay_process(
        ov, "sync", "--fork", fork2, env={"OVERLAY_TEST_KILL_AT": "commit"}
    )
    assert killed.returncode == -9, killed.stderr
    manifest = (ov.root / PDIR / "overlay.toml").read_text()
    assert manifest.count("uncarried-reviewed") == 1, manifest
    done = cli(ov, "sync", "--continue")
    assert done.exit_code == 0, done.output
    assert "not carried: the fork changed 1 path(s)" in done.output, done.output
    manifest = (ov.root / PDIR / "overlay.toml").read_text()
    assert manifest.count("uncarried-reviewed") == 1
    assert f'uncarried-reviewed = "{w.fork_commit}"' in manifest
    assert f'commit = "{fork2}"' in manifest


def test_ser008_names_the_index_line_after_a_multibyte_character(ov):
    device = "mlx/backend/rocm/device.cpp"
    data = add_patch(
        ov, "0001-device.patch", {device: lines("device", change={9: "d9"})}
    )
    data = data.replace(
        b"Why the change is needed.", "Why: \u00a9 the change.".encode()
    )
    short = re.sub(
        rb"^index ([0-9a-f]{7})[0-9a-f]{33}\.\.([0-9a-f]{7})[0-9a-f]{33}",
        rb"index \1..\2",
        data,
        flags=re.M,
    )
    (ov.root / PDIR / "0001-device.patch").write_bytes(short)
    want = short[: short.index(b"\nindex ")].count(b"\n") + 2
    out = cli(ov, "verify", "--only", "SER").output
    assert f"0001-device.patch:{want}: error SER008" in out, out


def test_rewrite_reasons_name_each_kind_of_line_a_refresh_owns():
    from overlay.engine.refresh import rewrite_reasons

    new = (
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        b"Subject: [PATCH] x\n\n---\ndiff --git a/f b/f\n"
        b"index " + b"a" * 40 + b".." + b"b" * 40 + b" 100644\n"
        b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
    )
    assert rewrite_reasons(new, new) == []
    old = (
        new.replace(b"a" * 40 + b".." + b"b" * 40, b"aaaaaaa..bbbbbbb")
        .replace(b"@@ -1 +1 @@", b"@@ -7 +7 @@")
        .replace(b"Subject:", b"Date: Mon, 1 Jan 2024 00:00:00 +0000\nSubject:")
    )
    assert rewrite_reasons(old, new) == [
        "Date header dropped",
        "index lines made full-length",
        "hunk line numbers",
    ]
