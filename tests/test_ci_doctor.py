"""`overlay doctor` on a fixture overlay."""

from __future__ import annotations

from click.testing import CliRunner
from gitfixtures import env_path_without_git

from overlay.cli import main


def test_doctor_reports_every_item(overlay):
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "doctor"])
    assert result.exit_code == 0, result.output
    names = [line.split()[1] for line in result.output.splitlines()]
    assert names[:3] == ["git", "git", "pinned"]  # "git", "git store", "pinned objects"
    assert (
        "warn  pinned objects   missing pin, fork commit, merge base" in result.output
    )
    assert "remote upstream" in result.output and "(reachable)" in result.output
    assert "ROCm toolchain" in result.output and "amd-gpu" in result.output


def test_doctor_fails_without_git(overlay, tmp_path):
    result = CliRunner().invoke(
        main,
        ["-C", str(overlay.root), "doctor", "--no-network"],
        env={"PATH": env_path_without_git(tmp_path)},
    )
    assert result.exit_code == 1 and "fail  git" in result.output


def test_doctor_and_suite_still_run_outside_an_overlay(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doctor = CliRunner().invoke(main, ["doctor", "--no-network"])
    assert "manifest" in doctor.output and "Traceback" not in doctor.output
