"""``overlay import whole-file`` on hostile names (issue 26, item 5). Real fixture
repositories (``test_import.Team``), no network."""

from __future__ import annotations

import os

import pytest
from test_importer import Team


@pytest.fixture
def team(tmp_path, w):
    return Team(tmp_path, w)


def test_a_file_name_that_is_not_utf8_is_one_line_naming_it(team):
    os.makedirs(team.dir / "mlx" / "backend" / "rocm", exist_ok=True)
    name = os.path.join(os.fsencode(team.dir), b"mlx/backend/rocm/caf\xe9.cpp")
    with open(name, "wb") as fh:
        fh.write(b"int x;\n")
    result = team.run()
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("overlay:")]
    assert len(lines) == 1, result.output
    assert '"mlx/backend/rocm/caf\\351.cpp"' in lines[0], lines[0]  # as git quotes it
    assert "not UTF-8" in lines[0]
    assert not (team.root / "patches-rocm").exists()
