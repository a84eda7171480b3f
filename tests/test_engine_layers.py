"""The layer model on real repositories: fork delta merge, resolutions, series."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from gitfixtures import Overlay, build_world, lines, make_patch, read_blob, tree_paths

from overlay.cli import main
from overlay.engine import PatchApplyError
from overlay.engine.layers import compute_layers
from overlay.errors import GitError, LayerError, OfflineMiss
from overlay.git.store import Store
from overlay.records.manifest import load_manifest


def layers_for(overlay, **kw):
    store = Store()
    return store, compute_layers(
        store, load_manifest(str(overlay.root)), str(overlay.root), **kw
    )


def test_forked_on_merge_base_carries_only_included_paths(overlay, world):
    store, layers = layers_for(overlay)
    paths = tree_paths(store, layers.forked)
    assert "mlx/backend/rocm/device.cpp" in paths
    assert "docs/rocm.md" not in paths  # not carried
    assert (
        read_blob(store, layers.forked, "mlx/backend/metal/kernels.cpp") == b"metal\n"
    )  # excluded
    assert b"rocm hook" in read_blob(store, layers.forked, "mlx/core.cpp")
    assert sorted(layers.carried_changes) == [
        "CMakeLists.txt",
        "mlx/backend/rocm/device.cpp",
        "mlx/backend/rocm/device.h",
        "mlx/core.cpp",
    ]
    assert sorted(layers.dropped_changes) == [
        "docs/rocm.md",
        "mlx/backend/metal/kernels.cpp",
    ]
    assert layers.patched == layers.forked
    assert layers.pin == store.tree_of(world.base)


def test_fork_delta_merges_cleanly_onto_a_newer_pin(overlay, world):
    overlay.write_manifest(world.pin_clean)
    store, layers = layers_for(overlay)
    core = read_blob(store, layers.forked, "mlx/core.cpp").decode()
    assert "core 5 // rocm hook" in core and "core 25 upstream" in core
    assert b"ops 2 upstream" in read_blob(store, layers.forked, "mlx/ops.cpp")
    assert layers.conflicts == []


def test_same_inputs_same_sha_in_a_fresh_store(overlay, world, tmp_path, monkeypatch):
    overlay.write_manifest(world.pin_clean)
    _s, first = layers_for(overlay)
    monkeypatch.setenv("OVERLAY_GIT_DIR", str(tmp_path / "other-store.git"))
    _s, second = layers_for(overlay)
    assert (first.pin, first.forked, first.patched) == (
        second.pin,
        second.forked,
        second.patched,
    )


def test_conflict_without_resolution_names_path_and_hunks(overlay, world):
    overlay.write_manifest(world.pin_conflict)
    with pytest.raises(LayerError) as err:
        layers_for(overlay)
    assert "mlx/core.cpp (conflict hunks at lines 5-9)" in err.value.message
    assert err.value.exit_code == 1


def test_conflict_with_resolution_takes_the_resolved_file(overlay, world):
    overlay.write_manifest(world.pin_conflict)
    resolved = lines(
        "core",
        change={5: "core 5 upstream rewrite // rocm hook", 25: "core 25 upstream"},
    )
    overlay.add_resolution("mlx/core.cpp", resolved)
    store, layers = layers_for(overlay)
    assert read_blob(store, layers.forked, "mlx/core.cpp").decode() == resolved
    assert [(c.path, c.resolved) for c in layers.conflicts] == [("mlx/core.cpp", True)]
    assert layers.stale_resolutions == []


def test_stale_resolution_is_reported_not_applied(overlay, world):
    overlay.write_manifest(world.pin_clean)
    overlay.add_resolution("mlx/core.cpp", "stale\n")
    store, layers = layers_for(overlay)
    assert layers.stale_resolutions == ["mlx/core.cpp"]
    assert read_blob(store, layers.forked, "mlx/core.cpp") != b"stale\n"


def _forked(overlay):
    return layers_for(overlay)[1].forked


def test_series_of_two_dependent_patches(overlay):
    store, layers = layers_for(overlay)
    first, mid = make_patch(
        store,
        layers.forked,
        {"mlx/backend/rocm/device.cpp": lines("device", change={3: "device 3 locked"})},
    )
    second, end = make_patch(
        store,
        mid,
        {
            "mlx/backend/rocm/device.cpp": lines(
                "device", change={3: "device 3 locked twice"}
            )
        },
        fix=2,
    )
    overlay.add_patch("0001-lock.patch", first)
    overlay.add_patch("0002-lock-twice.patch", second)
    store, layers = layers_for(overlay)
    assert layers.patched == end
    assert [r.state for r in layers.patches] == ["exact", "exact"]
    # The stepwise path gives the same tree and records each patch's tree.
    _s, step = layers_for(overlay, stepwise=True)
    assert step.patched == end and [r.tree for r in step.patches] == [mid, end]


def test_moved_context_is_refused_not_placed_at_an_offset(tmp_path):
    world = build_world(tmp_path / "own-world")  # this test moves the fork
    overlay = Overlay(tmp_path / "overlay", world)
    store, layers = layers_for(overlay)
    patch, _ = make_patch(
        store,
        layers.forked,
        {
            "mlx/backend/rocm/device.cpp": lines(
                "device", change={20: "device 20 fixed"}
            )
        },
    )
    # The fork then grows the top of the file: git would place the hunk two lines down.
    fork2 = world.fork.commit(
        {"mlx/backend/rocm/device.cpp": "extra 1\nextra 2\n" + lines("device")}, "grow"
    )
    overlay.write_manifest(world.base, fork=fork2)
    overlay.add_patch("0001-fix.patch", patch)
    with pytest.raises(PatchApplyError) as err:
        layers_for(overlay)
    assert err.value.file == "mlx/backend/rocm/device.cpp"
    assert (
        "made against other content" in err.value.reason
        and "context still matches" in err.value.reason
    )
    # `overlay refresh` carries it by merge-ort and records the new pre-image; then it applies exactly.
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "refresh"])
    assert result.exit_code == 0 and "rewrote 0001-fix.patch" in result.output, (
        result.output
    )
    store, layers = layers_for(overlay)
    assert [r.state for r in layers.patches] == ["exact"]
    device = read_blob(store, layers.patched, "mlx/backend/rocm/device.cpp").decode()
    assert device.startswith("extra 1\nextra 2\n") and "device 20 fixed" in device


def test_hunk_whose_context_also_matches_elsewhere_is_never_placed_there(tmp_path):
    world = build_world(tmp_path / "own-world")
    overlay = Overlay(tmp_path / "overlay", world)
    store, layers = layers_for(overlay)
    block = "lock();\nstate = 1;\nunlock();\n"
    two = "// first\n" + block + "// middle\n" * 8 + block + "// end\n"
    fork2 = world.fork.commit(
        {"mlx/backend/rocm/device.cpp": two}, "two similar blocks"
    )
    overlay.write_manifest(world.base, fork=fork2)
    store, layers = layers_for(overlay)
    # The fix is made on the second block.
    fixed = two[::-1].replace("state = 1;"[::-1], "state = 2;"[::-1], 1)[::-1]
    patch, _ = make_patch(store, layers.forked, {"mlx/backend/rocm/device.cpp": fixed})
    overlay.add_patch("0001-fix.patch", patch)
    # The fork then deletes the first block's neighbourhood: git apply alone would slide
    # the hunk onto the first block (its context matches there too).
    shifted = two.replace("// first\n", "", 1).replace(
        "// middle\n" * 8, "// middle\n" * 2, 1
    )
    fork3 = world.fork.commit(
        {"mlx/backend/rocm/device.cpp": shifted}, "shrink the middle"
    )
    overlay.write_manifest(world.base, fork=fork3)
    with pytest.raises(PatchApplyError) as err:
        layers_for(overlay)
    assert "made against other content" in err.value.reason
    # Carried by merge-ort, the change lands on the second block, as made.
    assert CliRunner().invoke(main, ["-C", str(overlay.root), "refresh"]).exit_code == 0
    store, layers = layers_for(overlay)
    device = read_blob(store, layers.patched, "mlx/backend/rocm/device.cpp").decode()
    assert (
        device == shifted[::-1].replace("state = 1;"[::-1], "state = 2;"[::-1], 1)[::-1]
    )
    assert device.index("state = 1;") < device.index("state = 2;")


def test_patch_that_needs_a_three_way_merge_is_refused_then_carried_by_refresh(
    overlay, world
):
    store, layers = layers_for(overlay)
    patch, _ = make_patch(
        store,
        layers.forked,
        {
            "mlx/core.cpp": lines(
                "core", change={5: "core 5 // rocm hook", 22: "core 22 fixed"}
            )
        },
    )
    overlay.add_patch("0001-fix.patch", patch)
    # Upstream changed line 25, inside the hunk's context: the layer refuses the patch.
    overlay.write_manifest(world.pin_clean)
    with pytest.raises(PatchApplyError) as err:
        layers_for(overlay)
    assert (
        err.value.file == "mlx/core.cpp"
        and "its context differs there too" in err.value.reason
    )
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "refresh"])
    assert result.exit_code == 0, result.output
    store, layers = layers_for(overlay)
    core = read_blob(store, layers.patched, "mlx/core.cpp").decode()
    assert (
        "core 22 fixed" in core and "core 25 upstream" in core and "rocm hook" in core
    )


def test_patch_that_does_not_apply_names_patch_file_and_hunk(overlay):
    store, layers = layers_for(overlay)
    base = store.edit_tree(
        layers.forked,
        {
            "mlx/ops.cpp": (
                "100644",
                store.hash_blob(lines("ops", change={10: "something else"}).encode()),
            )
        },
    )
    patch, _ = make_patch(
        store, base, {"mlx/ops.cpp": lines("ops", change={10: "ops 10 patched"})}
    )
    overlay.add_patch("0001-broken.patch", patch)
    with pytest.raises(PatchApplyError) as err:
        layers_for(overlay)
    assert err.value.patch == "0001-broken.patch"
    assert err.value.file == "mlx/ops.cpp" and err.value.hunk == 1
    assert "made against other content" in err.value.reason
    # And refresh says it conflicts, naming git's conflict type; the patch is untouched.
    before = (overlay.root / "patches-rocm" / "0001-broken.patch").read_bytes()
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "refresh"])
    assert result.exit_code == 1 and "CONFLICT (contents)" in result.output
    assert (overlay.root / "patches-rocm" / "0001-broken.patch").read_bytes() == before


def test_offline_miss_is_a_clear_error(overlay, world, monkeypatch, tmp_path):
    monkeypatch.setenv("OVERLAY_GIT_DIR", str(tmp_path / "empty.git"))
    store = Store(offline=True)
    with pytest.raises(OfflineMiss) as err:
        compute_layers(store, load_manifest(str(overlay.root)), str(overlay.root))
    assert "--offline forbids fetching" in err.value.message


def test_unknown_commit_is_a_clear_error(overlay, world):
    overlay.write_manifest("f" * 40)
    with pytest.raises(GitError) as err:
        layers_for(overlay)
    assert f"commit {'f' * 40} is not in upstream" in err.value.message


def test_remote_url_change_in_manifest_is_applied_by_the_next_fetch(overlay, world):
    store, _ = layers_for(overlay)
    assert store.out("config", "remote.upstream.url") == str(world.upstream.path)
    text = (overlay.root / "patches-rocm" / "overlay.toml").read_text()
    moved = overlay.root.parent / "upstream-moved"
    moved.symlink_to(world.upstream.path)
    (overlay.root / "patches-rocm" / "overlay.toml").write_text(
        text.replace(str(world.upstream.path), str(moved))
    )
    config = Path(store.git_dir) / "config"
    before = config.read_bytes()
    store, _ = layers_for(overlay)  # the layer cache answers: nothing is fetched
    assert config.read_bytes() == before
    store.refresh_upstream_refs()  # a fetch points the remote at the new URL first
    assert store.out("config", "remote.upstream.url") == str(moved)
