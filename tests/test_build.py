"""``overlay build`` on a tiny CMake project that stands in for MLX (tests/data/cmake-mini).

A fork-like world: an upstream repository, a fork that adds a "ROCm" file and
changes an upstream line, an overlay with patches. Needs cmake, ninja and a C++
compiler (skipped with the reason otherwise); no network, no ROCm.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from buildfixtures import (
    DATA,
    isolated_store,
    project_files,
    project_text,
    stand_in_overlay,
)
from click.testing import CliRunner
from gitfixtures import Overlay, WorkRepo, World, cli, make_patch
from procfixtures import default_signals, gone

from overlay.build import (
    BUILD_LOCK,
    BuildOptions,
    BuildResult,
    Toolchain,
    ToolchainError,
    build,
    find_toolchain,
    parse_diagnostics,
    resolve_arch,
)
from overlay.cli import main
from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest
from overlay.workspace import Workspace

_missing = [t for t in ("cmake", "ninja") if shutil.which(t) is None]
if shutil.which("c++") is None and shutil.which("g++") is None:
    _missing.append("c++")
needs_cmake = pytest.mark.skipif(
    bool(_missing),
    reason=f"needs {', '.join(_missing)} (apt-get install cmake ninja-build g++)",
)

HOST = Toolchain("host", "host compilers", cmake_args=["-DMLX_BUILD_GGUF=OFF"])


@pytest.fixture(scope="module")
def mini_world(tmp_path_factory) -> World:
    """Upstream (DATA/upstream) and a fork adding DATA/fork on top."""
    tmp = tmp_path_factory.mktemp("mini")
    up = WorkRepo.init(tmp / "upstream")
    base = up.commit(project_files(DATA / "upstream"), "mini mlx")
    fork = WorkRepo.clone(up, tmp / "fork", "rocm-support")
    fork_commit = fork.commit(project_files(DATA / "fork"), "rocm backend")
    return World(up, fork, base, fork_commit, base, base)


@pytest.fixture
def mini(tmp_path, mini_world):
    """(overlay, store) with an empty series."""
    ov = Overlay(tmp_path / "overlay", mini_world)
    return ov, Store(os.environ["OVERLAY_GIT_DIR"])


def _layers(ov: Overlay, store: Store):
    return compute_layers(
        store, load_manifest(str(ov.root)), str(ov.root), stepwise=True
    )


def _build(ov: Overlay, store: Store, *, on_wait=None, **kw) -> BuildResult:
    options = BuildOptions("cpu", HOST, jobs=2, **kw)
    return build(Workspace.of(str(ov.root), store), options, on_wait=on_wait)


def _add(
    ov: Overlay, store: Store, name: str, edits: dict[str, str], subject: str
) -> None:
    layers = _layers(ov, store)
    data, _tree = make_patch(store, layers.patched, edits, subject=subject)
    ov.add_patch(name, data)


def _break_series(ov: Overlay, store: Store) -> None:
    """0001 renames both helpers (API drift); 0002 writes a broken line in hunk #2."""
    _add(
        ov,
        store,
        "0001-rename-helpers.patch",
        {
            "mlx/util.h": project_text(
                DATA / "upstream",
                "mlx/util.h",
                {4: "inline int up_helper_v2(int x) { return x + 1; }"},
            ),
            "mlx/fork.h": project_text(
                DATA / "fork",
                "mlx/fork.h",
                {4: "inline int fork_helper_v2(int x) { return x * 2; }"},
            ),
        },
        "rocm: rename helpers",
    )
    _add(
        ov,
        store,
        "0002-device.patch",
        {
            "mlx/backend/rocm/device.cpp": project_text(
                DATA / "fork",
                "mlx/backend/rocm/device.cpp",
                {
                    3: "// device: a harmless first hunk",
                    35: "int device_broken() { return no_such_symbol_35; }",
                },
            ),
        },
        "rocm: device change",
    )


@needs_cmake
def test_configure_build_and_nothing_to_do(mini):
    ov, store = mini
    first = _build(ov, store)
    assert first.ok, first.report()
    assert first.configured and first.returncode == 0
    assert os.path.isfile(os.path.join(first.obj, "compile_commands.json"))
    assert os.path.isfile(os.path.join(first.obj, "libmlx.a"))
    log = Path(first.log).read_text()
    assert "Building CXX object" in log

    second = _build(ov, store)
    assert second.ok and not second.configured  # cache and options unchanged
    assert second.no_work, Path(second.log).read_text()
    assert "ninja: no work to do." in Path(second.log).read_text()


@needs_cmake
def test_incremental_export_rebuilds_only_the_patched_unit(mini):
    ov, store = mini
    first = _build(ov, store)
    assert first.ok
    objs = {p: os.stat(p).st_mtime_ns for p in Path(first.obj).rglob("*.o")}
    assert len(objs) == 3
    _add(
        ov,
        store,
        "0001-ops.patch",
        {
            "mlx/ops.cpp": project_text(
                DATA / "upstream", "mlx/ops.cpp", {20: "int ops_more() { return 20; }"}
            )
        },
        "ops",
    )
    second = _build(ov, store)
    assert second.ok, second.report()
    assert second.export.written == ["mlx/ops.cpp"]
    changed = sorted(p.name for p, m in objs.items() if os.stat(p).st_mtime_ns != m)
    assert changed == ["ops.cpp.o"]
    assert _build(ov, store).no_work


@needs_cmake
def test_errors_in_every_unit_are_attributed(mini):
    ov, store = mini
    _break_series(ov, store)
    result = _build(ov, store)
    assert not result.ok and result.returncode != 0
    got = sorted((d.path, d.line, d.attribution()) for d in result.diagnostics)
    assert got == [
        (
            "mlx/backend/rocm/device.cpp",
            10,
            "from the fork",
        ),  # a fork line using the renamed helper
        (
            "mlx/backend/rocm/device.cpp",
            35,
            "patch 0002-device.patch hunk #2",
        ),  # the line the patch wrote
        ("mlx/core.cpp", 5, "from the fork"),
        ("mlx/ops.cpp", 12, "from upstream"),  # an unpatched upstream line (API drift)
    ]
    layers = {d.line: d.origin.layer for d in result.diagnostics}
    assert layers == {10: "fork", 35: "patch", 5: "fork", 12: "upstream"}
    assert (
        len(result.failed_targets) == 3
    )  # -k 0: every failing unit, not only the first
    report = "\n".join(result.report())
    assert (
        "mlx/backend/rocm/device.cpp:35:" in report
        and "[patch 0002-device.patch hunk #2]" in report
    )
    assert "4 error(s) (1 from patches, 2 from the fork, 1 from upstream)" in report


@needs_cmake
def test_cli_build_reports_and_exits_1(mini):
    ov, store = mini
    _break_series(ov, store)
    res = CliRunner().invoke(
        main, ["-C", str(ov.root), "build", "--backend", "cpu", "--jobs", "2"]
    )
    assert res.exit_code == 1, res.output
    assert "mlx/ops.cpp:12:" in res.output and "[from upstream]" in res.output
    assert "mlx/core.cpp:5:" in res.output and "[from the fork]" in res.output
    assert "[patch 0002-device.patch hunk #2]" in res.output
    assert os.path.isfile(ov.root / "build" / "cpu" / "build.log")


@needs_cmake
def test_only_changed_compiles_the_series_units(mini):
    ov, store = mini
    assert _build(ov, store).ok  # a configured tree
    _add(
        ov,
        store,
        "0001-device.patch",
        {
            "mlx/backend/rocm/device.cpp": project_text(
                DATA / "fork",
                "mlx/backend/rocm/device.cpp",
                {30: "int device_broken() { return nope_30; }"},
            )
        },
        "device",
    )
    result = _build(ov, store, only_changed=True)
    assert [u.path for u in result.units] == ["mlx/backend/rocm/device.cpp"]
    assert not result.ok and result.units[0].seconds > 0
    (diag,) = result.diagnostics
    assert diag.attribution() == "patch 0001-device.patch hunk #1"
    assert any("1 translation unit(s)" in line for line in result.report())


@needs_cmake
def test_only_changed_header_uses_dependency_data(mini):
    ov, store = mini
    assert _build(ov, store).ok
    _add(
        ov,
        store,
        "0001-util.patch",
        {
            "mlx/util.h": project_text(
                DATA / "upstream", "mlx/util.h", {1: "// util.h: touched"}
            )
        },
        "util",
    )
    result = _build(ov, store, only_changed=True)
    assert result.ok, result.report()
    assert sorted(u.path for u in result.units) == ["mlx/core.cpp", "mlx/ops.cpp"]


@needs_cmake
def test_reconfigures_when_options_change(mini):
    ov, store = mini
    assert _build(ov, store).configured
    other = Toolchain(
        "host",
        "host compilers",
        cmake_args=["-DMLX_BUILD_GGUF=OFF", "-DOVERLAY_TEST=1"],
    )
    again = build(
        Workspace.of(str(ov.root), store),
        BuildOptions("cpu", other, jobs=2),
        layers=_layers(ov, store),
    )
    assert again.configured and again.ok


def test_parse_diagnostics_maps_paths_and_dedupes(tmp_path):
    src = str(tmp_path / "src")
    text = (
        f"{src}/mlx/a.cpp:3:7: error: use of undeclared identifier 'x'\n"
        f"In file included from {src}/mlx/b.cpp:1:\n"
        f"{src}/mlx/h.h:2:1: error: unknown type name 'foo'\n"
        f"{src}/mlx/h.h:2:1: error: unknown type name 'foo'\n"
        "\x1b[1m/usr/include/x.h:9:2: fatal error: \x1b[0mbad.h: No such file or directory\n"
        "clang: error: unknown argument: '-parallel-jobs=2'\n"
        "../src/mlx/c.cpp:4: error: no col\n"
    )
    diags, other = parse_diagnostics(text, src, str(tmp_path / "obj"))
    assert [(d.path, d.line, d.col, d.in_tree) for d in diags] == [
        ("mlx/a.cpp", 3, 7, True),
        ("mlx/h.h", 2, 1, True),
        ("/usr/include/x.h", 9, 2, False),
        ("mlx/c.cpp", 4, None, True),
    ]
    assert diags[1].count == 2 and diags[2].severity == "fatal error"
    assert other == ["clang: error: unknown argument: '-parallel-jobs=2'"]
    assert diags[2].format().endswith("[outside the tree]")


def test_no_rocm_toolchain_is_a_clear_exit_2(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    monkeypatch.setenv("OVERLAY_TOOLCHAIN_DIR", str(tmp_path / "tc"))
    with pytest.raises(ToolchainError) as exc:
        find_toolchain("rocm", None)
    assert exc.value.exit_code == 2 and exc.value.message.startswith(
        "no ROCm toolchain"
    )
    with pytest.raises(ToolchainError, match="no READY"):
        find_toolchain("rocm", str(tmp_path / "tc"))


def test_resolve_arch_for_a_chroot_without_rocwmma():
    chroot = Toolchain("chroot", "chroot x", default_arch="gfx1030", rocwmma=False)
    archs, note = resolve_arch(None, ["gfx1100", "gfx1151"], chroot)
    assert archs == "gfx1030" and "rocWMMA" in note
    assert resolve_arch("gfx1030,gfx906", ["gfx1100"], chroot) == (
        "gfx1030;gfx906",
        None,
    )
    with pytest.raises(ToolchainError, match="rocWMMA"):
        resolve_arch("gfx1100", [], chroot)
    system = Toolchain("system", "system ROCm")
    assert resolve_arch(None, ["gfx1100", "gfx1151"], system) == (
        "gfx1100;gfx1151",
        None,
    )


def test_chroot_toolchain_wraps_every_command():
    tc = Toolchain(
        "chroot", "chroot /r", root="/r", script="/x/tools/rocm-toolchain.sh"
    )
    assert tc.wrap(["ninja", "-C", "/b/obj"], ["/b"], "/b/obj") == [
        "/x/tools/rocm-toolchain.sh",
        "exec",
        "--root",
        "/r",
        "--bind",
        "/b",
        "--cwd",
        "/b/obj",
        "--",
        "ninja",
        "-C",
        "/b/obj",
    ]


# ------------------------------------------------------ one ninja per build directory


def _hip_patch(ov: Overlay, store: Store, name: str, body: str) -> None:
    """A patch adding (or changing) two .hip files, which the stand-in compiles through
    custom commands into hip_objs/ as the fork does."""
    _add(
        ov,
        store,
        name,
        {
            "mlx/backend/rocm/a.hip": f"int hip_a() {{ return {body}; }}\n",
            "mlx/backend/rocm/b.hip": f"int hip_b() {{ return {body}; }}\n",
        },
        f"hip {name}",
    )


def _ninja_spy(tmp_path: Path, monkeypatch) -> Path:
    """Put a ``ninja`` on PATH that records each build run and whether another one was
    running in the same build directory at the time (``overlap``)."""
    real = shutil.which("ninja")
    bindir = tmp_path / "spy-bin"
    bindir.mkdir()
    record = tmp_path / "ninja-runs"
    record.write_text("")
    spy = bindir / "ninja"
    spy.write_text(f"""#!/bin/sh
case " $* " in *" -t "*|*" -n "*) exec {real} "$@";; esac
mkdir {tmp_path}/ninja-running 2>/dev/null || echo overlap >> {record}
echo "$*" >> {record}
sleep 1
{real} "$@"; rc=$?
rmdir {tmp_path}/ninja-running 2>/dev/null
exit $rc
""")
    spy.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return record


@needs_cmake
def test_only_changed_builds_every_hip_object_in_one_ninja(mini, tmp_path, monkeypatch):
    ov, store = mini
    _hip_patch(ov, store, "0001-hip.patch", "1")
    first = _build(ov, store)
    assert first.ok, first.report()
    assert sorted(p.name for p in Path(first.obj, "hip_objs").glob("*.o")) == [
        "a.o",
        "b.o",
    ]
    record = _ninja_spy(tmp_path, monkeypatch)
    _hip_patch(ov, store, "0002-hip-edit.patch", "2")
    result = _build(ov, store, only_changed=True)
    assert result.ok, result.report()
    assert sorted((u.path, u.kind, u.ok) for u in result.units) == [
        ("mlx/backend/rocm/a.hip", "hip", True),
        ("mlx/backend/rocm/b.hip", "hip", True),
    ]
    runs = record.read_text().splitlines()
    assert "overlap" not in runs, runs
    assert len(runs) == 1 and runs[0].endswith("hip_objs/a.o hip_objs/b.o"), runs


@needs_cmake
def test_a_failing_hip_object_of_only_changed_is_the_failed_unit(mini):
    ov, store = mini
    _hip_patch(ov, store, "0001-hip.patch", "1")
    assert _build(ov, store).ok
    _add(
        ov,
        store,
        "0002-hip-break.patch",
        {"mlx/backend/rocm/b.hip": "int hip_b() { return nope_b; }\n"},
        "b",
    )
    result = _build(ov, store, only_changed=True)
    assert not result.ok
    assert {u.path: u.ok for u in result.units} == {
        "mlx/backend/rocm/a.hip": True,
        "mlx/backend/rocm/b.hip": False,
    }
    (diag,) = result.diagnostics
    assert (diag.path, diag.line, diag.attribution()) == (
        "mlx/backend/rocm/b.hip",
        1,
        "patch 0002-hip-break.patch hunk #1",
    )


@needs_cmake
def test_a_second_build_waits_for_the_build_directory(mini):
    ov, store = mini
    backend_dir = ov.root / "build" / "cpu"
    backend_dir.mkdir(parents=True)
    holder = os.open(backend_dir / BUILD_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another overlay build holds the directory
    waited = threading.Event()
    out: dict = {}
    thread = threading.Thread(
        target=lambda: out.update(
            result=_build(ov, store, on_wait=lambda pid: waited.set())
        )
    )
    thread.start()
    try:
        assert waited.wait(60), "the build did not wait for the lock"
        time.sleep(0.5)
        assert (
            thread.is_alive() and not (backend_dir / "build.log").exists()
        )  # nothing ran meanwhile
    finally:
        os.close(holder)
        thread.join(300)
    assert out["result"].ok, out["result"].report()


# ------------------------------------------------------------------ --check

FORK_H_DEVICE = (
    "// fork.h: the fork's helpers\n#pragma once\n\ninline int fork_helper(int x) {{ return x * 2; }}\n"
    "struct Device {{ int run(int a{extra}); }};\n"
)


def _device_def_series(ov: Overlay, store: Store) -> None:
    """0001 declares Device::run in fork.h and defines it at device.cpp:35; 0002 gives the
    declaration a new parameter (as an upstream API change does), so the definition no
    longer matches any declaration."""
    _add(
        ov,
        store,
        "0001-device-run.patch",
        {
            "mlx/fork.h": FORK_H_DEVICE.format(extra=""),
            "mlx/backend/rocm/device.cpp": project_text(
                DATA / "fork",
                "mlx/backend/rocm/device.cpp",
                {35: "int Device::run(int a) { return a; }"},
            ),
        },
        "rocm: Device::run",
    )
    _add(
        ov,
        store,
        "0002-run-fused.patch",
        {"mlx/fork.h": FORK_H_DEVICE.format(extra=", bool fused")},
        "rocm: Device::run takes fused",
    )


def _objects(obj: str) -> list[str]:
    """Object files a compile would have written (CMake's own compiler probes aside)."""
    return sorted(
        str(p.relative_to(obj))
        for p in Path(obj).rglob("*.o")
        if "CompilerId" not in str(p) and "CMakeScratch" not in str(p)
    )


@needs_cmake
def test_check_passes_a_clean_tree_without_writing_objects(mini):
    ov, store = mini
    _hip_patch(ov, store, "0001-hip.patch", "1")
    result = _build(ov, store, check=True)
    assert result.ok, result.report()
    assert result.mode == "check" and not result.no_work
    assert sorted((u.path, u.kind, u.how) for u in result.units) == [
        ("mlx/backend/rocm/a.hip", "hip", "-fsyntax-only"),
        ("mlx/backend/rocm/b.hip", "hip", "-fsyntax-only"),
        ("mlx/backend/rocm/device.cpp", "cpp", "-fsyntax-only"),
        ("mlx/core.cpp", "cpp", "-fsyntax-only"),
        ("mlx/ops.cpp", "cpp", "-fsyntax-only"),
    ]
    assert _objects(result.obj) == []  # no object, no HIP object, no archive
    assert not os.path.exists(os.path.join(result.obj, "libmlx.a"))
    # the symbols of each unit (GCC: an LTO object, no code generated) lie apart from
    # the build's objects, and the front end's link check read them all
    log = Path(result.log).read_text()
    assert log.count("-fno-fat-lto-objects") >= 5
    symbols = Path(result.obj).parent / "check-symbols"
    assert sorted(str(p.relative_to(symbols)) for p in symbols.rglob("*.o")) == [
        "mlx/backend/rocm/a.hip.o",
        "mlx/backend/rocm/b.hip.o",
        "mlx/backend/rocm/device.cpp.o",
        "mlx/core.cpp.o",
        "mlx/ops.cpp.o",
    ]
    assert result.link is not None and result.link.front_end
    report = result.report()
    assert any(
        "check (front end only): 5 translation unit(s) (3 C++, 2 HIP)" in line
        for line in report
    )
    assert any(
        line.startswith(
            "link check (front end): 0 undefined mlx::core symbol(s) over 5 unit(s)"
        )
        for line in report
    ), report

    # without the link check, the units run -fsyntax-only and write nothing at all
    result = _build(ov, store, check=True, link=False)
    assert result.ok and result.link is None
    log = Path(result.log).read_text()
    assert (
        log.count("-fsyntax-only") >= 5
        and " -o " not in log.split("# configure")[-1].split("-G Ninja")[-1]
    )


@needs_cmake
def test_check_finds_a_definition_that_no_longer_matches_its_declaration(mini):
    from overlay.drift import log_errors

    ov, store = mini
    _device_def_series(ov, store)
    result = _build(ov, store, check=True)
    assert not result.ok
    assert {u.path: u.ok for u in result.units} == {
        "mlx/backend/rocm/device.cpp": False,
        "mlx/core.cpp": True,
        "mlx/ops.cpp": True,
    }
    (diag,) = [d for d in result.diagnostics if "no declaration matches" in d.message]
    assert (diag.path, diag.line) == ("mlx/backend/rocm/device.cpp", 35)
    assert (
        diag.attribution() == "patch 0001-device-run.patch hunk #1"
    )  # the line that wrote the definition
    assert _objects(result.obj) == []
    report = "\n".join(result.report())
    assert "mlx/backend/rocm/device.cpp:35:" in report and "cpu check failed:" in report
    # the log reads as a build log for `overlay drift --log`
    drift = log_errors(Path(result.log).read_text(), strip_prefixes=[result.src])
    assert [
        (d.path, d.line) for d in drift if "no declaration matches" in d.message
    ] == [("mlx/backend/rocm/device.cpp", 35)]


@needs_cmake
def test_check_runs_hip_custom_commands_syntax_only(mini):
    ov, store = mini
    _hip_patch(ov, store, "0001-hip.patch", "1")
    _add(
        ov,
        store,
        "0002-hip-break.patch",
        {"mlx/backend/rocm/b.hip": "int hip_b() { return nope_b; }\n"},
        "b",
    )
    result = _build(ov, store, check=True)
    assert not result.ok
    assert [u.path for u in result.units if not u.ok] == ["mlx/backend/rocm/b.hip"]
    (diag,) = result.diagnostics
    assert (diag.path, diag.line, diag.attribution()) == (
        "mlx/backend/rocm/b.hip",
        1,
        "patch 0002-hip-break.patch hunk #1",
    )
    assert _objects(result.obj) == []
    assert not Path(
        result.obj, "CMakeFiles", "d"
    ).exists()  # no depfile step ran either


@needs_cmake
@pytest.mark.parametrize("mode", [["--check"], []], ids=["check", "full"])
@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [
        (signal.SIGTERM, 143, "overlay: terminated"),
        (signal.SIGHUP, 129, "overlay: terminated"),  # its terminal closed
        (signal.SIGINT, 130, "overlay: interrupted"),
    ],
)
def test_a_signal_to_overlays_pid_stops_the_build_and_its_compilers(
    mini, tmp_path, signum, code, line, mode
):
    # `kill PID` (a CI runner's cancel) reaches overlay alone: before, SIGTERM ended it
    # at once and SIGINT waited for the running units (--check) or went unseen until
    # ninja ended (a whole build), and the compilers went on either way.
    ov, store = mini
    _hip_patch(ov, store, "0001-hip.patch", "1")
    started = tmp_path / "compiling"
    cxx = tmp_path / "slow-c++"
    real = shutil.which("c++") or shutil.which("g++")
    cxx.write_text(
        "#!/bin/sh\n"  # the tree's units sleep a minute; CMake's probes compile
        f'case "$*" in */src/mlx/*) echo $$ >> "{started}"; exec sleep 60;; esac\n'
        f'exec {real} "$@"\n'
    )
    cxx.chmod(0o755)
    proc = subprocess.Popen(
        [sys.executable, "-m", "overlay", "-C", str(ov.root), "build"]
        + ["--backend", "cpu", *mode, "-j", "2", "--cache", "none"],
        env={**os.environ, "CXX": str(cxx)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,  # not ignored, whatever this session inherited
    )
    deadline = time.monotonic() + 120
    while not (started.exists() and started.read_text()) and proc.poll() is None:
        assert time.monotonic() < deadline, "no unit started"
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()
    os.kill(proc.pid, signum)
    _out, err = proc.communicate(timeout=30)  # not the minute a unit sleeps
    assert proc.returncode == code, err
    assert err.splitlines()[-1] == line
    # Each compiler was stopped with overlay: gone, or a zombie of a shell the signal
    # also ended, waiting for init to reap it (given a moment: the signal reached the
    # compiler and its shell at once, and the shell may have ended first).
    pids = [int(pid) for pid in started.read_text().split()]
    assert pids and all(gone(pid) for pid in pids), pids


def test_syntax_only_commands_drop_the_object_and_the_depfile():
    from overlay.build.check import _syntax_only_shell, syntax_only_argv

    assert syntax_only_argv(
        ["c++", "-DX", "-MD", "-MT", "o.o", "-MF", "o.o.d", "-o", "o.o", "-c", "a.cpp"]
    ) == ["c++", "-DX", "a.cpp", "-fsyntax-only"]
    assert syntax_only_argv(
        ["hipcc", "-MFx.d", "--offload-arch=gfx1030", "-fsyntax-only", "b.hip"]
    ) == ["hipcc", "--offload-arch=gfx1030", "b.hip", "-fsyntax-only"]
    cmd = (
        "cd /b/obj && /usr/local/bin/hipcc -x hip -c /s/x.hip -o /b/obj/hip_objs/x.o -fPIC -MD -MF "
        "/b/obj/hip_objs/x.o.d --offload-arch=gfx1030 '-DNAME=a b' && /usr/bin/cmake -E "
        "cmake_transform_depfile Ninja gccdepfile /s /s /b/obj /b/obj /b/obj/hip_objs/x.o.d /b/obj/CMakeFiles/d/1.d"
    )
    assert _syntax_only_shell(cmd) == (
        "cd /b/obj && /usr/local/bin/hipcc -x hip /s/x.hip -fPIC "
        "--offload-arch=gfx1030 '-DNAME=a b' -fsyntax-only"
    )


@needs_cmake
def test_check_after_a_full_build_of_the_same_tree_runs_nothing(mini):
    ov, store = mini
    assert _build(ov, store).ok
    result = _build(ov, store, check=True)
    assert result.ok and result.no_work and result.units == []
    assert any("nothing to check again" in line for line in result.report())


@needs_cmake
def test_check_says_which_unit_needs_a_generated_header(mini):
    ov, store = mini
    cmake = (DATA / "upstream" / "CMakeLists.txt").read_text() + (
        "add_custom_command(OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/gen/version.h\n"
        '  COMMAND ${CMAKE_COMMAND} -E echo "#define MLX_GEN 1" > ${CMAKE_CURRENT_BINARY_DIR}/gen/version.h)\n'
        "add_custom_target(mlx_gen DEPENDS ${CMAKE_CURRENT_BINARY_DIR}/gen/version.h)\n"
        "add_dependencies(mlx mlx_gen)\n"
        "target_include_directories(mlx PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/gen)\n"
    )
    _add(
        ov,
        store,
        "0001-generated.patch",
        {
            "CMakeLists.txt": cmake,
            "mlx/ops.cpp": project_text(
                DATA / "upstream", "mlx/ops.cpp", {1: '#include "version.h"'}
            ),
        },
        "gen",
    )
    result = _build(ov, store, check=True)
    assert result.ok, result.report()
    assert sorted(u.path for u in result.units) == [
        "mlx/backend/rocm/device.cpp",
        "mlx/core.cpp",
    ]
    ((path, why),) = result.skipped_units
    assert (
        path == "mlx/ops.cpp"
        and "version.h" in why
        and "`ninja gen/version.h` makes it" in why
    )
    assert not Path(result.obj, "gen", "version.h").exists()  # nothing was built for it


@needs_cmake
def test_check_reports_a_generated_source_by_its_repository_path(mini, tmp_path):
    """A source the build generates lies in the build directory; the
    text and the Markdown report name it from the repository root, not by the
    machine's absolute path."""
    ov, store = mini
    cmake = (DATA / "upstream" / "CMakeLists.txt").read_text() + (
        "add_custom_command(OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/gen/extra.cpp\n"
        "  COMMAND ${CMAKE_COMMAND} -E echo int_extra > ${CMAKE_CURRENT_BINARY_DIR}/gen/extra.cpp)\n"
        "target_sources(mlx PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/gen/extra.cpp)\n"
    )
    _add(ov, store, "0001-generated.patch", {"CMakeLists.txt": cmake}, "gen")
    result = _build(ov, store, check=True)
    assert result.ok, result.report()
    ((path, why),) = result.skipped_units
    assert path == "build/cpu/obj/gen/extra.cpp" and "`ninja gen/extra.cpp`" in why
    md = tmp_path / "ci.md"
    res = CliRunner().invoke(
        main,
        ["-C", str(ov.root), "ci", "--backend", "cpu", "--only", "check"]
        + ["--markdown", str(md)],
    )
    assert res.exit_code == 0, res.output
    text = md.read_text()
    assert "Not checked:\n- build/cpu/obj/gen/extra.cpp: generated by the build" in text
    assert str(ov.root) not in text and os.path.realpath(ov.root) not in text


@needs_cmake
def test_cli_check_reports_and_exits_1(mini):
    ov, store = mini
    _device_def_series(ov, store)
    res = CliRunner().invoke(
        main, ["-C", str(ov.root), "build", "--backend", "cpu", "--check", "-j", "2"]
    )
    assert res.exit_code == 1, res.output
    assert (
        "mlx/backend/rocm/device.cpp:35:" in res.output
        and "[patch 0001-device-run.patch hunk #1]" in res.output
    )
    assert (
        "cpu check failed: 1 error(s) (1 from patches, 0 from the fork, 0 from upstream)"
        in res.output
    )
    res = CliRunner().invoke(
        main,
        ["-C", str(ov.root), "build", "--backend", "cpu", "--check", "--only-changed"],
    )
    assert res.exit_code == 2 and "cannot be combined" in res.output


# ------------------------------------------------- a failing configure, build and ci

FIND_MISSING = """find_library(OVERLAY_MISSING_LIBRARY NAMES overlay_no_such_library_anywhere)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OverlayMissing REQUIRED_VARS OVERLAY_MISSING_LIBRARY)
"""


def _missing_package_series(ov: Overlay, store: Store) -> None:
    """A patch whose CMakeLists.txt asks for a package the machine lacks, through a
    find module, as MLX asks for BLAS (``Could NOT find BLAS``)."""
    cmake = (DATA / "upstream" / "CMakeLists.txt").read_text() + (
        "list(APPEND CMAKE_MODULE_PATH ${CMAKE_CURRENT_SOURCE_DIR}/cmake)\n"
        "find_package(OverlayMissing REQUIRED)\n"
    )
    _add(
        ov,
        store,
        "0001-needs-a-package.patch",
        {"CMakeLists.txt": cmake, "cmake/FindOverlayMissing.cmake": FIND_MISSING},
        "build: needs a package",
    )


#: find_package is the second line appended to the stand-in's CMakeLists.txt.
CAUSE = (
    "Could NOT find OverlayMissing (missing: OVERLAY_MISSING_LIBRARY) (at CMakeLists.txt:"
    f"{(DATA / 'upstream' / 'CMakeLists.txt').read_text().count(chr(10)) + 2} (find_package))"
)


@needs_cmake
def test_cli_build_names_the_cause_of_a_failed_configure(mini):
    ov, store = mini
    _missing_package_series(ov, store)
    res = CliRunner().invoke(main, ["-C", str(ov.root), "build", "--backend", "cpu"])
    assert res.exit_code == 1, res.output
    assert f"overlay: CMake configure failed (exit 1): {CAUSE}" in res.output
    assert "FindPackageHandleStandardArgs" not in res.output.splitlines()[0]
    assert "Traceback" not in res.output


@needs_cmake
def test_ci_with_a_failing_configure_fails_the_stage_and_writes_every_report(
    mini, tmp_path
):
    import json
    import xml.etree.ElementTree as ET

    ov, store = mini
    _missing_package_series(ov, store)
    out = tmp_path / "reports"
    out.mkdir()
    reports = [
        "--junit",
        str(out / "ci.xml"),
        "--json",
        str(out / "ci.json"),
        "--markdown",
        str(out / "ci.md"),
    ]
    res = CliRunner().invoke(
        main,
        ["-C", str(ov.root), "ci", "--backend", "cpu", "--only", "build", *reports],
    )
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    assert f"build   FAILED   CMake configure failed (exit 1): {CAUSE}" in res.output
    stages = {s["name"]: s for s in json.loads((out / "ci.json").read_text())["stages"]}
    assert stages["build"]["status"] == "failed" and CAUSE in stages["build"]["reason"]
    assert (
        stages["build"]["data"]["backend"] == "cpu"
        and stages["build"]["data"]["log"] == "build/cpu/build.log"
    )
    (case,) = [
        c
        for c in ET.parse(out / "ci.xml").getroot().iter("testcase")
        if c.get("name") == "build cpu"
    ]
    assert CAUSE in case.find("failure").get("message")
    md = (out / "ci.md").read_text()
    assert (
        "### Build" in md
        and f"First error: `CMake configure failed (exit 1): {CAUSE}`" in md
    )

    # with the check stage first, the check fails the same way and the doomed build is not started
    res = CliRunner().invoke(
        main,
        [
            "-C",
            str(ov.root),
            "ci",
            "--backend",
            "cpu",
            "--only",
            "build,check",
            *reports,
        ],
    )
    assert res.exit_code == 1, res.output
    assert f"check   FAILED   CMake configure failed (exit 1): {CAUSE}" in res.output
    assert "build   SKIPPED  the check stage failed" in res.output
    assert "### Check" in (out / "ci.md").read_text()


@needs_cmake
def test_ci_check_stage_names_the_first_error_with_its_attribution(mini):
    ov, store = mini
    _device_def_series(ov, store)
    res = CliRunner().invoke(
        main, ["-C", str(ov.root), "ci", "--backend", "cpu", "--only", "check,build"]
    )
    assert res.exit_code == 1, res.output
    (line,) = [line for line in res.output.splitlines() if line.startswith("check ")]
    assert "1 error(s); first: mlx/backend/rocm/device.cpp:35:" in line
    assert line.endswith("[patch 0001-device-run.patch hunk #1]")
    assert "build   SKIPPED  the check stage failed" in res.output


def test_builds_callers_pass_the_workspace_and_one_options_value(clean, monkeypatch):
    """``overlay build`` and the gate's check stage call ``build(ws, options)``: one
    :class:`BuildOptions` value, the callbacks and the layers beside it."""
    from overlay import build as _build
    from overlay.errors import OverlayError

    seen = []

    def recorder(*args, **kwargs):
        seen.append((args, sorted(kwargs)))
        raise OverlayError("stopped by the test", exit_code=1)

    monkeypatch.setattr(_build, "find_toolchain", lambda *a, **k: HOST)
    monkeypatch.setattr(_build, "build", recorder)
    root = str(clean.root)
    argv = ["build", "--backend", "cpu", "-j", "3", "--check", "--cache", "none"]
    built = CliRunner().invoke(main, ["-C", root, *argv, "--no-link-check"])
    assert built.exit_code == 1 and "stopped by the test" in built.output
    gate = CliRunner().invoke(
        main, ["-C", root, "ci", "--only", "check", "--backend", "cpu"]
    )
    assert "check   FAILED   stopped by the test" in gate.output
    (ws, options), keywords = seen[0]
    assert isinstance(ws, Workspace) and ws.root == root
    assert options == BuildOptions(
        "cpu", HOST, jobs=3, check=True, cache="none", link=False
    )
    assert keywords == ["layers", "on_wait", "progress"]
    (ws, options), keywords = seen[1]
    assert isinstance(ws, Workspace) and options == BuildOptions(
        "cpu", HOST, check=True
    )
    assert keywords == ["layers", "progress"]


@needs_cmake
def test_ci_check_names_the_upstream_commit_behind_the_drift(tmp_path):
    """A bump whose drift is not fixed fails ``ci --require check``, naming the upstream commit."""
    up = WorkRepo.init(tmp_path / "upstream")
    base = up.commit(project_files(DATA / "upstream"), "mini mlx")
    fork = WorkRepo.clone(up, tmp_path / "fork", "rocm-support")
    fork_commit = fork.commit(project_files(DATA / "fork"), "rocm backend")
    bump = up.commit(
        {
            "mlx/util.h": project_text(
                DATA / "upstream",
                "mlx/util.h",
                {4: "inline int up_helper(int x, int y) { return x + y; }"},
            ),
            "mlx/ops.cpp": project_text(
                DATA / "upstream",
                "mlx/ops.cpp",
                {12: "int ops_value() { return up_helper(12, 1); }"},
            ),
        },
        "Give up_helper a second operand (#4300)",
    )
    ov = stand_in_overlay(
        tmp_path / "overlay", World(up, fork, base, fork_commit, base, base)
    )
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
