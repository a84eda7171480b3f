"""Issue 14 for a pin bump: the manifest's commits rewritten without tomlkit (the same
bytes), and the fork-delta merge kept in the store so that a rebase merges once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import tomlkit
from gitfixtures import MANIFEST, PATCH

from overlay.engine import layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest, set_pins

ROOT = Path(__file__).resolve().parents[1]
NEW = ("a" * 40, "b" * 40, "c" * 40)


def with_tomlkit(text: str, pin: str, fork: str, base: str) -> str:
    doc = tomlkit.parse(text)
    doc["upstream"]["pin"], doc["fork"]["commit"], doc["fork"]["merge-base"] = (
        pin,
        fork,
        base,
    )
    return tomlkit.dumps(doc)


def _fixture_manifest() -> str:
    return MANIFEST.format(
        upstream="/up",
        fork_url="/fork",
        pin="1" * 40,
        fork="2" * 40,
        base="3" * 40,
        closing="Closing.",
    )


@pytest.mark.parametrize(
    "text",
    [
        (ROOT / "patches-rocm" / "overlay.toml").read_text(),
        _fixture_manifest(),
        _fixture_manifest().replace('pin = "', 'pin="').replace("\n", "\r\n"),
        _fixture_manifest()
        .replace('commit = "2', '  commit   =   "2')
        .replace("# the pin", "#the pin  "),
    ],
)
def test_set_pins_writes_what_tomlkit_writes(text):
    assert set_pins(text, *NEW) == with_tomlkit(text, *NEW)


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.replace(
            'pin = "' + "1" * 40 + '"', "pin = '" + "1" * 40 + "'"
        ),  # a literal string
        lambda t: t.replace("[upstream]\n", "[upstream]\n").replace(
            'pin = "', 'pin = "' + "1" * 40 + '"\npin2 = "'
        ),
        lambda t: (
            t + '\n[extra]\npin = "' + "4" * 40 + '"\n'
        ),  # a pin key elsewhere is not ours, stays as it is
        lambda t: (
            t.replace("[upstream]\n", "")
            .replace('url = "/up"', 'upstream.url = "/up"')
            .replace('pin = "', 'upstream.pin = "')
        ),  # dotted keys
    ],
)
def test_set_pins_leaves_anything_else_to_tomlkit(change):
    text = change(_fixture_manifest())
    got = set_pins(text, *NEW)
    assert got is None or got == with_tomlkit(text, *NEW)


def test_a_second_merge_of_the_same_commits_is_read_from_the_store(
    overlay, monkeypatch
):
    store = Store()
    m = load_manifest(str(overlay.root))
    w = overlay.world
    layers.ensure_commits(store, m)
    for pin in (w.pin_conflict, w.pin_clean):
        store.ensure_commit(pin, ["upstream"])
    first = layers.merge_fork_delta(
        store, m.merge_base, w.pin_conflict, m.fork_commit, m.carry
    )
    assert first.stages  # the conflict world: stages must survive the cache
    merges = []
    real = Store.merge_trees
    monkeypatch.setattr(
        Store,
        "merge_trees",
        lambda self, *a, **k: merges.append(a) or real(self, *a, **k),
    )
    again = layers.merge_fork_delta(
        store, m.merge_base, w.pin_conflict, m.fork_commit, m.carry
    )
    assert again == first and merges == []
    # Another pin: merged, but the carried delta is not rebuilt.
    edits = []
    monkeypatch.setattr(
        Store,
        "edit_tree",
        lambda self, *a, **k: edits.append(a) or pytest.fail("rebuilt"),
    )
    other = layers.merge_fork_delta(
        store, m.merge_base, w.pin_clean, m.fork_commit, m.carry
    )
    assert len(merges) == 1 and other.tree != first.tree
    monkeypatch.undo()
    # A damaged record is merged again; another callable than Carry is not cached.
    for top, _dirs, files in os.walk(os.path.join(store.git_dir, "overlay-merges")):
        for name in files:
            with open(os.path.join(top, name), "w") as fh:
                json.dump({"tree": 5}, fh)
    assert (
        layers.merge_fork_delta(
            store, m.merge_base, w.pin_conflict, m.fork_commit, m.carry
        )
        == first
    )
    assert (
        layers.merge_fork_delta(
            store, m.merge_base, w.pin_conflict, m.fork_commit, lambda p: m.carry(p)
        )
        == first
    )


def test_ancestry_answers_are_remembered(overlay, monkeypatch, tmp_path):
    store = Store()
    m = load_manifest(str(overlay.root))
    layers.ensure_commits(store, m)
    w = overlay.world
    store.ensure_commit(w.pin_clean, ["upstream"])
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


def test_refresh_reads_and_parses_each_patch_once(clean, monkeypatch):
    """The series is read once per `refresh` (it was read again for the layers, the
    second read as costly as the first: issue 14), and a batch of reads resolves the
    patches' directory once, not once per patch."""
    from gitfixtures import cli

    from overlay.records import series

    parsed: list[str] = []
    real_parse = series.parse_patch
    monkeypatch.setattr(
        series,
        "parse_patch",
        lambda data, name, *a, **k: (
            parsed.append(name) or real_parse(data, name, *a, **k)
        ),
    )
    assert cli(clean, "refresh", "--check").exit_code == 0
    assert parsed == [PATCH]

    resolved: list[str] = []
    real_realpath = os.path.realpath
    monkeypatch.setattr(
        os.path,
        "realpath",
        lambda p, *a, **k: resolved.append(p) or real_realpath(p, *a, **k),
    )
    series.load_series(str(clean.root))
    one = len(resolved)
    for k in range(2, 6):  # the same patch under four more names
        (clean.root / "patches-rocm" / f"000{k}-copy.patch").write_bytes(
            (clean.root / "patches-rocm" / PATCH).read_bytes()
        )
    names = [f"000{k}-copy.patch" for k in range(2, 6)]
    (clean.root / "patches-rocm" / "series").write_text(
        "\n".join([PATCH, *names]) + "\n"
    )
    resolved.clear()
    assert [p.name for p in series.load_series(str(clean.root))] == [PATCH, *names]
    assert len(resolved) == one, resolved
