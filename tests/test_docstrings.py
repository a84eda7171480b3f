"""Docstrings and comments under ``overlay/`` state contracts and reasons in the present
tense. Where a change came from (an issue, a trial run) belongs in its commit message,
and a figure worth keeping in ``docs/``: an issue number means nothing to a reader of
the code, and it goes stale as the code moves on."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_HISTORY = re.compile(r"\bissues?\s+#?\d+|\bnew user's trial", re.IGNORECASE)


def history_mentions(text: str) -> list[int]:
    """Lines of ``text`` that cite an issue by number or a new user's trial."""
    return [n for n, line in enumerate(text.splitlines(), 1) if _HISTORY.search(line)]


def test_no_module_cites_an_issue_or_a_trial():
    found = {}
    for path in sorted((ROOT / "overlay").rglob("*")):
        if path.suffix not in (".py", ".j2"):
            continue
        lines = history_mentions(path.read_text(encoding="utf-8"))
        if lines:
            found[path.relative_to(ROOT).as_posix()] = lines
    assert found == {}, (
        "say what the code does and why; the history goes to the commit message "
        f"and a figure worth keeping to docs/: {found}"
    )


def test_the_history_finder_finds_issues_and_trials():
    text = (
        '"""The verdict cache (issue 14).\n'
        "Kept for a run of issues 8 and 16; see Issue #30 item 3.\n"
        "Found by a new user's trial.\n"
        "A patch may serve several entries; docs/design.md §5 says how.\n"
        "The issue is a race in the allocator; 14 issues of the lock remain.\n"
    )
    assert history_mentions(text) == [1, 2, 3]
