"""The open edit (overlay/edit/session.py): while one is open, a rebase or a sync is
refused, naming the edit and the ways to end it."""

from __future__ import annotations

from gitfixtures import cli, overlay_lines, records_hash


def test_rebase_and_sync_are_refused_while_an_edit_is_open(ov, w):
    assert cli(ov, "edit", "--new", "0001-x").exit_code == 0
    newer_fork = w.fork.commit({"mlx/backend/rocm/extra.cpp": "extra\n"}, "more rocm")
    before = records_hash(ov)
    for args in (["rebase", "--onto", w.pin_clean], ["sync", "--fork", newer_fork]):
        refused = cli(ov, *args)
        assert refused.exit_code == 2, (args, refused.output)
        (line,) = overlay_lines(refused.output)
        assert "an edit of 0001-x.patch is open" in line, line
        assert "`overlay record`" in refused.output
        assert "`overlay edit --abort`" in refused.output
        assert not (ov.root / ".overlay" / "rebase").exists()
    assert records_hash(ov) == before
    assert cli(ov, "edit", "--abort").exit_code == 0
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 0
