"""Helpers of overlay/git/run.py that every git caller uses: a full object name is
told from anything else by :func:`is_sha` (string operations, no pattern)."""

from __future__ import annotations

import pytest

from overlay.git.run import is_sha

SHA = "0123456789abcdef" * 2 + "01234567"


@pytest.mark.parametrize(
    "value, full",
    [
        (SHA, True),
        ("f" * 40, True),
        (SHA.upper(), False),  # git writes names in lower case
        (SHA[:39], False),
        (SHA + "0", False),
        (SHA + "\n", False),  # a line read with its end is not a name
        (" " + SHA[1:], False),
        ("g" + SHA[1:], False),
        ("HEAD", False),
        ("", False),
    ],
)
def test_only_a_full_lowercase_name_is_a_sha(value, full):
    assert is_sha(value) is full
