"""Property-based fuzz of the records: every mutation of every record, through
``verify``, ``status``, ``export`` (and ``fix list`` / ``suite`` for their records), ends
with exit 0, 1 or 2, no traceback, no ``internal error`` line, no hang.

Examples are few and derandomized so the suite stays fast and repeatable; the long
campaign is ``tools/fuzz_records.py`` (``docs/fuzz.md``). The hang guard is a guard
only (60 s per command, far above the ~0.1 s a run takes).
"""

from __future__ import annotations

import itertools

import pytest
from fuzzlib import OPS, RECORDS, apply_ops, build_fixture, run_mutation
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_op = st.tuples(st.sampled_from(OPS), st.integers(0, 1 << 20), st.integers(0, 1 << 16))
_counter = itertools.count()


@pytest.fixture
def template(tmp_path, world):
    return build_fixture(tmp_path / "template", world)


def test_fixture_is_clean(template, tmp_path):
    runs = run_mutation(template, tmp_path / "w", "patch", [])
    assert [(r.command, r.exit_code, r.problem) for r in runs] == [
        ("verify", 0, None),
        ("status", 0, None),
        ("export {dest}", 0, None),
    ]


@pytest.mark.parametrize("record", sorted(RECORDS))
@settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_op, min_size=1, max_size=4))
def test_mutated_record_never_crashes(template, tmp_path, record, ops):
    runs = run_mutation(template, tmp_path / f"w{next(_counter)}", record, ops)
    bad = [
        (r.command, r.exit_code, r.problem, r.output[-2000:]) for r in runs if r.problem
    ]
    assert not bad, (ops, bad)


def test_apply_ops_is_deterministic_and_total():
    data = b"line one\nline two\n"
    for kind in OPS:
        for a, b in ((0, 0), (7, 3), (1 << 20, 1 << 16)):
            out = apply_ops(data, [(kind, a, b)])
            assert out == apply_ops(data, [(kind, a, b)])
    assert (
        apply_ops(b"", [("delete", 5, 5), ("swaplines", 3, 4), ("flip", 9, 300)])
        == b"\x2c"
    )


@pytest.mark.parametrize(
    "ops",
    [
        [
            ("flip", 415417, 28060),
            ("flip", 569386, 55077),
        ],  # campaign seed 13, mutation 317
        [("truncate", 798613, 56579), ("flip", 457252, 51655)],  # mutation 2277
    ],
)
def test_campaign_findings_stay_fixed(template, tmp_path, ops):
    """A byte in a patch's path that is not UTF-8 reached `verify`'s text report as a lone
    surrogate, and printing it raised UnicodeEncodeError (an internal error)."""
    runs = run_mutation(template, tmp_path / "w", "patch", ops)
    assert [r.problem for r in runs] == [None, None, None], [r.output for r in runs]


def test_reports_are_always_encodable():
    from overlay.checks.findings import Finding
    from overlay.checks.render import render

    f = Finding(
        "SER010",
        "error",
        "patches-rocm/x.patch",
        None,
        "mlx\udc9cbackend/x.cpp: bad",
        None,
    )
    for fmt in ("text", "json", "github", "junit"):
        render([f], fmt).encode("utf-8")
