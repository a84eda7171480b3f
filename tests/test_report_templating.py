"""The one jinja2 environment (overlay/report/templating.py): reports rendered from the
package's templates, the compiled templates kept in the user's cache between commands,
and a cache that is damaged or cannot be made costing only the compile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Each render runs in a fresh interpreter: the environment is built once per process.
RENDER = (
    "from overlay.report.templating import render_template\n"
    "print(render_template('fix_entry.md.j2', number=7, title='Title', body='Text.', "
    "files=['mlx/a.cpp'], closing=None), end='')\n"
)


def _render(cache_home: Path) -> str:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    return subprocess.run(
        [sys.executable, "-c", RENDER],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _entries(cache_home: Path) -> list[Path]:
    return sorted((cache_home / "overlay" / "templates").glob("__jinja2_*.cache"))


def test_the_compiled_template_is_kept_and_read_back(tmp_path):
    first = _render(tmp_path)
    assert "Title." in first
    [entry] = _entries(tmp_path)
    stamp = entry.stat().st_mtime_ns
    assert _render(tmp_path) == first
    assert (
        entry.stat().st_mtime_ns == stamp
    )  # read back, not compiled and written again


def test_a_damaged_entry_renders_the_same_and_is_written_again(tmp_path):
    first = _render(tmp_path)
    [entry] = _entries(tmp_path)
    good = entry.read_bytes()
    entry.write_bytes(good[: len(good) // 2])
    assert _render(tmp_path) == first
    assert entry.read_bytes() == good


def test_a_cache_directory_that_cannot_be_made_costs_only_the_compile(tmp_path):
    first = _render(tmp_path / "writable")
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory would be\n")
    assert _render(blocked) == first
