"""``overlay rebase`` and ``overlay sync``'s options (overlay/cli/runs.py): a target and
an action of a run are not given together."""

from __future__ import annotations

from gitfixtures import cli


def test_a_target_with_an_action_is_refused(ov, w):
    for args in (
        ("rebase", "--onto", w.pin_clean, "--abort"),
        ("sync", "--fork", w.base, "--continue"),
    ):
        result = cli(ov, *args)
        assert result.exit_code == 2, result.output
        assert "starts a run" in result.output and "give one of them" in result.output
