"""``overlay build --cache``: the compiler cache put in front of C++ and HIP compiles
(overlay/build/cache.py), on the stand-in CMake project. The tests that build need cmake,
ninja, a C++ compiler and nm, and ccache where they use it (skipped with the reason
otherwise). No network, no ROCm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from buildfixtures import DATA, project_files
from gitfixtures import Overlay, WorkRepo, World, cli

from overlay.build import (
    Toolchain,
    ToolchainError,
    cmake_options,
    resolve_cache,
    write_launcher,
)

_missing = [t for t in ("cmake", "ninja", "nm", "c++filt") if shutil.which(t) is None]


needs_cmake = pytest.mark.skipif(
    bool(_missing),
    reason=f"needs {', '.join(_missing)} "
    "(apt-get install cmake ninja-build g++ binutils)",
)


needs_ccache = pytest.mark.skipif(
    shutil.which("ccache") is None, reason="needs ccache (apt-get install ccache)"
)


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
    base = up.commit(project_files(DATA / "upstream"), "mini mlx")
    fork = WorkRepo.clone(up, tmp_path / "fork", "rocm-support")
    fork_commit = fork.commit(
        {
            **project_files(DATA / "fork"),
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
@needs_ccache
def test_a_second_check_of_unchanged_units_comes_from_the_cache(tmp_path, monkeypatch):
    up = WorkRepo.init(tmp_path / "upstream")
    base = up.commit(project_files(DATA / "upstream"), "mini mlx")
    fork = WorkRepo.clone(up, tmp_path / "fork", "rocm-support")
    fork_commit = fork.commit(
        {
            **project_files(DATA / "fork"),
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
