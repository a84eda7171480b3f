"""The ancestry answers (overlay/git/ancestry.py): remembered in the store, so that
another process asks git nothing it asked before; an answer git could not give is not
remembered."""

from __future__ import annotations

import pytest

from overlay.engine import layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest


def _store(overlay):
    """The tests' store with the overlay's three commits and the clean pin fetched;
    ``(store, manifest, world)``."""
    store = Store()
    m = load_manifest(str(overlay.root))
    layers.ensure_commits(store, m)
    store.ensure_commit(overlay.world.pin_clean, ["upstream"])
    return store, m, overlay.world


def _counting(monkeypatch) -> list:
    """The arguments of every git call of a store from now on (git still runs)."""
    started: list = []
    real = Store.git
    monkeypatch.setattr(
        Store, "git", lambda self, *a, **k: started.append(a) or real(self, *a, **k)
    )
    return started


def test_ancestry_answers_are_remembered(overlay, monkeypatch, tmp_path):
    store, m, w = _store(overlay)
    assert store.is_ancestor(m.merge_base, m.fork_commit) and not store.is_ancestor(
        m.fork_commit, m.merge_base
    )
    assert store.merge_base(m.fork_commit, w.pin_clean) == m.merge_base
    again = Store()  # another process: read from the store's file
    monkeypatch.setattr(
        Store, "git", lambda self, *a, **k: pytest.fail(f"git {a} ran again")
    )
    assert again.is_ancestor(m.merge_base, m.fork_commit) and not again.is_ancestor(
        m.fork_commit, m.merge_base
    )
    assert again.merge_base(m.fork_commit, w.pin_clean) == m.merge_base
    monkeypatch.undo()
    missing = "e" * 40  # git cannot answer: nothing is remembered
    assert not again.is_ancestor(missing, m.fork_commit)
    assert f"is-ancestor {missing} {m.fork_commit}" not in again._ancestry()


def test_one_walk_answers_both_directions(overlay, monkeypatch):
    # A rebase asks whether the new pin descends from the old one and the other way
    # round: one `git merge-base` answers both, also for commits on two branches.
    store, m, w = _store(overlay)
    started = _counting(monkeypatch)
    assert store.is_ancestor(m.merge_base, w.pin_clean)
    assert not store.is_ancestor(w.pin_clean, m.merge_base)
    assert not store.is_ancestor(w.pin_clean, m.fork_commit)  # on two branches
    assert not store.is_ancestor(m.fork_commit, w.pin_clean)
    assert store.is_ancestor(m.fork_commit, m.fork_commit)
    assert [a[0] for a in started] == ["merge-base", "merge-base", "merge-base"]


def test_one_walk_answers_whether_several_commits_are_below_one(overlay, monkeypatch):
    # A pin bump asks whether the old pin and the merge base are both below the new pin:
    # one `git merge-base --independent` answers both, then is_ancestor asks nothing.
    store, m, w = _store(overlay)
    started = _counting(monkeypatch)
    assert store.ancestors_of(w.pin_clean, [m.merge_base, w.pin_clean])
    assert [a[:2] for a in started] == [("merge-base", "--independent")]
    assert store.is_ancestor(m.merge_base, w.pin_clean)
    assert not store.is_ancestor(w.pin_clean, m.merge_base)
    assert store.is_ancestor(w.pin_clean, w.pin_clean)
    assert store.ancestors_of(w.pin_clean, [m.merge_base])
    assert len(started) == 1
    monkeypatch.undo()
    monkeypatch.setattr(
        Store, "git", lambda self, *a, **k: pytest.fail(f"git {a} ran again")
    )
    assert Store().is_ancestor(m.merge_base, w.pin_clean)  # another process


def test_a_commit_not_below_says_no_and_nothing_is_remembered(overlay, monkeypatch):
    store, m, w = _store(overlay)
    # The fork commit is on another branch than the pin; the merge base is below both.
    assert not store.ancestors_of(w.pin_clean, [m.merge_base, m.fork_commit])
    known = store._ancestry()
    assert f"is-ancestor {m.merge_base} {w.pin_clean}" not in known
    assert f"is-ancestor {m.fork_commit} {w.pin_clean}" not in known
    assert not store.ancestors_of(m.merge_base, [w.pin_clean])
    # A no already known answers without git.
    assert not store.is_ancestor(m.fork_commit, w.pin_clean)
    started = _counting(monkeypatch)
    assert not store.ancestors_of(w.pin_clean, [m.merge_base, m.fork_commit])
    assert started == []


def test_a_merge_base_is_remembered_below_both_commits(overlay, monkeypatch):
    store, m, w = _store(overlay)
    assert store.merge_base(m.fork_commit, w.pin_clean) == m.merge_base
    started = _counting(monkeypatch)
    assert store.is_ancestor(m.merge_base, m.fork_commit)
    assert store.is_ancestor(m.merge_base, w.pin_clean)
    assert started == []
