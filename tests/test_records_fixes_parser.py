"""Reading LOCAL_FIXES.md (overlay/records/fixes/parser.py): the document's title,
sections, entries and bullets, paths told from other backticked words, and section
headings matched strictly (a mangled heading is FIX026 and keeps its entries in their
section)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from fuzzlib import verify_codes
from gitfixtures import CLOSING, local_fixes
from test_records_fixes import FORK, doc

from overlay.cli import main
from overlay.errors import OverlayError
from overlay.records import fixes

KERNELS_HEADING = "## Fixes to the fork's kernels"


@pytest.mark.parametrize(
    "mangled",
    [
        "##Fixes to the fork's kernels",
        "### Fixes to the fork's kernels",
        "## Fixes to the Fork's Kernels",
        "## Fixes to the forks kernels:",
        "#Fixes to the fork's kernels",
    ],
)
def test_mangled_heading_is_a_finding_and_keeps_the_closing_check(
    clean, world, mangled
):  # noqa: F811
    lf = clean.root / "LOCAL_FIXES.md"
    lf.write_text(local_fixes(world).replace(KERNELS_HEADING, mangled))
    found = verify_codes(clean.root)
    assert ("FIX026", "LOCAL_FIXES.md") in found
    result = CliRunner().invoke(main, ["-C", str(clean.root), "verify"])
    assert result.exit_code == 1 and "FIX026" in result.output
    # The entry below the mangled heading is still a kernels entry: a missing closing sentence is caught.
    lf.write_text(
        local_fixes(world, closing="No closing sentence here.").replace(
            KERNELS_HEADING, mangled
        )
    )
    assert "FIX013" in [c for c, _p in verify_codes(clean.root)]
    doc = fixes.load(lf)
    assert [e.section for e in doc.entries()] == ["kernels"]


def test_exact_headings_and_unrelated_hash_lines_are_not_mangled():
    text = (
        "# Local changes relative to a/b@12345678\n\n## Retarget onto the MLX pin (39886de4)\n\n"
        "1. **A.** see `x.cpp`.\n\n#include <vector> is prose here\n\n"
        f"{KERNELS_HEADING}\n\n2. **B.** {CLOSING}\n\n### Notes\n\n## Dropped from the vendored set\n\n- `docs/`: no.\n"
    )
    doc = fixes.parse(text)
    assert [f.code for f in fixes.check_sections(doc)] == []
    assert [(s.key, s.mangled) for s in doc.sections] == [
        ("retarget", False),
        ("kernels", False),
        ("dropped", False),
    ]


def test_heading_text_alone_and_mangled_retarget():
    text = (
        "# Local changes relative to a/b@12345678\n\n## retarget onto the MLX pin (39886de4)\n\n"
        "1. **A.** x.\n\nFixes to the fork's kernels\n\n2. **B.** y.\n"
    )
    doc = fixes.parse(text)
    assert [(f.code, f.line) for f in fixes.check_sections(doc)] == [
        ("FIX026", 3),
        ("FIX026", 7),
    ]
    assert [e.section for e in doc.entries()] == ["retarget", "kernels"]
    assert fixes.check_retarget_pin(doc, "39886de4" + "0" * 32) == []


def test_parse_good_document():
    d = doc()
    assert (d.title_line, d.fork_repo, d.fork_sha) == (1, FORK, "75915908")
    assert [s.key for s in d.sections] == [
        "retarget",
        "kernels",
        "build",
        "api",
        "dropped",
    ]
    assert d.section("retarget").pin == "39886de4"
    es = d.entries()
    assert [(e.number, e.line, e.end_line, e.section) for e in es] == [
        (1, 5, 6, "retarget"),
        (2, 10, 12, "kernels"),
        (3, 16, 16, "build"),
        (4, 20, 20, "api"),
    ]
    assert es[0].title == "Take the fork's device"
    assert es[0].text == "Resolution of `mlx/backend/rocm/device.cpp` against the pin."
    assert es[1].files == ("gemms/hipblaslt_gemm.cpp", "device.cpp")
    assert es[1].file_lines == {"gemms/hipblaslt_gemm.cpp": 11, "device.cpp": 11}
    assert es[3].files == ("mlx/backend/rocm/pinned.cu",)  # `std::mutex` is no file
    b = d.section("dropped").bullets[0]
    assert (b.line, b.names) == (
        24,
        ("docs/notes/", "setup.py"),
    )  # `overlay ci` is in the reason
    assert d.entry(3).title == "Pin the arch list" and d.entry(9) is None


def test_parse_plain_continuation_and_title_period_outside_bold():
    d = fixes.parse(
        "# T\n\n## Fixes to the fork's build\n\n7. **Title**. First line\nsecond `a/b.c`\n\nprose\n"
    )
    (e,) = d.entries()
    assert (e.number, e.title, e.text, e.files, e.end_line) == (
        7,
        "Title",
        "First line second `a/b.c`",
        ("a/b.c",),
        6,
    )


def test_parse_code_fence_is_not_structure():
    d = fixes.parse(
        "# T\n\n## Fixes to the fork's build\n\n1. **A.** text\n```\n2. **B.** no\n## no\n```\n"
    )
    assert [e.number for e in d.entries()] == [1]
    assert [s.key for s in d.sections] == ["build"]


@pytest.mark.parametrize(
    "token,expected",
    [
        ("mlx/backend/rocm/device.cpp", True),
        ("gemms/x.cpp", True),
        ("pinned.cu", True),
        ("CMakeLists.txt", True),
        (".gitignore", True),
        ("docs/notes/", True),
        ("std::mutex", False),
        ("hipblasLtMatmul()", False),
        ("MLX_BUILD_ROCM", False),
        ("0.5", False),
        ("a b.c", False),
    ],
)
def test_looks_like_path(token, expected):
    assert fixes.looks_like_path(token) is expected


def test_fork_repo_from_url():
    assert fixes.fork_repo_from_url("https://github.com/NripeshN/mlx.git") == FORK
    assert fixes.fork_repo_from_url("git@github.com:NripeshN/mlx.git") == FORK


def test_load_missing_and_non_utf8(tmp_path):
    with pytest.raises(OverlayError, match="not found"):
        fixes.load(tmp_path / "LOCAL_FIXES.md")
    (tmp_path / "LOCAL_FIXES.md").write_bytes(b"# \xff\n")
    with pytest.raises(OverlayError, match="not UTF-8"):
        fixes.load(tmp_path / "LOCAL_FIXES.md")
