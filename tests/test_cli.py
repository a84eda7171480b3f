"""The command line's shape (overlay/cli/): every command reachable and with help, by
``overlay``, ``python -m overlay.cli`` and the console script; start-up that loads only
the CLI; a Ctrl-C during start-up, a closed stdout and an option missing its value each
end in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from procfixtures import reader_leaves_mid_write

from overlay.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _python(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
    )


def test_every_command_is_listed_and_has_help():
    listed = CliRunner().invoke(main, ["--help"])
    assert listed.exit_code == 0, listed.output
    names = main.list_commands(None)
    assert "suite" in names and "build" in names and "verify" in names
    for name in names:
        assert f"\n  {name} " in listed.output, name
        sub = CliRunner().invoke(main, [name, "--help"], prog_name="overlay")
        assert sub.exit_code == 0 and sub.output.startswith(f"Usage: overlay {name}"), (
            name,
            sub.output,
        )


def test_python_m_reaches_every_command():
    """``python -m overlay.cli NAME`` reaches every command (each is defined before the
    ``__main__`` block)."""
    for name in main.list_commands(None):
        proc = _python("-m", "overlay.cli", name, "--help")
        assert proc.returncode == 0 and proc.stdout.startswith(
            f"Usage: overlay {name}"
        ), (name, proc.stderr)


def test_importing_the_cli_loads_no_command_module():
    """Start-up is the floor every command pays: the suites, jinja2, email,
    rich and the domain modules load only when a command needs them."""
    proc = _python(
        "-c", "import sys, overlay.cli; print(' '.join(sorted(sys.modules)))"
    )
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    heavy = {
        m for m in loaded if m.split(".")[0] in ("jinja2", "email", "rich", "tomlkit")
    }
    # The CLI package, its context and shared options: names and click only.
    cli = {m for m in loaded if m == "overlay.cli" or m.startswith("overlay.cli.")}
    ours = (
        {m for m in loaded if m.startswith("overlay.")}
        - cli
        - {
            "overlay.cli.tools",
            "overlay.errors",
            "overlay.layout",
            "overlay.cli.options",
            "overlay.workspace",
        }
    )
    assert not heavy and not ours, (heavy, ours)


def test_a_closed_stdout_ends_quietly(ov):
    """`overlay status | head -1`: when the reader goes away the command stops with
    git's SIGPIPE status and no "internal error" line."""
    for args in (["status"], ["verify"], ["tree"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "overlay.cli", "-C", str(ov.root), *args],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        proc.stdout.close()  # the reader is gone before the first line is written
        err = proc.stderr.read().decode()
        assert proc.wait() == 141, (args, err)
        assert err == "", (args, err)


@pytest.mark.parametrize("unbuffered", ["", "1"], ids=["buffered", "unbuffered"])
def test_a_reader_leaving_mid_write_is_a_broken_pipe(ov, w, unbuffered):
    """`overlay diff | head -1` of a diff larger than the pipe: the reader leaves while
    the diff is being written, and the command ends with 141, also under
    PYTHONUNBUFFERED, where the interpreter's text stream dropped the rest of a short
    write and the command exited 0."""
    big = w.fork.commit(
        {"mlx/backend/rocm/big.cpp": "".join(f"line {i}\n" for i in range(40_000))},
        "a large file",
    )
    ov.write_manifest(w.base, fork=big)
    status, err = reader_leaves_mid_write(
        [sys.executable, "-m", "overlay.cli"]
        + ["-C", str(ov.root), "diff", "--from", "pin", "--to", "forked"],
        dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED=unbuffered),
    )
    assert (status, err) == (141, "")


def test_a_global_option_after_the_command_says_where_it_goes(ov):
    result = CliRunner().invoke(main, ["status", "--debug"], prog_name="overlay")
    assert result.exit_code == 2
    assert (
        "no such option '--debug'" in result.output
        and "Did you mean" not in result.output
    )
    assert "--debug is a global option: it goes before the command" in result.output


def test_verify_offers_every_format_render_knows():
    """``verify --format``'s choices are spelled in the CLI (importing the renderer
    there would load it for every command); they must stay render's own list."""
    from overlay.checks.render import FORMATS

    option = next(p for p in main.commands["verify"].params if p.name == "fmt")
    assert tuple(option.type.choices) == FORMATS


#: The ``overlay`` command as installed (``[tool.setuptools] script-files``).
SCRIPT = ROOT / "bin" / "overlay"

#: The end of a ``python -c`` program that runs the ``overlay`` script (argv[1]) as
#: the program, with the arguments after it.
_AS_PROGRAM = """
sys.argv = sys.argv[1:]
with open(sys.argv[0]) as fh:
    exec(compile(fh.read(), sys.argv[0], "exec"), {"__name__": "__main__"})
"""

#: Runs the ``overlay`` script (argv[1]) as the program, with an import of click
#: raising KeyboardInterrupt: a Ctrl-C that lands while the CLI is still being imported.
_INTERRUPTED_IMPORT = (
    """
import sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
"""
    + _AS_PROGRAM
)


def test_ctrl_c_during_imports_is_one_line_and_exit_130(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_IMPORT, str(SCRIPT), "status"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "OVERLAY_SERVER": "off"},
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.splitlines() == ["overlay: interrupted"], proc.stderr


#: Runs the ``overlay`` script (argv[1]) as the program, printing the modules in the
#: order they were first imported.
_IMPORT_ORDER = (
    """
import atexit, sys
order = []
atexit.register(lambda: print(" ".join(order)))
class Record:
    def find_spec(self, name, path=None, target=None):
        order.append(name)
        return None
sys.meta_path.insert(0, Record())
"""
    + _AS_PROGRAM
)


def test_the_overlay_script_imports_overlay_before_anything_else():
    # pip's wrapper for an entry point imports re first: 5 ms of a served command.
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_ORDER, str(SCRIPT), "--version"],
        capture_output=True,
        text=True,
        env={**os.environ, "OVERLAY_SERVER": "off"},
    )
    assert proc.returncode == 0, proc.stderr
    order = proc.stdout.splitlines()[-1].split()
    assert order[:2] == ["overlay", "overlay.__main__"], order
    assert "overlay, version" in proc.stdout  # the command ran


def test_the_installed_overlay_command_is_the_script():
    installed = Path(sys.executable).parent / "overlay"
    if not installed.is_file():
        pytest.skip("no overlay command beside this interpreter (not installed)")
    first, _, body = installed.read_text().partition("\n")
    assert first.startswith("#!") and "python" in first, first
    # A copy, not a link: an edit of bin/overlay needs an install again (make does it).
    assert body == SCRIPT.read_text().partition("\n")[2], "install again: make install"


@pytest.mark.parametrize(
    "args,hint",
    [
        (["rebase", "--onto"], "hint: overlay rebase --help"),
        (["suite", "run", "--runs"], "hint: overlay suite run --help"),
        (["--git-dir"], "hint: overlay --help"),
    ],
)
def test_an_option_without_its_value_names_the_commands_help(tmp_path, args, hint):
    from click.testing import CliRunner

    from overlay.cli import main

    result = CliRunner().invoke(main, ["-C", str(tmp_path), *args])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert (
        lines[0].startswith("overlay: option ") and "requires an argument" in lines[0]
    )
    assert lines[1:] == [hint], result.output


def test_help_lists_every_command():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for cmd in ("tree", "status", "export", "diff"):
        assert f"  {cmd} " in result.output


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("overlay, version ")


def test_the_console_script_collects_less_and_freezes_what_is_left_at_its_end():
    """The entry point raises the youngest generation's threshold before the CLI loads
    and freezes the objects when the command ends; the command's exit status and the
    atexit handlers (which run after it) are as before."""
    proc = _python(
        "-c",
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print(gc.get_threshold()[0], gc.get_freeze_count() > 0))\n"
        "sys.argv = ['overlay', 'no-such-command']\n"
        "from overlay.__main__ import GC_YOUNG_THRESHOLD, main\n"
        "print(GC_YOUNG_THRESHOLD, gc.get_freeze_count())\n"
        "main()\n",
    )
    assert proc.returncode == 2, proc.stderr
    before, after = proc.stdout.splitlines()
    threshold = before.split()[0]
    assert before == f"{threshold} 0" and int(threshold) > 700
    assert after == f"{threshold} True"
    assert proc.stderr.startswith("overlay: no such command 'no-such-command'")


def test_short_root_is_parsed_as_the_long_one_and_loads_no_difflib(ov, tmp_path):
    """`-C DIR` means `--root DIR`; click's own way to it (a failed long match whose
    error suggests names) imported difflib on every such command."""
    from overlay.cli.tools import long_forms

    assert long_forms(main, ["-C", "d", "--offline", "status", "-C", "x"]) == [
        "--root=d",
        "--offline",
        "status",
        "-C",  # a subcommand's options are its own parser's
        "x",
    ]
    assert long_forms(main, ["-Cd", "tree"]) == ["--root=d", "tree"]
    # A long option's value is a value, however it looks; `--` and a lone -C are kept.
    assert long_forms(main, ["--git-dir", "-C", "tree"]) == ["--git-dir", "-C", "tree"]
    assert long_forms(main, ["--", "-C", "d"]) == ["--", "-C", "d"]
    assert long_forms(main, ["-C"]) == ["-C"]
    script = (
        "import sys\n"
        "from overlay.cli import main\n"
        f"code = main(['-C', {str(ov.root)!r}, 'status'],"
        " standalone_mode=False)\n"
        "print(code, 'difflib' in sys.modules)\n"
    )
    proc = _python("-c", script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["0", "False"], proc.stdout + proc.stderr
    # The same status as with the long form (the commits are in the store now).
    short = CliRunner().invoke(main, ["-C", str(ov.root), "--offline", "status"])
    long = CliRunner().invoke(main, ["--root", str(ov.root), "--offline", "status"])
    assert short.exit_code == long.exit_code == 0 and short.output == long.output


def test_whole_writes_waits_on_a_full_non_blocking_descriptor():
    """A stdout left non-blocking by another program: a write that finds the pipe full
    waits for the reader and then writes the rest, all of it, in order."""
    import fcntl
    import threading
    import time

    from overlay.cli.tools import WholeWrites

    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
    got = bytearray()

    def reader():
        time.sleep(0.2)  # the writer meets a full pipe first
        while chunk := os.read(r, 65536):
            got.extend(chunk)
        os.close(r)

    thread = threading.Thread(target=reader)
    thread.start()
    data = bytes(range(256)) * 2000  # 512 KB, eight pipes' worth
    with WholeWrites(w, "w", closefd=True) as out:
        assert out.write(data) == len(data)
    thread.join()
    assert bytes(got) == data
