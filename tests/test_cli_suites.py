"""``overlay suite ...`` through click's CliRunner on the ``suite`` group."""

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from gitfixtures import cli
from seriesfixtures import PDIR

from overlay.cli.suites import suite

REPO = Path(__file__).resolve().parents[1]
CHILDREN = Path(__file__).resolve().parent / "children"
NO_GPU = {"OVERLAY_SUITE_HARDWARE": "none", "OVERLAY_SUITE_MODELS": "none"}


def child(script, *args):
    return [sys.executable, "-S", str(CHILDREN / script), *map(str, args)]


def invoke(*args, env=NO_GPU):
    return CliRunner().invoke(
        suite, [str(a) for a in args], env=env, catch_exceptions=False
    )


@pytest.fixture
def suites_file(tmp_path):
    path = tmp_path / "suites.toml"
    path.write_text(
        f"[suites.clean]\nchild = {json.dumps(child('flaky.py', 0.0))}\nruns = 3\n"
        '[[suites.clean.markers]]\nstream = "stdout"\ntext = "overlay-suite: done"\nexpect = "exactly 1"\n'
        f"[suites.flaky]\nchild = {json.dumps(child('flaky.py', 0.3, 'd'))}\n"
        f'[suites.gpu]\nchild = "not_built"\nbackend = "rocm"\nhardware = "amd-gpu"\nproves = 2\n'
        f'[suites.missing]\nchild = "not_built_either"\nruns = 1\n'
    )
    return path


def test_plan_prints_four_for_seed_003():
    r = invoke("plan", "--baseline", "0.7", "--confidence", "0.99")
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[0] == "4"
    assert "0.0081" in lines[1]
    q = invoke("plan", "--baseline", "0.7", "--confidence", "0.99", "--quiet")
    assert q.output == "4\n"
    assert (
        invoke("plan", "--baseline", "0.7", "-q").output == "4\n"
    )  # default confidence 0.99


def test_plan_bad_baseline_is_usage_error():
    r = CliRunner().invoke(suite, ["plan", "--baseline", "0"])
    assert r.exit_code == 2
    assert "overlay: baseline must be in (0, 1]" in r.output


def test_list_repository_suites_without_gpu():
    r = invoke("--suites", REPO / "patches-rocm" / "suites" / "suites.toml", "list")
    assert r.exit_code == 0
    assert "would be SKIPPED: needs amd-gpu" in r.output
    data = json.loads(
        invoke(
            "--suites",
            REPO / "patches-rocm" / "suites" / "suites.toml",
            "list",
            "--format",
            "json",
        ).output
    )
    runs_here = {d["name"]: d["runs_here"] for d in data}
    assert runs_here == {
        "rocblas_handle_concurrency": False,
        "hipblaslt_concurrency": False,
        "pinned_alias": False,
        "pinned_alias_cuda": False,
        "hipblaslt_race_ws_tsan": False,
        "hipblaslt_race_ws0_tsan": False,
        "hipblaslt_race_ws_asan": False,
        "hipblaslt_race_ws0_asan": False,
        "racelab_model": False,
        "rocblas_race_ws_tsan": False,
        "rocblas_race_ws0_tsan": False,
        "rocblas_race_ws_asan": False,
        "rocblas_race_ws0_asan": False,
        "hipblaslt_release_ws_tsan": False,
        "hipblaslt_late_ws0_tsan": False,
        "rocblas_twostreams_ws_tsan": False,
        "hipblaslt_release_cbfirst_ws_tsan": False,
        "hipblaslt_capture_ws_tsan": False,
        "hipblaslt_release_capture_ws_tsan": False,
        "pinned_alias_free_tsan": False,
        "pinned_alias_stack_tsan": False,
    }
    skips = {d["name"]: d["skip_reason"] for d in data}
    assert (
        skips["racelab_model"]
        == "needs the race-lab host model's toolchain: OVERLAY_SUITE_MODELS='none'"
    )
    text = invoke(
        "--suites", REPO / "patches-rocm" / "suites" / "suites.toml", "list"
    ).output
    assert "child: hipblaslt_race_tsan  race-lab: host model, not a GPU result" in text


def test_run_exit_codes(suites_file, tmp_path):
    res = tmp_path / "res"
    ok = invoke("--suites", suites_file, "run", "clean", "gpu", "--results", res)
    assert ok.exit_code == 0, ok.output
    assert "clean  PASSED   0 of 3 failed" in ok.output
    assert "gpu    SKIPPED  needs amd-gpu" in ok.output
    bad = invoke("--suites", suites_file, "run", "flaky", "--results", res)
    assert bad.exit_code == 1
    assert "3 of 10 failed, 95% interval [0.0667, 0.6525]; fail 3" in bad.output
    # --runs overrides the suite's count: runs 1-9 of seed d hold two failures.
    fewer = invoke(
        "--suites",
        suites_file,
        "run",
        "flaky",
        "--runs",
        "9",
        "--format",
        "json",
        "--results",
        res,
    )
    data = json.loads(fewer.output)
    assert (
        data["suites"][0]["summary"]["runs"],
        data["suites"][0]["summary"]["failed"],
    ) == (9, 2)
    assert fewer.exit_code == 1


def test_run_usage_errors(suites_file, tmp_path):
    r = CliRunner().invoke(
        suite,
        ["--suites", str(suites_file), "run", "nope", "--results", str(tmp_path)],
        env=NO_GPU,
    )
    assert r.exit_code == 2 and 'overlay: unknown suite "nope"' in r.output
    r = CliRunner().invoke(
        suite,
        ["--suites", str(suites_file), "run", "missing", "--results", str(tmp_path)],
        env=NO_GPU,
    )
    assert r.exit_code == 2 and "not_built_either" in r.output and "hint:" in r.output
    r = CliRunner().invoke(
        suite, ["--suites", str(tmp_path / "absent.toml"), "list"], env=NO_GPU
    )
    assert r.exit_code == 2 and "no such file" in r.output
    r = CliRunner().invoke(
        suite, ["--suites", str(suites_file), "run", "clean", "--runs", "0"], env=NO_GPU
    )
    assert r.exit_code == 2


def test_run_junit_output_file(suites_file, tmp_path):
    out = tmp_path / "suites.xml"
    r = invoke(
        "--suites",
        suites_file,
        "run",
        "clean",
        "gpu",
        "--format",
        "junit",
        "-o",
        out,
        "--results",
        tmp_path / "res",
    )
    assert r.exit_code == 0
    root = ET.parse(out).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == (
        "4",
        "0",
        "1",
    )
    assert out.read_text() == r.output


def test_repository_suites_with_a_built_child_dir(tmp_path):
    """The real suites.toml on an NVIDIA host: the CUDA pinned suite runs from --child-dir, the ROCm ones skip."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    prog = bin_dir / "pinned_alias"
    prog.write_text("#!/bin/sh\necho 'overlay-suite: done'\n")
    prog.chmod(0o755)
    r = CliRunner().invoke(
        suite,
        [
            "--suites",
            str(REPO / "patches-rocm" / "suites" / "suites.toml"),
            "run",
            "--runs",
            "2",
            "--child-dir",
            str(bin_dir),
            "--results",
            str(tmp_path / "res"),
            "--format",
            "json",
        ],
        env={"OVERLAY_SUITE_HARDWARE": "nvidia-gpu", "OVERLAY_BACKEND": "cuda"},
    )
    assert r.exit_code == 0, r.output
    by_name = {s["suite"]: s for s in json.loads(r.output)["suites"]}
    assert by_name["pinned_alias_cuda"]["status"] == "ran"
    assert by_name["pinned_alias_cuda"]["summary"]["failed"] == 0
    for name in ("hipblaslt_concurrency", "rocblas_handle_concurrency", "pinned_alias"):
        assert by_name[name]["status"] == "skipped"
        assert by_name[name]["skip_reason"].startswith("needs amd-gpu")


# --------------------------------------------------------------------------- host-model (race lab) suites

LAB = {"OVERLAY_SUITE_HARDWARE": "none", "OVERLAY_SUITE_MODELS": "race-lab"}


@pytest.fixture
def lab_suites(tmp_path):
    path = tmp_path / "suites.toml"
    path.write_text(
        f'[suites.lab]\nchild = {json.dumps(child("reports.py", 0))}\nruns = 2\nmodel = "race-lab"\n'
        'backend = "cpu"\nproves = 2\n'
        '[[suites.lab.markers]]\nstream = "stdout"\ntext = "overlay-suite: done"\nexpect = "exactly 1"\n'
        f"[suites.clean]\nchild = {json.dumps(child('flaky.py', 0.0))}\nruns = 1\n"
    )
    return path


def test_run_host_models_only_and_their_skip(lab_suites, tmp_path):
    res = tmp_path / "res"
    r = invoke(
        "--suites",
        lab_suites,
        "run",
        "--host-models",
        "--results",
        res,
        "--child-dir",
        tmp_path,
        env=LAB,
    )
    assert r.exit_code == 0, r.output
    assert "lab    PASSED   0 of 2 failed" in r.output and "clean" not in r.output
    assert "race-lab: host model, not a GPU result" in r.output
    skipped = invoke("--suites", lab_suites, "run", "--host-models", "--results", res)
    assert skipped.exit_code == 0
    assert "lab    SKIPPED  needs the race-lab host model's toolchain" in skipped.output
    only_gpu = tmp_path / "gpu.toml"
    only_gpu.write_text('[suites.g]\nchild = "x"\n')
    none = invoke("--suites", only_gpu, "run", "--host-models", "--results", res)
    assert none.exit_code == 2 and "no host-model suite selected" in none.output


def test_host_model_suites_build_the_lab_when_no_child_dir_is_given(
    lab_suites, tmp_path, monkeypatch
):
    """Without --child-dir, run and ab build the race lab (here a stand-in) and run from there."""
    from overlay.suites import racelab

    built = []

    def fake_build(ws, layer="patched", **kw):
        built.append(layer)
        return racelab.LabBuild(
            out_dir=str(tmp_path / layer),
            tree="0" * 40,
            label=layer,
            programs=[],
            compiled=0,
            seconds=0.0,
        )

    monkeypatch.setattr(racelab, "build_layer", fake_build)
    r = invoke(
        "--suites",
        lab_suites,
        "run",
        "lab",
        "clean",
        "--results",
        tmp_path / "res",
        env=LAB,
    )
    assert r.exit_code == 0, r.output
    assert built == ["patched"]  # once, for the host-model suite only
    ab = invoke(
        "--suites",
        lab_suites,
        "ab",
        "lab",
        "--without-layer",
        "forked",
        "--runs",
        "2",
        "--results",
        tmp_path / "res",
        env=LAB,
    )
    # The child is an absolute argv (python), so both columns run it: a guard, on a host model.
    assert ab.exit_code == 0, ab.output
    assert built == ["patched", "forked", "patched"]  # fix removed, then with fix
    assert "GUARD: " in ab.output and "HOST-MODEL: " in ab.output
    both = invoke(
        "--suites",
        lab_suites,
        "ab",
        "lab",
        "--without-layer",
        "forked",
        "--without-child",
        "x",
        env=LAB,
    )
    assert both.exit_code == 2 and "give exactly one of" in both.output


def test_env_option_sets_a_variable_on_top_of_the_suite_and_is_recorded(tmp_path):
    path = tmp_path / "suites.toml"
    script = tmp_path / "show.py"
    script.write_text(
        "import os\nprint(os.environ.get('X'), os.environ.get('Y'))\nprint('overlay-suite: done')\n"
    )
    path.write_text(
        f"[suites.e]\nchild = {json.dumps([sys.executable, str(script)])}\nruns = 1\n"
        'env-set = { X = "suite" }\nenv-remove = ["Y"]\n'
    )
    r = invoke(
        "--suites",
        path,
        "run",
        "e",
        "--env",
        "X=cli",
        "--env",
        "Y=back",
        "--format",
        "json",
        "--results",
        tmp_path / "res",
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)["suites"][0]
    assert (
        data["settings"]["env_set"] == {"X": "cli", "Y": "back"}
        and data["settings"]["env_remove"] == []
    )
    out = Path(data["directory"]) / "run-001.out"
    assert out.read_text().splitlines()[0] == "cli back"
    bad = invoke(
        "--suites",
        path,
        "run",
        "e",
        "--env",
        "no-equals",
        "--results",
        tmp_path / "res",
    )
    assert bad.exit_code == 2 and "expected NAME=VALUE" in bad.output


@pytest.mark.parametrize(
    "text",
    ["", "# suites come later\n", "[suites]\n"],
    ids=["empty", "comment", "table"],
)
def test_suite_list_on_a_file_without_suites_is_one_line_and_exit_2(clean, text):
    suites = clean.root / PDIR / "suites"
    suites.mkdir(exist_ok=True)
    (suites / "suites.toml").write_text(text)
    for args in (["suite", "list"], ["suite", "run", "--runs", "1"]):
        result = cli(clean, *args)
        assert result.exit_code == 2, (args, result.output)
        lines = [ln for ln in result.output.splitlines() if ln.startswith("overlay:")]
        assert len(lines) == 1 and "declares no suite" in lines[0], result.output
