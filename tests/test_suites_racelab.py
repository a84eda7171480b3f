"""The race lab (overlay/suites/racelab/, patches-rocm/suites/racelab/).

The tests that compile need the ROCm toolchain (a provisioned
``tools/rocm-toolchain.sh`` root and root privileges, or a system ROCm) and are
skipped without it; the ones that build the MLX file under test also need the
real mirrors (``OVERLAY_UPSTREAM_URL``, ``OVERLAY_FORK_URL``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from cifixtures import run_verify_rocm, verify_rocm_stand_ins

from overlay.suites import racelab

ROOT = Path(__file__).resolve().parent.parent
#: Read before conftest's isolation replaces HOME and clears OVERLAY_*.
REAL_TOOLCHAIN = os.environ.get("OVERLAY_TOOLCHAIN_DIR") or os.path.join(
    os.path.expanduser("~"), ".cache", "overlay", "rocm-toolchain"
)


@pytest.fixture
def lab_compiler(monkeypatch):
    """The real lab compiler, or skip (no toolchain here)."""
    monkeypatch.setenv("OVERLAY_TOOLCHAIN_DIR", REAL_TOOLCHAIN)
    try:
        return racelab.find_lab_compiler(str(ROOT))
    except racelab.LabError as exc:
        pytest.skip(f"needs the ROCm toolchain for the race lab: {exc.message}")


def run(program, *args, env=None, timeout=300):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run(
        [program, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full,
        stdin=subprocess.DEVNULL,
    )


def report_kinds(stderr: str) -> set[str]:
    kinds = set()
    for line in stderr.splitlines():
        if line.startswith("overlay-suite: report "):
            kinds.add(line.split(" ")[2].rstrip(":"))
        elif "Sanitizer: " in line and ("WARNING:" in line or "ERROR:" in line):
            kinds.add(
                line.split("Sanitizer: ", 1)[1].split(" (")[0].split(" on ")[0].strip()
            )
    return kinds


# --------------------------------------------------------------------------- no toolchain needed


def test_no_toolchain_is_a_lab_error_with_exit_2(monkeypatch, tmp_path):
    monkeypatch.setenv("OVERLAY_TOOLCHAIN_DIR", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("ROCM_PATH", raising=False)
    monkeypatch.setattr("overlay.build.toolchain._system_hipcc", lambda: None)
    with pytest.raises(racelab.LabError) as err:
        racelab.find_lab_compiler(str(ROOT))
    assert err.value.exit_code == 2 and "no ROCm toolchain" in err.value.message


def test_models_override_replaces_the_probe():
    assert racelab.unavailable_reason(environ={racelab.MODELS_ENV: "race-lab"}) is None
    reason = racelab.unavailable_reason(environ={racelab.MODELS_ENV: "none"})
    assert reason == "OVERLAY_SUITE_MODELS='none'"


def test_chroot_launcher_forwards_only_the_listed_variables(tmp_path):
    script = tmp_path / "fake-toolchain.sh"
    script.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    script.chmod(0o755)
    tc = SimpleNamespace(kind="chroot", root="/tc root", script=str(script))
    compiler = racelab.LabCompiler(tc, "/usr/bin/clang++-22", [], ["format"], "test")
    launcher = tmp_path / "child_tsan"
    launcher.write_text(compiler.launcher("/out dir/bin/child_tsan", ["/out dir"]))
    launcher.chmod(0o755)
    got = run(
        str(launcher),
        "a b",
        env={
            "OVERLAY_STUB_WORKSPACE": "65536",
            "TSAN_OPTIONS": "x=1 y=2",
            "SECRET_TOKEN": "no",
        },
    ).stdout.splitlines()
    assert got[:5] == ["exec", "--root", "/tc root", "--bind", "/out dir"]
    assert (
        "--env" in got
        and "OVERLAY_STUB_WORKSPACE=65536" in got
        and "TSAN_OPTIONS=x=1 y=2" in got
    )
    assert not any(a.startswith("SECRET_TOKEN") for a in got)
    assert got[-3:] == ["--", "/out dir/bin/child_tsan", "a b"]


def test_system_launcher_execs_the_binary(tmp_path):
    compiler = racelab.LabCompiler(
        SimpleNamespace(kind="system"), "clang++", [], [], "test"
    )
    assert compiler.launcher("/x/bin/c_asan", []).endswith('exec /x/bin/c_asan "$@"\n')


def test_a_missing_tree_source_is_named(tmp_path):
    compiler = racelab.LabCompiler(
        SimpleNamespace(kind="system", wrap=None), "clang++", [], [], "test"
    )
    child = racelab.LabChild(
        "x", ("racelab_selftest.cpp",), ("mlx/backend/rocm/gemms/hipblaslt_gemm.cpp",)
    )
    with pytest.raises(
        racelab.LabError, match="hipblaslt_gemm.cpp is not in the exported layer"
    ) as err:
        racelab.build_tree(
            str(ROOT),
            str(tmp_path / "src"),
            str(tmp_path / "out"),
            tree="0" * 40,
            label="t",
            compiler=compiler,
            children=[child],
        )
    assert err.value.exit_code == 1


def test_a_layer_builds_only_the_children_whose_file_it_has(tmp_path):
    """The fork's layer has no pinned arena: its lab (``suite ab --without-layer
    forked``) builds the other children instead of failing on pinned.cu."""
    from overlay.suites.racelab.builder import children_in

    for rel in (
        "mlx/backend/rocm/gemms/hipblaslt_gemm.cpp",
        "mlx/backend/rocm/device.cpp",
        "mlx/backend/rocm/worker.cpp",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("// code under test\n")
    names = [c.name for c in children_in(str(tmp_path))]
    assert names == ["racelab_selftest", "hipblaslt_race", "rocblas_race"]
    (tmp_path / "mlx/backend/rocm/pinned.cu").write_text("// the arena\n")
    assert [c.name for c in children_in(str(tmp_path))] == [
        c.name for c in racelab.CHILDREN
    ]


def test_a_second_layer_compiles_only_its_own_tree_objects(tmp_path):
    """The model's objects (lab sources that do not include the tree) are shared
    between the builds of two layers: the second compiles only what includes its tree.
    A stand-in compiler writes each -o file."""
    cxx = tmp_path / "cxx"
    cxx.write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && echo "$*" > "$2"; shift; done\n'
    )
    cxx.chmod(0o755)
    compiler = racelab.LabCompiler(
        SimpleNamespace(kind="system", wrap=lambda argv, binds, cwd=None: list(argv)),
        str(cxx),
        [],
        [],
        "stand-in",
    )
    for layer in ("patched", "forked"):
        for child in racelab.CHILDREN:
            for src in child.tree_sources:
                path = tmp_path / layer / "src" / src
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(f"// {layer}\n")

    def build(layer: str, tree: str) -> racelab.LabBuild:
        return racelab.build_tree(
            str(ROOT),
            str(tmp_path / layer / "src"),
            str(tmp_path / layer),
            tree=tree,
            label=layer,
            compiler=compiler,
        )

    first = build("patched", "1" * 40)
    assert first.compiled == 32
    second = build("forked", "2" * 40)
    model = {
        s
        for c in racelab.CHILDREN
        for s in c.lab_sources
        if b'"mlx/' not in (ROOT / "patches-rocm/suites/racelab" / s).read_bytes()
    }
    assert model >= {"hip_stub.cpp", "gemm_model.cpp", "rocblas_stub.cpp"}
    assert second.compiled == 32 - 2 * len(model) == 20
    assert len(list((tmp_path / "model-objects" / "obj-tsan").iterdir())) == len(model)
    assert build("forked", "2" * 40).compiled == 0
    assert len(second.programs) == 10


# --------------------------------------------------------------------------- the model, compiled


@pytest.fixture(scope="module")
def selftest(tmp_path_factory):
    """racelab_selftest built with both sanitizers (no MLX tree needed)."""
    saved = os.environ.get("OVERLAY_TOOLCHAIN_DIR")
    os.environ["OVERLAY_TOOLCHAIN_DIR"] = REAL_TOOLCHAIN
    try:
        compiler = racelab.find_lab_compiler(str(ROOT))
    except racelab.LabError as exc:
        pytest.skip(f"needs the ROCm toolchain for the race lab: {exc.message}")
    finally:
        if saved is None:
            os.environ.pop("OVERLAY_TOOLCHAIN_DIR", None)
        else:
            os.environ["OVERLAY_TOOLCHAIN_DIR"] = saved
    out = tmp_path_factory.mktemp("lab")
    (out / "src").mkdir()
    built = racelab.build_tree(
        str(ROOT),
        str(out / "src"),
        str(out),
        tree="0" * 40,
        label="selftest",
        compiler=compiler,
        children=[racelab.CHILDREN[0]],
    )
    built.compiler = compiler
    return built


@pytest.mark.parametrize("san", ["tsan", "asan"])
def test_model_promises_hold(selftest, san):
    done = run(os.path.join(selftest.out_dir, f"racelab_selftest_{san}"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "overlay-suite: done"


@pytest.mark.parametrize("san", ["tsan", "asan"])
@pytest.mark.parametrize(
    "mode,expected",
    [
        ("shared-workspace", {"exact-output-mismatch", "data race"}),
        ("destroy-in-use", {"descriptor-destroyed-in-use"}),
        ("use-after-free", {"device-use-after-free"}),
        ("capture-malloc", {"capture-violation"}),
        ("capture-sync", {"capture-violation"}),
    ],
)
def test_model_detects(selftest, san, mode, expected):
    done = run(os.path.join(selftest.out_dir, f"racelab_selftest_{san}"), mode)
    assert done.returncode not in (0, 3), (
        done.stdout + done.stderr
    )  # 3: the model missed it
    assert report_kinds(done.stderr) & expected, done.stderr


def test_second_build_compiles_nothing(selftest):
    again = racelab.build_tree(
        str(ROOT),
        os.path.join(selftest.out_dir, "src"),
        selftest.out_dir,
        tree="0" * 40,
        label="selftest",
        children=[racelab.CHILDREN[0]],
        compiler=selftest.compiler,
    )
    assert again.compiled == 0 and sorted(again.programs) == sorted(selftest.programs)


# --------------------------------------------------------------------------- the files under test


@pytest.fixture(scope="module")
def layer_builds(tmp_path_factory):
    """The lab's children (ThreadSanitizer) from the patched and the forked layer of the real mirrors."""
    from conftest import REAL_MIRRORS

    from overlay.git.store import Store
    from overlay.workspace import Workspace

    if len(REAL_MIRRORS) != 2:
        pytest.skip(
            "set OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL to the real mirrors to run this"
        )
    saved = {k: os.environ.get(k) for k in (*REAL_MIRRORS, "OVERLAY_TOOLCHAIN_DIR")}
    os.environ.update(REAL_MIRRORS, OVERLAY_TOOLCHAIN_DIR=REAL_TOOLCHAIN)
    try:
        compiler = racelab.find_lab_compiler(str(ROOT))
        base = tmp_path_factory.mktemp("layers")
        store = Store(str(base / "store.git"))
        return {
            layer: racelab.build_layer(
                Workspace.of(str(ROOT), store),
                layer,
                out_dir=str(base / layer),
                compiler=compiler,
                sanitizers=("tsan",),
            ).out_dir
            for layer in ("patched", "forked")
        }
    except racelab.LabError as exc:
        pytest.skip(f"needs the ROCm toolchain for the race lab: {exc.message}")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def outcome(out_dir, program, env):
    done = run(os.path.join(out_dir, program), env=env)
    return done.returncode, report_kinds(done.stderr), done.stdout, done.stderr


def test_hipblaslt_file_forked_fails_patched_passes(layer_builds):
    """Seed 000's child on the model, once per layer: the fork's file races, the fix's does not."""
    env = {"OVERLAY_STUB_WORKSPACE": "65536", "OVERLAY_STUB_FAIL_ONCE_AT": "10"}
    rc, kinds, stdout, stderr = outcome(
        layer_builds["patched"], "hipblaslt_race_tsan", env
    )
    assert rc == 0 and not kinds, stdout + stderr
    assert stdout.splitlines()[-1] == "overlay-suite: done"
    assert stderr.count("[hipBLASLt caps] device 0 (host-model)") == 1
    rc, kinds, stdout, stderr = outcome(
        layer_builds["forked"], "hipblaslt_race_tsan", env
    )
    assert rc != 0 and "data race" in kinds, stderr[-4000:]
    assert "overlay-suite: done" not in stdout


def test_rocblas_device_forked_fails_patched_passes(layer_builds):
    """Fix 1 on the model: the fork's device.cpp shares and rebinds one handle, the fix's does not."""
    env = {
        "OVERLAY_STUB_ARCH": "gfx1030:host-model",
        "OVERLAY_STUB_ROCBLAS_WORKSPACE": "1048576",
    }
    rc, kinds, stdout, stderr = outcome(
        layer_builds["patched"], "rocblas_race_tsan", env
    )
    assert rc == 0 and not kinds, stdout + stderr
    assert stderr.count("race-lab: rocblas_create_handle on the host model") == 1
    rc, kinds, stdout, stderr = outcome(
        layer_builds["forked"], "rocblas_race_tsan", env
    )
    assert rc != 0 and "data race" in kinds and "exact-output-mismatch" in kinds, (
        stderr[-4000:]
    )


# --------------------------------------------------------------------------- make verify-rocm


@pytest.mark.parametrize(
    "run_out,rc,state",
    [
        (
            "hipblaslt_race_ws_tsan  PASSED   0 of 20 failed\n5 suite(s): 5 passed, 0 failed, 0 skipped; 0 of 83 runs failed",
            0,
            "passed (race lab: a host model of HIP, hipBLASLt and rocBLAS, not a GPU result)",
        ),
        (
            "racelab_model  SKIPPED  needs the race-lab host model's toolchain: no ROCm toolchain\n"
            "1 suite(s): 0 passed, 0 failed, 1 skipped; 0 of 0 runs failed",
            0,
            "skipped (needs the race-lab host model's toolchain: no ROCm toolchain)",
        ),
        (
            "hipblaslt_race_ws_tsan  FAILED   3 of 20 failed\n5 suite(s): 4 passed, 1 failed, 0 skipped; 3 of 83 runs failed",
            1,
            "failed (overlay suite run --host-models exited 1; race lab: a host model of HIP, hipBLASLt and rocBLAS, "
            "not a GPU result)",
        ),
    ],
)
def test_verify_rocm_runs_the_host_models_without_a_gpu(tmp_path, run_out, rc, state):
    """tools/verify-rocm.sh's host-model stage, with a stand-in overlay (no GPU on this machine)."""
    if os.path.exists("/dev/kfd"):
        pytest.skip(
            "an AMD GPU is present: the stage is skipped there unless OVERLAY_HOST_MODELS=1"
        )
    stub, make = verify_rocm_stand_ins(
        tmp_path,
        '#!/bin/sh\ncase "$1" in\n  build) echo "overlay: no ROCm toolchain: none here" >&2; exit 2;;\n'
        '  suite) case "$2" in\n    --help) echo "  build  Build the race lab";;\n'
        f'    run) printf "%s\\n" "{run_out}"; exit {rc};;\n  esac; exit 0;;\nesac\n',
    )
    done = run_verify_rocm(tmp_path, stub, make)
    assert f"verify-rocm: host-model: {state}" in done.stdout, done.stdout + done.stderr
    assert "verify-rocm: suites: skipped (the build stage did not pass)" in done.stdout
    assert done.returncode == (1 if rc else 0)
    if state.startswith("skipped"):
        required = run_verify_rocm(tmp_path, stub, make, OVERLAY_REQUIRE="host-model")
        assert (
            required.returncode == 1
            and "host-model: failed (required, but skipped" in required.stdout
        )


# --------------------------------------------------------------------------- tools/race-lab-tally.py


def test_tally_counts_runs_per_reported_location(tmp_path):
    ab = tmp_path / "x-ab"
    for column, runs in (("with", ["clean"]), ("without", ["init", "init+erase"])):
        (ab / column).mkdir(parents=True)
        for i, what in enumerate(runs, 1):
            lines = []
            if "init" in what:
                lines += [
                    "SUMMARY: ThreadSanitizer: data race /t/src/mlx/backend/rocm/gemms/hipblaslt_gemm.cpp:96:16 "
                    "in mlx::core::rocm::(anonymous namespace)::get_handle(int)"
                ] * 2
            if "erase" in what:
                lines.append(
                    "SUMMARY: ThreadSanitizer: data race /lab/hipblaslt_stub.cpp:188:12 in hipblasStatus_t "
                    "(anonymous namespace)::destroy<(anonymous namespace)::Layout>((anonymous namespace)::"
                    "Layout*, (anonymous namespace)::Kind, char const*)"
                )
            (ab / column / f"run-{i:03d}.err").write_text("\n".join(lines) + "\n")
    (ab / "ab.json").write_text('{"suite": "x"}')
    done = subprocess.run(
        [os.sys.executable, str(ROOT / "tools" / "race-lab-tally.py"), str(ab)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "with fix: 1 runs, 0 location(s)" in done.stdout
    assert "host model, not a GPU result" in done.stdout.splitlines()[0]
    assert (
        "  2 of 2 runs  ThreadSanitizer: data race at hipblaslt_gemm.cpp: mlx::core::rocm::get_handle"
        in done.stdout
    )
    assert (
        "  1 of 2 runs  ThreadSanitizer: data race at hipblaslt_stub.cpp: destroy<Layout>"
        in done.stdout
    )
    bad = subprocess.run(
        [os.sys.executable, str(ROOT / "tools" / "race-lab-tally.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "no ab.json" in bad.stderr
