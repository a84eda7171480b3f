"""`overlay ci` end to end on a fixture overlay: stages, JUnit, JSON, golden Markdown."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from cifixtures import run_verify_rocm, verify_rocm_stand_ins
from click.testing import CliRunner
from gitfixtures import lines, make_patch

from overlay.cli import main
from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records import fixes
from overlay.records.manifest import load_manifest

GOLDEN = Path(__file__).parent / "golden" / "ci_summary.md"

SUITES = """\
[suites.quick]
child = ["{python}", "{child}"]
runs = 3
deadline = 30
backend = "any"
hardware = "none"
proves = 1

[[suites.quick.markers]]
stream = "stdout"
text = "overlay-suite: done"
expect = "exactly 1"

[suites.needs_amd]
child = "absent_child"
backend = "rocm"
hardware = "amd-gpu"
proves = 1
"""


def make_clean_overlay(overlay, world):
    store = Store()
    layers = compute_layers(store, load_manifest(str(overlay.root)), str(overlay.root))
    patch, _ = make_patch(
        store,
        layers.forked,
        {"mlx/backend/rocm/device.cpp": lines("device", change={3: "device 3 locked"})},
        subject="rocm: lock the device",
    )
    overlay.add_patch("0001-lock.patch", patch)
    repo = fixes.fork_repo_from_url(str(world.fork.path))
    (overlay.root / "LOCAL_FIXES.md").write_text(
        f"# Local changes relative to {repo}@{world.fork_commit[:8]}\n\n"
        f"## Retarget onto the MLX pin ({world.base[:8]})\n\n## Fixes to the fork's kernels\n\n"
        "1. **Lock the device.** `mlx/backend/rocm/device.cpp` now locks. "
        "Applies to the fork; kept in mlxcelverse under the 2026-10-06 fork policy, not proposed there.\n\n"
        "## Dropped from the vendored set\n\n- `docs/rocm.md`: docs.\n- `mlx/backend/metal/kernels.cpp`: Metal.\n"
    )
    child = overlay.root / "child.py"
    child.write_text("print('overlay-suite: done')\n")
    (overlay.root / "patches-rocm" / "suites").mkdir()
    (overlay.root / "patches-rocm" / "suites" / "suites.toml").write_text(
        SUITES.format(python=sys.executable, child=child)
    )


def test_ci_end_to_end(overlay, world, tmp_path, monkeypatch):
    make_clean_overlay(overlay, world)
    monkeypatch.setenv("OVERLAY_SUITE_HARDWARE", "none")
    out = tmp_path / "out"
    out.mkdir()
    result = CliRunner().invoke(
        main,
        [
            "-C",
            str(overlay.root),
            "ci",
            "--only",
            "verify",
            "--only",
            "suites",
            "--junit",
            str(out / "ci.xml"),
            "--json",
            str(out / "ci.json"),
            "--markdown",
            str(out / "ci.md"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "verify  PASSED" in result.output
    assert "build   SKIPPED  not requested" in result.output
    assert "suites  PASSED" in result.output

    # JUnit: well-formed, and every count agrees with the children (what pytest and Jenkins read).
    root = ET.parse(out / "ci.xml").getroot()
    assert root.tag == "testsuites"
    total = {"tests": 0, "failures": 0, "skipped": 0}
    for ts in root.findall("testsuite"):
        cases = ts.findall("testcase")
        counts = {
            "tests": len(cases),
            "failures": sum(1 for c in cases if c.find("failure") is not None),
            "skipped": sum(1 for c in cases if c.find("skipped") is not None),
        }
        for key, value in counts.items():
            assert int(ts.get(key)) == value
            total[key] += value
        assert all(c.get("classname") and c.get("name") for c in cases)
    for key, value in total.items():
        assert int(root.get(key)) == value
    assert [ts.get("name") for ts in root.findall("testsuite")] == [
        "verify",
        "check",
        "build",
        "suites",
    ]

    summary = json.loads((out / "ci.json").read_text())
    assert summary["failed"] is False
    assert [s["status"] for s in summary["stages"]] == [
        "passed",
        "skipped",
        "skipped",
        "passed",
    ]
    assert [s["required"] for s in summary["stages"]] == [False] * 4

    md = (out / "ci.md").read_text()
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(md)
    assert md == GOLDEN.read_text()


def test_ci_fails_on_a_verify_error(overlay, world, monkeypatch):
    make_clean_overlay(overlay, world)
    monkeypatch.setenv("OVERLAY_SUITE_HARDWARE", "none")
    overlay.write_series([])  # the patch is now an orphan: SER002
    result = CliRunner().invoke(
        main, ["-C", str(overlay.root), "ci", "--only", "verify"]
    )
    assert result.exit_code == 1 and "verify  FAILED" in result.output


def test_ci_build_stage_skips_without_a_toolchain(
    overlay, world, monkeypatch, tmp_path
):
    make_clean_overlay(overlay, world)
    monkeypatch.setenv("OVERLAY_TOOLCHAIN_DIR", str(tmp_path / "no-toolchain"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    result = CliRunner().invoke(
        main, ["-C", str(overlay.root), "ci", "--only", "build"]
    )
    assert result.exit_code == 0, result.output
    assert "build   SKIPPED" in result.output and "ROCm" in result.output


def _no_toolchain(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("OVERLAY_TOOLCHAIN_DIR", str(tmp_path / "no-toolchain"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")


def test_ci_require_fails_a_stage_this_machine_cannot_run(
    overlay, world, monkeypatch, tmp_path
):
    make_clean_overlay(overlay, world)
    _no_toolchain(monkeypatch, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    result = CliRunner().invoke(
        main,
        [
            "-C",
            str(overlay.root),
            "ci",
            "--only",
            "verify",
            "--require",
            "verify,check",
            "--require",
            "build",
            "--junit",
            str(out / "ci.xml"),
            "--json",
            str(out / "ci.json"),
        ],
    )
    assert result.exit_code == 1, result.output
    assert "verify  PASSED" in result.output
    assert "check   FAILED   required, but skipped: no ROCm toolchain" in result.output
    assert "build   FAILED   required, but skipped: no ROCm toolchain" in result.output
    assert (
        "suites  SKIPPED  not requested" in result.output
        and "overlay ci: FAILED" in result.output
    )
    stages = {s["name"]: s for s in json.loads((out / "ci.json").read_text())["stages"]}
    assert [stages[n]["required"] for n in ("verify", "check", "build", "suites")] == [
        True,
        True,
        True,
        False,
    ]
    root = ET.parse(out / "ci.xml").getroot()
    failures = [
        c.get("name") for c in root.iter("testcase") if c.find("failure") is not None
    ]
    assert failures == ["check", "build"]


def test_ci_require_passes_when_the_required_stages_pass(
    overlay, world, monkeypatch, tmp_path
):
    make_clean_overlay(overlay, world)
    _no_toolchain(monkeypatch, tmp_path)
    monkeypatch.setenv("OVERLAY_SUITE_HARDWARE", "none")
    result = CliRunner().invoke(
        main, ["-C", str(overlay.root), "ci", "--require", "verify,suites"]
    )
    assert result.exit_code == 0, result.output
    assert (
        "check   SKIPPED  no ROCm toolchain" in result.output
    )  # not required: not a failure
    # and the reason names the way out
    assert "tools/rocm-toolchain.sh provision --root" in result.output, result.output
    assert (
        "overlay ci: passed (required: verify, suites; other skipped stages are not failures)"
        in result.output
    )


def test_ci_unknown_stage_is_a_usage_error(overlay, world):
    make_clean_overlay(overlay, world)
    result = CliRunner().invoke(
        main, ["-C", str(overlay.root), "ci", "--require", "verify,bogus"]
    )
    assert result.exit_code == 2
    assert (
        "overlay: invalid value for '--require': unknown stage 'bogus'" in result.output
    )
    assert "Traceback" not in result.output


def test_ci_a_stage_that_raises_is_a_failed_stage_and_reports_are_written(
    overlay, world, monkeypatch, tmp_path
):
    from overlay import ci

    make_clean_overlay(overlay, world)

    def boom(*_a, **_k):
        raise RuntimeError("verify blew up")

    monkeypatch.setattr(ci, "stage_verify", boom)
    out = tmp_path / "out"
    out.mkdir()
    result = CliRunner().invoke(
        main,
        [
            "-C",
            str(overlay.root),
            "ci",
            "--only",
            "verify",
            "--junit",
            str(out / "ci.xml"),
            "--json",
            str(out / "ci.json"),
            "--markdown",
            str(out / "ci.md"),
        ],
    )
    assert result.exit_code == 1, result.output
    assert (
        "verify  FAILED   internal error (RuntimeError: verify blew up)"
        in result.output
    )
    assert json.loads((out / "ci.json").read_text())["stages"][0]["status"] == "failed"
    assert (
        "internal error (RuntimeError: verify blew up)" in (out / "ci.md").read_text()
    )
    assert ET.parse(out / "ci.xml").getroot().get("failures") == "1"


def test_ci_writes_its_reports_when_the_gate_cannot_start(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    empty = tmp_path / "not-an-overlay"
    empty.mkdir()
    result = CliRunner().invoke(
        main,
        [
            "-C",
            str(empty),
            "ci",
            "--junit",
            str(out / "ci.xml"),
            "--json",
            str(out / "ci.json"),
            "--markdown",
            str(out / "ci.md"),
        ],
    )
    assert result.exit_code == 2 and result.output.startswith("overlay: ")
    summary = json.loads((out / "ci.json").read_text())
    assert summary["failed"] is True and summary["error"] in result.output
    assert ET.parse(out / "ci.xml").getroot().get("failures") == "1"
    assert (out / "ci.md").read_text().startswith("## overlay ci: FAILED")


def test_verify_rocm_script_require_fails_a_skipped_stage(tmp_path):
    """tools/verify-rocm.sh (make verify-rocm) with stand-in overlay and make commands."""
    stub, make = verify_rocm_stand_ins(
        tmp_path,
        '#!/bin/sh\ncase "$1" in\n  build) echo "overlay: no ROCm toolchain: none here" >&2; exit 2;;\n'
        "  suite) exit 0;;\nesac\n",
    )

    def run(require: str | None) -> subprocess.CompletedProcess:
        extra = {} if require is None else {"OVERLAY_REQUIRE": require}
        return run_verify_rocm(tmp_path, stub, make, **extra)

    plain = run(None)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "verify-rocm: build: skipped (no ROCm toolchain: none here)" in plain.stdout
    required = run("verify, check")
    assert required.returncode == 1, required.stdout + required.stderr
    assert "verify-rocm: overlay: passed" in required.stdout
    assert (
        "verify-rocm: build: failed (required, but skipped: no ROCm toolchain: none here)"
        in required.stdout
    )
    assert (
        "verify-rocm: suites: skipped (the build stage did not pass)" in required.stdout
    )
    bad = run("verify bogus")
    assert (
        bad.returncode == 2 and "unknown stage bogus in OVERLAY_REQUIRE" in bad.stderr
    )


def test_verify_rocm_script_reads_the_builds_reason_only_once_tee_has_written_it(
    tmp_path,
):
    """The build's stderr goes through tee into the file the reason is read from: on a
    busy machine tee may write late, and a reason read before it (the script once
    slept 0.2 s after a process substitution) turned a skip into a failure (a CI run
    of 2026-12-03). A tee that takes a second stands in for the busy machine. The
    build's stdout goes straight out, its stderr both to the file and on."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tee = shutil.which("tee")
    assert tee is not None
    (bin_dir / "tee").write_text(f'#!/bin/sh\nsleep 1\nexec {tee} "$@"\n')
    (bin_dir / "tee").chmod(0o755)
    stub, make = verify_rocm_stand_ins(
        bin_dir,
        '#!/bin/sh\ncase "$1" in\n  build) echo "configuring"; '
        'echo "overlay: no ROCm toolchain: none here" >&2; exit 2;;\n'
        "  suite) exit 0;;\nesac\n",
    )
    proc = run_verify_rocm(
        tmp_path,
        stub,
        make,
        OVERLAY_STAGES="build",
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verify-rocm: build: skipped (no ROCm toolchain: none here)" in proc.stdout
    assert "configuring" in proc.stdout and "configuring" not in proc.stderr
    assert "overlay: no ROCm toolchain: none here" in proc.stderr


def test_verify_rocm_script_announces_stages_and_runs_only_those_asked(tmp_path):
    """Each stage of tools/verify-rocm.sh prints a start line; OVERLAY_STAGES picks the
    stages (a no-GPU user runs the race lab without the full ROCm build) and the others
    say they were skipped, and why."""
    calls = tmp_path / "calls"
    stub, make = verify_rocm_stand_ins(
        tmp_path,
        f'#!/bin/sh\necho "$*" >> {calls}\ncase "$1" in\n'
        '  build) echo "overlay: no ROCm toolchain: none here" >&2; exit 2;;\n'
        '  suite) case "$2" in\n    --help) echo "  build  Build the race lab";;\n'
        '    run) echo "x  PASSED  0 of 3 failed"; echo "1 suite(s): 1 passed, 0 failed, 0 skipped; '
        '0 of 3 runs failed";;\n  esac; exit 0;;\nesac\n',
    )

    def run(**extra: str) -> subprocess.CompletedProcess:
        calls.write_text("")
        return run_verify_rocm(tmp_path, stub, make, OVERLAY_HOST_MODELS="1", **extra)

    every = run(OVERLAY_HOST_MODEL_ARGS="--runs 3")
    assert every.returncode == 0, every.stdout + every.stderr
    for line in (
        "verify-rocm: overlay: running make verify-rocm-overlay",
        "verify-rocm: build: running overlay build --backend rocm (a first build takes many minutes",
        "verify-rocm: host-model: running overlay suite run --host-models --runs 3",
    ):
        assert line in every.stdout, every.stdout
    assert "suite run --host-models --runs 3" in calls.read_text()

    some = run(OVERLAY_STAGES="verify host-model")
    assert some.returncode == 0, some.stdout + some.stderr
    assert "build" not in calls.read_text().split()
    assert (
        "verify-rocm: build: skipped (not in OVERLAY_STAGES=verify host-model)"
        in some.stdout
    )
    assert (
        "verify-rocm: suites: skipped (not in OVERLAY_STAGES=verify host-model)"
        in some.stdout
    )
    assert "verify-rocm: overlay: passed" in some.stdout
    assert "verify-rocm: host-model: passed" in some.stdout

    suites_alone = run(OVERLAY_STAGES="suites")
    assert (
        "verify-rocm: suites: skipped (the build stage is not in OVERLAY_STAGES)"
        in suites_alone.stdout
    )
    required = run(OVERLAY_STAGES="host-model", OVERLAY_REQUIRE="build")
    assert required.returncode == 1
    assert (
        "build: failed (required, but skipped: not in OVERLAY_STAGES" in required.stdout
    )
    bad = run(OVERLAY_STAGES="verify gpu")
    assert bad.returncode == 2 and "unknown stage gpu in OVERLAY_STAGES" in bad.stderr


def test_verify_rocm_script_runs_the_behaviour_check_without_a_gpu(tmp_path):
    """make verify-rocm runs `overlay drift --behaviour` (host code, no
    GPU, no ROCm toolchain) and fails when it reports drift."""
    stub, make = verify_rocm_stand_ins(
        tmp_path,
        '#!/bin/sh\ncase "$1" in\n  drift) echo "behaviour drift: FloorDivide"; exit 1;;\n'
        '  build) echo "overlay: no ROCm toolchain: none here" >&2; exit 2;;\nesac\n',
    )
    res = run_verify_rocm(tmp_path, stub, make, OVERLAY_STAGES="verify behaviour")
    if shutil.which("g++") is None:
        assert "verify-rocm: behaviour: skipped (no host C++ compiler" in res.stdout
        return
    assert res.returncode == 1, res.stdout + res.stderr
    assert "verify-rocm: behaviour: running overlay drift --behaviour" in res.stdout
    assert (
        "verify-rocm: behaviour: failed (overlay drift --behaviour exited 1)"
        in res.stdout
    )


def test_ci_fails_verify_when_the_layers_were_not_checked(ov):
    fixes = ov.root / "LOCAL_FIXES.md"
    fixes.write_text(
        fixes.read_text().replace("x/fork@", "world/fork@")
    )  # no error finding at all
    result = CliRunner().invoke(
        main, ["-C", str(ov.root), "--offline", "ci", "--only", "verify"]
    )
    assert result.exit_code == 1, result.output
    assert re.search(
        r"^verify\s+FAILED\s+the layers could not be checked \(MAN002",
        result.output,
        re.M,
    )
    assert (
        CliRunner().invoke(main, ["-C", str(ov.root), "--offline", "verify"]).exit_code
        == 0
    )  # verify alone passes
