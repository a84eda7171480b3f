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
from gitfixtures import PATCH, cli, lines

from overlay.engine import apply as engine_apply
from overlay.engine.layers import LAYER_CACHE, compute_layers
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
