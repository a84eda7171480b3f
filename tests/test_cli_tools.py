"""Every failure ends in one ``overlay:`` line and its documented exit code
(overlay/cli/tools.py): click's usage errors, an unexpected exception (its traceback
under ``--debug``), memory and recursion errors, an ``OverlayError`` raised outside the
handler, a Ctrl-C, and messages holding line breaks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from gitfixtures import overlay_lines

from overlay.cli import main
from overlay.errors import OverlayError
from overlay.workspace import Workspace


def lines_of(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


@pytest.mark.parametrize(
    "args,first,hint",
    [
        (["--x"], "overlay: no such option", "hint: overlay --help"),
        (["verify", "--x"], "overlay: no such option", "hint: overlay verify --help"),
        (
            ["verify", "--format", "xml"],
            "overlay: invalid value for '--format'",
            "hint: overlay verify --help",
        ),
        (["export"], "overlay: missing argument 'DEST'", "hint: overlay export --help"),
        (["nosuch"], "overlay: no such command", "hint: overlay --help"),
        (
            ["fix", "new", "--bogus"],
            "overlay: no such option",
            "hint: overlay fix new --help",
        ),
        (
            ["suite", "run", "--runs", "x"],
            "overlay: invalid value for '--runs'",
            "hint: overlay suite run --help",
        ),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(tmp_path, args, first, hint):
    result = CliRunner().invoke(main, ["-C", str(tmp_path), *args])
    assert result.exit_code == 2
    out = lines_of(result.output)
    assert len(out) == 2 and out[0].startswith(first) and out[1] == hint, result.output
    assert "Usage:" not in result.output


def test_unknown_option_from_the_real_entry_point(tmp_path):
    """The console script path (``main()`` with sys.argv), not only CliRunner."""
    proc = subprocess.run(
        [sys.executable, "-c", "from overlay.cli import main; main()", "--x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2
    out = lines_of(proc.stderr)
    assert (
        len(out) == 2
        and out[0].startswith("overlay: no such option")
        and "--x" in out[0]
    ), proc.stderr
    assert out[1] == "hint: overlay --help"
    assert proc.stdout == ""


def test_a_current_directory_removed_meanwhile_is_one_line_and_debug_shows_why(
    tmp_path,
):
    # A shell left in a work tree that was removed: every command's first step asks
    # for the current directory. Not an internal error; --debug shows the traceback.
    gone = tmp_path / "gone"
    code = f"import os; os.mkdir({str(gone)!r}); os.chdir({str(gone)!r}); "
    code += f"os.rmdir({str(gone)!r}); from overlay.cli import main; main()"
    for extra in ([], ["--debug"]):
        proc = subprocess.run(
            [sys.executable, "-c", code, *extra, "status"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            env={**os.environ, "OVERLAY_SERVER": "off"},
        )
        assert proc.returncode == 2, proc.stderr
        out = lines_of(proc.stderr)
        assert out[-2:] == [
            "overlay: the current directory is gone (removed since the shell "
            "entered it)",
            "hint: cd into the overlay repository again, or name it with -C DIR",
        ], proc.stderr
        assert ("Traceback" in proc.stderr) == bool(extra), proc.stderr


def test_unexpected_exception_is_one_line_and_debug_shows_the_traceback(
    tmp_path, monkeypatch
):
    def boom(*_a, **_k):
        raise KeyError("boom")

    monkeypatch.setattr(Workspace, "layers", boom)
    result = CliRunner().invoke(main, ["-C", str(tmp_path), "tree"])
    assert result.exit_code == 2
    assert lines_of(result.output) == [
        "overlay: internal error (KeyError: 'boom')",
        "hint: rerun with `overlay --debug ...` for the traceback, and report it",
    ]
    debug = CliRunner().invoke(main, ["-C", str(tmp_path), "--debug", "tree"])
    assert (
        debug.exit_code == 2
        and "Traceback" in debug.output
        and "KeyError: 'boom'" in debug.output
    )


@pytest.mark.parametrize(
    "exc", [MemoryError(), RecursionError("maximum recursion depth exceeded")]
)
def test_memory_and_recursion_errors_are_one_line(tmp_path, monkeypatch, exc):
    def boom(*_a, **_k):
        raise exc

    monkeypatch.setattr(Workspace, "layers", boom)
    result = CliRunner().invoke(main, ["-C", str(tmp_path), "tree"])
    assert result.exit_code == 2 and lines_of(result.output)[0].startswith(
        "overlay: internal error ("
    )
    assert "Traceback" not in result.output


def test_overlay_error_outside_handle_errors_and_interrupt(tmp_path, monkeypatch):
    def expected(*_a, **_k):
        raise OverlayError("the thing is wrong", exit_code=1, hint="fix the thing")

    monkeypatch.setattr(Workspace, "layers", expected)
    # status has handle_errors; the root group gives the same line for a command that has not.
    for command in ("tree", "status"):
        result = CliRunner().invoke(main, ["-C", str(tmp_path), command])
        assert result.exit_code == 1
        assert lines_of(result.output) == [
            "overlay: the thing is wrong",
            "hint: fix the thing",
        ]

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(Workspace, "layers", interrupted)
    result = CliRunner().invoke(main, ["-C", str(tmp_path), "tree"])
    assert (
        result.exit_code == 130
        and lines_of(result.output)[-1] == "overlay: interrupted"
    )


def test_help_and_version_still_exit_0(tmp_path):
    assert CliRunner().invoke(main, ["--help"]).exit_code == 0
    assert CliRunner().invoke(main, ["verify", "--help"]).exit_code == 0
    version = CliRunner().invoke(main, ["--version"])
    assert version.exit_code == 0 and "version" in version.output


def test_messages_with_line_breaks_stay_one_line(tmp_path, monkeypatch):
    def expected(*_a, **_k):
        raise OverlayError("bad line 'a\nb\x1b[1m'", hint="x\ry")

    monkeypatch.setattr(Workspace, "layers", expected)
    result = CliRunner().invoke(main, ["-C", str(tmp_path), "status"])
    assert lines_of(result.output) == [
        "overlay: bad line 'a\\x0ab\\x1b[1m'",
        "hint: x\\x0dy",
    ]


def _interrupt(*_a, **_k):
    raise KeyboardInterrupt


def test_ctrl_c_in_any_command_is_exit_130_one_line(overlay, monkeypatch):
    monkeypatch.setattr("overlay.engine.layers.compute_layers", _interrupt)
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "tree"])
    assert result.exit_code == 130 and "Aborted!" not in result.output
    assert overlay_lines(result.output) == ["overlay: interrupted"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_full_disk_is_one_line_not_an_internal_error(overlay):
    # Output to a full disk (or a quota, a read-only file system) is the machine's
    # refusal: one `overlay:` line and exit 2, not a bug to report.
    root = Path(__file__).resolve().parent.parent
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "overlay.cli", "-C", str(overlay.root), "status"],
            env=dict(os.environ, PYTHONPATH=str(root)),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0] == "overlay: cannot write: No space left on device", lines
    assert lines[1].startswith("hint: free space") and len(lines) == 2
    assert "internal error" not in proc.stderr
