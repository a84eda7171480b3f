"""Which stages a gate requires (overlay/ci/gate.py): ``make ci`` is the per-PR gate of
docs/build.md and requires its stages (``--require auto``: verify, and check where a
toolchain is found or ``$CI`` is set), so a CI job copied from it fails on a runner whose
toolchain went missing; a race-lab suite skipped by the gate names the command that runs
it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_ci import make_clean_overlay
from test_suites_runner import DONE, child, make_suite

from overlay.cli import main
from overlay.suites.runner import detect_platform, skip_reason

ROOT = Path(__file__).resolve().parents[1]


def _make_ci(**variables: str) -> str:
    """The command ``make ci`` runs (a dry run, ``make -n``)."""
    dry = subprocess.run(
        [
            "make",
            "-n",
            "-C",
            str(ROOT),
            "ci",
            "OVERLAY=overlay",
            *(f"{k}={v}" for k, v in variables.items()),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, MAKEFLAGS=""),
    )
    assert dry.returncode == 0, dry.stderr
    return next(ln for ln in dry.stdout.splitlines() if ln.startswith("overlay ci"))


def test_make_ci_runs_the_per_pr_gate_by_default():
    line = _make_ci()
    assert "--only verify,check" in line and "--require auto" in line
    explicit = _make_ci(OVERLAY_REQUIRE="verify check build")
    assert '--require "verify check build"' in explicit and "auto" not in explicit


def _no_toolchain(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("OVERLAY_TOOLCHAIN_DIR", str(tmp_path / "no-toolchain"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")


def _gate(overlay, *require: str):
    args = ["-C", str(overlay.root), "ci", "--only", "verify,check"]
    for r in require:
        args += ["--require", r]
    return CliRunner().invoke(main, args)


def test_auto_on_a_laptop_without_a_toolchain_requires_verify_only(
    overlay, world, monkeypatch, tmp_path
):
    make_clean_overlay(overlay, world)
    _no_toolchain(monkeypatch, tmp_path)
    monkeypatch.delenv("CI", raising=False)
    result = _gate(overlay, "auto")
    assert result.exit_code == 0, result.output
    assert "check   SKIPPED  no ROCm toolchain" in result.output
    assert "overlay ci: passed (required: verify;" in result.output
    assert 'OVERLAY_REQUIRE="verify check"' in result.output  # how to make it fail


def test_auto_on_a_ci_runner_without_a_toolchain_fails(
    overlay, world, monkeypatch, tmp_path
):
    make_clean_overlay(overlay, world)
    _no_toolchain(monkeypatch, tmp_path)
    monkeypatch.setenv("CI", "true")
    result = _gate(overlay, "auto")
    assert result.exit_code == 1, result.output
    assert "check   FAILED   required, but skipped: no ROCm toolchain" in result.output


def test_auto_requires_check_where_a_toolchain_is_found(monkeypatch, tmp_path):
    from overlay.ci.gate import required_stages

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    hipcc = bin_dir / "hipcc"
    hipcc.write_text("#!/bin/sh\nexit 0\n")
    hipcc.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    stages, note = required_stages(("auto",), "rocm", str(tmp_path), environ={})
    assert stages == ("verify", "check"), note
    assert "toolchain" in note


def test_auto_keeps_the_stages_named_beside_it(monkeypatch, tmp_path):
    from overlay.ci.gate import required_stages

    _no_toolchain(monkeypatch, tmp_path)
    stages, _ = required_stages(("auto", "suites"), "rocm", str(tmp_path), environ={})
    assert stages == ("verify", "suites")
    assert required_stages(("build",), "rocm", str(tmp_path), environ={})[0] == (
        "build",
    )


def test_a_host_model_suite_skipped_by_a_gpu_gate_names_the_command_that_runs_it():
    lab = make_suite(
        "lab",
        child("reports.py", 0),
        runs=1,
        model="race-lab",
        backend="cpu",
        markers=[DONE],
    )
    gpu_gate = detect_platform(
        "rocm",
        environ={"OVERLAY_SUITE_HARDWARE": "none", "OVERLAY_SUITE_MODELS": "race-lab"},
    )
    reason = skip_reason(lab, gpu_gate)
    assert reason is not None and "cpu backend" not in reason
    assert "overlay suite run --host-models" in reason
    assert "make verify-rocm OVERLAY_STAGES=host-model" in reason


@pytest.mark.parametrize("stage", ["auto"])
def test_auto_is_only_a_require_value(overlay, world, stage):
    make_clean_overlay(overlay, world)
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "ci", "--only", stage])
    assert result.exit_code == 2 and "unknown stage 'auto'" in result.output
