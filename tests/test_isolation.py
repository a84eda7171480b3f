"""The test suite never reaches the user's git store or mirrors (conftest's isolation),
and ``make test`` leaves the real-mirror tests to ``make test-real``."""

from __future__ import annotations

import os
import subprocess


def test_undo_in_a_test_keeps_the_isolated_store(monkeypatch, isolated_git):
    """A test that calls ``monkeypatch.undo()`` keeps the isolation: it is held apart
    from the test's own monkeypatch, so that ``make test`` with the README's mirror
    variables exported never writes test worlds into the user's store."""
    isolated = os.environ["OVERLAY_GIT_DIR"]
    monkeypatch.setenv("OVERLAY_GIT_DIR", "/nonexistent/elsewhere.git")
    monkeypatch.setenv("OVERLAY_ISOLATION_PROBE", "1")
    monkeypatch.undo()
    assert os.environ["OVERLAY_GIT_DIR"] == isolated == str(isolated_git / "store.git")
    assert os.environ["HOME"] == str(isolated_git)
    assert "OVERLAY_ISOLATION_PROBE" not in os.environ
    assert "OVERLAY_UPSTREAM_URL" not in os.environ


def test_make_test_leaves_the_real_mirror_tests_to_make_test_real(tmp_path):
    """With the mirror variables exported for ``make run``, ``make test`` still leaves
    the real-mirror tests (half an hour) to ``make test-real``."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    dry = subprocess.run(
        ["make", "-n", "-C", str(root), "test", "test-real"],
        capture_output=True,
        text=True,
        env=dict(os.environ, MAKEFLAGS=""),
    )
    assert dry.returncode == 0, dry.stderr
    assert '-m pytest -q -m "not real_mirrors"' in dry.stdout
    assert "-m pytest -q -m real_mirrors" in dry.stdout
    env = dict(os.environ, OVERLAY_UPSTREAM_URL="/x", OVERLAY_FORK_URL="/y")
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "not real_mirrors",
            "-p",
            "no:cacheprovider",
            "tests/test_real_mirrors.py",
        ],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
    )
    assert "no tests collected" in collected.stdout or " deselected" in collected.stdout
    assert "test_real_tree_status_and_export" not in collected.stdout
