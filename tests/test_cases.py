"""The patch-engine cases users of patch tools reported in public (shared/cases).

Each case is applied through the real layer engine onto a real fork tree;
the outcome is asserted exactly: correct bytes, or a finding naming the patch.
"""

from __future__ import annotations

import pytest
from gitfixtures import lines, make_patch, read_blob

from overlay.engine import PatchApplyError
from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest
from overlay.records.patchfmt import format_patch, tree_diff
from overlay.records.series import parse_patch


def forked(overlay):
    store = Store()
    return store, compute_layers(
        store, load_manifest(str(overlay.root)), str(overlay.root)
    ).forked


def patched(overlay):
    store = Store()
    return store, compute_layers(
        store, load_manifest(str(overlay.root)), str(overlay.root)
    )


def with_file(store, tree, path, data: bytes, overlay, mode="100644"):
    return store.edit_tree(tree, {path: (mode, store.hash_blob(data))})


def rebase_fork_on(store, overlay, world, tree):
    """Make ``tree`` the fork commit (as if the fork had it) and point the manifest at it."""
    commit = store.commit_tree(
        tree, [world.fork_commit], message="fork with case files"
    )
    # The store already has it; the manifest just names it.
    overlay.write_manifest(world.base, fork=commit)
    return commit


# 1. Line endings ------------------------------------------------------------------
def test_crlf_target_with_crlf_patch_keeps_crlf(overlay, world):
    store, base = forked(overlay)
    crlf = b"one\r\ntwo\r\nthree\r\n"
    tree = with_file(store, base, "mlx/backend/rocm/win.cpp", crlf, overlay)
    rebase_fork_on(store, overlay, world, tree)
    patch, _ = make_patch(
        store, tree, {"mlx/backend/rocm/win.cpp": b"one\r\nTWO\r\nthree\r\n"}
    )
    overlay.add_patch("0001-crlf.patch", patch)
    store, layers = patched(overlay)
    assert (
        read_blob(store, layers.patched, "mlx/backend/rocm/win.cpp")
        == b"one\r\nTWO\r\nthree\r\n"
    )


def test_crlf_target_with_lf_patch_is_a_clear_finding(overlay, world):
    store, base = forked(overlay)
    lf_tree = with_file(
        store, base, "mlx/backend/rocm/win.cpp", b"one\ntwo\nthree\n", overlay
    )
    patch, _ = make_patch(
        store, lf_tree, {"mlx/backend/rocm/win.cpp": b"one\nTWO\nthree\n"}
    )
    crlf_tree = with_file(
        store, base, "mlx/backend/rocm/win.cpp", b"one\r\ntwo\r\nthree\r\n", overlay
    )
    rebase_fork_on(store, overlay, world, crlf_tree)
    overlay.add_patch("0001-lf.patch", patch)
    with pytest.raises(PatchApplyError) as err:
        patched(overlay)
    assert (
        err.value.patch == "0001-lf.patch"
        and err.value.file == "mlx/backend/rocm/win.cpp"
    )
    assert "CRLF" in err.value.reason


def test_lf_target_with_crlf_patch_is_a_finding_not_a_crash(overlay, world):
    store, base = forked(overlay)
    crlf_tree = with_file(
        store, base, "mlx/backend/rocm/win.cpp", b"one\r\ntwo\r\nthree\r\n", overlay
    )
    patch, _ = make_patch(
        store, crlf_tree, {"mlx/backend/rocm/win.cpp": b"one\r\nTWO\r\nthree\r\n"}
    )
    lf_tree = with_file(
        store, base, "mlx/backend/rocm/win.cpp", b"one\ntwo\nthree\n", overlay
    )
    rebase_fork_on(store, overlay, world, lf_tree)
    overlay.add_patch("0001-crlf.patch", patch)
    with pytest.raises(PatchApplyError) as err:
        patched(overlay)
    assert err.value.file == "mlx/backend/rocm/win.cpp" and err.value.hunk == 1


# 2. No final newline -----------------------------------------------------------------
def test_no_final_newline_on_both_sides(overlay, world):
    store, base = forked(overlay)
    tree = with_file(store, base, "mlx/backend/rocm/tail.h", b"a\nb", overlay)
    rebase_fork_on(store, overlay, world, tree)
    patch, _ = make_patch(store, tree, {"mlx/backend/rocm/tail.h": b"a\nb\nc"})
    assert patch.count(b"\\ No newline at end of file") == 2
    overlay.add_patch("0001-tail.patch", patch)
    store, layers = patched(overlay)
    assert read_blob(store, layers.patched, "mlx/backend/rocm/tail.h") == b"a\nb\nc"


# 3. Binary -------------------------------------------------------------------------
def test_git_binary_patch_applies(overlay):
    store, base = forked(overlay)
    patch, _ = make_patch(
        store, base, {"mlx/backend/rocm/blob.bin": bytes(range(256)) * 4}
    )
    assert b"GIT binary patch" in patch
    overlay.add_patch("0001-bin.patch", patch)
    store, layers = patched(overlay)
    assert (
        read_blob(store, layers.patched, "mlx/backend/rocm/blob.bin")
        == bytes(range(256)) * 4
    )


def test_binary_files_differ_is_a_finding(overlay):
    store, base = forked(overlay)
    # Even when the post-image blob happens to be in the store, the patch cannot apply in a
    # fresh clone: refuse it everywhere.
    new = store.edit_tree(
        base, {"mlx/backend/rocm/blob.bin": ("100644", store.hash_blob(b"\0\1\2"))}
    )
    diff = store.git("diff-tree", "-r", "-p", "--full-index", base, new).stdout
    assert b"Binary files" in diff
    overlay.add_patch(
        "0001-nobin.patch",
        format_patch("rocm: blob", "Why.", [("Local-Fix", "1")], diff),
    )
    with pytest.raises(PatchApplyError) as err:
        patched(overlay)
    assert (
        err.value.patch == "0001-nobin.patch"
        and err.value.file == "mlx/backend/rocm/blob.bin"
    )
    assert "without data" in err.value.reason


# 4. Renames ------------------------------------------------------------------------
@pytest.mark.parametrize("edit", [False, True])
def test_rename_with_and_without_edits(overlay, edit):
    store, base = forked(overlay)
    content = lines("device")
    if edit:
        content = lines("device", change={30: "device 30 renamed"})
    patch, new_tree = make_patch(
        store,
        base,
        {
            "mlx/backend/rocm/device.cpp": None,
            "mlx/backend/rocm/device_impl.cpp": content,
        },
    )
    assert b"rename from mlx/backend/rocm/device.cpp" in patch
    parsed = parse_patch(patch, "0001-rename.patch")
    assert parsed.touched == {
        "mlx/backend/rocm/device.cpp",
        "mlx/backend/rocm/device_impl.cpp",
    }
    assert parsed.deleted == {"mlx/backend/rocm/device.cpp"}
    overlay.add_patch("0001-rename.patch", patch)
    store, layers = patched(overlay)
    assert layers.patched == new_tree


# 5. Modes --------------------------------------------------------------------------
def test_new_executable_file_and_mode_only_change(overlay):
    store, base = forked(overlay)
    patch, _ = make_patch(
        store,
        base,
        {
            "mlx/backend/rocm/gen.sh": "#!/bin/sh\n",
            "mlx/backend/rocm/device.h": "#pragma once\n",
        },
        modes={
            "mlx/backend/rocm/gen.sh": "100755",
            "mlx/backend/rocm/device.h": "100755",
        },
    )
    assert b"old mode 100644\nnew mode 100755" in patch
    overlay.add_patch("0001-modes.patch", patch)
    store, layers = patched(overlay)
    modes = {e[3]: e[0] for e in store.ls_tree(layers.patched)}
    assert modes["mlx/backend/rocm/gen.sh"] == "100755"
    assert modes["mlx/backend/rocm/device.h"] == "100755"


# 7. Pre-image blobs made elsewhere -------------------------------------------------------
def _foreign_patch(tmp_path, content_before: str, content_after: str) -> bytes:
    other = Store(str(tmp_path / "elsewhere.git"))
    from overlay.git.store import EMPTY_TREE

    before = other.edit_tree(
        EMPTY_TREE,
        {"mlx/core.cpp": ("100644", other.hash_blob(content_before.encode()))},
    )
    after = other.edit_tree(
        EMPTY_TREE,
        {"mlx/core.cpp": ("100644", other.hash_blob(content_after.encode()))},
    )
    return format_patch(
        "rocm: foreign",
        "Made in another clone.",
        [("Local-Fix", "1")],
        tree_diff(other, before, after),
    )


def test_foreign_preimage_exact_apply_works(overlay, tmp_path):
    # Elsewhere the file differed at line 1, far from the hunk: the pre-image blob is unknown here.
    before = lines("core", change={1: "elsewhere 1", 5: "core 5 // rocm hook"})
    after = lines(
        "core", change={1: "elsewhere 1", 5: "core 5 // rocm hook", 20: "core 20 fixed"}
    )
    overlay.add_patch("0001-foreign.patch", _foreign_patch(tmp_path, before, after))
    store, layers = patched(overlay)
    # Applied at its stated lines, but its records cannot be checked here: unverified
    # (docs/engine.md, the truth model), never "exact".
    assert layers.patches[0].state == "unverified"
    assert b"core 20 fixed" in read_blob(store, layers.patched, "mlx/core.cpp")


def test_foreign_preimage_three_way_says_why_it_cannot_run(overlay, tmp_path):
    before = lines("core", change={19: "elsewhere 19"})
    after = lines("core", change={19: "elsewhere 19", 20: "core 20 fixed"})
    overlay.add_patch("0001-foreign.patch", _foreign_patch(tmp_path, before, after))
    with pytest.raises(PatchApplyError) as err:
        patched(overlay)
    assert "a 3-way merge cannot run: its pre-image blob" in err.value.reason
    assert "is not in the git store (the patch was made elsewhere)" in err.value.reason


# 8. Bracketed subject ---------------------------------------------------------------
def test_bracketed_subject_is_kept_and_stable(overlay):
    store, base = forked(overlay)
    patch, _ = make_patch(
        store,
        base,
        {"mlx/backend/rocm/device.h": "#pragma twice\n"},
        subject="[rocm] fix the header",
    )
    parsed = parse_patch(patch, "0001-rocm-fix-the-header.patch")
    assert parsed.subject == "[rocm] fix the header"
    again = format_patch(
        parsed.subject,
        parsed.description,
        [(k, v) for k, vs in parsed.trailers.items() for v in vs],
        tree_diff(
            store,
            base,
            compute_layers(
                store,
                load_manifest(str(overlay.root)),
                str(overlay.root),
                patches=[
                    parsed._replace(
                        path=str(
                            overlay.add_patch(
                                "0001-rocm-fix-the-header.patch", patch, listed=False
                            )
                        )
                    )
                ],
            ).patched,
        ),
    )
    assert again == patch


# Skipped files are failures even when git exits 0 ----------------------------------------
def test_patch_listing_files_it_does_not_change_fails(overlay):
    store, base = forked(overlay)
    patch, _ = make_patch(store, base, {"mlx/backend/rocm/device.h": "#pragma twice\n"})
    # Two sections on mlx/ops.cpp that cancel out: git exits 0, the file does not change.
    there = with_file(store, base, "mlx/ops.cpp", b"ops changed\n", overlay)
    forth, back = (
        tree_diff(store, base, there, ["mlx/ops.cpp"]),
        tree_diff(store, there, base, ["mlx/ops.cpp"]),
    )
    overlay.add_patch("0001-noop.patch", patch + forth + back)
    with pytest.raises(PatchApplyError) as err:
        patched(overlay)
    assert (
        err.value.file == "mlx/ops.cpp"
        and "lists 2 path(s) but changes only 1" in err.value.reason
    )


def test_garbage_patch_reports_gits_reason(overlay):
    store, base = forked(overlay)
    patch, _ = make_patch(store, base, {"mlx/backend/rocm/device.h": "#pragma twice\n"})
    overlay.add_patch(
        "0001-garbage.patch",
        patch + b"diff --git a/mlx/ops.cpp b/mlx/ops.cpp\nold mode 100644\n"
        b"new mode 100644\n",
    )
    with pytest.raises(PatchApplyError) as err:
        patched(overlay)
    # The section changes nothing (same mode on both sides): a failure, found before git runs.
    assert (
        err.value.file == "mlx/ops.cpp"
        and "lists 2 path(s) but changes only 1" in err.value.reason
    )
