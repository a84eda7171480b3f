"""Section headings of LOCAL_FIXES.md are matched strictly (issue 13 item 7).

Before: ``##Fixes...`` or ``### Fixes...`` silently moved the entries below it
into the section before (the retarget section), which switched off the
closing-sentence check, and ``verify`` exited 0.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from gitfixtures import CLOSING, local_fixes
from test_fs_reading import codes

from overlay.cli import main
from overlay.records import fixes

GOOD = "## Fixes to the fork's kernels"


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
    lf.write_text(local_fixes(world).replace(GOOD, mangled))
    found = codes(clean.root)
    assert ("FIX026", "LOCAL_FIXES.md") in found
    result = CliRunner().invoke(main, ["-C", str(clean.root), "verify"])
    assert result.exit_code == 1 and "FIX026" in result.output
    # The entry below the mangled heading is still a kernels entry: a missing closing sentence is caught.
    lf.write_text(
        local_fixes(world, closing="No closing sentence here.").replace(GOOD, mangled)
    )
    assert "FIX013" in [c for c, _p in codes(clean.root)]
    doc = fixes.load(lf)
    assert [e.section for e in doc.entries()] == ["kernels"]


def test_exact_headings_and_unrelated_hash_lines_are_not_mangled():
    text = (
        "# Local changes relative to a/b@12345678\n\n## Retarget onto the MLX pin (39886de4)\n\n"
        "1. **A.** see `x.cpp`.\n\n#include <vector> is prose here\n\n"
        f"{GOOD}\n\n2. **B.** {CLOSING}\n\n### Notes\n\n## Dropped from the vendored set\n\n- `docs/`: no.\n"
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
