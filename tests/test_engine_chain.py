"""The stepwise apply (overlay/engine/chain.py): the chain of copies applies a series in
a number of git processes that does not grow with it, and an apply kept in the store is
read back, not applied again; the trees computed in Python (:mod:`overlay.git.treemodel`)
that it writes, and every refresh diff from one ``diff-tree --stdin``.

Each is compared with the plain way: one ``git apply`` + ``write-tree`` per patch,
``write-tree`` on an index, one ``diff-tree`` per pair. Same trees, same bytes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from gitfixtures import make_patch, read_blob
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from overlay.engine import PatchApplyError, apply_series
from overlay.engine import apply as engine
from overlay.engine import chain as engine_chain
from overlay.engine import records as engine_records
from overlay.git.store import EMPTY_TREE, Store
from overlay.git.treemodel import TreeConflict, TreeModel, listing, write_objects
from overlay.records.patchfmt import tree_diff, tree_diffs
from overlay.records.series import parse_patch

BASE = {
    "a.txt": b"one\ntwo\nthree\n",
    "dir/b.c": b"int b;\n" * 20,
    "dir/sub/c.h": b"#pragma once\n",
    "dir/run.sh": b"#!/bin/sh\necho hi\n",
    "name with space.txt": b"spaced\n",
    "na\xc3\xafve.hip": b"unicode name\n",
    "link": b"a.txt",
    "gone.txt": b"to be deleted\n" * 3,
    "moved.txt": b"renamed content\n" * 10,
}


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "store.git"))


def base_tree(store: Store) -> str:
    changes = {}
    for path, data in BASE.items():
        name = path.encode("latin-1").decode("utf-8") if "\xc3" in path else path
        mode = (
            "120000"
            if path == "link"
            else "100755"
            if path.endswith(".sh")
            else "100644"
        )
        changes[name] = (mode, store.hash_blob(data))
    return store.edit_tree(EMPTY_TREE, changes)


def series(
    store: Store, tmp_path, tree: str, steps: list[dict]
) -> tuple[list, list[str]]:
    """Patches made one on top of the other from ``steps`` (edits, modes); their files and trees."""
    patches, trees = [], []
    for i, step in enumerate(steps, 1):
        data, tree = make_patch(
            store, tree, step["edits"], modes=step.get("modes"), fix=i
        )
        path = tmp_path / f"{i:04d}.patch"
        path.write_bytes(data)
        patches.append(parse_patch(data, path.name, str(path)))
        trees.append(tree)
    return patches, trees


def sequential(store: Store, tree: str, patches) -> tuple[str, list]:
    """The one-patch-at-a-time path, the chain switched off."""
    saved = engine.apply_chained
    engine.apply_chained = lambda *args, **kw: None
    try:
        return apply_series(store, tree, patches, stepwise=True)
    finally:
        engine.apply_chained = saved


STEPS = [
    {"edits": {"a.txt": "one\nTWO\nthree\n"}},
    {"edits": {"a.txt": "ONE\nTWO\nthree\n", "dir/b.c": "int b;\n" * 19 + "int c;\n"}},
    {"edits": {"new/deep/file.cpp": "created\n", "gone.txt": None}},
    {
        "edits": {"dir/run.sh": "#!/bin/sh\necho hi\n"},
        "modes": {"dir/run.sh": "100644"},
    },
    {
        "edits": {
            "name with space.txt": "spaced out\n",
            "na\u00efve.hip": "unicode changed\n",
        }
    },
    {"edits": {"moved.txt": None, "moved/elsewhere.txt": "renamed content\n" * 10}},
    {"edits": {"link": "dir/b.c"}, "modes": {"link": "120000"}},
    {"edits": {"new/deep/file.cpp": None, "a.txt": "ONE\nTWO\nTHREE\n"}},
    {"edits": {"dir/sub/c.h": None}},
]


def test_chain_gives_the_trees_of_one_patch_at_a_time(store, tmp_path, monkeypatch):
    tree = base_tree(store)
    patches, trees = series(store, tmp_path, tree, STEPS)
    assert any(
        c.rename for p in patches for c in p.changes
    )  # the rename is seen as one
    calls = []
    real = engine.apply_chained
    monkeypatch.setattr(
        engine, "apply_chained", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    chained, results = apply_series(store, tree, patches, stepwise=True)
    assert (
        calls
        and real(store, tree, patches, *_records(store, tree, patches)) is not None
    )
    assert chained == trees[-1] and [r.tree for r in results] == trees
    monkeypatch.setattr(engine, "apply_chained", real)
    one_by_one, seq_results = sequential(store, tree, patches)
    assert one_by_one == chained and [r.tree for r in seq_results] == [
        r.tree for r in results
    ]


def _records(store, tree, patches):
    state = dict.fromkeys(engine_records.touched_paths(patches))
    state.update(store.entries(tree, list(state)))
    initial, expected = dict(state), []
    for _k, _patch, bad, same in engine_records.walk_records(
        patches, state, lambda oid: True
    ):
        assert not bad and not same
        expected.append(dict(state))
    return initial, expected


def test_chain_runs_a_fixed_number_of_git_processes(store, tmp_path, monkeypatch):
    tree = base_tree(store)
    steps = [{"edits": {"a.txt": f"one\ntwo {i}\nthree\n"}} for i in range(30)]
    patches, trees = series(store, tmp_path, tree, steps)
    seen = []
    real_git = Store.git
    monkeypatch.setattr(
        Store, "git", lambda self, *a, **k: seen.append(a[0]) or real_git(self, *a, **k)
    )
    _tree, results = apply_series(store, tree, patches, stepwise=True)
    assert [r.tree for r in results] == trees
    assert len(seen) <= 8, (
        seen
    )  # ls-tree, update-index, apply, ls-files, ls-tree, unpack/index-pack


def _apply_inputs(monkeypatch) -> list[list[bytes]]:
    """The contents of the files of every ``git apply`` the chain runs, per run."""
    runs: list[list[bytes]] = []
    real = engine_chain.git_apply

    def spy(store, env, names):
        runs.append([Path(n).read_bytes() for n in names])
        return real(store, env, names)

    monkeypatch.setattr(engine_chain, "git_apply", spy)
    return runs


def test_patches_of_other_files_share_an_input_and_a_patch_on_a_written_file_starts_one(
    store, tmp_path, monkeypatch
):
    # Patches 1-3 edit three files, 4 edits the first again (it reads patch 1's
    # result: a new input), 5 a file no patch of that input wrote.
    tree = base_tree(store)
    steps = [
        {"edits": {"a.txt": "one\ntwo 1\nthree\n"}},
        {"edits": {"dir/sub/c.h": "#pragma once\n// 2\n"}},
        {"edits": {"new/made.txt": "made by 3\n"}},
        {"edits": {"a.txt": "one\ntwo 4\nthree\n"}},
        {"edits": {"gone.txt": None}},
    ]
    patches, trees = series(store, tmp_path, tree, steps)
    runs = _apply_inputs(monkeypatch)
    _tree, results = apply_series(store, tree, patches, stepwise=True)
    assert [r.tree for r in results] == trees
    # One apply, and git's result kept: the chain held (no patch-at-a-time fallback).
    (inputs,) = runs
    assert len(_kept(store)) == 1 and len(inputs) == 2
    assert inputs[0].count(b"diff --git") == 3 and b"b/1/a.txt" in inputs[0]
    assert b"a/1/a.txt b/4/a.txt" in inputs[1] and b"b/5/gone.txt" in inputs[1]
    # The same series one patch at a time gives the same trees.
    one_by_one, _ = sequential(store, tree, patches)
    assert one_by_one == trees[-1]


#: The paths a generated series works on (two share a directory, one is nested).
_POOL = ["a.txt", "dir/b.c", "dir/sub/c.h", "new/made.txt"]
#: One step of a generated series: per path of the pool, leave it, write line k of it
#: anew, delete it, or move its content to ``moved/<name>`` (a rename, when it exists).
_STEP = st.lists(
    st.sampled_from(["keep", "edit", "delete", "move"]),
    min_size=len(_POOL),
    max_size=len(_POOL),
).filter(lambda ops: any(op != "keep" for op in ops))


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(_STEP, min_size=1, max_size=7))
def test_any_series_chained_gives_the_trees_of_one_patch_at_a_time(
    tmp_path_factory, steps
):
    # However the patches fall into git's inputs (a patch that reads what one of the
    # same input wrote begins a new one), each patch's tree is the one-at-a-time one.
    tmp = tmp_path_factory.mktemp("chain")
    store = Store(str(tmp / "store.git"))
    tree = base_tree(store)
    files = {p: read_blob(store, tree, p) for p in _POOL[:3]}
    specs = []
    for k, ops in enumerate(steps, 1):
        edits: dict[str, bytes | None] = {}
        for path, op in zip(_POOL, ops, strict=True):
            moved = "moved/" + path.rsplit("/", 1)[-1]
            if op == "edit":
                lines = (files.get(path) or b"").splitlines(keepends=True) or [b"\n"]
                lines[k % len(lines)] = b"line %d of patch %d\n" % (k % len(lines), k)
                files[path] = edits[path] = b"".join(lines)
            elif op == "delete" and path in files:
                del files[path]
                edits[path] = None
            elif op == "move" and path in files and moved not in files:
                files[moved] = edits[moved] = files.pop(path)
                edits[path] = None
        if edits:
            specs.append({"edits": edits})
    if not specs:
        return
    patches, trees = series(store, tmp, tree, specs)
    chained, results = apply_series(store, tree, patches, stepwise=True)
    assert [r.tree for r in results] == trees and chained == trees[-1]
    # The chain held: git's result is kept (a fallback to one at a time keeps none).
    assert len(_kept(store)) == 1
    one_by_one, seq_results = sequential(store, tree, patches)
    assert [r.tree for r in seq_results] == trees


def test_a_patch_whose_result_differs_from_its_record_is_named_as_before(
    store, tmp_path
):
    tree = base_tree(store)
    patches, _trees = series(store, tmp_path, tree, STEPS[:2])
    # Hand-edit patch 2's added line: its index line still records the old post-image.
    data = patches[1].data.replace(b"+int c;\n", b"+int d;\n")
    path = tmp_path / "0002.patch"
    path.write_bytes(data)
    edited = [patches[0], parse_patch(data, "0002.patch", str(path))]
    with pytest.raises(PatchApplyError) as chained:
        apply_series(store, tree, edited, stepwise=True)
    with pytest.raises(PatchApplyError) as one_by_one:
        sequential(store, tree, edited)
    assert chained.value.message == one_by_one.value.message
    assert "0002.patch" in chained.value.message and "dir/b.c" in chained.value.message


def test_tree_model_matches_write_tree(store):
    tree = base_tree(store)
    model = TreeModel(listing(store, tree), tree)
    blob = store.hash_blob(b"x\n")
    edits = [
        ("set", "dir/sub/new.txt", "100644"),
        ("set", "z/y/x.txt", "100755"),
        ("remove", "dir/sub/c.h", ""),
        ("remove", "absent/file", ""),
        ("set", "dir.txt", "100644"),
        ("remove", "link", ""),
    ]
    index_changes = {}
    for op, path, mode in edits:
        if op == "set":
            model.set(path, mode, blob)
            index_changes[path] = (mode, blob)
        else:
            model.remove(path)
            if path != "absent/file":
                index_changes[path] = None
    got = model.write()
    write_objects(store, model.objects)
    assert got == store.edit_tree(tree, index_changes)
    assert store.has_object(got, "tree")
    with pytest.raises(TreeConflict):
        model.set("a.txt/under", "100644", blob)
    with pytest.raises(TreeConflict):
        model.set("dir", "100644", blob)
    # Everything removed: the empty tree.
    empty = TreeModel(listing(store, tree), tree)
    for _mode, kind, _oid, path in listing(store, tree):
        if kind != "tree":
            empty.remove(path)
    assert empty.write() == EMPTY_TREE


def test_many_objects_go_in_one_pack(store, monkeypatch):
    from overlay.git import loose

    monkeypatch.setattr(loose, "LOOSE_LIMIT", 2)
    tree = base_tree(store)
    model = TreeModel(listing(store, tree), tree)
    for i in range(5):
        model.set(f"p{i}/f.txt", "100644", store.hash_blob(b"%d\n" % i))
    got = model.write()
    packs = set(os.listdir(os.path.join(store.git_dir, "objects", "pack")))
    write_objects(store, model.objects)
    assert store.has_object(got, "tree") and len(model.objects) > 2
    new = set(os.listdir(os.path.join(store.git_dir, "objects", "pack"))) - packs
    assert len([n for n in new if n.endswith(".pack")]) == 1
    assert not os.path.exists(os.path.join(store.git_dir, "objects", got[:2], got[2:]))


def test_tree_diffs_are_the_bytes_of_one_diff_per_pair(store, tmp_path):
    tree = base_tree(store)
    _patches, trees = series(store, tmp_path, tree, STEPS)
    pairs = list(zip([tree, *trees[:-1]], trees, strict=True)) + [
        (trees[0], trees[0]),
        (tree, trees[-1]),
    ]
    assert tree_diffs(store, pairs) == [tree_diff(store, a, b) for a, b in pairs]
    assert tree_diffs(store, []) == []


# -- the applies kept in the store (engine_chain._run_chain) ---------------------------


def _git_calls(monkeypatch) -> list[str]:
    seen: list[str] = []
    real_git = Store.git
    monkeypatch.setattr(
        Store, "git", lambda self, *a, **k: seen.append(a[0]) or real_git(self, *a, **k)
    )
    return seen


def _kept(store: Store) -> list[str]:
    top = os.path.join(store.git_dir, engine_chain.APPLIES)
    return sorted(os.path.join(d, f) for d, _dirs, files in os.walk(top) for f in files)


def test_a_chain_git_applied_once_is_read_back_not_applied_again(
    store, tmp_path, monkeypatch
):
    tree = base_tree(store)
    patches, trees = series(store, tmp_path, tree, STEPS)
    seen = _git_calls(monkeypatch)
    # The first run (a verify's refresh check) applies the chain and keeps git's result
    _tree, results = apply_series(store, tree, patches, stepwise=True)
    assert [r.tree for r in results] == trees and "apply" in seen
    assert len(_kept(store)) == 1
    # ... which the next (a rebase's) reads instead of applying.
    seen.clear()
    _tree, results = apply_series(store, tree, patches, stepwise=True)
    assert [r.tree for r in results] == trees
    assert not {"apply", "update-index", "ls-files"} & set(seen), seen


def test_a_changed_patch_is_applied_by_git_again(store, tmp_path, monkeypatch):
    tree = base_tree(store)
    patches, _trees = series(store, tmp_path, tree, STEPS[:2])
    apply_series(store, tree, patches, stepwise=True)
    # A hand edit of an added line (the index line still names the old post-image):
    # another input, so git runs and its result is refused, as on a first run.
    data = patches[1].data.replace(b"+int c;\n", b"+int d;\n")
    path = tmp_path / "0002-edited.patch"
    path.write_bytes(data)
    edited = [patches[0], parse_patch(data, "0002.patch", str(path))]
    seen = _git_calls(monkeypatch)
    with pytest.raises(PatchApplyError) as err:
        apply_series(store, tree, edited, stepwise=True)
    assert "apply" in seen and "0002.patch" in err.value.message
    # A change below at a path no patch touches (a pin bump's upstream changes): the
    # same chain, read back, and the tree holds the new content there.
    seen.clear()
    blob = store.hash_blob(b"upstream moved on\n")
    other = store.edit_tree(tree, {"gone.txt": ("100644", blob)})
    final, _ = apply_series(store, other, patches, stepwise=True)
    assert "apply" not in seen
    assert store.entries(final, ["gone.txt"])["gone.txt"].oid == blob


@pytest.mark.parametrize("damage", ["garbage", "shape", "missing-blob", "lie"])
def test_a_damaged_or_lying_record_never_gives_another_tree(
    store, tmp_path, monkeypatch, damage
):
    tree = base_tree(store)
    patches, trees = series(store, tmp_path, tree, STEPS)
    apply_series(store, tree, patches, stepwise=True)
    (record,) = _kept(store)
    with open(record, encoding="utf-8") as fh:
        rows = json.load(fh)["index"]
    if damage == "garbage":
        text = "{not json"
    elif damage == "shape":
        text = json.dumps({"index": [[r[0], r[1]] for r in rows]})
    elif damage == "missing-blob":
        rows[0][2] = "1" * 40
        text = json.dumps({"index": rows})
    else:  # every result swapped for another blob of the store: not the records
        blobs = [r[2] for r in rows]
        text = json.dumps(
            {
                "index": [
                    [r[0], r[1], blobs[(i + 1) % len(blobs)]]
                    for i, r in enumerate(rows)
                ]
            }
        )
    with open(record, "w", encoding="utf-8") as fh:
        fh.write(text)
    seen = _git_calls(monkeypatch)
    _tree, results = apply_series(store, tree, patches, stepwise=True)
    assert [r.tree for r in results] == trees
    assert "apply" in seen
