"""The one definition of a conflict marker (overlay/records/markers.py): the lines git
writes for a conflict are found, a setext heading's ``=======`` outside a conflict is
not (shared case 11), and on any text the answers are those of the definition written
as regular expressions (the module's docstring), which the module no longer compiles."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from overlay.records.markers import conflict_regions, has_markers, marker_lines

# The definition as the module's docstring states it, as the module once matched it.
_OPEN = re.compile(rb"^<{7}(?: |\r?$)")
_BASE = re.compile(rb"^\|{7}(?: |\r?$)")
_SEP = re.compile(rb"^={7}\r?$")
_CLOSE = re.compile(rb"^>{7}(?: |\r?$)")


def reference_lines(data: bytes) -> list[tuple[int, str]]:
    out, inside = [], False
    for number, line in enumerate(data.split(b"\n"), 1):
        if _OPEN.match(line):
            inside = True
        elif _CLOSE.match(line):
            inside = False
        elif not (_BASE.match(line) or (inside and _SEP.match(line))):
            continue
        out.append((number, line.rstrip(b"\r").decode("utf-8", "replace")))
    return out


def reference_regions(data: bytes) -> list[tuple[int, int]]:
    spans, start = [], None
    for number, line in enumerate(data.split(b"\n"), 1):
        if _OPEN.match(line):
            start = number
        elif _CLOSE.match(line) and start is not None:
            spans.append((start, number))
            start = None
    return spans


CONFLICT = (
    b"int a;\n"
    b"<<<<<<< pin 1234abcd\n"
    b"int b = 1;\n"
    b"||||||| merge base\n"
    b"int b;\n"
    b"=======\r\n"
    b"int b = 2;\n"
    b">>>>>>> fork\n"
    b"int c;\n"
)


def test_the_lines_git_writes_for_a_conflict_are_found():
    assert marker_lines(CONFLICT) == [
        (2, "<<<<<<< pin 1234abcd"),
        (4, "||||||| merge base"),
        (6, "======="),
        (8, ">>>>>>> fork"),
    ]
    assert conflict_regions(CONFLICT) == [(2, 8)]
    assert marker_lines(CONFLICT.decode()) == marker_lines(CONFLICT)  # text too


def test_a_heading_underline_outside_a_conflict_is_not_a_marker():
    doc = b"Caveats\n=======\n\nText.\n"
    assert marker_lines(doc) == [] and not has_markers(doc)
    assert conflict_regions(doc) == []


def test_seven_characters_run_on_are_not_a_marker():
    text = b"<<<<<<<<\n<<<<<<<x\n>>>>>>>>> y\n||||||||\n======= x\n"
    assert marker_lines(text) == []
    half = b"x\n>>>>>>> fork\n"  # a half-deleted conflict is still caught
    assert marker_lines(half) == [(2, ">>>>>>> fork")]
    assert conflict_regions(half) == []


LINES = st.sampled_from(
    [
        b"<<<<<<<",
        b"<<<<<<< ours",
        b"<<<<<<<\r",
        b"<<<<<<<<",
        b"|||||||",
        b"||||||| base",
        b"=======",
        b"=======\r",
        b"======= x",
        b"========",
        b">>>>>>>",
        b">>>>>>> theirs",
        b">>>>>>>x",
        b"",
        b"\r",
        b"int x;",
        b" <<<<<<< indented",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(LINES, max_size=12))
def test_any_text_is_answered_as_the_definition_answers(lines):
    data = b"\n".join(lines)
    assert marker_lines(data) == reference_lines(data)
    assert conflict_regions(data) == reference_regions(data)
