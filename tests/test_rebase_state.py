"""The typed rebase state and report (overlay.rebase.state, overlay.rebase.report) read
and write the JSON values the untyped dicts of earlier versions did, so a run stopped
by an earlier overlay is continued, skipped or aborted by this one."""

from __future__ import annotations

import json

import pytest
from gitfixtures import cli, fresh_python, lines, records_hash
from seriesfixtures import add_patch

from overlay.rebase.ondisk import inspect_state
from overlay.rebase.report import RebaseReport
from overlay.rebase.state import (
    Bases,
    EmptyStop,
    PatchOutcome,
    PatchStop,
    ResolutionOutcome,
    ResolutionStop,
    RunState,
)

SHA = {c: c * 40 for c in "abcdef0123456789"}
KEY = "7" * 64


def old_bytes(state: dict) -> bytes:
    """``state.json`` as the untyped code wrote it."""
    return json.dumps(state, indent=1, sort_keys=True).encode()


def old_state(**over) -> dict:
    """A state dict of the shape the untyped code wrote, every key spelled out."""
    state = {
        "format": 1,
        "kind": "rebase",
        "old": {"pin": SHA["a"], "fork": SHA["b"], "merge_base": SHA["c"]},
        "new": {"pin": SHA["d"], "fork": SHA["b"], "merge_base": SHA["c"]},
        "backup": ["patches-rocm/overlay.toml", "patches-rocm/series"],
        "resolutions": {},
        "forked": None,
        "patches": [],
        "stop": None,
        "committing": False,
    }
    state.update(over)
    return state


# Every shape of state the untyped code wrote at some step of a run.
SHAPES = {
    "just started": old_state(),
    "resolution stop": old_state(
        stop={
            "type": "resolution",
            "path": "mlx/core.cpp",
            "key": KEY,
            "mode": "100644",
            "recorded": False,
        },
        resolutions={
            "mlx/a.cpp": {"status": "unchanged", "blob": SHA["e"], "note": "same"},
        },
    ),
    "stale remembered, counts not yet": old_state(
        forked=SHA["f"], stale=["mlx/old.cpp"], rr_recorded=[KEY]
    ),
    "patch stop": old_state(
        forked=SHA["f"],
        stale=[],
        merge_stats={"carried": 4, "conflicts": 0},
        patches=[
            {
                "name": "0001-a.patch",
                "status": "clean",
                "tree": SHA["1"],
                "blob": None,
                "changed": False,
            },
            {
                "name": "0002-b.patch",
                "status": "merged",
                "tree": SHA["2"],
                "blob": SHA["3"],
                "changed": True,
                "note": "",
            },
            {"name": "0003-c.patch", "status": "upstream", "note": "already upstream"},
            {"name": "0004-d.patch", "status": "stopped"},
            {"name": "0005-e.patch", "status": "pending"},
        ],
        stop={
            "type": "patch",
            "name": "0004-d.patch",
            "tree": SHA["2"],
            "merged": SHA["4"],
            "files": ["mlx/ops.cpp"],
            "gitlinks": ["third_party/x"],
            "modes": {"mlx/ops.cpp": "100644"},
        },
    ),
    "patch that cannot be merged (no gitlinks key)": old_state(
        forked=SHA["f"],
        stale=[],
        merge_stats={"carried": 1, "conflicts": 0},
        patches=[{"name": "0001-a.patch", "status": "stopped"}],
        stop={
            "type": "patch",
            "name": "0001-a.patch",
            "tree": SHA["f"],
            "merged": SHA["f"],
            "files": [],
            "modes": {},
        },
    ),
    "empty stop": old_state(
        forked=SHA["f"],
        stale=[],
        merge_stats={"carried": 1, "conflicts": 0},
        patches=[{"name": "0001-a.patch", "status": "stopped"}],
        stop={"type": "empty", "name": "0001-a.patch"},
    ),
    "writing the records": old_state(
        kind="sync",
        forked=SHA["f"],
        stale=["mlx/old.cpp"],
        merge_stats={"carried": 2, "conflicts": 1},
        resolutions={
            "mlx/core.cpp": {
                "status": "resolved",
                "blob": SHA["5"],
                "note": "conflict resolved by hand",
            }
        },
        patches=[
            {
                "name": "0001-a.patch",
                "status": "resolved",
                "tree": SHA["6"],
                "blob": SHA["7"],
                "changed": True,
            },
            {"name": "0002-b.patch", "status": "skipped", "note": "dropped by --drop"},
        ],
        rr_recorded=[KEY],
        committing=True,
        commit_started=True,
    ),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_old_state_shape_round_trips_value_for_value(shape):
    # Read from the indented bytes the untyped code wrote; written on one line, keys
    # sorted (the C encoder), holding the very same JSON value.
    data = old_bytes(SHAPES[shape])
    state = RunState.from_json(json.loads(data))
    assert state.dumps() == json.dumps(SHAPES[shape], sort_keys=True).encode()
    assert json.loads(state.dumps()) == json.loads(data)


def test_the_plans_warnings_are_kept_and_a_state_without_them_reads_as_none():
    warned = old_state(warnings=["pin dddddddddddd does not descend from ..."])
    state = RunState.from_json(warned)
    assert state.warnings == warned["warnings"]
    assert json.loads(state.dumps()) == warned
    assert RunState.from_json(SHAPES["just started"]).warnings == []
    assert "warnings" not in json.loads(RunState.from_json(old_state()).dumps())
    with pytest.raises(ValueError, match="the warnings"):
        RunState.from_json(old_state(warnings="not a list"))


def test_the_typed_state_reads_the_old_keys():
    state = RunState.from_json(SHAPES["patch stop"])
    assert state.old.pin == SHA["a"] and state.new.pin == SHA["d"]
    assert [p.status for p in state.patches] == [
        "clean",
        "merged",
        "upstream",
        "stopped",
        "pending",
    ]
    assert state.patches[0].blob is None and state.patches[1].note == ""
    assert isinstance(state.stop, PatchStop) and state.stop.gitlinks == [
        "third_party/x"
    ]
    assert state.stop.what == "0004-d.patch" and state.stop.type == "patch"
    assert not state.commit_started and state.rr_recorded == []
    stop = RunState.from_json(SHAPES["resolution stop"]).stop
    assert isinstance(stop, ResolutionStop) and stop.what == "mlx/core.cpp"
    assert isinstance(RunState.from_json(SHAPES["empty stop"]).stop, EmptyStop)


@pytest.mark.parametrize(
    "key, value",
    [("format", []), ("patches", [42]), ("stop", {"type": "nonsense"})],
)
def test_a_malformed_state_is_refused_with_a_value_error(key, value):
    with pytest.raises(ValueError):
        RunState.from_json(old_state(**{key: value}))


def test_a_state_with_a_malformed_entry_is_wedged(ov, w):
    add_patch(
        ov, "0001-ops.patch", {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})}
    )
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 1
    path = ov.root / ".overlay" / "rebase" / "state.json"
    state = json.loads(path.read_text())
    state["stop"]["type"] = "nonsense"
    path.write_text(json.dumps(state))
    info = inspect_state(str(ov.root))
    assert info.problem and "is not a run state" in info.problem
    status = cli(ov, "rebase", "--status")
    assert "rebase state is wedged" in status.output


def _stopped_on_a_patch(ov, w):
    add_patch(
        ov,
        "0001-ops.patch",
        {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})},
        fix=7,
    )
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 1
    path = ov.root / ".overlay" / "rebase" / "state.json"
    return path, json.loads(path.read_text())


def _hand_written_patch_stop(ov, w, seen: dict) -> dict:
    """The state the untyped code left at this stop, written out key by key (the commits
    and trees taken from the run, as only git knows them)."""
    return {
        "format": 1,
        "kind": "rebase",
        "old": {"pin": w.base, "fork": w.fork_commit, "merge_base": w.base},
        "new": {"pin": w.pin_clean, "fork": w.fork_commit, "merge_base": w.base},
        "backup": seen["backup"],
        "resolutions": {},
        "forked": seen["forked"],
        "stale": [],
        "merge_stats": seen["merge_stats"],
        "patches": [{"name": "0001-ops.patch", "status": "stopped"}],
        "stop": {
            "type": "patch",
            "name": "0001-ops.patch",
            "tree": seen["forked"],
            "merged": seen["stop"]["merged"],
            "files": ["mlx/ops.cpp"],
            "gitlinks": [],
            "modes": {"mlx/ops.cpp": "100644"},
        },
        "committing": False,
    }


def test_an_old_patch_stop_is_written_alike_and_continued(ov, w):
    path, seen = _stopped_on_a_patch(ov, w)
    hand = _hand_written_patch_stop(ov, w, seen)
    old = old_bytes(hand)
    # The new code writes the value the old one did, plus the rr-cache key of the conflict
    # (rebase/rerere.py), a key the old code never read; a stop without it is continued.
    assert list(seen["stop"]["keys"]) == ["mlx/ops.cpp"]
    with_keys = {**hand, "stop": {**hand["stop"], "keys": seen["stop"]["keys"]}}
    assert json.loads(path.read_bytes()) == with_keys
    path.write_bytes(old)
    status = cli(ov, "rebase", "--status")
    assert "patch 0001-ops.patch: stopped" in status.output
    assert "stopped at patch 0001-ops.patch" in status.output
    assert "then --continue (or --drop it, or --abort)" in status.output
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "ops.cpp"
    work.write_text(lines("ops", change={2: "ops 2 upstream and ours"}))
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output
    patch = (ov.root / "patches-rocm" / "0001-ops.patch").read_text()
    assert "-ops 2 upstream\n+ops 2 upstream and ours" in patch
    assert "patch 0001-ops.patch: resolved" in done.output


def test_an_old_patch_stop_is_aborted_then_dropped(ov, w):
    path, seen = _stopped_on_a_patch(ov, w)
    path.write_bytes(old_bytes(_hand_written_patch_stop(ov, w, seen)))
    before = records_hash(ov)  # nothing is written before the run completes
    assert cli(ov, "rebase", "--abort").exit_code == 0
    assert records_hash(ov) == before and not path.parent.exists()
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 1
    path.write_bytes(old_bytes(_hand_written_patch_stop(ov, w, seen)))
    dropped = cli(ov, "rebase", "--drop", "--format", "json")
    assert dropped.exit_code == 0, dropped.output
    report = json.loads(dropped.output.split("report written to")[0])
    assert list(report) == [
        "kind",
        "pins",
        "merge",
        "resolutions",
        "patches",
        "range_diff",
        "next_steps",
    ]
    assert report["patches"] == [
        {
            "name": "0001-ops.patch",
            "status": "skipped",
            "local_fix": 7,
            "note": "dropped by --drop; move or delete LOCAL_FIXES entry 7",
        }
    ]
    on_disk = (ov.root / ".overlay" / "last-rebase.json").read_bytes()
    assert on_disk == json.dumps(report, indent=2).encode()
    assert RebaseReport.from_json(report).to_json() == report


def test_an_old_resolution_stop_is_continued(ov, w):
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    path = ov.root / ".overlay" / "rebase" / "state.json"
    seen = json.loads(path.read_text())
    old = {
        "format": 1,
        "kind": "rebase",
        "old": {"pin": w.base, "fork": w.fork_commit, "merge_base": w.base},
        "new": {"pin": w.pin_conflict, "fork": w.fork_commit, "merge_base": w.base},
        "backup": seen["backup"],
        "resolutions": {},
        "forked": None,
        "patches": [],
        "stop": {
            "type": "resolution",
            "path": "mlx/core.cpp",
            "key": seen["stop"]["key"],
            "mode": "100644",
            "recorded": False,
        },
        "committing": False,
    }
    assert json.loads(path.read_bytes()) == old
    path.write_bytes(old_bytes(old))
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp"
    resolved = lines(
        "core",
        change={5: "core 5 upstream rewrite // rocm hook", 25: "core 25 upstream"},
    )
    work.write_text(resolved)
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output
    assert "resolution mlx/core.cpp: resolved" in done.output
    assert (
        ov.root / "patches-rocm" / "resolved" / "mlx" / "core.cpp"
    ).read_text() == resolved


def test_the_runs_records_compare_and_print_as_dataclasses_do():
    """The run's typed records (``Fields``: not dataclasses, whose import and method
    compiling a pin bump paid) keep what a dataclass gave them."""
    bases = Bases("a" * 40, "b" * 40, "c" * 40)
    one, same = PatchOutcome("0001-x.patch"), PatchOutcome("0001-x.patch")
    assert one == same and one != PatchOutcome("0001-x.patch", "clean")
    assert one != ResolutionOutcome("pending", "", "") and one != "0001-x.patch"
    assert repr(one) == (
        "PatchOutcome(name='0001-x.patch', status='pending', tree=None, blob=None, "
        "changed=False, note=None)"
    )
    with pytest.raises(TypeError):
        hash(one)
    with pytest.raises(AttributeError):
        one.stauts = "clean"  # type: ignore[attr-defined]  # a typo is an error
    first, second = (
        RunState("rebase", bases, bases, []),
        RunState("rebase", bases, bases, []),
    )
    first.patches.append(one)
    first.warnings.append("w")
    # each state has lists of its own, as default_factory gave
    assert second.patches == [] and second.warnings == [] and first != second
    assert RunState.from_json(json.loads(first.dumps())) == first
    stop = PatchStop("0001-x.patch", "t" * 40, "m" * 40, ["f"], {"f": "100644"})
    assert stop.fields() == {
        "name": "0001-x.patch",
        "tree": "t" * 40,
        "merged": "m" * 40,
        "files": ["f"],
        "modes": {"f": "100644"},
        "gitlinks": None,
        "keys": None,
    }


def test_a_pin_bumps_modules_do_not_import_dataclasses():
    out = fresh_python(
        "import sys, overlay.cli, overlay.cli.runs, overlay.rebase.run, "
        "overlay.rebase.plan, overlay.rebase.recover; "
        "print('dataclasses' in sys.modules)"
    )
    assert out.strip() == "False"
