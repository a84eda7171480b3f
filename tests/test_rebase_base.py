"""The run's shared tools (overlay/rebase/base.py): a kept conflict text is merged again
whenever a blob, a side or a label differs."""

from __future__ import annotations

import pytest

from overlay.git.store import Store
from overlay.rebase.base import RunBase
from overlay.rebase.state import Bases
from overlay.workspace import Workspace


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store.git"))


def test_a_kept_conflict_text_follows_every_input(store, tmp_path):
    run = RunBase(Workspace.of(str(tmp_path), store))
    base, ours, theirs, other = (
        store.hash_blob(b"a\nb\nc\n"),
        store.hash_blob(b"a\nB\nc\n"),
        store.hash_blob(b"a\nb2\nc\n"),
        store.hash_blob(b"a\nb3\nc\n"),
    )
    stages = {1: ("100644", base), 2: ("100644", ours), 3: ("100644", theirs)}
    first = run._labelled(stages, None)
    assert b"<<<<<<< pin" in first and b"b2" in first
    # Another blob on one side: merged again, not the kept text.
    changed = run._labelled({**stages, 3: ("100644", other)}, None)
    assert b"b3" in changed and b"b2" not in changed
    # A side missing: the empty text there.
    assert run._labelled({1: stages[1], 2: stages[2]}, None) != first
    # Other labels and the diff3 style: merged again.
    bases = Bases("1" * 40, "2" * 40, "3" * 40)
    labelled = run._labelled(stages, bases)
    assert (
        b"<<<<<<< pin 11111111" in labelled
        and b"||||||| merge base 33333333" in labelled
    )
    assert run._labelled(stages, None) == first
    run.close()
