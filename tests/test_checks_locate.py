"""Where the overlay repository is (overlay/checks/locate.py): found upwards from the
current directory or ``-C DIR`` as git finds its root, and a one-line error naming
where it looked when there is none."""

from __future__ import annotations

from click.testing import CliRunner
from gitfixtures import overlay_lines

from overlay.cli import main


def test_root_is_found_upwards_from_a_subdirectory(overlay, monkeypatch):
    expected = CliRunner().invoke(
        main, ["-C", str(overlay.root), "tree", "--layer", "pin"]
    )
    assert expected.exit_code == 0, expected.output
    sub = overlay.root / "patches-rocm" / "deeper"
    sub.mkdir()
    monkeypatch.chdir(sub)
    found = CliRunner().invoke(main, ["tree", "--layer", "pin"])
    assert found.exit_code == 0, found.output
    assert found.output == expected.output
    # -C changes where the search starts, as git -C does.
    monkeypatch.chdir(overlay.root.parent)
    via_c = CliRunner().invoke(main, ["-C", str(sub), "tree", "--layer", "pin"])
    assert via_c.exit_code == 0 and via_c.output == expected.output


def test_no_root_names_where_it_looked(tmp_path, monkeypatch):
    start = tmp_path / "a" / "b"
    start.mkdir(parents=True)
    monkeypatch.chdir(start)
    result = CliRunner().invoke(main, ["tree"])
    assert result.exit_code == 2
    (line,) = overlay_lines(result.output)
    assert f"not found in {start} or any parent directory up to /" in line
    assert "Traceback" not in result.output
    missing = CliRunner().invoke(main, ["-C", str(tmp_path / "nope"), "tree"])
    assert missing.exit_code == 2 and "no such directory" in missing.output
