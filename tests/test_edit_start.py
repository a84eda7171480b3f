"""``overlay edit`` of a patch (overlay/edit/start.py): an edit never rests on a patch
whose recorded blobs cannot be found (SER017)."""

from __future__ import annotations

from gitfixtures import cli, lines
from seriesfixtures import made_elsewhere


def test_edit_refuses_to_rest_on_an_unverified_patch(ov, w, tmp_path):
    made_elsewhere(
        ov,
        tmp_path,
        "mlx/backend/rocm/device.cpp",
        lines("device", change={1: "elsewhere 1"}),
        lines("device", change={1: "elsewhere 1", 20: "d20"}),
    )
    for args in (
        ("edit", "0001-elsewhere.patch"),
        ("edit", "--new", "0002-more.patch"),
    ):
        refused = cli(ov, *args)
        assert refused.exit_code == 2, refused.output
        assert "unverifiable" in refused.output and "--accept-text" in refused.output
    assert not (ov.root / ".overlay" / "edit").exists() or not any(
        (ov.root / ".overlay" / "edit").iterdir()
    )
