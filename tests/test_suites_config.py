"""suites.toml: the repository's file, defaults, and every kind of bad input."""

from pathlib import Path

import pytest
from fuzzlib import hang_guard

from overlay.errors import EXIT_USAGE
from overlay.suites.config import (
    DEFAULT_DEADLINE_S,
    DEFAULT_RUNS,
    SuiteConfigError,
    load_suites,
    parse_expect,
    parse_suites,
    select_suites,
)

REPO = Path(__file__).resolve().parents[1]


def test_repository_suites_file():
    suites = load_suites(str(REPO / "patches-rocm" / "suites" / "suites.toml"))
    lab = {
        "hipblaslt_race_ws_tsan",
        "hipblaslt_race_ws0_tsan",
        "hipblaslt_race_ws_asan",
        "hipblaslt_race_ws0_asan",
        "racelab_model",
        "rocblas_race_ws_tsan",
        "rocblas_race_ws0_tsan",
        "rocblas_race_ws_asan",
        "rocblas_race_ws0_asan",
    }
    # The mutation check's suites (docs/race-lab.md): teardown, weak ordering, capture,
    # release under capture, two streams a thread, and fix 3's alias guard; name -> the
    # fix each proves.
    more = {
        "hipblaslt_release_ws_tsan": 2,
        "hipblaslt_release_cbfirst_ws_tsan": 2,
        "hipblaslt_late_ws0_tsan": 2,
        "hipblaslt_capture_ws_tsan": 2,
        "hipblaslt_release_capture_ws_tsan": 2,
        "rocblas_twostreams_ws_tsan": 1,
        "pinned_alias_free_tsan": 3,
        "pinned_alias_stack_tsan": 3,
    }
    for name, fix in more.items():
        s = suites[name]
        assert (s.model, s.backend, s.hardware, s.proves) == (
            "race-lab",
            "cpu",
            "none",
            fix,
        )
        expects = {(m.stream, m.text): m.expect for m in s.markers}
        assert expects[("stdout", "overlay-suite: done")] == "exactly 1"
        assert s.env_set.get("OVERLAY_RACE_MODE") or name.startswith("pinned_")
    assert set(suites) == {
        "hipblaslt_concurrency",
        "rocblas_handle_concurrency",
        "pinned_alias",
        "pinned_alias_cuda",
    } | lab | set(more)
    # The race lab's suites: host models of fix 2, runnable without a GPU, never GPU evidence.
    for name in lab:
        s = suites[name]
        assert (s.model, s.backend, s.hardware) == ("race-lab", "cpu", "none")
        expects = {(m.stream, m.text): m.expect for m in s.markers}
        assert expects[("stdout", "overlay-suite: done")] == "exactly 1"
        if name.startswith("rocblas_race_"):
            assert s.child == ("rocblas_race_" + name.rsplit("_", 1)[1],)
            assert s.proves == 1 and s.runs == 20
            assert s.env_set["OVERLAY_STUB_ARCH"] == "gfx1030:host-model"
            assert s.env_set["OVERLAY_STUB_ROCBLAS_WORKSPACE"] == (
                "0" if "_ws0_" in name else "1048576"
            )
            assert (
                expects[("stderr", "race-lab: rocblas_create_handle on the host model")]
                == "exactly 1"
            )
            assert expects[("stderr", "Warning: rocBLAS")] == "never"
            # The fix-route marker: only the fixed route prints it.
            assert (
                expects[("stderr", "each bound and used by one thread")] == "exactly 1"
            )
            continue
        assert s.child == (
            ("racelab_selftest_tsan",)
            if name == "racelab_model"
            else ("hipblaslt_race_" + name.rsplit("_", 1)[1],)
        )
        if name != "racelab_model":
            assert s.proves == 2 and s.runs == 20
            assert (
                expects[("stderr", "[hipBLASLt caps] device 0 (host-model)")]
                == "exactly 1"
            )
            assert s.env_set["OVERLAY_STUB_WORKSPACE"] == (
                "0" if "_ws0_" in name else "1048576"
            )
            assert s.env_set["OVERLAY_STUB_FAIL_ONCE_AT"] == "10"
            assert (
                expects[("stderr", "each with descriptors its own thread created")]
                == "exactly 1"
            )
    assert all(suites[n].model is None for n in set(suites) - lab - set(more))
    assert (suites["pinned_alias"].backend, suites["pinned_alias"].hardware) == (
        "rocm",
        "amd-gpu",
    )
    assert (
        suites["pinned_alias_cuda"].backend,
        suites["pinned_alias_cuda"].hardware,
    ) == ("cuda", "nvidia-gpu")
    assert suites["pinned_alias_cuda"].child == ("pinned_alias",)
    hip = suites["hipblaslt_concurrency"]
    rb = suites["rocblas_handle_concurrency"]
    pinned = suites["pinned_alias"]
    assert (rb.proves, hip.proves, pinned.proves) == (1, 2, 3)
    for s in (hip, rb):
        assert (s.backend, s.hardware) == ("rocm", "amd-gpu")
        assert set(s.env_remove) == {"MLX_NO_HIPBLASLT", "MLX_HIPBLASLT_NO_PIPE_CACHE"}
        assert s.child == (s.name,)
        expects = {(m.stream, m.text): m.expect for m in s.markers}
        assert expects[("stderr", "Warning: hipBLASLt")] == "never"
        assert expects[("stderr", "Warning: rocBLAS")] == "never"
        assert expects[("stdout", "overlay-suite: done")] == "exactly 1"
    assert {(m.stream, m.text): m.expect for m in hip.markers}[
        ("stderr", "[hipBLASLt caps] device")
    ] == "exactly 1"
    assert not any(m.text.startswith("[hipBLASLt caps]") for m in rb.markers)
    assert (pinned.backend, pinned.hardware) == ("rocm", "amd-gpu")
    assert [(m.stream, m.text, m.expect) for m in pinned.markers] == [
        ("stdout", "overlay-suite: done", "exactly 1")
    ]


def test_defaults_and_shapes():
    suites = parse_suites(
        '[suites.a]\nchild = ["prog", "--flag"]\n[suites.b]\nchild = "other"\n'
        'deadline = 2.5\nenv-set = { X = "1" }\nenv-remove = ["Y"]\n'
    )
    a, b = suites["a"], suites["b"]
    assert list(suites) == ["a", "b"]
    assert a.child == ("prog", "--flag") and b.child == ("other",)
    assert (a.runs, a.deadline, a.backend, a.hardware, a.proves) == (
        DEFAULT_RUNS,
        DEFAULT_DEADLINE_S,
        "any",
        "none",
        None,
    )
    assert a.model is None and a.to_dict()["model"] is None
    assert (DEFAULT_RUNS, DEFAULT_DEADLINE_S) == (10, 120.0)
    assert b.deadline == 2.5
    env = b.build_env({"Y": "gone", "Z": "kept", "X": "old"})
    assert env == {"Z": "kept", "X": "1"}


@pytest.mark.parametrize(
    "text,op,count",
    [
        ("exactly 1", "exactly", 1),
        ("at least 3", "at least", 3),
        ("never", "never", 0),
        ("  exactly 0 ", "exactly", 0),
    ],
)
def test_parse_expect(text, op, count):
    assert parse_expect(text) == (op, count)


def test_marker_semantics():
    (m_exact, m_least, m_never) = parse_suites(
        '[suites.s]\nchild = "c"\n'
        '[[suites.s.markers]]\nstream = "stderr"\ntext = "x"\nexpect = "exactly 1"\n'
        '[[suites.s.markers]]\nstream = "stdout"\ntext = "y"\nexpect = "at least 2"\n'
        '[[suites.s.markers]]\nstream = "stderr"\ntext = "z"\nexpect = "never"\n'
    )["s"].markers
    assert m_exact.holds(1) and not m_exact.holds(2) and not m_exact.holds(0)
    assert m_least.holds(2) and m_least.holds(5) and not m_least.holds(1)
    assert m_never.holds(0) and not m_never.holds(1)
    assert m_exact.describe(2) == 'stderr "x": expected exactly 1, saw 2'


@pytest.mark.parametrize(
    "body,needle",
    [
        ('[suites.s]\nchild = "c"\nrun = 3\n', 'suite "s": key "run": unknown key'),
        ('[suites.s]\nchild = "c"\nruns = 0\n', 'suite "s": key "runs"'),
        ('[suites.s]\nchild = "c"\nruns = true\n', 'suite "s": key "runs"'),
        ('[suites.s]\nchild = "c"\ndeadline = -1\n', 'suite "s": key "deadline"'),
        ('[suites.s]\nchild = "c"\ndeadline = "10"\n', 'suite "s": key "deadline"'),
        ("[suites.s]\nruns = 3\n", 'suite "s": key "child": missing'),
        ("[suites.s]\nchild = []\n", 'suite "s": key "child"'),
        ('[suites.s]\nchild = "c"\nbackend = "metal"\n', 'suite "s": key "backend"'),
        ('[suites.s]\nchild = "c"\nhardware = "tpu"\n', 'suite "s": key "hardware"'),
        ('[suites.s]\nchild = "c"\nproves = "2"\n', 'suite "s": key "proves"'),
        ('[suites.s]\nchild = "c"\nproves = 0\n', 'suite "s": key "proves"'),
        (
            '[suites.s]\nchild = "c"\nmodel = "qemu"\n',
            'suite "s": key "model": must be one of race-lab',
        ),
        ('[suites.s]\nchild = "c"\nenv-remove = "X"\n', 'suite "s": key "env-remove"'),
        ('[suites.s]\nchild = "c"\nenv-set = { X = 1 }\n', 'suite "s": key "env-set"'),
        (
            '[suites.s]\nchild = "c"\nenv-set = { "A=B" = "1" }\n',
            'suite "s": key "env-set"',
        ),
        (
            '[suites.s]\nchild = "c"\n[[suites.s.markers]]\nstream = "stdin"\ntext = "x"\nexpect = "never"\n',
            'suite "s": key "markers[1].stream"',
        ),
        (
            '[suites.s]\nchild = "c"\n[[suites.s.markers]]\nstream = "stdout"\ntext = "x"\nexpect = "twice"\n',
            'suite "s": key "markers[1].expect"',
        ),
        (
            '[suites.s]\nchild = "c"\n[[suites.s.markers]]\nstream = "stdout"\ntext = "x"\n',
            'suite "s": key "markers[1].expect": missing',
        ),
        (
            '[suites.s]\nchild = "c"\n[[suites.s.markers]]\nstream = "stdout"\ntext = "x"\nexpect = "never"\ncount = 2\n',
            'suite "s": key "markers[1].count": unknown key',
        ),
        ('[suites."../up"]\nchild = "c"\n', 'suite name "../up"'),
        ("[other]\nx = 1\n", 'unknown top-level key "other"'),
        ('[suites.s\nchild = "c"\n', "not valid TOML"),
    ],
)
def test_bad_input_names_suite_and_key(body, needle):
    with pytest.raises(SuiteConfigError) as info:
        parse_suites(body, "suites.toml")
    assert needle in info.value.message
    assert info.value.message.startswith("suites.toml:")
    assert info.value.exit_code == EXIT_USAGE


def test_missing_file_is_usage_error(tmp_path):
    with pytest.raises(SuiteConfigError) as info:
        load_suites(str(tmp_path / "nope.toml"))
    assert "no such file" in info.value.message and info.value.exit_code == EXIT_USAGE


def test_select_suites():
    suites = parse_suites('[suites.a]\nchild = "c"\n[suites.b]\nchild = "c"\n')
    assert [s.name for s in select_suites(suites, [])] == ["a", "b"]
    assert [s.name for s in select_suites(suites, ["b", "a", "b"])] == ["b", "a"]
    with pytest.raises(
        SuiteConfigError, match='unknown suite "c" \\(declared: a, b\\)'
    ):
        select_suites(suites, ["c"])


def test_suites_toml_symlinked_out_and_nested(tmp_path):
    from overlay.suites.config import SuiteConfigError, load_suites

    repo = tmp_path / "repo"
    (repo / "patches-rocm" / "suites").mkdir(parents=True)
    path = repo / "patches-rocm" / "suites" / "suites.toml"
    path.symlink_to("/dev/zero")
    with hang_guard():
        with pytest.raises(SuiteConfigError, match="outside the repository"):
            load_suites(str(path), str(repo))
    path.unlink()
    path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(SuiteConfigError, match="nested too deeply"):
        load_suites(str(path), str(repo))
