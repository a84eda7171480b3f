"""The mutation check (overlay/suites/racelab/mutate.py, patches-rocm/suites/mutants.toml).

The file's own rules, the scratch layer, the table and the check's plumbing need no
toolchain (a stand-in builder and runner); applying every mutant to the real patched
layer needs the real mirrors; building and running a mutant needs the ROCm toolchain
too, and is skipped without it, with the reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from overlay.git.store import Store
from overlay.suites import racelab
from overlay.suites.config import load_suites, parse_suites
from overlay.suites.racelab import mutate
from overlay.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent
REAL_TOOLCHAIN = os.environ.get("OVERLAY_TOOLCHAIN_DIR") or os.path.join(
    os.path.expanduser("~"), ".cache", "overlay", "rocm-toolchain"
)

ONE = """
[[mutants]]
id = "m1"
fix = 2
part = "the part"
file = "mlx/x.cpp"
[[mutants.edits]]
find = "lock();"
replace = ""

[[uncaught]]
fix = 2
part = "another part"
reason = "no suite reaches it"
"""


def test_the_file_parses_into_mutants_and_uncaught_parts():
    mutants, uncaught = mutate.parse_mutants(ONE)
    assert [m.id for m in mutants] == ["m1"]
    assert mutants[0].edits == (mutate.Edit("lock();", "", 1),)
    assert uncaught == [mutate.Uncaught(2, "another part", "no suite reaches it")]


@pytest.mark.parametrize(
    "text, message",
    [
        ('[[mutants]]\nid = "a"\nfix = 1\npart = "p"\nfile = "f"\n', "has no edits"),
        ("[[mutants]]\nid = 'a b'\n", "not a plain name"),
        (ONE + ONE.split("[[uncaught]]")[0], "repeated"),
        (
            '[[uncaught]]\nfix = 0\npart = "p"\nreason = "r"\n',
            "`fix` must be an integer",
        ),
        ("[[mutants]\n", "mutants.toml"),
    ],
)
def test_an_invalid_file_is_a_usage_error(text, message):
    with pytest.raises(mutate.MutantError, match=message) as err:
        mutate.parse_mutants(text)
    assert err.value.exit_code == 2


def test_an_edit_must_match_its_count():
    (m,), _ = mutate.parse_mutants(ONE)
    assert mutate.apply_mutant("a; lock(); b;", m) == "a;  b;"
    for text in ("a; b;", "lock(); lock();"):
        with pytest.raises(mutate.MutantError, match="edit 1 occurs") as err:
            mutate.apply_mutant(text, m)
        assert "mutants.toml" in (err.value.hint or "")
    every = mutate.Mutant("all", 2, "p", "f", (mutate.Edit("x", "y", 0),))
    assert mutate.apply_mutant("x x x", every) == "y y y"


def test_the_scratch_layer_links_everything_but_the_mutated_file(tmp_path):
    export = tmp_path / "export"
    (export / "mlx").mkdir(parents=True)
    (export / "mlx" / "x.cpp").write_text("a; lock(); b;\n")
    (export / "mlx" / "y.h").write_text("header\n")
    (m,), _ = mutate.parse_mutants(ONE)
    dest = tmp_path / "scratch"
    mutate.scratch_layer(str(export), str(dest), m)
    assert (dest / "mlx" / "x.cpp").read_text() == "a;  b;\n"
    assert (export / "mlx" / "x.cpp").read_text() == "a; lock(); b;\n"
    assert (
        os.stat(dest / "mlx" / "y.h").st_ino == os.stat(export / "mlx" / "y.h").st_ino
    )


def test_the_repository_file_names_real_children_and_covering_suites():
    """Every mutant's file is compiled by a lab child, and some race-lab suite proving
    its fix runs that child: nothing in the file can be silently left unrun."""
    mutants, uncaught = mutate.load_mutants(str(ROOT))
    suites = load_suites(str(ROOT / "patches-rocm/suites/suites.toml"))
    assert {m.fix for m in mutants} == {1, 2, 3} and uncaught
    for m in mutants:
        child = mutate.child_for(m.file)
        assert mutate.covering_suites(suites, m.fix, child), m.id


SUITES = parse_suites(
    """
[suites.a_tsan]
child = "hipblaslt_race_tsan"
model = "race-lab"
proves = 2
backend = "cpu"
[suites.b_asan]
child = "hipblaslt_race_asan"
model = "race-lab"
proves = 2
backend = "cpu"
[suites.other]
child = "rocblas_race_tsan"
model = "race-lab"
proves = 1
backend = "cpu"
"""
)


def test_the_check_builds_each_mutant_and_runs_the_covering_suites(
    tmp_path, monkeypatch
):
    """Stand-ins for the layer, the builder and the runner: the plumbing and the table."""
    (tmp_path / "patches-rocm" / "suites").mkdir(parents=True)
    (tmp_path / "patches-rocm" / "suites" / "mutants.toml").write_text(
        ONE.replace("mlx/x.cpp", "mlx/backend/rocm/gemms/hipblaslt_gemm.cpp")
    )

    class Layers:
        patched = "a" * 40

    class StandIn:  # the workspace: its root, no store, one layer
        root = str(tmp_path)
        store = None

        def layers(self, **_kw):
            return Layers()

    def fake_export(store, tree, dest):
        path = Path(dest) / "mlx/backend/rocm/gemms"
        path.mkdir(parents=True, exist_ok=True)
        (path / "hipblaslt_gemm.cpp").write_text("x; lock(); y;\n")

    monkeypatch.setattr("overlay.export.export_tree", fake_export)
    built = []

    def builder(root, src, out, *, tree, label, children, sanitizers):
        built.append((label, tree[:41], [c.name for c in children], sanitizers))
        os.makedirs(out, exist_ok=True)
        return None

    def runner(suite, child_dir, runs, label):
        failed = runs if label.startswith("mutant") and suite.name == "a_tsan" else 0
        return mutate.Cell(suite.name, failed=failed, runs=runs)

    result = mutate.run_check(
        StandIn(), SUITES, runs=4, need=4, runner=runner, builder=builder
    )
    assert [b[0] for b in built] == ["baseline-hipblaslt_race", "mutant-m1"]
    assert built[1][1].startswith("a" * 40) and built[1][3] == ["tsan", "asan"]
    assert not result.missed and not result.baseline_failed
    table = result.markdown()
    assert "host model, not a GPU result" in table
    assert (
        "| 2 | the part | `a_tsan` 4/4, `b_asan` 0/4 | caught (4/4, `a_tsan`) |"
        in table
    )
    assert "| 2 | another part | not run | **uncaught**: no suite reaches it |" in table
    scratch = tmp_path / "build/race-lab/mutants/m1/src/mlx/backend/rocm/gemms"
    assert (scratch / "hipblaslt_gemm.cpp").read_text() == "x;  y;\n"


def test_a_part_below_the_threshold_is_listed_as_not_caught():
    (m,), _ = mutate.parse_mutants(ONE)
    row = mutate.Row(2, "the part", m, [mutate.Cell("a_tsan", failed=18, runs=20)])
    assert not mutate.caught(row, 20, 19)
    assert "**not caught**" in mutate.render_table([row], [], 20, 19)


def test_an_unknown_mutant_id_is_named(tmp_path):
    (tmp_path / "patches-rocm" / "suites").mkdir(parents=True)
    (tmp_path / "patches-rocm" / "suites" / "mutants.toml").write_text(ONE)
    with pytest.raises(mutate.MutantError, match="unknown mutant id.*nope"):
        mutate.run_check(Workspace.of(str(tmp_path), Store()), SUITES, only=["nope"])


# --------------------------------------------------------------------------- real mirrors


def test_every_mutant_applies_to_the_patched_layer(real_mirrors, tmp_path):
    """The patch and its mutants move together: each edit matches the patched file."""
    from overlay.engine.layers import compute_layers
    from overlay.export import export_tree
    from overlay.git.store import Store
    from overlay.records.manifest import load_manifest

    store = Store(str(tmp_path / "store.git"))
    tree = compute_layers(store, load_manifest(str(ROOT)), str(ROOT)).patched
    export_tree(store, tree, str(tmp_path / "src"))
    mutants, _ = mutate.load_mutants(str(ROOT))
    for m in mutants:
        text = (tmp_path / "src" / m.file).read_text()
        assert mutate.apply_mutant(text, m) != text, m.id


def test_a_mutant_is_caught_and_the_baseline_is_clean(real_mirrors, tmp_path):
    """Needs the ROCm toolchain: the release-order half-fix of fix 2, built and run
    twice with its covering suites (a small run count: this is the tool's test, the
    table of docs/race-lab.md has 20 runs)."""
    from overlay.git.store import Store

    os.environ["OVERLAY_TOOLCHAIN_DIR"] = REAL_TOOLCHAIN
    try:
        racelab.find_lab_compiler(str(ROOT))
    except racelab.LabError as exc:
        pytest.skip(f"needs the ROCm toolchain for the race lab: {exc.message}")
    suites = load_suites(str(ROOT / "patches-rocm/suites/suites.toml"))
    suites = {
        k: v
        for k, v in suites.items()
        if k in ("hipblaslt_release_ws_tsan", "hipblaslt_late_ws0_tsan")
    }
    result = mutate.run_check(
        Workspace.of(str(ROOT), Store(str(tmp_path / "store.git"))),
        suites,
        runs=2,
        need=2,
        only=["hipblaslt-release-order"],
        results_dir=str(tmp_path / "results"),
        out_root=str(tmp_path / "lab"),
    )
    assert not result.baseline_failed, result.markdown()
    (row,) = result.rows[1:]
    cells = {c.suite: c for c in row.cells}
    assert cells["hipblaslt_release_ws_tsan"].failed == 2, result.markdown()
    assert "workspace-of-destroyed-stream" in cells["hipblaslt_release_ws_tsan"].kinds


def test_the_parts_that_went_uncaught_are_caught(real_mirrors, tmp_path):
    """Needs the ROCm toolchain: three parts the table once listed below 19 of 20, each
    with the suite meant to catch it, twice (the table has 20 runs): the relaxed init
    flag by the weak-ordering stress (0 of 20 when thread 0 ran a whole GEMM before the
    others read the handle), the release's capture check by the release-under-capture
    suite, and fix 1's check under its mutex by the availability route line."""
    from overlay.git.store import Store

    os.environ["OVERLAY_TOOLCHAIN_DIR"] = REAL_TOOLCHAIN
    try:
        racelab.find_lab_compiler(str(ROOT))
    except racelab.LabError as exc:
        pytest.skip(f"needs the ROCm toolchain for the race lab: {exc.message}")
    wanted = {
        "hipblaslt-init-relaxed": "hipblaslt_late_ws0_tsan",
        "hipblaslt-release-capture-unchecked": "hipblaslt_release_capture_ws_tsan",
        "rocblas-init-unlocked": "rocblas_race_ws_tsan",
    }
    suites = load_suites(str(ROOT / "patches-rocm/suites/suites.toml"))
    suites = {k: v for k, v in suites.items() if k in wanted.values()}
    result = mutate.run_check(
        Workspace.of(str(ROOT), Store(str(tmp_path / "store.git"))),
        suites,
        runs=2,
        need=2,
        only=list(wanted),
        results_dir=str(tmp_path / "results"),
        out_root=str(tmp_path / "lab"),
    )
    assert not result.baseline_failed, result.markdown()
    rows = {r.mutant.id: r for r in result.rows if r.mutant is not None}
    kinds = {}
    for mid, suite in wanted.items():
        cells = {c.suite: c for c in rows[mid].cells}
        assert cells[suite].failed == 2, result.markdown()
        kinds[mid] = cells[suite].kinds
    assert "capture-violation" in kinds["hipblaslt-release-capture-unchecked"]
    assert set(kinds["rocblas-init-unlocked"]) == {"marker"}


def test_the_command_names_an_unknown_mutant_with_exit_2(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from overlay.cli.suites import suite

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("OVERLAY_GIT_DIR", str(tmp_path / "store.git"))
    done = CliRunner().invoke(suite, ["mutate", "--mutant", "nope"])
    assert done.exit_code == 2, done.output
    assert "unknown mutant id(s): nope" in done.output
