"""`suite ab --without PATCH`: the fix-removed column comes from the series minus that patch."""

from __future__ import annotations

import os
import stat
import sys

import pytest
from click.testing import CliRunner
from gitfixtures import lines, make_patch, read_blob

from overlay.cli import main
from overlay.engine.layers import compute_layers
from overlay.errors import OverlayError
from overlay.git.store import Store
from overlay.records.manifest import load_manifest
from overlay.suites.config import parse_suites
from overlay.suites.runner import detect_platform, run_ab
from overlay.suites.without import build_without, layers_without, without_dir
from overlay.workspace import Workspace

FIXED = "device 3 locked"


@pytest.fixture
def two_patches(overlay):
    store = Store()
    layers = compute_layers(store, load_manifest(str(overlay.root)), str(overlay.root))
    fix, mid = make_patch(
        store,
        layers.forked,
        {"mlx/backend/rocm/device.cpp": lines("device", change={3: FIXED})},
    )
    other, _ = make_patch(
        store, mid, {"mlx/backend/rocm/device.h": "#pragma once\n// other\n"}, fix=2
    )
    overlay.add_patch("0001-lock.patch", fix)
    overlay.add_patch("0002-other.patch", other)
    return overlay


def fake_builder(store):
    """Stands in for the CMake build: writes a child that fails unless the tree has the fix."""

    def build(layers, build_root):
        has_fix = FIXED.encode() in read_blob(
            store, layers.patched, "mlx/backend/rocm/device.cpp"
        )
        child_dir = os.path.join(build_root, "rocm", "suites")
        os.makedirs(child_dir, exist_ok=True)
        path = os.path.join(child_dir, "probe")
        with open(path, "w") as fh:
            fh.write(
                f"#!{sys.executable}\nimport sys\nprint('overlay-suite: done')\nsys.exit({0 if has_fix else 1})\n"
            )
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        return child_dir

    return build


def test_fix_removed_column_is_built_from_the_series_minus_the_patch(
    two_patches, tmp_path
):
    store = Store()
    ws = Workspace.of(str(two_patches.root), store)
    kept = layers_without(ws, "0001-lock.patch")
    assert [r.patch.name for r in kept.patches] == ["0002-other.patch"]
    assert FIXED.encode() not in read_blob(
        store, kept.patched, "mlx/backend/rocm/device.cpp"
    )

    without = build_without(ws, "0001-lock.patch", fake_builder(store))
    assert without == os.path.join(
        without_dir(str(two_patches.root), "0001-lock.patch"), "rocm", "suites"
    )
    with_dir = fake_builder(store)(
        compute_layers(
            store,
            load_manifest(str(two_patches.root)),
            str(two_patches.root),
            stepwise=True,
        ),
        str(tmp_path / "with-build"),
    )
    (suite,) = parse_suites(
        '[suites.probe]\nchild = "probe"\nruns = 3\nbackend = "any"\nhardware = "none"\n'
        '[[suites.probe.markers]]\nstream = "stdout"\ntext = "overlay-suite: done"\n'
        'expect = "exactly 1"\n'
    ).values()
    ab = run_ab(
        suite,
        [os.path.join(without, "probe")],
        str(tmp_path / "results"),
        child_dir=with_dir,
        platform=detect_platform(environ={"OVERLAY_SUITE_HARDWARE": "none"}),
    )
    assert ab.table == [[0, 3], [3, 0]]
    assert ab.fisher_p == pytest.approx(0.1)
    assert not ab.guard_only


def test_unknown_patch_and_exclusive_options(two_patches):
    with pytest.raises(
        OverlayError, match="0009-nope.patch is not in patches-rocm/series"
    ):
        layers_without(Workspace(str(two_patches.root)), "0009-nope.patch")
    suites = two_patches.root / "patches-rocm" / "suites"
    suites.mkdir()
    (suites / "suites.toml").write_text(
        '[suites.probe]\nchild = "probe"\nbackend = "any"\nhardware = "none"\n'
    )
    runner = CliRunner()
    both = runner.invoke(
        main,
        [
            "-C",
            str(two_patches.root),
            "suite",
            "ab",
            "probe",
            "--without",
            "x",
            "--without-child",
            "y",
        ],
    )
    assert (
        both.exit_code == 2
        and "exactly one of --without PATCH, --without-layer forked and --without-child"
        in both.output
    )
    unknown = runner.invoke(
        main,
        [
            "-C",
            str(two_patches.root),
            "suite",
            "ab",
            "probe",
            "--without",
            "0009-nope.patch",
        ],
    )
    assert unknown.exit_code == 2 and "is not in patches-rocm/series" in unknown.output


def test_removing_a_patch_a_later_one_needs_names_it(overlay):
    store = Store()
    layers = compute_layers(store, load_manifest(str(overlay.root)), str(overlay.root))
    first, mid = make_patch(
        store,
        layers.forked,
        {"mlx/backend/rocm/device.cpp": lines("device", change={3: FIXED})},
    )
    second, _ = make_patch(
        store,
        mid,
        {"mlx/backend/rocm/device.cpp": lines("device", change={3: FIXED + " twice"})},
        fix=2,
    )
    overlay.add_patch("0001-lock.patch", first)
    overlay.add_patch("0002-lock-twice.patch", second)
    from overlay.engine import PatchApplyError

    with pytest.raises(PatchApplyError) as err:
        layers_without(Workspace.of(str(overlay.root), store), "0001-lock.patch")
    assert err.value.patch == "0002-lock-twice.patch"
    # A what-if the series cannot express is a usage error (exit 2; 1 is "a with-fix
    # run failed"), and the hint names what works, not refresh/rebase (they would
    # rewrite the real series).
    assert err.value.exit_code == 2
    assert "depends on 0001-lock.patch" in err.value.message
    hint = err.value.hint or ""
    assert "--without-layer forked" in hint and "`overlay refresh`" not in hint
    suites = overlay.root / "patches-rocm" / "suites"
    suites.mkdir()
    (suites / "suites.toml").write_text(
        '[suites.probe]\nchild = "probe"\nbackend = "any"\nhardware = "none"\n'
    )
    done = CliRunner().invoke(
        main,
        [
            "-C",
            str(overlay.root),
            "suite",
            "ab",
            "probe",
            "--without",
            "0001-lock.patch",
        ],
    )
    assert done.exit_code == 2, done.output
    assert "--without-layer forked" in done.output


def test_ab_without_builds_from_the_commands_store(two_patches, tmp_path, monkeypatch):
    """`overlay --git-dir S --offline suite ab NAME --without PATCH` builds the fix-removed
    tree from S, offline (the default store, online, would lack the layers' objects)."""
    from types import SimpleNamespace

    root = str(two_patches.root)
    holding = os.environ["OVERLAY_GIT_DIR"]  # the store the fixture filled
    monkeypatch.setenv("OVERLAY_GIT_DIR", str(tmp_path / "default-store.git"))
    suites = two_patches.root / "patches-rocm" / "suites"
    suites.mkdir()
    (suites / "suites.toml").write_text(
        '[suites.probe]\nchild = "probe"\nruns = 2\nbackend = "any"\nhardware = "none"\n'
        '[[suites.probe.markers]]\nstream = "stdout"\ntext = "overlay-suite: done"\n'
        'expect = "exactly 1"\n'
    )
    seen = []

    def fake_build(ws, options, *, layers, **kw):
        store = ws.store
        seen.append((store.git_dir, store.offline))
        return SimpleNamespace(
            ok=True, log=None, child=fake_builder(store)(layers, options.build_root)
        )

    from overlay import build as _build

    monkeypatch.setattr(_build, "find_toolchain", lambda *a, **k: None)
    monkeypatch.setattr(_build, "build", fake_build)
    with_dir = fake_builder(Store(holding))(
        compute_layers(Store(holding), load_manifest(root), root),
        str(tmp_path / "with"),
    )
    result = CliRunner().invoke(
        main,
        [
            "-C",
            root,
            "--git-dir",
            holding,
            "--offline",
            "suite",
            "ab",
            "probe",
            "--without",
            "0001-lock.patch",
            "--child-dir",
            with_dir,
            "--results",
            str(tmp_path / "results"),
        ],
        env={"OVERLAY_SUITE_HARDWARE": "none", "OVERLAY_SUITE_MODELS": "none"},
    )
    assert seen == [(os.path.abspath(holding), True)], (seen, result.output)
    assert result.exit_code == 0, result.output
    # The fix-removed child failed every run, the with-fix one none: the patch matters.
    assert os.path.isfile(
        os.path.join(without_dir(root, "0001-lock.patch"), "rocm", "suites", "probe")
    )
