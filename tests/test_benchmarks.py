"""The benchmark scripts' shared runner (benchmarks/_record.py): each figure recorded as
the median of the runs with their spread and the load, every target checked on the
medians, a missed one named and the exit 1; and the README's table made from several
invocations' records (benchmarks/summarize.py); every script loads (--help)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

from _record import record, repeat_runs  # noqa: E402
from summarize import main as summarize  # noqa: E402


def _runs(*figures: dict):
    return lambda i: figures[i]


def test_each_figure_is_the_median_of_the_runs_with_its_spread():
    out = repeat_runs(
        _runs(
            {"a": {"ratio": 1.0, "s": 0.3}, "b": 5},
            {"a": {"ratio": 3.0, "s": 0.1}, "b": 7},
            {"a": {"ratio": 2.0, "s": 0.2}, "b": 6},
        ),
        3,
        {"a.ratio": 2.5},
    )
    assert out["median"] == {"a": {"ratio": 2.0, "s": 0.2}, "b": 6.0}
    assert out["spread"] == {
        "a": {"ratio": [1.0, 3.0], "s": [0.1, 0.3]},
        "b": [5.0, 7.0],
    }
    assert out["met"] and out["missed"] == []
    assert len(out["load_average_1min"]) == 4  # before each run and after the last


def test_a_target_is_checked_on_the_median_not_the_best_run():
    # One run meets the target; the median of the three does not.
    with pytest.raises(SystemExit, match="targets name no figure: other"):
        repeat_runs(
            _runs({"r": 0.9}, {"r": 1.3}, {"r": 1.2}), 3, {"r": 1.0, "other": 9}
        )
    out = repeat_runs(_runs({"r": 0.9}, {"r": 1.3}, {"r": 1.2}), 3, {"r": 1.0})
    assert out["median"]["r"] == 1.2 and out["missed"] == ["r"] and not out["met"]


def test_fewer_than_three_runs_are_refused():
    with pytest.raises(SystemExit, match="at least 3"):
        repeat_runs(_runs({"r": 1.0}, {"r": 1.0}), 2, {})


def test_a_missed_target_exits_1_and_is_named(tmp_path, capsys):
    out = repeat_runs(_runs({"r": 2.0}, {"r": 2.0}, {"r": 2.0}), 3, {"r": 1.0})
    path = tmp_path / "result.json"
    assert record(out, str(path)) == 1
    assert "missed: r" in capsys.readouterr().err
    written = json.loads(path.read_text())
    assert written["missed"] == ["r"] and written["cpu_count"] and written["date"]
    met = repeat_runs(_runs({"r": 0.5}, {"r": 0.5}, {"r": 0.5}), 3, {"r": 1.0})
    assert record(met, str(path)) == 0


def _invocation(
    tmp_path: Path, name: str, ratio: float, low: float, high: float
) -> str:
    path = tmp_path / name
    path.write_text(
        json.dumps(
            {
                "what": "the bump",
                "median": {"median_cpu_s": {"bump": ratio / 10}, "bump_ratio": ratio},
                "spread": {
                    "median_cpu_s": {"bump": [low / 10, high / 10]},
                    "bump_ratio": [low, high],
                },
                "targets": {"bump_ratio": 3.0},
            }
        )
    )
    return str(path)


def test_the_table_gives_the_median_of_the_invocations_and_the_spread_of_all_runs(
    tmp_path, capsys
):
    files = [
        _invocation(tmp_path, "1.json", 3.31, 3.12, 3.32),
        _invocation(tmp_path, "2.json", 2.90, 2.80, 3.40),
        _invocation(tmp_path, "3.json", 3.05, 2.95, 3.10),
    ]
    assert summarize([*files, "--label", "bump_ratio=pin bump"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[2] == (
        "| pin bump | 3.05x | 3.31x, 2.90x, 3.05x | 2.80x to 3.40x | 3.00x | **missed** |"
    )
    assert table[3] == (
        "| median_cpu_s.bump | 0.305 s | 0.331 s, 0.290 s, 0.305 s "
        "| 0.280 s to 0.340 s |  |  |"
    )
    assert summarize([files[1], "--only", "bump_ratio"]) == 0
    assert capsys.readouterr().out.splitlines()[2].endswith("| 3.00x | met |")


def test_the_table_refuses_records_of_different_scripts(tmp_path, capsys):
    first = _invocation(tmp_path, "1.json", 3.31, 3.12, 3.32)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"what": "export", "median": {}, "spread": {}}))
    listing = tmp_path / "list.json"
    listing.write_text("[]")
    for second, said in (
        (other, "the files record different scripts"),
        (listing, f"{listing}: not a benchmark record"),
    ):
        with pytest.raises(SystemExit) as ended:
            summarize([first, str(second)])
        assert ended.value.code == 2
        assert capsys.readouterr().err == f"summarize: {said}\n"


@pytest.mark.parametrize(
    "script", sorted(p.name for p in BENCH.glob("*_bench.py")) + ["suite_overhead.py"]
)
def test_every_script_loads_and_says_how_it_is_run(script):
    """A script's imports of overlay's modules break with a move of the code; its
    --help loads all of them (no mirror, no store needed) and must still work."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:"), proc.stdout


def test_the_suite_overhead_script_records_medians_spread_and_load(tmp_path):
    """The one script that needs no mirrors, run small: its record has what every
    script's has (never a best run), and its exit status says whether the target held."""
    out = tmp_path / "so.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "suite_overhead.py")]
        + ["--children", "5", "--repeat", "1", "--runs", "3", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    data = json.loads(out.read_text())
    assert data["runs"] == 3 and len(data["load_average_1min"]) == 4
    low, high = data["spread"]["overhead_per_run_ms"]["runner"]
    assert low <= data["median"]["overhead_per_run_ms"]["runner"] <= high
    assert set(data["targets"]) == {
        "overhead_per_run_ms.runner",
        "overhead_per_run_ms.runner+markers",
    }
    assert proc.returncode == (0 if data["met"] else 1), proc.stderr


def test_the_peer_layout_holds_what_the_patched_layer_adds_or_changes(ov, w, tmp_path):
    """rebase_bench.py --peer lays the peer's whole-file overlay out from the records:
    each file the patched layer adds to the pin or changes in it, with the patch's
    bytes, and UPSTREAM with the three commits; nothing the layers leave as the pin
    has it."""
    from gitfixtures import git, lines
    from rebase_bench import peer_layout
    from seriesfixtures import add_patch

    from overlay.git.store import Store

    device = "mlx/backend/rocm/device.cpp"
    patched = lines("device", change={9: "d9 patched"})
    add_patch(ov, "0001-device.patch", {device: patched})
    dest = peer_layout(Store(), str(ov.root), str(tmp_path / "peer"))
    files = sorted(
        os.path.relpath(os.path.join(d, f), dest)
        for d, _dirs, names in os.walk(dest)
        for f in names
    )
    pin_tree = git(w.upstream.path, "ls-tree", "-r", "--name-only", w.base)
    assert device in files and (Path(dest) / device).read_text() == patched
    assert "mlx/core.cpp" in files  # a core file the fork changes
    assert "mlx/ops.cpp" not in files and "mlx/ops.cpp" in pin_tree  # the pin's
    upstream = (Path(dest) / "UPSTREAM").read_text()
    assert f"commit: {w.fork_commit}\n" in upstream
    assert f"retargeted_to_mlx_pin: {w.base}\n" in upstream
    assert f"fork_upstream_merge_base: {w.base}\n" in upstream


def test_the_lower_bound_imports_what_the_command_imported_then_runs_its_merge(
    tmp_path,
):
    """rebase_bench.py's lower bound: the names come from the command's own import
    report, in its order, without the header or ``__main__``; the program imports
    them and runs the merge, whose status 1 (a conflict) is an answer and 2 a failure."""
    from rebase_bench import IMPORTS_THEN_RUN, imported_modules

    names = imported_modules(
        [sys.executable, "-c", "import json, difflib"],
        dict(os.environ),
        str(tmp_path / "modules.txt"),
    )
    listed = Path(names).read_text().split()
    assert "json" in listed and "difflib" in listed and "json.decoder" in listed
    assert listed.index("json.decoder") < listed.index("json")  # children first
    assert "__main__" not in listed and "imported" not in listed
    assert len(listed) == len(set(listed))

    # a module whose import leaves a mark, and a name that is no module here
    (tmp_path / "marks_import.py").write_text(
        "open(__file__ + '.imported', 'w').close()\n"
    )
    with open(names, "a") as fh:
        fh.write("no_such_module_here\nmarks_import\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    def lower_bound(status: int) -> int:
        merge = [sys.executable, "-c", f"import sys; sys.exit({status})"]
        return subprocess.run(
            [sys.executable, "-c", IMPORTS_THEN_RUN, names, *merge], env=env
        ).returncode

    assert lower_bound(1) == 0  # a conflict is the merge's answer
    assert (tmp_path / "marks_import.py.imported").exists()
    assert lower_bound(2) == 1  # a failure is not
    with pytest.raises(SystemExit):
        imported_modules(
            [sys.executable, "-c", "raise SystemExit(3)"],
            dict(os.environ),
            str(tmp_path / "none.txt"),
        )
