"""Line attribution through the synthetic pin -> forked -> patch chain (no compiler needed)."""

from __future__ import annotations

import pytest
from gitfixtures import lines, make_patch

from overlay.build.attribute import (
    Attributor,
    _parse_porcelain,
    attribute_lines,
    build_chain,
)
from overlay.engine.layers import compute_layers
from overlay.errors import OverlayError
from overlay.git.store import Store
from overlay.records.manifest import load_manifest


def _layers(overlay, store, stepwise=True):
    return compute_layers(
        store, load_manifest(str(overlay.root)), str(overlay.root), stepwise=stepwise
    )


@pytest.fixture
def store(isolated_git):
    return Store(str(isolated_git / "store.git"))


def _series(overlay, store):
    """0001: two hunks in device.cpp (lines 3 and 25); 0002: one line of ops.cpp."""
    base = _layers(overlay, store)
    one, tree1 = make_patch(
        store,
        base.patched,
        {
            "mlx/backend/rocm/device.cpp": lines(
                "device", change={3: "device 3 patched", 25: "device 25 patched"}
            )
        },
        subject="rocm: device",
    )
    overlay.add_patch("0001-device.patch", one)
    two, _ = make_patch(
        store,
        tree1,
        {"mlx/ops.cpp": lines("ops", change={10: "ops 10 patched"})},
        subject="rocm: ops",
    )
    overlay.add_patch("0002-ops.patch", two)


def test_each_layer_and_hunk(overlay, store):
    _series(overlay, store)
    layers = _layers(overlay, store)
    got = attribute_lines(
        store,
        layers,
        [
            ("mlx/core.cpp", 1),
            ("mlx/core.cpp", 5),
            ("mlx/backend/rocm/device.cpp", 1),
            ("mlx/backend/rocm/device.cpp", 3),
            ("mlx/backend/rocm/device.cpp", 25),
            ("mlx/ops.cpp", 10),
            ("mlx/ops.cpp", 11),
            ("mlx/nope.cpp", 1),
            ("mlx/core.cpp", 999),
        ],
    )
    label = {k: (v.label() if v else None) for k, v in got.items()}
    assert label == {
        ("mlx/core.cpp", 1): "from upstream",
        ("mlx/core.cpp", 5): "from the fork",  # "core 5 // rocm hook"
        ("mlx/backend/rocm/device.cpp", 1): "from the fork",
        ("mlx/backend/rocm/device.cpp", 3): "patch 0001-device.patch hunk #1",
        ("mlx/backend/rocm/device.cpp", 25): "patch 0001-device.patch hunk #2",
        ("mlx/ops.cpp", 10): "patch 0002-ops.patch hunk #1",
        ("mlx/ops.cpp", 11): "from upstream",
        ("mlx/nope.cpp", 1): None,
        ("mlx/core.cpp", 999): None,
    }
    dev = got[("mlx/backend/rocm/device.cpp", 25)]
    assert dev.layer == "patch" and dev.patch == "0001-device.patch" and dev.line == 25


def test_chain_is_deterministic_and_ends_at_patched(overlay, store):
    _series(overlay, store)
    layers = _layers(overlay, store)
    a, b = build_chain(store, layers), build_chain(store, layers)
    assert [x.commit for x in a] == [x.commit for x in b]
    assert [x.layer for x in a] == ["upstream", "fork", "patch", "patch"]
    assert a[-1].tree == layers.patched and a[0].tree == layers.pin


def test_one_blame_per_file(overlay, store, monkeypatch):
    _series(overlay, store)
    layers = _layers(overlay, store)
    attr = Attributor(store, layers)
    calls = []
    real = store.git

    def spy(*args, **kw):
        if args and args[0] == "blame":
            calls.append(args)
        return real(*args, **kw)

    monkeypatch.setattr(store, "git", spy)
    attr.attribute([("mlx/backend/rocm/device.cpp", n) for n in (1, 3, 25, 26)])
    assert len(calls) == 1 and calls[0].count("-L") == 4


def test_needs_stepwise_layers(overlay, store):
    _series(overlay, store)
    layers = _layers(overlay, store, stepwise=False)
    assert layers.patches and all(
        p.tree is None for p in layers.patches
    )  # the one-batch fast path
    with pytest.raises(OverlayError, match="stepwise"):
        build_chain(store, layers)


def test_parse_porcelain_groups():
    sha = "a" * 40
    text = (
        f"{sha} 7 3 1\nauthor x\nfilename old/name.cpp\n\tline\n"
        f"{sha} 9 5\nfilename old/name.cpp\n\tother\n"
    )
    assert _parse_porcelain(text) == [
        (sha, 7, 3, 1, "old/name.cpp"),
        (sha, 9, 5, 1, "old/name.cpp"),
    ]
