"""The forked layer (overlay/engine/forked.py) on real repositories: the merge of the
carried fork delta, and the layer with its resolutions, read back from the store."""

from __future__ import annotations

import json
import os

import pytest
from gitfixtures import lines

from overlay.engine import forked, layers
from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest


def layers_for(overlay, **kw):
    store = Store()
    return store, compute_layers(
        store, load_manifest(str(overlay.root)), str(overlay.root), **kw
    )


def test_a_second_merge_of_the_same_commits_is_read_from_the_store(
    overlay, monkeypatch
):
    store = Store()
    m = load_manifest(str(overlay.root))
    w = overlay.world
    layers.ensure_commits(store, m)
    for pin in (w.pin_conflict, w.pin_clean):
        store.ensure_commit(pin, ["upstream"])
    first = forked.merge_fork_delta(
        store, m.merge_base, w.pin_conflict, m.fork_commit, m.carry
    )
    assert first.stages  # the conflict world: stages must survive the cache
    merges = []
    real = Store.merge_trees
    monkeypatch.setattr(
        Store,
        "merge_trees",
        lambda self, *a, **k: merges.append(a) or real(self, *a, **k),
    )
    again = forked.merge_fork_delta(
        store, m.merge_base, w.pin_conflict, m.fork_commit, m.carry
    )
    assert again == first and merges == []
    # Another pin: merged, but the carried delta is not rebuilt.
    edits = []
    monkeypatch.setattr(
        Store,
        "edit_tree",
        lambda self, *a, **k: edits.append(a) or pytest.fail("rebuilt"),
    )
    other = forked.merge_fork_delta(
        store, m.merge_base, w.pin_clean, m.fork_commit, m.carry
    )
    assert len(merges) == 1 and other.tree != first.tree
    monkeypatch.undo()
    # A damaged record is merged again; another callable than Carry is not cached.
    for top, _dirs, files in os.walk(os.path.join(store.git_dir, "overlay-merges")):
        for name in files:
            with open(os.path.join(top, name), "w") as fh:
                json.dump({"tree": 5}, fh)
    assert (
        forked.merge_fork_delta(
            store, m.merge_base, w.pin_conflict, m.fork_commit, m.carry
        )
        == first
    )
    assert (
        forked.merge_fork_delta(
            store, m.merge_base, w.pin_conflict, m.fork_commit, lambda p: m.carry(p)
        )
        == first
    )


def test_the_forked_layer_of_the_same_commits_and_resolutions_is_read_from_the_store(
    overlay, world, monkeypatch
):
    # After `overlay record` only the series changes: the layers are computed again,
    # but the forked layer (a resolution applied and checked against git's merge) is
    # read. Another resolution's bytes compute it again.
    overlay.write_manifest(world.pin_conflict)
    resolved = lines(
        "core",
        change={5: "core 5 upstream rewrite // rocm hook", 25: "core 25 upstream"},
    )
    overlay.add_resolution("mlx/core.cpp", resolved)
    store = Store()
    m = load_manifest(str(overlay.root))
    layers.ensure_commits(store, m)
    resolutions = {"mlx/core.cpp": resolved.encode()}
    args = (store, m.merge_base, m.pin, m.fork_commit, m.carry)
    first = forked.compute_forked(*args, resolutions)
    assert [c.path for c in first[3]] == ["mlx/core.cpp"] and first[3][0].resolved
    checked = []
    real = forked.changes_outside_conflicts
    monkeypatch.setattr(
        forked,
        "changes_outside_conflicts",
        lambda *a: checked.append(a) or real(*a),
    )
    monkeypatch.setattr(
        forked, "edit_tree", lambda *a, **k: pytest.fail("the forked tree rebuilt")
    )
    assert forked.compute_forked(*args, resolutions) == first
    assert checked == []
    monkeypatch.undo()
    monkeypatch.setattr(
        forked,
        "changes_outside_conflicts",
        lambda *a: checked.append(a) or real(*a),
    )
    other = dict(resolutions, **{"mlx/core.cpp": resolved.encode() + b"// more\n"})
    changed = forked.compute_forked(*args, other)
    assert len(checked) == 1 and changed[0] != first[0]
    assert changed[3][0].outside  # the added line is outside git's conflict region
    # The same answer through compute_layers (the cache is the engine's), and a
    # damaged record is computed again.
    assert layers_for(overlay)[1].forked == first[0]
    for top, _dirs, files in os.walk(os.path.join(store.git_dir, "overlay-merges")):
        for name in files:
            with open(os.path.join(top, name), "w") as fh:
                json.dump({"forked": 5}, fh)
    assert forked.compute_forked(*args, resolutions) == first
