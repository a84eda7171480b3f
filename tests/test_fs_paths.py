"""Path safety and carry globs (overlay/fs/paths.py): a glob of many consecutive ``*``
is matched in linear time (an NFA that means what the regex means), through ``verify``
too. No timed assertions: ``hang_guard`` only turns a runaway match into a failure
instead of a stalled suite."""

from __future__ import annotations

import re

from click.testing import CliRunner
from fuzzlib import hang_guard
from hypothesis import given, settings
from hypothesis import strategies as st

from overlay.cli import main
from overlay.fs.paths import Carry, _GlobNFA, _tokens, collapse_stars, glob_match


def test_glob_with_twenty_stars_is_fast():
    """Sixteen to twenty consecutive `*` are matched without backtracking."""
    path = "mlx/backend/rocm/" + "a" * 200 + "/x.cpp"
    with hang_guard(60):
        assert not glob_match(path, "mlx/" + "*" * 20 + "y")
        assert glob_match(path, "mlx/" + "*" * 20 + "p")
        assert not glob_match(
            "a" * 300, "*a" * 20 + "b"
        )  # no consecutive stars, many wildcards
        assert Carry(["*" * 20 + "/**"], ["**" * 10 + ".md"])("mlx/core.cpp")
    assert collapse_stars("a/" + "*" * 20 + "/b***") == "a/**/b**"


def test_carry_through_verify_with_a_twenty_star_glob(clean):  # noqa: F811
    manifest = clean.root / "patches-rocm" / "overlay.toml"
    manifest.write_text(
        manifest.read_text().replace(
            'include = ["CMakeLists.txt", "mlx/**"]',
            'include = ["CMakeLists.txt", "mlx/' + "*" * 20 + '"]',
        )
    )
    with hang_guard(120):
        result = CliRunner().invoke(main, ["-C", str(clean.root), "verify"])
    assert result.exit_code in (0, 1) and "Traceback" not in result.output


def _regex(glob: str) -> re.Pattern:
    parts = {4: "(?:.*/)?", 3: ".*", 2: "[^/]*", 1: "[^/]"}
    return re.compile(
        "".join(parts.get(kind) or re.escape(char) for kind, char in _tokens(glob))
        + r"\Z",
        re.S,
    )


@settings(max_examples=400, deadline=None)
@given(st.text("ab*/?.", max_size=9), st.text("ab/.", max_size=10))
def test_linear_matcher_agrees_with_the_regex(glob, path):
    """The NFA used for many-wildcard globs means exactly what the regex means."""
    assert _GlobNFA(_tokens(glob)).match(path) == (_regex(glob).match(path) is not None)
