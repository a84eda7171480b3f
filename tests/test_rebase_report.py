"""The rebase report's renderings (overlay/rebase/report.py): the Markdown of
``.overlay/last-rebase.md`` is byte for byte what its former jinja2 template renders
(``tests/data/rebase_report.md.j2``, the reference), for generated reports of every
shape, and a rebase renders it without importing jinja2."""

from __future__ import annotations

from pathlib import Path

import jinja2
from gitfixtures import fresh_python
from hypothesis import given, settings
from hypothesis import strategies as st

from overlay.rebase.report import (
    PinChange,
    RebaseReport,
    ReportPatch,
    ReportResolution,
    render,
    render_markdown,
)
from overlay.rebase.state import Bases

DATA = Path(__file__).resolve().parent / "data"

# The settings overlay's jinja2 environment had (overlay/report/templating.py).
REFERENCE = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(DATA)),
    autoescape=False,
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
).get_template("rebase_report.md.j2")

# Text as reports hold it: names, notes and range-diffs with Markdown's own characters,
# newlines, trailing blanks and non-ASCII.
text = st.text(alphabet=st.sampled_from("ab01 |`*_<>&\n→é-."), max_size=12)
sha = st.text(alphabet="0123456789abcdef", min_size=8, max_size=40)
bases = st.builds(Bases, pin=sha, fork=sha, merge_base=sha)

reports = st.builds(
    RebaseReport,
    kind=st.sampled_from(["rebase", "sync"]),
    pins=st.builds(PinChange, before=bases, after=bases),
    merge=st.dictionaries(
        st.sampled_from(["carried", "conflicts"]), st.integers(0, 500)
    ),
    resolutions=st.lists(st.builds(ReportResolution, text, text, text), max_size=3),
    patches=st.lists(
        st.builds(ReportPatch, text, text, st.none() | st.integers(0, 99), text),
        max_size=3,
    ),
    range_diff=text,
    next_steps=st.lists(text, max_size=3),
    uncarried=st.lists(st.tuples(text, st.lists(text, max_size=3)), max_size=3),
    warnings=st.lists(text, max_size=2),
)


@settings(max_examples=100, deadline=None)
@given(reports)
def test_the_markdown_is_the_reference_templates_bytes(report):
    assert render_markdown(report) == REFERENCE.render(r=report)


def test_a_real_shape_renders_every_section():
    report = RebaseReport(
        kind="sync",
        pins=PinChange(
            Bases("a" * 40, "b" * 40, "c" * 40), Bases("d" * 40, "e" * 40, "f" * 40)
        ),
        merge={"carried": 123, "conflicts": 3},
        resolutions=[ReportResolution("mlx/x.h", "carried", "")],
        patches=[ReportPatch("0001-fix.patch", "clean", 1, "")],
        range_diff="1:  abc = 1:  abc 0001\n",
        next_steps=["review the fork's 1 change(s) outside [carry]", "overlay verify"],
        uncarried=[("mlx/y.cpp", ["1234567890ab fork: y"])],
        warnings=["pin dddddddddddd does not descend from the current pin"],
    )
    md = render_markdown(report)
    assert md == REFERENCE.render(r=report)
    assert md.startswith(
        "## overlay sync: aaaaaaaa / fork bbbbbbbb → dddddddd / fork eeeeeeee\n"
    )
    assert "pin.\n\n### Warnings\n\n- pin dddddddddddd does not descend" in md
    for section in (
        "### Resolutions",
        "### Series",
        "### Not carried",
        "### Range-diff",
    ):
        assert f"\n{section}" in md
    assert md.endswith(
        "### Next steps\n\n- review the fork's 1 change(s) outside [carry]\n"
        "- `overlay verify`\n\n"
    )  # a sentence as text, a command as code
    assert render(report, "markdown") == md


def test_rendering_the_markdown_does_not_import_jinja2():
    code = (
        "import sys\n"
        "from overlay.rebase.report import render_markdown, RebaseReport, PinChange\n"
        "from overlay.rebase.state import Bases\n"
        "b = Bases('a' * 40, 'b' * 40, 'c' * 40)\n"
        "render_markdown(RebaseReport('rebase', PinChange(b, b), {}, [], [], '', []))\n"
        "print('jinja2' in sys.modules)\n"
    )
    assert fresh_python(code) == "False\n"
