"""Remembered patch-conflict resolutions (overlay/rebase/rerere.py): git rerere's idea
for the series.

A patch that conflicts with the new base stops the run; the user's resolution is recorded
on ``--continue`` keyed by the normalized conflict, and a later run that meets the very
same conflict replays it, says so, and goes on without stopping. ``--forget`` forgets it,
``--abort`` forgets what its run recorded (shared case 17), and a team's shared directory
``patches-rocm/rr-cache/`` is used only when it exists."""

from __future__ import annotations

from pathlib import Path

from gitfixtures import cli, lines, overlay_process
from seriesfixtures import (
    CORE_RESOLVED,
    PDIR,
    add_patch,
    assert_verify_clean,
    work_file,
    write_fixes,
)

RR = Path(".overlay") / "rr-cache"
RESOLVED_OPS = lines("ops", change={2: "ops 2 upstream and ours"})
REPLAYED = "replayed the recorded resolution of mlx/ops.cpp for patch 0001-ops.patch"


def records(o) -> dict[str, bytes]:
    """The overlay's records (everything under patches-rocm/ and LOCAL_FIXES.md)."""
    out = {"LOCAL_FIXES.md": (o.root / "LOCAL_FIXES.md").read_bytes()}
    for p in (o.root / PDIR).rglob("*"):
        if p.is_file():
            out[str(p.relative_to(o.root))] = p.read_bytes()
    return out


def put_back(o, saved: dict[str, bytes]) -> None:
    """Restore the records exactly (a colleague's checkout of the same commit)."""
    for p in list((o.root / PDIR).rglob("*")):
        if p.is_file() and str(p.relative_to(o.root)) not in saved:
            p.unlink()
    for rel, data in saved.items():
        (o.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (o.root / rel).write_bytes(data)


def ops_overlay(ov):
    """One patch on ops line 2, which pin_clean rewrites too: a patch conflict."""
    add_patch(
        ov, "0001-ops.patch", {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})}
    )
    write_fixes(ov, [("Ops 2.", ["mlx/ops.cpp"])])
    return records(ov)


def resolve_first_run(ov, w) -> None:
    first = cli(ov, "rebase", "--onto", w.pin_clean)
    assert first.exit_code == 1, first.output
    assert "patch 0001-ops.patch conflicts with the new base" in first.output
    work_file(ov, "mlx/ops.cpp").write_text(RESOLVED_OPS)
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output


def test_a_patch_resolution_is_replayed_on_the_same_conflict_and_forgotten(ov, w):
    saved = ops_overlay(ov)
    resolve_first_run(ov, w)
    after_first = records(ov)
    put_back(ov, saved)
    again = cli(ov, "rebase", "--onto", w.pin_clean)
    assert again.exit_code == 0, again.output
    assert REPLAYED in again.output
    assert "overlay rebase --forget mlx/ops.cpp" in again.output
    assert records(ov) == after_first  # the same records as the resolved run
    assert REPLAYED in (ov.root / ".overlay" / "last-rebase.md").read_text()
    # Forgotten: the next run from the same records stops again.
    forgot = cli(ov, "rebase", "--forget", "mlx/ops.cpp")
    assert forgot.exit_code == 0 and "forgot 1 recorded" in forgot.output
    put_back(ov, saved)
    stops = cli(ov, "rebase", "--onto", w.pin_clean)
    assert stops.exit_code == 1 and "conflicts with the new base" in stops.output
    assert "replayed" not in stops.output
    assert cli(ov, "rebase", "--abort").exit_code == 0


def ops_and_core_overlay(ov) -> None:
    """Two patches whose lines upstream changed at w.pin_clean: 0001 (mlx/ops.cpp)
    and 0002 (mlx/core.cpp), each with its LOCAL_FIXES entry."""
    add_patch(
        ov, "0001-ops.patch", {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})}
    )
    add_patch(
        ov,
        "0002-core.patch",
        {"mlx/core.cpp": lines("core", change={25: "core 25 ours"})},
        fix=2,
    )
    write_fixes(ov, [("Ops 2.", ["mlx/ops.cpp"]), ("Core 25.", ["mlx/core.cpp"])])


def test_abort_forgets_the_patch_resolution_its_run_recorded(ov, w):
    ops_and_core_overlay(ov)
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 1
    work_file(ov, "mlx/ops.cpp").write_text(RESOLVED_OPS)
    second = cli(ov, "rebase", "--continue")
    assert second.exit_code == 1 and "0002-core.patch conflicts" in second.output
    assert any((ov.root / RR).iterdir())
    aborted = cli(ov, "rebase", "--abort")
    assert aborted.exit_code == 0, aborted.output
    assert not (ov.root / RR).is_dir() or not any((ov.root / RR).iterdir())
    again = cli(ov, "rebase", "--onto", w.pin_clean)
    assert again.exit_code == 1 and "0001-ops.patch conflicts" in again.output
    assert cli(ov, "rebase", "--abort").exit_code == 0


def test_abort_forgets_from_the_shared_directory_too_and_says_so(ov, w):
    ops_and_core_overlay(ov)
    shared = ov.root / PDIR / "rr-cache"
    shared.mkdir()  # the team made it
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 1
    work_file(ov, "mlx/ops.cpp").write_text(RESOLVED_OPS)
    assert cli(ov, "rebase", "--continue").exit_code == 1  # 0002 stops
    assert any(shared.iterdir()) and any((ov.root / RR).iterdir())
    aborted = cli(ov, "rebase", "--abort")
    assert aborted.exit_code == 0, aborted.output
    assert (
        "recorded in .overlay/rr-cache/ and patches-rocm/rr-cache/: a next run does "
        "not replay them" in aborted.output
    ), aborted.output
    assert shared.is_dir() and not any(shared.iterdir())  # the team's stays, emptied
    assert not (ov.root / RR).exists()


def test_the_shared_directory_is_used_only_when_the_team_made_it(ov, w):
    saved = ops_overlay(ov)
    shared = ov.root / PDIR / "rr-cache"
    resolve_first_run(ov, w)
    assert not shared.exists()  # never made silently
    shared.mkdir()
    saved = {**saved}
    # A colleague's checkout: no local rr-cache; the team's directory holds the record.
    for p in (ov.root / RR).iterdir():
        (shared / p.name).write_bytes(p.read_bytes())
        saved[str((shared / p.name).relative_to(ov.root))] = p.read_bytes()
        p.unlink()
    put_back(ov, saved)
    again = cli(ov, "rebase", "--onto", w.pin_clean)
    assert again.exit_code == 0, again.output
    assert REPLAYED in again.output and "patches-rocm/rr-cache" in again.output


def test_the_key_ignores_labels_side_order_and_the_base_section():
    from overlay.rebase.rerere import conflict_key, normalize_conflict

    m = 32
    lt, bar, eq, gt = ("<" * m, "|" * m, "=" * m, ">" * m)
    one = f"a\n{lt} new base\nx\n{eq}\ny\n{gt} patch\nz\n".encode()
    swapped = f"a\n{lt} ours\ny\n{bar} base\nold\n{eq}\nx\n{gt} theirs\nz\n".encode()
    key = conflict_key(normalize_conflict(one))
    assert key == conflict_key(normalize_conflict(swapped))
    # A 7-character heading inside a side is text, not a separator (shared case 11).
    heading = f"{lt}\nCaveats\n=======\n{eq}\ny\n{gt}\n".encode()
    assert b"Caveats\n=======\n" in normalize_conflict(heading)
    assert normalize_conflict(f"{lt}\nx\n{eq}\n".encode()) is None  # not closed


def rr_entries(o) -> set[str]:
    d = o.root / RR
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


def test_case17_abort_forgets_what_the_run_recorded(ov, w):
    add_patch(
        ov,
        "0001-ops.patch",
        {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})},
        fix=2,
    )
    write_fixes(
        ov,
        [("Ops 2.", ["mlx/ops.cpp"])],
        retarget=[("Keep the ROCm hook.", ["mlx/core.cpp"])],
    )
    assert_verify_clean(ov)
    before = rr_entries(ov)
    first = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert (
        first.exit_code == 1
        and "mlx/core.cpp: the fork delta conflicts" in first.output
    )
    # A (bad) resolution is recorded when --continue takes it ...
    work_file(ov, "mlx/core.cpp").write_text(
        lines("core", change={5: "core 5 BAD", 25: "core 25 upstream"})
    )
    later = cli(ov, "rebase", "--continue")
    # ... and the run goes on into a later stop (the patch conflicts with upstream's ops 2).
    assert (
        later.exit_code == 1
        and "patch 0001-ops.patch conflicts with the new base" in later.output
    )
    recorded = rr_entries(ov) - before
    assert recorded and any(not n.endswith(".path") for n in recorded)
    aborted = cli(ov, "rebase", "--abort")
    assert aborted.exit_code == 0, aborted.output
    assert rr_entries(ov) == before  # the run's rr-cache records are gone
    # A new run stops again instead of reusing the bad resolution.
    again = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert (
        again.exit_code == 1
        and "mlx/core.cpp: the fork delta conflicts" in again.output
    )
    assert "reused" not in again.output
    assert cli(ov, "rebase", "--abort").exit_code == 0


def test_case17_abort_after_a_run_killed_while_committing_forgets_too(ov, w):
    # The resolution is recorded by --continue, the process is SIGKILLed while the run writes
    # its results (before it completes); --abort then forgets the record as well.
    write_fixes(ov, retarget=[("Keep the ROCm hook.", ["mlx/core.cpp"])])
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    work_file(ov, "mlx/core.cpp").write_text(
        lines("core", change={5: "core 5 BAD", 25: "core 25 upstream"})
    )
    proc = overlay_process(
        ov, "rebase", "--continue", env={"OVERLAY_TEST_KILL_AT": "commit"}
    )
    assert proc.returncode == -9
    assert rr_entries(ov)  # recorded before the kill
    assert cli(ov, "rebase", "--abort").exit_code == 0
    assert rr_entries(ov) == set()
    again = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert (
        again.exit_code == 1
        and "mlx/core.cpp: the fork delta conflicts" in again.output
    )


def test_case17_reused_resolution_is_shown_and_forget_forgets_it(ov, w):
    write_fixes(ov, retarget=[("Keep the ROCm hook.", ["mlx/core.cpp"])])
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    work_file(ov, "mlx/core.cpp").write_text(CORE_RESOLVED)
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output
    assert_verify_clean(ov)
    back = cli(
        ov, "rebase", "--onto", w.base
    )  # no conflict there: the resolution file goes
    assert back.exit_code == 0 and "resolution mlx/core.cpp: removed" in back.output, (
        back.output
    )
    assert_verify_clean(ov)
    reused = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert reused.exit_code == 0, reused.output
    assert "resolution mlx/core.cpp: reused" in reused.output
    assert (
        "review" in reused.output
        and "overlay rebase --forget mlx/core.cpp" in reused.output
    )
    assert (
        ov.root / PDIR / "resolved" / "mlx" / "core.cpp"
    ).read_text() == CORE_RESOLVED
    assert_verify_clean(ov)
    # Forget it (the run is complete): the count is reported, and the next run stops.
    forgot = cli(ov, "rebase", "--forget", "mlx/core.cpp")
    assert (
        forgot.exit_code == 0
        and "forgot 1 recorded resolution(s) for mlx/core.cpp" in forgot.output
    )
    assert rr_entries(ov) == set()
    none = cli(ov, "rebase", "--forget", "mlx/core.cpp")
    assert (
        none.exit_code == 0 and "no recorded resolution for mlx/core.cpp" in none.output
    )
    # The resolution is still in the records: the run that removes it remembers it again
    # (as rerere records what it sees), and says so; forgetting it then makes the next
    # run onto that conflict stop.
    removed = cli(ov, "rebase", "--onto", w.base)
    assert (
        removed.exit_code == 0
        and "stays in the rr-cache"
        in (ov.root / ".overlay" / "last-rebase.md").read_text()
    )
    assert_verify_clean(ov)
    assert len({n for n in rr_entries(ov) if not n.endswith(".path")}) == 1
    assert cli(ov, "rebase", "--forget", "mlx/core.cpp").exit_code == 0
    stops = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert (
        stops.exit_code == 1
        and "mlx/core.cpp: the fork delta conflicts" in stops.output
    )
