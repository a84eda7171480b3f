"""LOCAL_FIXES.md as a whole (overlay/records/fixes/): the textual FIX checks (one pass,
one or more failures), entry numbering on hostile numbers, the project's own file, the
code table; the document fixture the other test_records_fixes_* files use."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from fuzzlib import hang_guard
from gitfixtures import CLOSING, local_fixes

from overlay.cli import main
from overlay.records import fixes

FORK = "NripeshN/mlx"
FORK_COMMIT = "75915908dfe5028335d318b10340313744fd3a8d"
PIN = "39886de461d4f014cd60a3a68ad42fd8d776754a"
S = "Applies to the fork; kept in mlxcelverse under the 2026-10-06 fork policy, not proposed there."
S_REF = S[:-1] + " (#12)."  # an issue reference before the final period is allowed

# Line numbers matter: each fixture line is commented with its number.
GOOD = [
    "# Local changes relative to NripeshN/mlx@75915908",  # 1
    "",  # 2
    "## Retarget onto the MLX pin (39886de4)",  # 3
    "",  # 4
    "1. **Take the fork's device.** Resolution of `mlx/backend/rocm/device.cpp`",  # 5
    "   against the pin.",  # 6
    "",  # 7
    "## Fixes to the fork's kernels",  # 8
    "",  # 9
    "2. **Make hipBLASLt GEMM state safe.** Each thread owns its handle in",  # 10
    "   `gemms/hipblaslt_gemm.cpp` and `device.cpp`. Applies to the fork; kept in",  # 11
    "   mlxcelverse under the 2026-10-06 fork policy, not proposed there.",  # 12
    "",  # 13
    "## Fixes to the fork's build",  # 14
    "",  # 15
    f"3. **Pin the arch list.** Sets defaults in `mlx/backend/rocm/CMakeLists.txt`. {S}",  # 16
    "",  # 17
    "## Additions to the fork's API",  # 18
    "",  # 19
    f"4. **Pinned host arena.** Adds `mlx/backend/rocm/pinned.cu` and `std::mutex` use. {S_REF}",  # 20
    "",  # 21
    "## Dropped from the vendored set",  # 22
    "",  # 23
    "- `docs/notes/`, `setup.py`: not part of the library (see `overlay ci`).",  # 24
]

TREE = {
    "CMakeLists.txt",
    "mlx/backend/rocm/CMakeLists.txt",
    "mlx/backend/rocm/device.cpp",
    "mlx/backend/rocm/gemms/hipblaslt_gemm.cpp",
    "mlx/backend/rocm/pinned.cu",
    "mlx/backend/cpu/device.h",
    "mlx/array.cpp",
    "mlx/backend/cpu/array.cpp",
}


def doc(lines=GOOD, **replace):
    """Parse GOOD (or ``lines``) with line N replaced by ``replace['l<N>']`` (None deletes)."""
    lines = list(lines)
    for key, val in replace.items():
        lines[int(key[1:]) - 1] = val
    return fixes.parse("\n".join(x for x in lines if x is not None) + "\n")


def codes(findings):
    return [(f.code, f.line) for f in findings]


def all_text_checks(d):
    return fixes.check_document(
        d, fork_repo=FORK, fork_commit=FORK_COMMIT, pin=PIN, closing_sentence=S
    )


# --------------------------------------------------------------------------- textual checks


def test_good_document_is_clean():
    assert all_text_checks(doc()) == []
    assert (
        fixes.check_upstream_packages(doc(), ["docs/design.md", "docs/upstream.md"])
        == []
    )


def test_every_finding_names_the_file():
    fs = all_text_checks(doc(l1="# Local changes relative to x/y@deadbeef"))
    assert fs and all(f.path == "LOCAL_FIXES.md" and f.line >= 1 for f in fs)


def test_fix001_title_missing_or_malformed():
    assert codes(fixes.check_title(doc(l1="Some text"), FORK, FORK_COMMIT)) == [
        ("FIX001", 1)
    ]
    assert codes(fixes.check_title(doc(l1="# Local fixes"), FORK, FORK_COMMIT)) == [
        ("FIX001", 1)
    ]
    assert codes(
        fixes.check_title(fixes.parse("\n\n# Local fixes\n"), FORK, FORK_COMMIT)
    ) == [("FIX001", 3)]
    assert fixes.check_title(doc(), FORK, FORK_COMMIT) == []


def test_fix002_title_repo():
    d = doc(l1="# Local changes relative to ml-explore/mlx@75915908")
    assert codes(fixes.check_title(d, FORK, FORK_COMMIT)) == [("FIX002", 1)]


@pytest.mark.parametrize("sha", ["75915909", "7591590", "75915908dfe5", "zzzzzzzz"])
def test_fix003_title_commit(sha):
    d = doc(l1=f"# Local changes relative to NripeshN/mlx@{sha}")
    assert codes(fixes.check_title(d, FORK, FORK_COMMIT)) == [("FIX003", 1)]


@pytest.mark.parametrize(
    "heading",
    [
        "## Retarget onto the MLX pin (39886de5)",
        "## Retarget onto the MLX pin",
        "## Retarget onto the MLX pin (39886de461d4)",
    ],
)
def test_fix004_retarget_pin(heading):
    assert fixes.check_retarget_pin(doc(), PIN) == []
    assert codes(fixes.check_retarget_pin(doc(l3=heading), PIN)) == [("FIX004", 3)]


def test_fix005_unknown_section():
    assert fixes.check_sections(doc()) == []
    assert codes(fixes.check_sections(doc(l17="## Notes"))) == [("FIX005", 17)]
    assert codes(fixes.check_sections(doc(l2="# Another title"))) == [("FIX005", 2)]


def test_fix006_section_order_and_repeat():
    swapped = doc(
        l8="## Fixes to the fork's build", l14="## Fixes to the fork's kernels"
    )
    assert codes(fixes.check_sections(swapped)) == [("FIX006", 14)]
    repeated = doc(l18="## Fixes to the fork's build")
    assert codes(fixes.check_sections(repeated)) == [("FIX006", 18)]


def test_fix007_numbering_gap():
    assert fixes.check_numbering(doc()) == []
    gap = doc(l16=GOOD[15].replace("3. ", "5. ", 1))  # 1, 2, 5, 4: 3 missing
    assert codes(fixes.check_numbering(gap)) == [("FIX007", 20)]
    zero = doc(l5=GOOD[4].replace("1. ", "0. ", 1))
    assert ("FIX007", 5) in codes(fixes.check_numbering(zero))


def test_numbering_order_is_free_across_sections():
    d = doc(l5=GOOD[4].replace("1. ", "4. ", 1), l20=GOOD[19].replace("4. ", "1. ", 1))
    assert fixes.check_numbering(d) == []


def test_fix008_duplicate_number():
    dup = doc(
        l16=GOOD[15].replace("3. ", "2. ", 1), l20=GOOD[19].replace("4. ", "3. ", 1)
    )
    assert codes(fixes.check_numbering(dup)) == [("FIX008", 16)]


def test_fix009_numbered_entry_in_dropped():
    assert fixes.check_items(doc()) == []
    d = doc(l24="5. **Dropped docs.** `docs/notes/`.")
    assert codes(fixes.check_items(d)) == [("FIX009", 24)]


def test_fix010_bullet_in_numbered_section():
    d = doc(l13="- `mlx/backend/rocm/x.cpp`: a bullet")
    assert codes(fixes.check_items(d)) == [("FIX010", 13)]


def test_fix011_malformed_entry():
    d = doc(l21="5. Title without bold.")
    assert codes(fixes.check_items(d)) == [("FIX011", 21)]
    d = doc(l21="5. **Title without period** and text")
    assert codes(fixes.check_items(d)) == [("FIX011", 21)]


def test_fix012_item_before_first_section():
    d = doc(l2="0. **Stray.** text")
    assert ("FIX012", 2) in codes(fixes.check_items(d))
    d = doc(l2="- `x/y`: stray")
    assert codes(fixes.check_items(d)) == [("FIX012", 2)]


def test_fix013_closing_sentence():
    assert fixes.check_closing_sentence(doc(), S) == []
    short = doc(
        l16=f"3. **Pin the arch list.** Sets defaults. {S.replace(', not proposed there', '')}"
    )
    assert codes(fixes.check_closing_sentence(short, S)) == [("FIX013", 16)]
    # the wrapped entry 2 is checked at its last line
    d = doc(l12="   mlxcelverse under the 2026-10-06 fork policy.")
    assert codes(fixes.check_closing_sentence(d, S)) == [("FIX013", 12)]
    # a parenthesis that is no issue reference is not a reference
    bad_ref = doc(l20=f"4. **Pinned host arena.** Adds it. {S} (reference)")
    assert codes(fixes.check_closing_sentence(bad_ref, S)) == [("FIX013", 20)]


def test_closing_sentence_not_required_in_retarget():
    assert (
        fixes.check_closing_sentence(doc(l6="   against the pin, nothing more."), S)
        == []
    )


@pytest.mark.parametrize(
    "phrase",
    [
        "an upstreaming candidate",
        "Upstream candidate",
        "to be proposed",
        "we propose upstream",
        "send it upstream",
        "submitted upstream",
    ],
)
def test_fix014_upstream_marking(phrase):
    d = doc(l6=f"   against the pin; {phrase}.")
    assert codes(fixes.check_upstream_marking(d)) == [("FIX014", 6)]


def test_fix014_wrapped_phrase_points_at_its_start():
    d = doc(
        l10="2. **Make hipBLASLt GEMM state safe.** An upstreaming",
        l11="   candidate: `gemms/hipblaslt_gemm.cpp` and `device.cpp`. Applies to the fork; kept in",
    )
    assert codes(fixes.check_upstream_marking(d)) == [("FIX014", 10)]
    assert (
        fixes.check_upstream_marking(doc()) == []
    )  # "not proposed there" is the policy, not a mark


def test_fix015_upstream_package():
    paths = [
        "docs/design.md",
        "docs/rocm/upstream/0001-x.patch",
        "docs/rocm/upstream/README.md",
        "upstream/a.patch",
    ]
    fs = fixes.check_upstream_packages(doc(), paths)
    assert [(f.code, f.path, f.line) for f in fs] == [
        ("FIX015", "docs/rocm/upstream/0001-x.patch", 1)
    ]


def test_fix016_conflict_markers():
    assert fixes.check_conflict_markers(doc()) == []
    d = doc(l2="<<<<<<< ours", l7="=======", l13=">>>>>>> theirs")
    assert codes(fixes.check_conflict_markers(d)) == [
        ("FIX016", 2),
        ("FIX016", 7),
        ("FIX016", 13),
    ]
    # not at line start, or longer runs, are not markers
    assert fixes.find_conflict_markers("a <<<<<<< b\n========\n  >>>>>>> x\n") == []


def test_check_document_orders_by_line():
    d = doc(
        l1="# Local changes relative to NripeshN/mlx@00000000",
        l3="## Retarget onto the MLX pin (00000000)",
    )
    assert codes(all_text_checks(d)) == [("FIX003", 1), ("FIX004", 3)]


# --------------------------------------------------------------------------- the project's own file


def test_project_local_fixes_passes_textual_checks():
    root = Path(__file__).resolve().parents[1]
    from overlay.records.manifest import load_manifest

    m = load_manifest(str(root))
    d = fixes.load(root / "LOCAL_FIXES.md")
    assert (
        fixes.check_document(
            d,
            fork_repo=fixes.fork_repo_from_url(m.fork_url),
            fork_commit=m.fork_commit,
            pin=m.pin,
            closing_sentence=m.closing_sentence,
        )
        == []
    )


def test_every_code_is_documented_with_its_severity():
    table = (Path(__file__).resolve().parents[1] / "docs" / "findings.md").read_text(
        encoding="utf-8"
    )
    for code, (severity, _) in fixes.CODES.items():
        assert f"| {code} | {severity} |" in table


def test_emitted_codes_are_declared():
    import re

    source = "".join(
        module.read_text(encoding="utf-8")
        for module in Path(fixes.__file__).parent.glob("*.py")
    )
    emitted = set(re.findall(r'"(FIX\d{3})"', source))
    assert emitted == set(fixes.CODES)


def test_entry_number_20261201_is_one_finding_not_a_loop(clean, world):  # noqa: F811
    """An entry numbered 20261201 is one FIX007, not a walk over every missing number."""
    extra = f"\n20261201. **A date as a number.** Someone typed a date. {CLOSING}\n"
    (clean.root / "LOCAL_FIXES.md").write_text(local_fixes(world, extra=extra))
    doc = fixes.load(clean.root / "LOCAL_FIXES.md")
    with hang_guard(60):
        found = fixes.check_numbering(doc)
    assert [(f.code, f.message) for f in found] == [
        ("FIX007", "entry number 20261201 is above 9999")
    ]
    with hang_guard(120):
        result = CliRunner().invoke(main, ["-C", str(clean.root), "verify"])
    assert (
        result.exit_code == 1
        and "FIX007 entry number 20261201 is above 9999" in result.output
    )


def test_numbering_gaps_are_runs_and_huge_numbers_are_not_entries():
    text = (
        "# Local changes relative to a/b@12345678\n\n## Fixes to the fork's kernels\n\n"
        "1. **One.** x.\n\n9999. **Last.** x.\n\n" + "7" * 5000 + ". **Huge.** x.\n"
    )
    doc = fixes.parse(text)
    assert [e.number for e in doc.entries()] == [1, 9999]
    assert [f.message for f in fixes.check_numbering(doc)] == [
        "entry numbers have a gap: 2-9998 are missing"
    ]
    assert [f.code for f in fixes.check_items(doc)] == ["FIX011"]
    assert (
        fixes.next_number(
            fixes.parse(
                "## Fixes to the fork's kernels\n\n1. **A.** x\n\n20261201. **B.** x\n"
            )
        )
        == 2
    )
