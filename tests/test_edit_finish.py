"""`overlay record` keeps the recorded series' layers (overlay/edit/finish.py
``keep_recorded_layers``, overlay/engine/layers.py ``keep_layers``): the next
command reads them instead of applying the series again, and they are the very
layers the engine computes from the records with an empty cache.

Real fixture repositories (``gitfixtures``), no network.
"""

from __future__ import annotations

import os
import shutil

import pytest
from gitfixtures import PATCH, cli, git_calls, lines

from overlay.engine import apply as engine_apply
from overlay.engine.layers import LAYER_CACHE, compute_layers
from overlay.git.objects import ObjectReader
from overlay.git.store import Store
from overlay.records.manifest import load_manifest

DEVICE = "mlx/backend/rocm/device.cpp"
HEADER = "mlx/backend/rocm/device.h"
EXTRA = "mlx/backend/rocm/extra.h"


def layers_now(o):
    return compute_layers(Store(), load_manifest(str(o.root)), str(o.root))


def edited(o, name: str, *args: str, files: dict[str, str]) -> None:
    """``overlay edit ARGS`` (``name``: the patch's name without ``.patch``), then
    ``files`` written into its work tree."""
    started = cli(o, "edit", *args)
    assert started.exit_code == 0, started.output
    work = o.root / ".overlay" / "edit" / name
    for path, text in files.items():
        (work / path).write_text(text)


def record(o, *args: str) -> None:
    done = cli(o, "record", *args)
    assert done.exit_code == 0, done.output


def assert_kept_and_true(o, monkeypatch) -> None:
    """The layers after the record come from the cache (no apply runs), and are what
    the engine computes from the records once the cache is emptied."""

    def no_apply(*_a, **_k):
        raise AssertionError("the series was applied again after the record")

    with monkeypatch.context() as m:
        m.setattr(engine_apply, "apply_series", no_apply)
        kept = layers_now(o)
    shutil.rmtree(os.path.join(Store().git_dir, LAYER_CACHE))
    computed = layers_now(o)
    assert kept == computed
    assert [r.state for r in kept.patches] == ["exact"] * len(kept.patches)


@pytest.fixture
def three(clean):
    """The one patch of ``clean`` (device.cpp line 3), then 0002 adding device.h and
    0003 changing device.cpp line 30."""
    edited(clean, "0002-header", "--new", "0002-header", files={HEADER: "// header\n"})
    record(clean, "-m", "rocm: header", "--description", "Why.")
    edited(
        clean,
        "0003-line-30",
        "--new",
        "0003-line-30",
        files={DEVICE: lines("device", change={3: "device 3 locked", 30: "thirty"})},
    )
    record(clean, "-m", "rocm: thirty", "--description", "Why.")
    return clean


def test_a_record_in_the_middle_keeps_the_layers_with_the_later_patches(
    three, monkeypatch
):
    edited(three, "0002-header", "0002", files={HEADER: "// header, twice\n"})
    record(three)
    assert_kept_and_true(three, monkeypatch)


def test_a_new_patch_after_the_first_and_a_renamed_last_one_keep_theirs(
    three, monkeypatch
):
    edited(
        three,
        "0001a-extra",
        "--new",
        "0001a-extra",
        "--after",
        PATCH,
        files={EXTRA: "// extra\n"},
    )
    record(three, "-m", "rocm: extra", "--description", "Why.")
    assert (three.root / "patches-rocm" / "series").read_text().split()[1] == (
        "0001a-extra.patch"
    )
    assert_kept_and_true(three, monkeypatch)
    edited(
        three,
        "0003-line-30",
        "0003",
        files={DEVICE: lines("device", change={3: "device 3 locked", 30: "30!"})},
    )
    record(three, "--name", "0003-thirty")
    assert (three.root / "patches-rocm" / "series").read_text().split()[-1] == (
        "0003-thirty.patch"
    )
    assert_kept_and_true(three, monkeypatch)


def test_later_patches_carried_onto_the_change_are_applied_again_next_time(
    three, monkeypatch
):
    # 0003 was made on device.cpp as 0001 left it: a change there carries 0003.
    edited(
        three,
        "0001-rocm-lock-the-device",
        "0001",
        files={DEVICE: lines("device", change={3: "device 3 locked", 9: "nine"})},
    )
    done = cli(three, "record")
    assert done.exit_code == 0 and "carried 0003-line-30.patch" in done.output
    calls = []
    real = engine_apply.apply_series

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(engine_apply, "apply_series", counted)
    kept = layers_now(three)
    assert calls  # not kept: computed from the records
    shutil.rmtree(os.path.join(Store().git_dir, LAYER_CACHE))
    assert layers_now(three) == kept


def test_the_export_after_a_record_asks_git_nothing_about_the_trees(
    three, tmp_path, monkeypatch
):
    """The record keeps what changed between the layer it replaced and the one it
    wrote (Store.keep_diff): the export after it starts no cat-file (the old layer's
    trees) and no diff-tree, and exports exactly the new layer."""
    dest = tmp_path / "dest"
    assert cli(three, "export", str(dest)).exit_code == 0
    before = layers_now(three).patched
    edited(
        three,
        "0003-line-30",
        "0003-line-30",
        files={DEVICE: lines("device", change={3: "device 3 locked", 30: "30 again"})},
    )
    record(three)
    after = layers_now(three).patched
    store = Store()
    real_rows = [tuple(r) for r in _diff_tree_rows(store, before, after)]
    assert store.kept_diff(before, after) == real_rows != []
    asked = git_calls(monkeypatch)

    def no_reader(self):
        raise AssertionError("the export started a cat-file")

    monkeypatch.setattr(ObjectReader, "_proc", property(no_reader))
    done = cli(three, "export", str(dest))
    assert done.exit_code == 0, done.output
    assert "1 written, 0 removed" in done.output
    assert [a for a in asked if "diff-tree" in a or "cat-file" in a] == []
    assert (dest / DEVICE).read_text() == lines(
        "device", change={3: "device 3 locked", 30: "30 again"}
    )
    monkeypatch.undo()
    # DEST holds the new layer, file for file, as git lists it.
    listed = store.ls_tree(after)
    for _mode, _kind, oid, path in listed:
        assert (dest / path).read_bytes() == store.git("cat-file", "blob", oid).stdout
    held = {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()} - {
        ".overlay-export.json",
        ".overlay-export.lock",
    }
    assert held == {path for *_rest, path in listed}


def _diff_tree_rows(store: Store, old: str, new: str) -> list[list[str]]:
    """git's own ``diff-tree -r -z --no-renames --full-index`` rows for two trees."""
    from overlay.git.objects import parse_diff_tree

    out = store.git("diff-tree", "-r", "-z", "--no-renames", "--full-index", old, new)
    return [list(r) for r in parse_diff_tree(out.stdout)]
