"""The runner against small child programs in tests/children/.

Every child is a Python script run with ``sys.executable``. Expected counts come
from the children's definitions: flaky.py fails run i when
``random.Random(f"{seed}:{i}").random() < rate``, which for seed "d" at 0.3 is
runs 1, 2 and 10 of 10, and for seed "c" at 0.7 is runs 1, 2, 3, 7, 8, 9, 10.
"""

import json
import os
import signal
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from procfixtures import gone, python_child

from overlay.errors import EXIT_USAGE
from overlay.suites.config import parse_suites
from overlay.suites.report import render_ab, render_results
from overlay.suites.runner import (
    Platform,
    SuiteRunError,
    detect_platform,
    load_ab,
    load_result,
    resolve_child,
    run_ab,
    run_suite,
    skip_reason,
)

CHILDREN = Path(__file__).resolve().parent / "children"
NO_GPU = Platform(
    hardware=frozenset(),
    backends=frozenset({"cpu"}),
    reasons={"amd-gpu": "test: no AMD GPU", "nvidia-gpu": "test: no NVIDIA GPU"},
)


def child(script, *args):
    return [sys.executable, "-S", str(CHILDREN / script), *map(str, args)]


def make_suite(name="s", argv=None, **fields):
    """One suite from TOML text, so the tests go through the real parser."""
    lines = [f"[suites.{name}]", f"child = {json.dumps(argv)}"]
    markers = fields.pop("markers", [])
    for k, v in fields.items():
        if isinstance(v, dict):
            v_text = (
                "{ " + ", ".join(f"{a} = {json.dumps(b)}" for a, b in v.items()) + " }"
            )
        else:
            v_text = json.dumps(v)
        lines.append(f"{k} = {v_text}")
    for stream, text, expect in markers:
        lines += [
            f"[[suites.{name}.markers]]",
            f"stream = {json.dumps(stream)}",
            f"text = {json.dumps(text)}",
            f"expect = {json.dumps(expect)}",
        ]
    return parse_suites("\n".join(lines) + "\n")[name]


DONE = ("stdout", "overlay-suite: done", "exactly 1")


def test_flaky_counts_kinds_interval_and_files(tmp_path):
    s = make_suite("flaky", child("flaky.py", 0.3, "d"), markers=[DONE])
    r = run_suite(s, str(tmp_path), platform=NO_GPU)
    assert (r.status, r.n, r.failed) == ("ran", 10, 3)
    assert [x.index for x in r.runs if x.failed] == [1, 2, 10]
    assert r.kinds() == {"fail": 3}
    assert all(x.returncode == 1 for x in r.runs if x.failed)
    lo, hi = r.interval()
    assert (round(lo, 4), round(hi, 4)) == (0.0667, 0.6525)
    # Outputs kept per run under <results>/<suite>/<id>/.
    d = Path(r.directory)
    assert d.parent == tmp_path / "flaky"
    assert (d / "run-001.err").read_text() == "flaky: run 1 failed\n"
    assert (d / "run-003.out").read_text() == "overlay-suite: done\n"
    assert sorted(p.name for p in d.iterdir()) == sorted(
        [f"run-{i:03d}.{e}" for i in range(1, 11) for e in ("out", "err")]
        + ["result.json"]
    )
    stored = json.loads((d / "result.json").read_text())
    assert stored["summary"]["failed"] == 3 and stored["summary"]["kinds"] == {
        "fail": 3
    }
    again = load_result(str(d))
    assert (again.n, again.failed, again.kinds()) == (10, 3, {"fail": 3})
    text = render_results([r])
    assert "3 of 10 failed, 95% interval [0.0667, 0.6525]; fail 3" in text


def test_all_pass_and_zero_interval(tmp_path):
    s = make_suite("clean", child("flaky.py", 0.0), markers=[DONE])
    r = run_suite(s, str(tmp_path), platform=NO_GPU)
    assert (r.n, r.failed, r.kinds()) == (10, 0, {})
    assert [round(x, 4) for x in r.interval()] == [0.0, 0.3085]
    assert "PASSED   0 of 10 failed, 95% interval [0.0000, 0.3085]" in render_results(
        [r]
    )


def test_hang_is_killed_at_the_deadline(tmp_path):
    s = make_suite("hang", child("hang.py"), runs=2, deadline=0.5)
    r = run_suite(s, str(tmp_path), platform=NO_GPU)
    assert [x.kind for x in r.runs] == ["hang", "hang"]
    assert all(x.signal == signal.SIGKILL and x.returncode is None for x in r.runs)
    assert all(x.duration_s >= 0.5 for x in r.runs)
    # Output written before the kill is kept.
    assert (Path(r.directory) / "run-001.out").read_text() == "hang: started\n"
    assert "still running at the 0.5 s deadline" in render_results([r])


@pytest.mark.parametrize("sig", ["SIGSEGV", "SIGABRT"])
def test_death_by_signal_is_a_crash(tmp_path, sig):
    s = make_suite("crash", child("crash.py", sig), runs=2, markers=[DONE])
    r = run_suite(s, str(tmp_path), platform=NO_GPU)
    assert r.kinds() == {"crash": 2}
    assert all(x.signal == getattr(signal, sig) for x in r.runs)
    assert f"killed by {sig}" in render_results([r])


def test_marker_printed_twice(tmp_path):
    s = make_suite(
        "twice",
        child("marker_twice.py"),
        runs=3,
        markers=[("stderr", "[hipBLASLt caps] device", "exactly 1"), DONE],
    )
    r = run_suite(s, str(tmp_path), platform=NO_GPU)
    assert r.kinds() == {"marker": 3}
    assert r.runs[0].returncode == 0
    assert r.runs[0].marker_failures == [
        'stderr "[hipBLASLt caps] device": expected exactly 1, saw 2'
    ]
    # "at least 2" and "never" on the same output.
    s2 = make_suite(
        "twice2",
        child("marker_twice.py"),
        runs=1,
        markers=[
            ("stderr", "[hipBLASLt caps] device", "at least 2"),
            ("stdout", "Warning", "never"),
        ],
    )
    assert run_suite(s2, str(tmp_path), platform=NO_GPU).runs[0].kind == "pass"


def test_leaked_grandchild_is_killed_with_the_group_after_exit(tmp_path):
    pidfile = tmp_path / "gc.pid"
    s = make_suite(
        "leak",
        child("leak_grandchild.py", pidfile, "exit"),
        runs=1,
        deadline=20,
        markers=[DONE],
    )
    r = run_suite(s, str(tmp_path / "res"), platform=NO_GPU)
    gc = int(pidfile.read_text())
    assert r.runs[0].kind == "pass"
    assert r.runs[0].strays_killed is True
    assert gone(gc)


def test_leaked_grandchild_is_killed_with_a_hung_child(tmp_path):
    pidfile = tmp_path / "gc.pid"
    s = make_suite(
        "leakhang", child("leak_grandchild.py", pidfile, "hang"), runs=1, deadline=1.0
    )
    r = run_suite(s, str(tmp_path / "res"), platform=NO_GPU)
    gc = int(pidfile.read_text())
    assert r.runs[0].kind == "hang"
    assert gone(gc)


def test_environment_removed_set_and_run_index(tmp_path):
    argv = [
        "/bin/sh",
        "-c",
        'echo "A=${A-unset} B=$B SUITE=$OVERLAY_SUITE I=$OVERLAY_RUN_INDEX"',
    ]
    s = make_suite(
        "env", argv, runs=2, **{"env-remove": ["A"], "env-set": {"B": "set"}}
    )
    r = run_suite(
        s,
        str(tmp_path),
        platform=NO_GPU,
        environ={"A": "1", "B": "old", "PATH": os.defpath},
    )
    d = Path(r.directory)
    assert (d / "run-001.out").read_text() == "A=unset B=set SUITE=env I=1\n"
    assert (d / "run-002.out").read_text() == "A=unset B=set SUITE=env I=2\n"
    # Fresh process group per run: the child is a session leader, not in ours.
    s2 = make_suite(
        "pgid",
        [sys.executable, "-c", "import os; print(os.getpgid(0) == os.getpid())"],
        runs=1,
    )
    r2 = run_suite(s2, str(tmp_path), platform=NO_GPU)
    assert (Path(r2.directory) / "run-001.out").read_text() == "True\n"


def test_missing_hardware_or_backend_is_skipped_never_passed(tmp_path):
    s = make_suite("gpu", ["no-such-child-program"], backend="rocm", hardware="amd-gpu")
    r = run_suite(s, str(tmp_path), platform=NO_GPU)
    assert r.status == "skipped" and r.skip_reason == "needs amd-gpu: test: no AMD GPU"
    assert (r.n, r.failed) == (0, 0)
    assert (
        json.loads((Path(r.directory) / "result.json").read_text())["status"]
        == "skipped"
    )
    assert "SKIPPED  needs amd-gpu" in render_results([r])
    assert "PASSED" not in render_results([r])
    cuda_only = Platform(
        hardware=frozenset({"amd-gpu"}),
        backends=frozenset({"cuda"}),
        backend_source="test",
    )
    s2 = make_suite("rocm", ["x"], backend="rocm", hardware="amd-gpu")
    assert skip_reason(s2, cuda_only).startswith(
        "needs the rocm backend; available: cuda"
    )
    assert skip_reason(make_suite("any", ["x"]), NO_GPU) is None


def test_hardware_override_and_backend_inference():
    p = detect_platform(environ={"OVERLAY_SUITE_HARDWARE": "amd-gpu"})
    assert p.hardware == {"amd-gpu"} and p.backends == {"cpu", "rocm"}
    p = detect_platform(environ={"OVERLAY_SUITE_HARDWARE": "none"})
    assert p.hardware == set() and p.backends == {"cpu"}
    p = detect_platform("cuda", environ={"OVERLAY_SUITE_HARDWARE": "nvidia-gpu"})
    assert p.backends == {"cuda"}
    with pytest.raises(SuiteRunError):
        detect_platform(environ={"OVERLAY_SUITE_HARDWARE": "tpu"})


def test_resolve_child(tmp_path):
    prog = tmp_path / "hipblaslt_concurrency"
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(0o755)
    assert resolve_child(["hipblaslt_concurrency", "--x"], str(tmp_path)) == [
        str(prog),
        "--x",
    ]
    assert resolve_child(["./hipblaslt_concurrency"], None, str(tmp_path)) == [
        str(prog)
    ]
    assert resolve_child(["sh"])[0].endswith("/sh")
    with pytest.raises(SuiteRunError) as info:
        resolve_child(["pinned_alias"], str(tmp_path))
    assert info.value.exit_code == EXIT_USAGE and "pinned_alias" in info.value.message
    assert info.value.hint and "--child-dir" in info.value.hint


def test_ab_reproduction_with_fisher_p(tmp_path):
    s = make_suite("race", child("flaky.py", 0.0), markers=[DONE])
    ab = run_ab(s, child("flaky.py", 0.7, "c"), str(tmp_path), platform=NO_GPU)
    assert ab.table == [[0, 10], [7, 3]]
    assert round(ab.fisher_p, 6) == 0.003096
    assert not ab.guard_only
    assert ab.verdicts()[0][0] == "reproduction"
    assert ab.without_fix.kinds() == {"fail": 7}
    text = render_ab(ab)
    assert "p = 0.003096" in text and "0 of 10" in text and "7 of 10" in text
    assert "[0.3475, 0.9333]" in text
    assert "guard, not a reproduction" not in text
    stored = json.loads((Path(ab.directory) / "ab.json").read_text())
    assert (
        stored["table"] == [[0, 10], [7, 3]]
        and stored["guard_not_reproduction"] is False
    )
    assert load_ab(ab.directory).table == [[0, 10], [7, 3]]
    assert (Path(ab.directory) / "without" / "result.json").is_file()


def test_ab_inconclusive_says_the_runs_to_significance_and_reads_consistently(
    tmp_path,
):
    """0 of 3 against 3 of 3 (p = 0.1): the verdict says 4 runs per column reach
    p < 0.05, and puts seed 003's 1 clean run (at a known 3/3) beside the 14 needed at
    the lower 95% bound, so 3 clean runs are not read as an acquittal."""
    s = make_suite("race", child("flaky.py", 0.0), runs=3, markers=[DONE])
    ab = run_ab(s, child("flaky.py", 1.0, "all"), str(tmp_path), platform=NO_GPU)
    assert ab.table == [[0, 3], [3, 0]] and round(ab.fisher_p, 4) == 0.1
    (code, text), *_ = ab.verdicts()
    assert code == "inconclusive"
    assert "4 runs per column reach p < 0.05" in text, text
    assert (
        "1 clean run with the fix if the fix-removed rate were known to be 3/3" in text
    )
    assert "above 0.2924 (95%), where 14 runs are needed" in text
    assert "1 clean runs" not in text
    assert "INCONCLUSIVE" in render_ab(ab) or "inconclusive" in render_ab(ab)


def test_ab_text_table_stays_aligned_with_the_children_paths(tmp_path):
    """The child row shows paths relative to the repository root, and its cells are
    padded like every other row's, so the columns line up."""
    s = make_suite("race", child("flaky.py", 0.0), runs=2, markers=[DONE])
    ab = run_ab(s, child("flaky.py", 1.0, "all"), str(tmp_path), platform=NO_GPU)
    root = str(CHILDREN.parent)
    text = render_ab(ab, root=root)
    lines = text.splitlines()
    col = lines[1].index("fix removed")
    table = lines[2:6]
    assert [x.split("  ")[0] for x in table] == [
        "failed",
        "95% interval",
        "kinds",
        "child",
    ]
    for line in table:
        assert line[col - 2 : col] == "  " and line[col] != " ", (col, text)
    child_row = table[3]
    assert f"{CHILDREN.name}/flaky.py" in child_row and root + os.sep not in child_row
    md = render_ab(ab, "markdown", root=root)
    assert root + os.sep not in md


def test_ab_guard_not_reproduction(tmp_path):
    s = make_suite("race", child("flaky.py", 0.0), runs=4, markers=[DONE])
    ab = run_ab(s, child("flaky.py", 0.0, "other"), str(tmp_path), platform=NO_GPU)
    assert ab.table == [[0, 4], [0, 4]] and ab.fisher_p == 1.0
    assert ab.guard_only and ab.verdicts()[0][0] == "guard"
    for fmt in ("text", "markdown"):
        assert "guard, not a reproduction" in render_ab(ab, fmt)
    assert json.loads(render_ab(ab, "json"))["guard_not_reproduction"] is True


def test_junit_is_well_formed_and_counts_agree(tmp_path):
    results = [
        run_suite(
            make_suite("flaky", child("flaky.py", 0.3, "d")),
            str(tmp_path),
            platform=NO_GPU,
        ),
        run_suite(
            make_suite("gpu", ["x"], backend="rocm", hardware="amd-gpu"),
            str(tmp_path),
            platform=NO_GPU,
        ),
        run_suite(
            make_suite("crash", child("crash.py"), runs=1),
            str(tmp_path),
            platform=NO_GPU,
        ),
    ]
    root = ET.fromstring(render_results(results, "junit"))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [t.get("name") for t in suites] == ["flaky", "gpu", "crash"]
    for ts in suites:
        cases = ts.findall("testcase")
        assert int(ts.get("tests")) == len(cases)
        assert int(ts.get("failures")) == sum(
            1 for c in cases if c.find("failure") is not None
        )
        assert int(ts.get("skipped")) == sum(
            1 for c in cases if c.find("skipped") is not None
        )
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == (
        "12",
        "4",
        "1",
    )
    flaky = suites[0]
    assert [
        c.get("name")
        for c in flaky.findall("testcase")
        if c.find("failure") is not None
    ] == ["run-001", "run-002", "run-010"]
    crash_fail = suites[2].find("testcase/failure")
    assert crash_fail.get("type") == "crash" and "SIGSEGV" in crash_fail.get("message")
    md = render_results(results, "markdown")
    assert "| `flaky` | - | **FAILED** | 3 of 10 | [0.0667, 0.6525] | fail 3 |" in md
    assert "| `gpu` | - | **SKIPPED** |" in md
    data = json.loads(render_results(results, "json"))
    assert data["summary"] == {
        "suites": 3,
        "passed": 0,
        "failed": 2,
        "skipped": 1,
        "interrupted": 0,
        "runs": 11,
        "failed_runs": 4,
    }


# --------------------------------------------------------------------------- reports and host models


def test_reports_are_counted_per_kind_whatever_the_run_kind(tmp_path):
    s = make_suite(
        "rep",
        child(
            "reports.py",
            66,
            "TSAN",
            "overlay-suite: report exact-output-mismatch: t0",
            "overlay-suite: report exact-output-mismatch: t1",
            "TSAN",
            "ASAN",
            "ThreadSanitizer: reported 2 warnings",
        ),
        runs=2,
        markers=[DONE],
    )
    r = run_suite(s, str(tmp_path), platform=NO_GPU)
    assert r.kinds() == {"fail": 2}
    run = r.runs[0]
    assert run.reports == {
        "ThreadSanitizer: data race": 2,
        "exact-output-mismatch": 2,
        "AddressSanitizer: heap-use-after-free": 1,
    }
    assert r.report_kinds() == {
        "ThreadSanitizer: data race": [2, 4],
        "exact-output-mismatch": [2, 4],
        "AddressSanitizer: heap-use-after-free": [2, 2],
    }
    stored = json.loads((Path(r.directory) / "result.json").read_text())
    assert stored["runs"][0]["reports"]["exact-output-mismatch"] == 2
    assert stored["summary"]["reports"]["ThreadSanitizer: data race"] == [2, 4]
    assert load_result(r.directory).runs[1].reports == run.reports
    text = render_results([r])
    assert (
        "reports: ThreadSanitizer: data race in 2 runs (4 in all); exact-output-mismatch in 2 runs"
        in text
    )
    clean = run_suite(
        make_suite("clean", child("reports.py", 0), runs=1, markers=[DONE]),
        str(tmp_path),
        platform=NO_GPU,
    )
    assert clean.runs[0].reports == {} and "reports:" not in render_results([clean])


def test_host_model_suite_skips_without_its_toolchain_and_says_what_it_is(tmp_path):
    s = make_suite(
        "lab",
        child("reports.py", 0),
        runs=1,
        model="race-lab",
        backend="cpu",
        markers=[DONE],
    )
    absent = detect_platform(
        environ={"OVERLAY_SUITE_HARDWARE": "none", "OVERLAY_SUITE_MODELS": "none"}
    )
    assert absent.models == frozenset()
    reason = skip_reason(s, absent)
    assert (
        reason
        == "needs the race-lab host model's toolchain: OVERLAY_SUITE_MODELS='none'"
    )
    skipped = run_suite(s, str(tmp_path), platform=absent)
    assert skipped.status == "skipped" and "PASSED" not in render_results([skipped])
    present = detect_platform(
        environ={"OVERLAY_SUITE_HARDWARE": "none", "OVERLAY_SUITE_MODELS": "race-lab"}
    )
    assert skip_reason(s, present) is None and present.to_dict()["models"] == [
        "race-lab"
    ]
    ran = run_suite(s, str(tmp_path), platform=present)
    assert ran.status == "ran" and not ran.failed
    text = render_results([ran])
    assert "race-lab: host model, not a GPU result (docs/race-lab.md)" in text
    assert "(host model, not a GPU result)" in render_results([ran], "markdown")
    assert 'name="model" value="race-lab"' in render_results([ran], "junit")


def test_ab_on_a_host_model_counts_reports_and_plans_the_acquittal(tmp_path):
    present = detect_platform(
        environ={"OVERLAY_SUITE_HARDWARE": "none", "OVERLAY_SUITE_MODELS": "race-lab"}
    )
    s = make_suite(
        "lab", child("reports.py", 0), runs=10, model="race-lab", markers=[DONE]
    )
    ab = run_ab(
        s,
        child(
            "reports.py", 66, "TSAN", "overlay-suite: report exact-output-mismatch: x"
        ),
        str(tmp_path),
        platform=present,
    )
    assert ab.table == [[0, 10], [10, 0]] and ab.model == "race-lab"
    codes = [c for c, _t in ab.verdicts()]
    assert codes == ["reproduction", "acquitted", "host-model"]
    plan = ab.acquit_plan()
    # 10 of 10: the observed rate acquits after 1 clean run; its lower 95% bound 0.6915 needs 4.
    assert (
        plan["runs"],
        round(plan["baseline_lower95"], 4),
        plan["runs_at_lower95"],
    ) == (1, 0.6915, 4)
    text = render_ab(ab)
    assert "[race-lab: host model, not a GPU result]" in text
    assert "ThreadSanitizer: data race  0 of 10 runs (0)  10 of 10 runs (10)" in text
    assert (
        "Runs to acquit at 99% (seed 003, overlay suite plan): 1 at the fix-removed rate 10/10; 4 at "
        "its 95% lower bound 0.6915." in text
    )
    assert "HOST-MODEL: " in text and "not on an AMD GPU" in text
    md = render_ab(ab, "markdown")
    assert (
        "| report: exact-output-mismatch | 0 of 10 runs (0) | 10 of 10 runs (10) |"
        in md
    )
    stored = json.loads((Path(ab.directory) / "ab.json").read_text())
    assert stored["model"] == "race-lab" and stored["acquit"]["runs_at_lower95"] == 4
    # A suite without a model gets no host-model verdict.
    plain = run_ab(
        make_suite("plain", child("reports.py", 0), runs=2, markers=[DONE]),
        child("reports.py", 1),
        str(tmp_path),
        platform=NO_GPU,
    )
    assert "host-model" not in [c for c, _t in plain.verdicts()]


def test_a_missing_host_model_child_points_at_the_race_lab(tmp_path):
    present = detect_platform(
        environ={"OVERLAY_SUITE_HARDWARE": "none", "OVERLAY_SUITE_MODELS": "race-lab"}
    )
    s = make_suite("lab", ["hipblaslt_race_tsan"], model="race-lab")
    with pytest.raises(SuiteRunError) as info:
        run_suite(s, str(tmp_path), child_dir=str(tmp_path), platform=present)
    assert (
        "hipblaslt_race_tsan" in info.value.message
        and "overlay suite build" in info.value.hint
    )


# Suites run in parallel (the race lab's mutation check runs them through
# overlay.parallel.run_parallel): a SIGTERM or SIGINT sent to overlay's pid alone is
# passed on to each running suite's group, and no further run starts. In a child
# interpreter, so that the signal cannot reach the test session.
_PARALLEL_SUITES = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, sys.argv[3])
    from procfixtures import run_signalled
    from test_suites_runner import NO_GPU, child, make_suite
    from overlay.suites.runner import run_suite

    signum, out = int(sys.argv[1]), sys.argv[2]
    suites = [make_suite(f"h{i}", child("hang.py"), runs=3, deadline=120) for i in range(3)]

    def job(i):
        run_suite(suites[i], out, platform=NO_GPU, directory=os.path.join(out, f"h{i}"))

    # 1.5 s in: two suites' first runs under way
    raised, took = run_signalled(2, [lambda i=i: job(i) for i in range(3)], signum, 1.5)
    print(raised, round(took))
    """
)


@pytest.mark.parametrize(
    ("signum", "raised"),
    [(signal.SIGTERM, "Terminated"), (signal.SIGINT, "KeyboardInterrupt")],
)
def test_a_signal_stops_suites_running_in_parallel(tmp_path, signum, raised):
    proc = python_child(_PARALLEL_SUITES, int(signum), tmp_path, Path(__file__).parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    name, took = proc.stdout.split()
    assert name == raised and int(took) < 20, proc.stdout  # not 300 s of a hang run
    results = sorted(tmp_path.glob("h*/result.json"))
    # the two suites under way wrote their result as interrupted, with no run in it
    # (their first run was cut short by the signal, not failed); the third never began
    assert [p.parent.name for p in results] == ["h0", "h1"]
    for path in results:
        data = json.loads(path.read_text())
        assert data["status"] == "interrupted" and data["runs"] == [], data


# One suite, run from the main thread as `overlay suite run` does: its runs are a run
# of one (overlay.parallel.foreground), so a signal to overlay's pid alone reaches the
# running child's group, as SIGKILL (a test program may ignore the others; this one
# does). Before, a SIGTERM ended overlay and left the child running, and a SIGINT to
# the pid was raised in the main thread and killed it the same way.
_ONE_SUITE = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, sys.argv[3])
    from procfixtures import signalled
    from test_suites_runner import NO_GPU, child, make_suite
    from overlay.suites.runner import run_suite

    signum, out = int(sys.argv[1]), sys.argv[2]
    suite = make_suite("stubborn", child("stubborn.py"), runs=3, deadline=120)
    raised, took = signalled(
        lambda: run_suite(suite, out, platform=NO_GPU, directory=out + "/s"),
        signum,
        1.5,  # the first run under way
    )
    print(raised, round(took))
    """
)


@pytest.mark.parametrize(
    ("signum", "raised"),
    [
        (signal.SIGTERM, "Terminated"),
        (signal.SIGHUP, "Terminated"),
        (signal.SIGINT, "KeyboardInterrupt"),
    ],
)
def test_a_signal_kills_the_run_of_a_single_suite(tmp_path, signum, raised):
    proc = python_child(_ONE_SUITE, int(signum), tmp_path, Path(__file__).parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    name, took = proc.stdout.split()
    assert name == raised and int(took) < 20, proc.stdout  # not the child's 300 s
    data = json.loads((tmp_path / "s" / "result.json").read_text())
    assert data["status"] == "interrupted" and data["runs"] == [], data
    started = (tmp_path / "s" / "run-001.out").read_text().split()
    assert started[:2] == ["stubborn:", "started"]  # it ran, ignoring the signal,
    assert gone(int(started[2]))  # until it was killed
