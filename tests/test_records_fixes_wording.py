"""The wording checks of LOCAL_FIXES.md (overlay/records/fixes/wording.py): the
policy's closing sentence, with a trailing issue reference and older accepted forms
(FIX013), and the upstream-marking phrases (FIX014). Every excerpt is written for the
purpose."""

from __future__ import annotations

import pytest
from gitfixtures import CLOSING

from overlay.records import fixes

S = CLOSING
OLD = "Applies to the fork."


def policy_doc(*entries: str) -> fixes.Document:
    body = "\n\n".join(entries)
    return fixes.parse(
        f"# Local changes relative to x/fork@aaaaaaaa\n\n## Fixes to the fork's kernels\n\n{body}\n"
    )


def fix013(doc, **kw):
    return [
        (f.code, f.line, f.message) for f in fixes.check_closing_sentence(doc, S, **kw)
    ]


# ----------------------------------------------------------------------------- FIX013


@pytest.mark.parametrize(
    "ending",
    [
        f"{S} (acme/mlx-port#2149)",
        f"{S} (#7)",
        f"{S} (acme/mlx-port#12, #13)",
        f"{S[:-1]} (acme/mlx-port#12).",
        f"{S[:-1]} (#12).",
    ],
)
def test_closing_sentence_with_a_trailing_reference(ending):
    d = policy_doc(f"1. **Guard the queue.** The queue is locked now. {ending}")
    assert fix013(d) == []


@pytest.mark.parametrize(
    "ending",
    [
        f"{S} (see the notes)",  # not an issue reference
        f"{S} acme/mlx-port#12",  # no parentheses
        f"{S} (acme/mlx-port#12) and more.",  # the reference is not the end
        f"{S[:-1]} (#12)",  # neither position: no period at all
        f"{S} (acme#12)",  # owner/repo needs both parts
    ],
)
def test_closing_sentence_reference_forms_that_are_not_accepted(ending):
    d = policy_doc(f"1. **Guard the queue.** The queue is locked now. {ending}")
    assert [c for c, _l, _m in fix013(d)] == ["FIX013"]


def test_older_forms_are_accepted_below_the_entry_number():
    d = policy_doc(
        f"1. **Old one.** Kept. {OLD}",
        f"2. **Old two.** Kept. {OLD} (acme/mlx-port#4)",
        f"3. **New three.** Kept. {S}",
        f"4. **New four.** Kept. {OLD}",
        "5. **No sentence.** Kept.",
    )
    found = fix013(d, older=[OLD], required_from=3)
    assert [(c, m.split(" ")[1]) for c, _l, m in found] == [
        ("FIX013", "4"),
        ("FIX013", "5"),
    ]
    assert "older form" in found[0][2] and "from 3 on" in found[0][2]
    assert "older form" not in found[1][2]
    # without the policy keys every older form is a finding, as before
    assert len(fix013(d)) == 4


# ----------------------------------------------------------------------------- FIX014


@pytest.mark.parametrize(
    "phrase, marked",
    [
        ("This should also be proposed there.", True),
        ("The guard could be proposed upstream.", True),
        ("It may also be submitted later.", True),
        ("This should not be proposed there.", False),
        ("It was proposed there in March and declined.", False),
        (S, False),
    ],
)
def test_fix014_catches_a_wish_to_propose(phrase, marked):
    d = fixes.parse(
        f"# Local changes relative to x/fork@aaaaaaaa\n\nA preamble. {phrase}\n"
    )
    assert bool(fixes.check_upstream_marking(d)) is marked
