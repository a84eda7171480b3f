"""The stumbles of a new user on error paths (issue 30 item 8).

A Ctrl-C before the CLI's handler was set printed a traceback; a wrong full SHA got
a hint about network access though the remotes answered; an option missing its value
pointed to ``overlay --help``; a hand edit in an export could not fail a job.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from gitfixtures import cli

from overlay.errors import GitError
from overlay.git.store import Store

ROOT = Path(__file__).resolve().parents[1]

#: Runs the console script's entry point as pip's wrapper does (``from M import F``,
#: then ``sys.exit(F())``), with an import of click raising KeyboardInterrupt: a
#: Ctrl-C that lands while the CLI is still being imported.
_INTERRUPTED_IMPORT = """
import sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
module, _, attr = sys.argv[1].partition(":")
sys.exit(getattr(__import__(module, fromlist=[attr]), attr)())
"""


def test_ctrl_c_during_imports_is_one_line_and_exit_130(tmp_path):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    proc = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_IMPORT, scripts["overlay"], "status"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.splitlines() == ["overlay: interrupted"], proc.stderr


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


def test_a_wrong_full_sha_says_the_remotes_lack_it(overlay, world):
    from overlay.records.manifest import load_manifest

    store = Store()
    store.set_remotes(load_manifest(str(overlay.root)).remote_urls())
    with pytest.raises(GitError) as err:
        store.resolve("0123456789abcdef0123456789abcdef01234567")
    assert "is not in upstream" in err.value.message
    assert "network" not in (err.value.hint or "")


def test_a_wrong_full_sha_with_unreachable_remotes_keeps_the_network_hint(tmp_path):
    store = Store()
    store.set_remotes(
        {"upstream": str(tmp_path / "gone"), "fork": str(tmp_path / "gone")}
    )
    with pytest.raises(GitError) as err:
        store.resolve("0123456789abcdef0123456789abcdef01234567")
    assert "could not be reached" in err.value.message
    assert "OVERLAY_UPSTREAM_URL" in (err.value.hint or "")


def test_export_strict_fails_on_a_hand_edit(overlay, tmp_path):
    dest = tmp_path / "dest"
    assert cli(overlay, "export", str(dest)).exit_code == 0
    edited = next(
        p
        for p in sorted(dest.rglob("*"))
        if p.is_file() and "overlay-export" not in p.name
    )
    edited.write_text("edited by hand\n")
    plain = cli(overlay, "export", str(dest))
    assert plain.exit_code == 0 and "edited by hand" in plain.output
    strict = cli(overlay, "export", "--strict", str(dest))
    assert strict.exit_code == 1, strict.output
    assert "edited by hand" in strict.output
    assert edited.read_text() == "edited by hand\n"


def test_export_names_a_file_the_layer_does_not_have_and_strict_fails(
    overlay, tmp_path
):
    """A file added to DEST by hand is never touched, but a build of DEST builds it:
    the export names it (as ``git status`` names an untracked file), ``--strict``
    fails on it, and removing it makes the export clean again."""
    dest = tmp_path / "dest"
    assert cli(overlay, "export", str(dest)).exit_code == 0
    stray = dest / "mlx" / "backend" / "rocm" / "stray.cpp"
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_text("int stray;\n")
    plain = cli(overlay, "export", str(dest))
    assert plain.exit_code == 0, plain.output
    assert (
        "warning: " + str(dest) + ": 1 file(s) that the layer does not have were left "
        "as they are: mlx/backend/rocm/stray.cpp"
    ) in plain.output
    strict = cli(overlay, "export", "--strict", str(dest))
    assert strict.exit_code == 1, strict.output
    assert "error: " in strict.output and "stray.cpp" in strict.output
    assert stray.read_text() == "int stray;\n"
    forced = cli(overlay, "export", "--force", str(dest))
    assert forced.exit_code == 0 and stray.exists()  # never the export's to delete
    stray.unlink()
    clean = cli(overlay, "export", "--strict", str(dest))
    assert clean.exit_code == 0 and "layer does not have" not in clean.output
