"""The one live progress line (overlay/report/progress.py): fetches, ``ci`` stages and
compiled units say what they do, plain lines off a terminal, nothing when off."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from test_ci import make_clean_overlay

from overlay.cli import main
from overlay.errors import OverlayError
from overlay.git.store import Store
from overlay.records.manifest import load_manifest
from overlay.report.progress import PLAIN_INTERVAL, LiveProgress, progress_mode


@pytest.mark.parametrize(
    "environ,tty,mode",
    [
        ({}, True, "live"),
        ({}, False, "off"),
        ({"CI": "true"}, False, "plain"),
        ({"CI": "false"}, False, "off"),
        ({"OVERLAY_PROGRESS": "plain"}, True, "plain"),
        ({"OVERLAY_PROGRESS": "off", "CI": "1"}, True, "off"),
    ],
)
def test_the_mode_follows_the_terminal_ci_and_the_variable(environ, tty, mode):
    assert progress_mode(environ, tty) == mode


def test_plain_lines_are_few_and_carry_time_and_an_estimate(capsys):
    now = [100.0]
    with LiveProgress("check rocm", mode="plain", clock=lambda: now[0]) as live:
        live(0, 4, "a.cpp")  # the first status goes out at once
        now[0] += 3
        live(1, 4, "b.cpp")  # within the interval: not printed
        now[0] += PLAIN_INTERVAL
        live(2, 4, "c.cpp")
        live.note("a line that stays")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "overlay: check rocm: [0/4] a.cpp (0 s)",
        "overlay: check rocm: [2/4] c.cpp (13 s, about 13 s left)",
        "overlay: check rocm: a line that stays",
    ]


def test_off_prints_nothing(capsys):
    with LiveProgress("x", mode="off") as live:
        live(1, 2, "a")
        live.note("b")
    assert capsys.readouterr().err == ""


def test_a_live_display_inside_another_borrows_its_line():
    """rich allows one live display at a time: a fetch inside ``ci`` must not raise."""
    with LiveProgress("ci", mode="live") as outer:
        with LiveProgress("fetch", mode="live") as inner:
            inner.show("commit 123")
            assert "fetch: commit 123" in outer.__rich__().plain
        outer.show("verify")
        assert "ci: verify" in outer.__rich__().plain


def test_a_fetch_says_what_it_fetches_and_from_where(
    overlay, world, monkeypatch, capsys
):
    monkeypatch.setenv("OVERLAY_PROGRESS", "plain")
    store = Store()
    store.set_remotes(load_manifest(str(overlay.root)).remote_urls())
    store.ensure_commit(world.fork_commit, ["fork"])
    err = capsys.readouterr().err
    assert f"overlay: fetch: commit {world.fork_commit[:12]} from fork (" in err


def test_verify_says_when_it_fetches_every_upstream_branch(overlay, world, monkeypatch):
    """A cold ``verify`` says when it fetches upstream's branches and tags (for the
    fork-ahead check), after the commit fetches."""
    make_clean_overlay(overlay, world)
    monkeypatch.setenv("OVERLAY_PROGRESS", "plain")
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "verify"])
    assert result.exit_code == 0, result.output
    assert "overlay: fetch: every branch and tag of upstream (" in result.stderr


def test_ci_shows_each_stage_and_the_units_of_its_check(overlay, world, monkeypatch):
    from overlay import build as _build
    from overlay.build import Toolchain

    make_clean_overlay(overlay, world)
    monkeypatch.setenv("OVERLAY_PROGRESS", "plain")

    def fake_build(ws, options, *, progress=None, **kwargs):
        if progress is not None:
            progress(1, 3, "mlx/backend/rocm/device.cpp")
        raise OverlayError("stopped after one unit")

    monkeypatch.setattr(
        _build, "find_toolchain", lambda *a, **k: Toolchain("host", "host tools")
    )
    monkeypatch.setattr(_build, "build", fake_build)
    result = CliRunner().invoke(
        main,
        ["-C", str(overlay.root), "ci", "--only", "verify,check", "--backend", "cpu"],
    )
    assert "overlay: ci: verify: running" in result.output
    assert "overlay: ci: check: running" in result.output
    assert "[1/3] check: mlx/backend/rocm/device.cpp" in result.output
    assert "check   FAILED   stopped after one unit" in result.output
