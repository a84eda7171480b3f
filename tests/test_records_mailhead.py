"""A patch's mail head (overlay/records/mailhead.py): plain headers are read without
the :mod:`email` package; whatever the short reader accepts, it reads exactly as
``email``'s compat32 parser does, and it hands everything else to that parser."""

from __future__ import annotations

import email.parser
import email.policy
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from overlay.records.mailhead import _simple_headers
from overlay.records.series import parse_patch

NAMES = st.sampled_from(
    ["Subject", "From", "subject", "FROM", "Date", "X-Thing", "Local-Fix"]
)
VALUES = st.text(
    alphabet=st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=30
)
LINES = st.one_of(
    st.builds(
        lambda n, sep, v: f"{n}:{sep}{v}",
        NAMES,
        st.sampled_from(["", " ", "  ", "\t"]),
        VALUES,
    ),
    st.text(max_size=30),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(LINES, max_size=6))
def test_the_short_reader_agrees_with_email(lines):
    short = _simple_headers(lines)
    if short is None:
        return
    full = email.parser.Parser(policy=email.policy.compat32).parsestr(
        "\n".join(lines) + "\n"
    )
    for name in ("Subject", "From", "Date", "X-Thing", "Local-Fix", "Absent"):
        assert short.get(name) == full.get(name), (lines, name)


def test_folded_or_encoded_headers_go_to_email():
    assert _simple_headers(["Subject: [PATCH] one", " two"]) is None
    assert _simple_headers(["Subject: caf\u00e9"]) is None
    data = (
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        b"From: A <a@b>\nSubject: [PATCH] rocm: a long\n subject folded\n\nWhy.\n\nLocal-Fix: 1\n---\n"
        b"diff --git a/x b/x\nnew file mode 100644\nindex 0000000000000000000000000000000000000000.."
        b"587be6b4c3f93f93c489c0111bba5596147a26cb\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+x\n"
    )
    patch = parse_patch(data, "p.patch")
    assert patch.subject == "rocm: a long subject folded" and patch.author == "A <a@b>"


def test_reading_a_plain_patch_does_not_import_email():
    code = (
        "import sys; from overlay.records.series import parse_patch\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "p = parse_patch(data, 'p.patch')\n"
        "print(p.subject, 'email' in sys.modules)"
    )
    patch = (
        Path(__file__).resolve().parents[1]
        / "patches-rocm"
        / "0008-gather-qqmm-not-implemented.patch"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(patch)],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    ).stdout
    assert out.strip().endswith("False"), out
