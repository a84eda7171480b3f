"""The test suite never reaches the user's git store or mirrors (conftest's isolation)."""

from __future__ import annotations

import os


def test_undo_in_a_test_keeps_the_isolated_store(monkeypatch, isolated_git):
    """A new user's `make test` with the README's mirror variables exported wrote test
    worlds into their store: tests that called ``monkeypatch.undo()`` also undid the
    isolation. It is now held apart from the test's own monkeypatch."""
    isolated = os.environ["OVERLAY_GIT_DIR"]
    monkeypatch.setenv("OVERLAY_GIT_DIR", "/nonexistent/elsewhere.git")
    monkeypatch.setenv("OVERLAY_ISOLATION_PROBE", "1")
    monkeypatch.undo()
    assert os.environ["OVERLAY_GIT_DIR"] == isolated == str(isolated_git / "store.git")
    assert os.environ["HOME"] == str(isolated_git)
    assert "OVERLAY_ISOLATION_PROBE" not in os.environ
    assert "OVERLAY_UPSTREAM_URL" not in os.environ
