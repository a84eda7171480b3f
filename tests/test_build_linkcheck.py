"""``overlay build``'s link check (overlay/build/linkcheck.py) on the stand-in CMake
project (tests/data/cmake-mini): an undefined ``mlx::core`` symbol named with the upstream
commit that declared it, in ``build``, ``build --check`` and the ``ci`` build stage. Needs
cmake, ninja, a C++ compiler and nm (skipped with the reason otherwise). No network, no
ROCm."""

from __future__ import annotations

import shutil

import pytest
from buildfixtures import (
    DATA,
    isolated_store,
    project_files,
    project_text,
    stand_in_overlay,
)
from gitfixtures import WorkRepo, World, cli, make_patch

from overlay.build import is_mlx_core_symbol
from overlay.engine.layers import compute_layers
from overlay.records.manifest import load_manifest

_missing = [t for t in ("cmake", "ninja", "nm", "c++filt") if shutil.which(t) is None]
if shutil.which("c++") is None and shutil.which("g++") is None:
    _missing.append("c++")
needs_cmake = pytest.mark.skipif(
    bool(_missing),
    reason=f"needs {', '.join(_missing)} "
    "(apt-get install cmake ninja-build g++ binutils)",
)
needs_ccache = pytest.mark.skipif(
    shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)"
)

#: Upstream's new API: a hook every backend defines (as a new primitive's eval_gpu is).
HOOK_H = """// util.h: upstream helpers
#pragma once

inline int up_helper(int x) { return x + 1; }
namespace mlx::core {
// Defined by each backend.
int gpu_hook(int x);
}
"""
HOOK_SUBJECT = "Add gpu_hook, which every backend defines (#4242)"


@pytest.fixture
def hook_world(tmp_path) -> tuple[World, str]:
    """The stand-in upstream and fork, and an upstream commit after the fork's base that
    declares and calls ``mlx::core::gpu_hook`` (which no backend of the fork defines)."""
    up = WorkRepo.init(tmp_path / "upstream")
    base = up.commit(project_files(DATA / "upstream"), "mini mlx")
    fork = WorkRepo.clone(up, tmp_path / "fork", "rocm-support")
    fork_commit = fork.commit(project_files(DATA / "fork"), "rocm backend")
    hook = up.commit(
        {
            "mlx/util.h": HOOK_H,
            "mlx/ops.cpp": project_text(
                DATA / "upstream",
                "mlx/ops.cpp",
                {12: "int ops_value() { return mlx::core::gpu_hook(up_helper(12)); }"},
            ),
        },
        HOOK_SUBJECT,
    )
    return World(up, fork, base, fork_commit, base, base), hook


@needs_cmake
def test_link_check_reports_an_undefined_symbol_with_its_upstream_commit(
    tmp_path, hook_world
):
    world, hook = hook_world
    ov = stand_in_overlay(tmp_path / "overlay", world)
    res = cli(ov, "rebase", "--onto", hook)
    assert res.exit_code == 0 and "rebase complete" in res.output, res.output

    res = cli(ov, "build", "--backend", "cpu", "--jobs", "2", "--cache", "none")
    assert res.exit_code == 1, res.output
    line = next(
        x for x in res.output.splitlines() if x.startswith("link: undefined symbol:")
    )
    assert "mlx::core::gpu_hook(int)" in line
    assert "referenced from libmlx.a(ops.cpp.o)" in line
    assert (
        f"upstream {hook[:12]} {HOOK_SUBJECT}" in line
    )  # the drift range of the last rebase
    assert (
        "link check: 1 undefined mlx::core symbol(s) over 3 object(s) of libmlx.a"
        in res.output
    )
    assert res.output.splitlines()[-1].startswith("cpu build failed: 0 error(s)")
    assert "; 1 undefined mlx::core symbol(s); log: " in res.output.splitlines()[-1]
    log = ov.root / "build" / "cpu" / "build.log"
    assert "link check: undefined symbol: mlx::core::gpu_hook(int)\n" in log.read_text()
    assert not (
        ov.root / "build" / "cpu" / "obj" / ".overlay-built.json"
    ).exists()  # not a good build

    # overlay drift reads the same log and names the same commit
    res = cli(ov, "drift", "--log", str(log))
    assert res.exit_code == 1, res.output
    assert "link: undefined: mlx::core::gpu_hook(int)" in res.output
    assert f"upstream {hook[:12]} {HOOK_SUBJECT}" in res.output

    # the fix: the backend defines the hook (one patch); the link check is clean
    store = isolated_store()
    layers = compute_layers(store, load_manifest(str(ov.root)), str(ov.root))
    data, _tree = make_patch(
        store,
        layers.patched,
        {
            "mlx/backend/rocm/device.cpp": project_text(
                DATA / "fork",
                "mlx/backend/rocm/device.cpp",
                {
                    20: "namespace mlx::core { int gpu_hook(int x) { return device_value() + x; } }"
                },
            )
        },
        subject="rocm: define gpu_hook",
        fix=None,
    )
    ov.add_patch("0001-gpu-hook.patch", data)
    res = cli(ov, "build", "--backend", "cpu", "--jobs", "2", "--cache", "none")
    assert res.exit_code == 0, res.output
    assert (
        "link check: 0 undefined mlx::core symbol(s) over 3 object(s) of libmlx.a"
        in res.output
    )


@needs_cmake
def test_no_link_check_leaves_the_undefined_symbol_to_the_consumer(
    tmp_path, hook_world
):
    world, hook = hook_world
    ov = stand_in_overlay(tmp_path / "overlay", world, pin=hook)
    res = cli(
        ov,
        "build",
        "--backend",
        "cpu",
        "--jobs",
        "2",
        "--cache",
        "none",
        "--no-link-check",
    )
    assert res.exit_code == 0, (
        res.output
    )  # an archive with an undefined reference builds
    assert "link check" not in res.output
    # without a rebase record, --drift-from names the range
    res = cli(
        ov, "build", "--backend", "cpu", "--cache", "none", "--drift-from", world.base
    )
    assert res.exit_code == 1, res.output
    assert f"[upstream {hook[:12]} {HOOK_SUBJECT}]" in res.output
    res = cli(ov, "build", "--backend", "cpu", "--cache", "none")
    assert res.exit_code == 1 and "[no upstream commit attributed]" in res.output, (
        res.output
    )


def test_mlx_core_symbols_are_told_from_template_arguments():
    assert is_mlx_core_symbol("mlx::core::Event::error() const")
    assert is_mlx_core_symbol("vtable for mlx::core::GatherQQMM")
    assert is_mlx_core_symbol(
        "mlx::core::array mlx::core::astype<float>(mlx::core::array, int)"
    )
    assert not is_mlx_core_symbol(
        "std::vector<mlx::core::array, std::allocator<mlx::core::array> >::~vector()"
    )
    assert not is_mlx_core_symbol("operator delete(void*, unsigned long)")


# ----------------------------------------------------------------- --cache


@needs_cmake
def test_ci_build_stage_fails_on_an_undefined_symbol_and_says_so(tmp_path, hook_world):
    world, hook = hook_world
    ov = stand_in_overlay(tmp_path / "overlay", world, pin=hook)
    md = tmp_path / "ci.md"
    res = cli(
        ov,
        "ci",
        "--only",
        "build",
        "--require",
        "build",
        "--backend",
        "cpu",
        "--drift-from",
        world.base,
        "--markdown",
        str(md),
    )
    assert res.exit_code == 1, res.output
    build = next(x for x in res.output.splitlines() if x.startswith("build "))
    assert (
        "0 error(s), 1 undefined symbol(s); first: link: undefined symbol: mlx::core::gpu_hook(int)"
        in build
    )
    assert f"[upstream {hook[:12]} {HOOK_SUBJECT}]" in build
    text = md.read_text()
    assert (
        "\nlink check: 1 undefined mlx::core symbol(s) over 3 object(s) of libmlx.a"
        in text
    )


@needs_cmake
def test_check_finds_the_undefined_symbol_from_the_front_end(tmp_path, hook_world):
    """The per-PR check (no object of the build, no archive) reports the
    symbol the link check finds after a full build, with the same attribution."""
    world, hook = hook_world
    ov = stand_in_overlay(tmp_path / "overlay", world)
    res = cli(ov, "rebase", "--onto", hook)
    assert res.exit_code == 0, res.output

    res = cli(ov, "build", "--backend", "cpu", "--check", "-j", "2", "--cache", "none")
    assert res.exit_code == 1, res.output
    line = next(
        x for x in res.output.splitlines() if x.startswith("link: undefined symbol:")
    )
    assert "mlx::core::gpu_hook(int) (referenced from mlx/ops.cpp)" in line
    assert f"upstream {hook[:12]} {HOOK_SUBJECT}" in line
    assert (
        "link check (front end): 1 undefined mlx::core symbol(s) over 3 unit(s)"
        in res.output
    )
    last = res.output.splitlines()[-1]
    assert last.startswith("cpu check failed: 0 error(s)"), res.output
    assert "; 1 undefined mlx::core symbol(s); log: " in last
    assert not (ov.root / "build" / "cpu" / "obj" / "libmlx.a").exists()

    # the gate: ci's check stage fails on it, and names the symbol and the commit
    res = cli(ov, "ci", "--backend", "cpu", "--only", "check", "--require", "check")
    assert res.exit_code == 1, res.output
    assert "1 undefined symbol(s)" in res.output and hook[:12] in res.output

    # --no-link-check: the plain syntax check, which cannot see it
    res = cli(
        ov, "build", "--backend", "cpu", "--check", "--cache", "none", "--no-link-check"
    )
    assert res.exit_code == 0, res.output
