"""``overlay build``'s link check and ``--cache`` on the stand-in CMake project
(tests/data/cmake-mini). Needs cmake, ninja, a C++ compiler and nm (skipped with the
reason otherwise); the cache tests also need ccache. No network, no ROCm.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from gitfixtures import Overlay, WorkRepo, World, cli, make_patch

from overlay.build import (
    Toolchain,
    ToolchainError,
    cmake_options,
    is_mlx_core_symbol,
    resolve_cache,
    write_launcher,
)
from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest

DATA = Path(__file__).parent / "data" / "cmake-mini"

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


from test_build import _files, _text  # noqa: E402  (the stand-in project's files, one copy)


@pytest.fixture
def hook_world(tmp_path) -> tuple[World, str]:
    """The stand-in upstream and fork, and an upstream commit after the fork's base that
    declares and calls ``mlx::core::gpu_hook`` (which no backend of the fork defines)."""
    up = WorkRepo.init(tmp_path / "upstream")
    base = up.commit(_files(DATA / "upstream"), "mini mlx")
    fork = WorkRepo.clone(up, tmp_path / "fork", "rocm-support")
    fork_commit = fork.commit(_files(DATA / "fork"), "rocm backend")
    hook = up.commit(
        {
            "mlx/util.h": HOOK_H,
            "mlx/ops.cpp": _text(
                DATA / "upstream",
                "mlx/ops.cpp",
                {12: "int ops_value() { return mlx::core::gpu_hook(up_helper(12)); }"},
            ),
        },
        HOOK_SUBJECT,
    )
    return World(up, fork, base, fork_commit, base, base), hook


def _overlay(root: Path, world: World, pin: str | None = None) -> Overlay:
    """An overlay on ``world`` with an empty series and a minimal LOCAL_FIXES.md."""
    o = Overlay(root, world, pin=pin)
    (o.root / "LOCAL_FIXES.md").write_text(
        f"# Local changes relative to x/fork@{world.fork_commit[:8]}\n\n"
        f"## Retarget onto the MLX pin ({(pin or world.base)[:8]})\n\n## Fixes to the fork's kernels\n\n"
    )
    return o


def _store() -> Store:
    return Store(os.environ["OVERLAY_GIT_DIR"])


@needs_cmake
def test_link_check_reports_an_undefined_symbol_with_its_upstream_commit(
    tmp_path, hook_world
):
    world, hook = hook_world
    ov = _overlay(tmp_path / "overlay", world)
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
    store = _store()
    layers = compute_layers(store, load_manifest(str(ov.root)), str(ov.root))
    data, _tree = make_patch(
        store,
        layers.patched,
        {
            "mlx/backend/rocm/device.cpp": _text(
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
    ov = _overlay(tmp_path / "overlay", world, pin=hook)
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


def test_cache_options_reach_cxx_and_the_custom_commands(tmp_path):
    host = Toolchain("host", "host compilers")
    rules = write_launcher(str(tmp_path), "sccache")
    opts = cmake_options(
        "rocm",
        host,
        arch="gfx1030",
        cmake_option="MLX_BUILD_ROCM",
        json_dir="",
        cache="none",
        launch_rules=rules,
    )
    assert "-DMLX_USE_CCACHE=OFF" in opts  # MLX would put ccache back otherwise
    assert not any("COMPILER_LAUNCHER" in o for o in opts)
    assert f"-DCMAKE_PROJECT_INCLUDE={rules}" in opts
    script = (tmp_path / "launch" / "custom").read_text()
    assert 'exec sccache "$@"' in script and "OVERLAY_NO_CCACHE=1" in script
    # one sccache server per build directory, on its own socket, unless the caller chose one
    assert f"SCCACHE_SERVER_UDS={tmp_path}/launch/sccache.sock" in script
    assert os.access(tmp_path / "launch" / "custom", os.X_OK)
    assert "RULE_LAUNCH_CUSTOM" in Path(rules).read_text()
    # the launcher puts the cache in front of a compiler only
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sccache").write_text('#!/bin/sh\necho "cached: $*"\n')
    (fake / "sccache").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    run = [str(tmp_path / "launch" / "custom")]
    out = subprocess.run(
        [*run, "/usr/bin/hipcc", "-c", "x.hip"], capture_output=True, text=True, env=env
    )
    assert out.stdout == "cached: /usr/bin/hipcc -c x.hip\n"
    out = subprocess.run(
        [*run, "sh", "-c", 'echo "ran $OVERLAY_NO_CCACHE"'],
        capture_output=True,
        text=True,
        env=env,
    )
    assert (
        out.stdout == "ran 1\n"
    )  # not a compiler: run as is (and the chroot wrapper's own ccache is off)


def test_an_absent_cache_is_a_clear_exit_2(tmp_path, monkeypatch):
    host = Toolchain("host", "host compilers")
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    assert resolve_cache(host, None) == "none"
    with pytest.raises(ToolchainError) as exc:
        resolve_cache(host, "sccache")
    assert (
        exc.value.exit_code == 2 and "sccache is not on the PATH" in exc.value.message
    )


def _ccache_stats(env: dict) -> dict[str, int]:
    out = subprocess.run(
        ["ccache", "--print-stats"], capture_output=True, text=True, env=env
    ).stdout
    return {
        k: int(v)
        for k, v in (line.split("\t", 1) for line in out.splitlines() if "\t" in line)
        if v.strip().isdigit()
    }


@needs_cmake
@needs_ccache
def test_cache_ccache_serves_cxx_and_hip_objects_into_an_empty_build_directory(
    tmp_path, monkeypatch
):
    """The stand-in's .hip file compiles through a custom command, as the fork's do."""
    up = WorkRepo.init(tmp_path / "upstream")
    base = up.commit(_files(DATA / "upstream"), "mini mlx")
    fork = WorkRepo.clone(up, tmp_path / "fork", "rocm-support")
    fork_commit = fork.commit(
        {
            **_files(DATA / "fork"),
            "mlx/backend/rocm/kernels.hip": "int kernel_value() { return 7; }\n",
        },
        "rocm",
    )
    ov = Overlay(tmp_path / "overlay", World(up, fork, base, fork_commit, base, base))
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    monkeypatch.setenv("CCACHE_NOHASHDIR", "1")
    env = dict(os.environ)
    subprocess.run(["ccache", "-z"], env=env, check=True, capture_output=True)

    res = cli(ov, "build", "--backend", "cpu", "--jobs", "2", "--cache", "ccache")
    assert res.exit_code == 0, res.output
    obj = ov.root / "build" / "cpu" / "obj"
    record = json.loads((obj / ".overlay-configure.json").read_text())
    launcher = str(ov.root / "build" / "cpu" / "launch" / "custom")
    assert f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}" in record["options"]
    assert 'exec ccache "$@"' in Path(launcher).read_text()
    assert (
        "RULE_LAUNCH_CUSTOM"
        in (ov.root / "build" / "cpu" / "launch" / "rules.cmake").read_text()
    )
    assert (
        "launch/custom" in (obj / "build.ninja").read_text()
    )  # the HIP custom command goes through it
    cold = _ccache_stats(env)
    assert cold.get("cache_miss", 0) + cold.get("direct_cache_miss", 0) >= 4, (
        cold
    )  # 3 C++ + 1 HIP

    shutil.rmtree(obj)  # an empty build directory, the cache warm
    subprocess.run(["ccache", "-z"], env=env, check=True, capture_output=True)
    res = cli(ov, "build", "--backend", "cpu", "--jobs", "2", "--cache", "ccache")
    assert res.exit_code == 0, res.output
    warm = _ccache_stats(env)
    hits = warm.get("direct_cache_hit", 0) + warm.get("preprocessed_cache_hit", 0)
    assert hits == 4, warm  # every object, the HIP one included, from the cache
    assert (obj / "hip_objs" / "kernels.o").is_file()

    # --cache none: nothing goes through ccache
    shutil.rmtree(obj)
    subprocess.run(["ccache", "-z"], env=env, check=True, capture_output=True)
    res = cli(ov, "build", "--backend", "cpu", "--jobs", "2", "--cache", "none")
    assert res.exit_code == 0, res.output
    none = _ccache_stats(env)
    assert none.get("direct_cache_hit", 0) + none.get("cache_miss", 0) == 0, none


@needs_cmake
def test_ci_check_names_the_upstream_commit_behind_the_drift(tmp_path):
    """A bump whose drift is not fixed fails ``ci --require check``, naming the upstream commit."""
    up = WorkRepo.init(tmp_path / "upstream")
    base = up.commit(_files(DATA / "upstream"), "mini mlx")
    fork = WorkRepo.clone(up, tmp_path / "fork", "rocm-support")
    fork_commit = fork.commit(_files(DATA / "fork"), "rocm backend")
    bump = up.commit(
        {
            "mlx/util.h": _text(
                DATA / "upstream",
                "mlx/util.h",
                {4: "inline int up_helper(int x, int y) { return x + y; }"},
            ),
            "mlx/ops.cpp": _text(
                DATA / "upstream",
                "mlx/ops.cpp",
                {12: "int ops_value() { return up_helper(12, 1); }"},
            ),
        },
        "Give up_helper a second operand (#4300)",
    )
    ov = _overlay(tmp_path / "overlay", World(up, fork, base, fork_commit, base, base))
    store = _store()
    layers = compute_layers(store, load_manifest(str(ov.root)), str(ov.root))
    data, _tree = make_patch(
        store,
        layers.patched,
        {
            "mlx/backend/rocm/device.cpp": _text(
                DATA / "fork",
                "mlx/backend/rocm/device.cpp",
                {
                    1: '#include "mlx/fork.h"\n#include "mlx/util.h"',
                    20: "int device_up() { return up_helper(3); }",
                },
            )
        },
        subject="rocm: use up_helper",
        fix=None,
    )
    ov.add_patch("0001-up.patch", data)
    res = cli(ov, "rebase", "--onto", bump)
    assert res.exit_code == 0 and "rebase complete" in res.output, res.output

    report = tmp_path / "ci.json"
    res = cli(
        ov,
        "ci",
        "--only",
        "check",
        "--require",
        "check",
        "--backend",
        "cpu",
        "--json",
        str(report),
    )
    assert res.exit_code == 1, res.output
    check = next(x for x in res.output.splitlines() if x.startswith("check "))
    assert "FAILED" in check and "mlx/backend/rocm/device.cpp:21" in check
    assert check.endswith(
        f"drift: upstream {bump[:12]} Give up_helper a second operand (#4300)"
    ), check
    stage = next(
        s for s in json.loads(report.read_text())["stages"] if s["name"] == "check"
    )
    assert stage["data"]["drift_from"] == base
    assert stage["data"]["drift"][0].endswith(
        f"-> upstream {bump[:12]} Give up_helper a second operand (#4300)"
    )


@needs_cmake
@needs_ccache
def test_a_second_check_of_unchanged_units_comes_from_the_cache(tmp_path, monkeypatch):
    up = WorkRepo.init(tmp_path / "upstream")
    base = up.commit(_files(DATA / "upstream"), "mini mlx")
    fork = WorkRepo.clone(up, tmp_path / "fork", "rocm-support")
    fork_commit = fork.commit(
        {
            **_files(DATA / "fork"),
            "mlx/backend/rocm/kernels.hip": "int kernel_value() { return 7; }\n",
        },
        "rocm",
    )
    ov = Overlay(tmp_path / "overlay", World(up, fork, base, fork_commit, base, base))
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    env = dict(os.environ)
    res = cli(
        ov, "build", "--backend", "cpu", "--check", "--jobs", "2"
    )  # the default: ccache, present
    assert (
        res.exit_code == 0 and "4 translation unit(s) (3 C++, 1 HIP)" in res.output
    ), res.output
    subprocess.run(["ccache", "-z"], env=env, check=True, capture_output=True)
    res = cli(ov, "build", "--backend", "cpu", "--check", "--jobs", "2")
    assert res.exit_code == 0, res.output
    stats = _ccache_stats(env)
    assert (
        stats.get("direct_cache_hit", 0) + stats.get("preprocessed_cache_hit", 0) == 4
    ), stats
    assert not list(
        (ov.root / "build" / "cpu" / "obj").rglob("*.o")
    )  # still nothing written


@needs_cmake
def test_ci_build_stage_fails_on_an_undefined_symbol_and_says_so(tmp_path, hook_world):
    world, hook = hook_world
    ov = _overlay(tmp_path / "overlay", world, pin=hook)
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


def test_the_github_actions_example_checks_every_pr_and_links_on_bumps():
    yaml = pytest.importorskip(
        "yaml", reason="needs PyYAML to read the workflow example"
    )
    path = Path(__file__).parent.parent / "docs" / "examples" / "github-actions.yml"
    jobs = yaml.safe_load(path.read_text())["jobs"]
    check = "\n".join(s.get("run", "") for s in jobs["check"]["steps"])
    assert "tools/rocm-toolchain.sh provision" in check
    assert (
        "overlay ci --only verify,check --require verify,check --arch gfx1030" in check
    )
    assert jobs["check"]["container"]["options"] == "--privileged"
    cached = [
        s["with"]["path"]
        for s in jobs["check"]["steps"]
        if s.get("uses", "").startswith("actions/cache")
    ]
    assert "${{ env.OVERLAY_TOOLCHAIN_DIR }}" in cached and ".ccache" in cached
    assert "needs.check.outputs.bumped == 'true'" in jobs["link"]["if"]
    link = "\n".join(s.get("run", "") for s in jobs["link"]["steps"])
    assert "--require verify,build" in link and "--drift-from" in link


@needs_cmake
def test_check_finds_the_undefined_symbol_from_the_front_end(tmp_path, hook_world):
    """Issue 29 item 1: the per-PR check (no object of the build, no archive) reports the
    symbol the link check finds after a full build, with the same attribution."""
    world, hook = hook_world
    ov = _overlay(tmp_path / "overlay", world)
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
