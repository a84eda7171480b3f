"""Step 1 of a run, the fork delta's conflicts (overlay/rebase/forkdelta.py): a
resolution is kept unchanged only for the same three blobs, and carried when the pin's
side changed."""

from __future__ import annotations

from gitfixtures import cli, lines


def test_a_conflict_whose_pin_side_changed_is_carried_not_unchanged(ov, w):
    """The 'same three blobs' shortcut is taken only for the same three blobs."""
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp"
    work.write_text(lines("core", change={5: "core 5 both", 25: "core 25 upstream"}))
    assert cli(ov, "rebase", "--continue").exit_code == 0
    elsewhere = w.upstream.commit({"docs/other.md": "other\n"}, "upstream: docs only")
    same = cli(ov, "rebase", "--onto", elsewhere)
    assert same.exit_code == 0 and "resolution mlx/core.cpp: unchanged" in same.output
    edited = w.upstream.commit(
        {
            "mlx/core.cpp": lines(
                "core",
                change={5: "core 5 upstream rewrite", 25: "core 25 upstream", 28: "x"},
            )
        },
        "upstream edits core 28",
    )
    moved = cli(ov, "rebase", "--onto", edited)
    assert moved.exit_code == 0 and "resolution mlx/core.cpp: carried" in moved.output
    resolved = ov.root / "patches-rocm" / "resolved" / "mlx" / "core.cpp"
    assert "core 5 both" in resolved.read_text() and "x\n" in resolved.read_text()
