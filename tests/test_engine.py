"""The patch engine (overlay/engine/apply.py) through the commands a user runs: the
shared cases 10-14 (a quoted non-ASCII path, setext headings, Latin-1 context, a
directory that becomes a submodule, modify/delete) and the engine's other outcomes
(context that also matches elsewhere, a patch half upstream, an add/add conflict).

Each test builds its own upstream + fork (``build_world``) and an overlay, runs the
CLI as a user would (``overlay rebase`` / ``sync`` / ``refresh`` / ``verify``), and
asserts the outcome the case names. ``overlay verify`` exits 0 right after every run
that completes (no refresh in between): see :func:`seriesfixtures.assert_verify_clean`."""

from __future__ import annotations

import re
import subprocess

import pytest
from gitfixtures import Overlay, cli, git, lines, read_blob, tree_paths
from seriesfixtures import (
    PDIR,
    WORK,
    add_patch,
    assert_verify_clean,
    blocks_overlay,
    layers_of,
    patch_bytes,
    patched_blob,
    tree_hash,
    two_blocks,
    upstream_branch,
    work_file,
    write_fixes,
)

from overlay.git.store import Store
from overlay.records.series import parse_patch


# -- the overlay every case starts from ----------------------------------------------
@pytest.fixture
def ov(tmp_path, w):
    """An overlay on the merge base, empty series, a verify-clean LOCAL_FIXES.md."""
    o = Overlay(tmp_path / "overlay", w)
    write_fixes(o)
    return o


# -- fixture sanity: the helpers give a verify-clean overlay --------------------------------------------
def test_fixture_overlay_verifies_clean(ov):
    add_patch(
        ov,
        "0001-device.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={9: "d9"})},
    )
    write_fixes(ov, [("Device fix.", ["mlx/backend/rocm/device.cpp"])])
    assert_verify_clean(ov)


# -- case 10: quoted non-ASCII path with a space ---------------------------------------------
NAIVE = "mlx/backend/rocm/kernels/na\u00efve gemm.hip"


def quoted_gemm_patch(ov, w, name=NAIVE) -> tuple[bytes, str]:
    """The fork adds ``name``; a patch editing it made by real `git diff` with core.quotepath=true
    (git's default), so its headers hold the quoted ``"a/...na\\303\\257ve gemm.hip"`` form."""
    fork2 = w.fork.commit({name: lines("gemm", 12)}, "fork adds the naive gemm kernel")
    ov.write_manifest(w.base, fork=fork2)
    after = lines("gemm", 12, change={6: "gemm 6 // tiled"})
    (w.fork.path / name).write_text(after)
    diff = subprocess.run(
        ["git", "-c", "core.quotepath=true", "diff", "--full-index", "--no-color"],
        cwd=w.fork.path,
        stdout=subprocess.PIPE,
        check=True,
    ).stdout
    git(w.fork.path, "checkout", "--", ".")
    from overlay.records.patchfmt import format_patch

    data = format_patch(
        "rocm: tile the naive gemm",
        "Why.",
        [("Local-Fix", "1"), ("Forwarded", "not-needed")],
        diff,
    )
    return data, after


def test_case10_quoted_non_ascii_path_parses_and_applies(ov, w):
    data, after = quoted_gemm_patch(ov, w)
    assert b'diff --git "a/mlx/backend/rocm/kernels/na\\303\\257ve gemm.hip" ' in data
    assert b'+++ "b/mlx/backend/rocm/kernels/na\\303\\257ve gemm.hip"' in data
    parsed = parse_patch(data, "0001-gemm.patch")
    assert parsed.touched == {NAIVE}
    ov.add_patch("0001-gemm.patch", data)
    store, layers = layers_of(ov)
    assert [r.state for r in layers.patches] == ["exact"]
    assert read_blob(store, layers.patched, NAIVE) == after.encode()
    tree = cli(ov, "tree")
    assert tree.exit_code == 0 and tree.output.strip() == layers.patched
    # verify: the patch applies (no SER010). SER011 is expected here: refresh rewrites git's
    # quoted headers in its own (unquoted, -M) form; after a refresh the patch is stable.
    result = cli(ov, "verify", "--only", "SER")
    assert "SER010" not in result.output and "SER004" not in result.output
    assert cli(ov, "refresh").exit_code == 0
    assert parse_patch(patch_bytes(ov, "0001-gemm.patch"), "x").touched == {NAIVE}
    assert cli(ov, "verify", "--only", "SER").exit_code == 0


@pytest.mark.parametrize(
    "name",
    [
        NAIVE,
        "mlx/backend/rocm/kernels/na\u00efve_gemm.hip",
        "mlx/backend/rocm/kernels/naive gemm.hip",
    ],
)
def test_case10_entry_naming_the_quoted_file_in_backticks_counts(ov, w, name):
    data, _after = quoted_gemm_patch(ov, w, name)
    ov.add_patch("0001-gemm.patch", data)
    write_fixes(ov, [("Tile the naive gemm.", [name])])
    result = cli(ov, "verify", "--skip", "SER011")  # SER011: see the test above
    assert "FIX020" not in result.output and "FIX021" not in result.output, (
        result.output
    )
    assert result.exit_code == 0, result.output


def test_case10_entry_naming_another_file_is_still_fix020(ov, w):
    # The naming check is live: an entry that does not name the quoted file is caught.
    data, _after = quoted_gemm_patch(ov, w)
    ov.add_patch("0001-gemm.patch", data)
    write_fixes(ov, [("Tile the naive gemm.", ["mlx/backend/rocm/device.cpp"])])
    result = cli(ov, "verify", "--skip", "SER011")
    assert result.exit_code == 1 and "FIX020" in result.output


# -- case 11: setext heading underlines are not conflict markers --------------------------------
NOTES = "mlx/NOTES.md"


def notes_text(change=None) -> str:
    return "Notes\n=====\n\nIntro.\n\nCaveats\n=======\n\n" + lines("note", 10, change)


def test_case11_setext_heading_in_a_patched_markdown_file(ov, w):
    upstream_branch(w, "notes", w.base)
    pin_a = w.upstream.commit({NOTES: notes_text()}, "upstream adds notes")
    ov.write_manifest(pin_a)
    # The fix edits a line and adds a section of its own, underlined with exactly seven '='.
    fixed = notes_text({5: "note 5 rocm"}) + "\nROCm notes\n=======\n\nUse gfx1030.\n"
    add_patch(ov, "0001-notes.patch", {NOTES: fixed})
    assert b"\n+=======\n" in patch_bytes(ov, "0001-notes.patch")
    write_fixes(ov, [("Document the ROCm caveats.", [NOTES])], pin=pin_a)
    result = cli(ov, "verify")
    assert result.exit_code == 0, result.output
    assert not {"SER013", "LAY003", "FIX016"} & set(
        re.findall(r"[A-Z]{3}\d{3}", result.output)
    )

    # The pin moves: upstream rewrites the line the fix edits -> a stop on the Markdown file.
    pin_b = w.upstream.commit(
        {NOTES: notes_text({5: "note 5 upstream"})}, "upstream edits note 5"
    )
    stop = cli(ov, "rebase", "--onto", pin_b)
    assert stop.exit_code == 1 and "patch 0001-notes.patch conflicts" in stop.output, (
        stop.output
    )
    work = work_file(ov, NOTES)
    assert "<<<<<<< new base" in work.read_text()
    # The resolution keeps both setext headings (lines of exactly "======="): --continue takes it.
    resolved = (
        notes_text({5: "note 5 upstream rocm"})
        + "\nROCm notes\n=======\n\nUse gfx1030.\n"
    )
    work.write_text(resolved)
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output
    assert "conflict marker left" not in done.output
    assert patched_blob(ov, NOTES) == resolved.encode()
    assert_verify_clean(ov)


def test_case11_setext_heading_in_a_fork_delta_resolution(ov, w):
    write_fixes(
        ov, retarget=[("Keep the ROCm hook.", ["mlx/core.cpp"])]
    )  # FIX023 wants the resolution named
    stop = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert (
        stop.exit_code == 1 and "mlx/core.cpp: the fork delta conflicts" in stop.output
    )
    # The conflict region (line 5) resolved with a block comment holding a setext heading.
    resolved = lines(
        "core",
        change={
            5: "core 5 upstream rewrite // rocm hook\n/*\nCaveats\n=======\n*/",
            25: "core 25 upstream",
        },
    )
    work_file(ov, "mlx/core.cpp").write_text(resolved)
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output
    assert "conflict marker left" not in done.output
    assert (ov.root / PDIR / "resolved" / "mlx" / "core.cpp").read_text() == resolved
    result = cli(ov, "verify")
    assert result.exit_code == 0, result.output
    assert "LAY003" not in result.output


# -- case 12: Latin-1 bytes in context after a pin bump --------------------------------------------
def latin1(change: dict[int, bytes] | None = None) -> bytes:
    rows = {i: f"row {i}".encode() for i in range(1, 21)}
    rows[10] = b"// caf\xe9 au lait"
    rows.update(change or {})
    return b"".join(rows[i] + b"\n" for i in range(1, 21))


def test_case12_latin1_context_survives_a_three_way_carry(ov, w):
    upstream_branch(w, "latin", w.base)
    pin_a = w.upstream.commit(
        {"mlx/latin1.cpp": latin1()}, "upstream adds a Latin-1 file"
    )
    ov.write_manifest(pin_a)
    add_patch(ov, "0001-latin.patch", {"mlx/latin1.cpp": latin1({11: b"row 11 fixed"})})
    assert b" // caf\xe9 au lait\n" in patch_bytes(ov, "0001-latin.patch")
    write_fixes(ov, [("Fix row 11.", ["mlx/latin1.cpp"])], pin=pin_a)
    assert_verify_clean(ov)
    # Upstream changes row 8, inside the hunk's context: the patch must be carried 3-way.
    pin_b = w.upstream.commit(
        {"mlx/latin1.cpp": latin1({8: b"row 8 upstream"})}, "upstream edits row 8"
    )
    done = cli(ov, "rebase", "--onto", pin_b)
    assert done.exit_code == 0, done.output
    assert "patch 0001-latin.patch: merged" in done.output
    data = patch_bytes(ov, "0001-latin.patch")
    assert (
        b" // caf\xe9 au lait\n" in data
        and b"+row 11 fixed\n" in data
        and b" row 8 upstream\n" in data
    )
    parse_patch(data, "0001-latin.patch")  # the tool reads what it wrote
    status = cli(ov, "status")
    assert status.exit_code == 0, status.output
    assert "0001-latin.patch  [exact]" in status.output
    assert_verify_clean(ov)
    assert patched_blob(ov, "mlx/latin1.cpp") == latin1(
        {8: b"row 8 upstream", 11: b"row 11 fixed"}
    )


# -- case 13: the fork turns a directory the fix touches into a submodule ---------------------------
KDIR = "mlx/backend/rocm/kernels"
GEMM = f"{KDIR}/gemm.hip"


def submodule_stop(ov, w, outputs: list[str]):
    """Fork adds kernels/, a fix edits kernels/gemm.hip, then the fork turns kernels/ into a
    gitlink; `overlay sync --fork` stops. Returns the new fork commit."""
    fork2 = w.fork.commit(
        {GEMM: lines("gemm", 12), f"{KDIR}/conv.hip": "conv\n"}, "fork adds kernels"
    )
    ov.write_manifest(w.base, fork=fork2)
    add_patch(
        ov,
        "0001-gemm.patch",
        {GEMM: lines("gemm", 12, change={6: "gemm 6 // tiled"})},
        fix=1,
    )
    write_fixes(ov, [("Tile the gemm.", [GEMM])], fork=fork2)
    assert_verify_clean(ov)
    git(w.fork.path, "rm", "-r", "-q", "--", KDIR)
    git(w.fork.path, "update-index", "--add", "--cacheinfo", f"160000,{w.base},{KDIR}")
    git(w.fork.path, "commit", "-q", "-m", "kernels become a submodule")
    fork3 = git(w.fork.path, "rev-parse", "HEAD")
    stop = cli(ov, "sync", "--fork", fork3)
    outputs.append(stop.output)
    assert (
        stop.exit_code == 1
        and "patch 0001-gemm.patch conflicts with the new base" in stop.output
    )
    return fork3, stop


def delete_work_files(ov) -> None:
    for f in (ov.root / WORK).rglob("*"):
        if f.is_file():
            f.unlink()


def never_called_upstream(outputs: list[str], name: str) -> None:
    for out in outputs:
        for line in out.splitlines():
            assert not (name in line and "upstream" in line), line


def test_case13_directory_becomes_a_submodule(ov, w):
    outputs: list[str] = []
    fork3, stop = submodule_stop(ov, w, outputs)
    # The stop names the conflict: the directory became a submodule; the patch's file is modify/delete.
    assert (
        f"{KDIR} (CONFLICT (file/directory): the new base has a submodule there)"
        in stop.output
    )
    assert (
        "~" not in stop.output.split(KDIR, 1)[1][:1]
    )  # git's internal name is not shown
    assert "keep it to keep it" not in stop.output and "cannot be kept" in stop.output
    assert f"{GEMM} (CONFLICT (modify/delete)" in stop.output
    assert work_file(ov, GEMM).is_file()
    # --continue with the patch's file left in place: refused, the run stays stopped.
    kept = cli(ov, "sync", "--continue")
    outputs.append(kept.output)
    assert kept.exit_code != 0 and "submodule" in kept.output and KDIR in kept.output, (
        kept.output
    )
    assert "stopped at patch 0001-gemm.patch" in cli(ov, "sync", "--status").output
    assert (ov.root / PDIR / "0001-gemm.patch").exists()
    # Only --drop removes the patch (--skip asks for it: the patch's change is not on the new base).
    done = cli(ov, "sync", "--drop")
    outputs.append(done.output)
    assert done.exit_code == 0, done.output
    assert "0001-gemm.patch: skipped" in done.output
    assert not (ov.root / PDIR / "0001-gemm.patch").exists()
    assert f'commit = "{fork3}"' in (ov.root / PDIR / "overlay.toml").read_text()
    # The forked layer keeps the fork's gitlink.
    forked = cli(ov, "tree", "--layer", "forked")
    assert forked.exit_code == 0, forked.output
    assert (
        Store().out("ls-tree", forked.output.strip(), "--", KDIR)
        == f"160000 commit {w.base}\t{KDIR}"
    )
    never_called_upstream(outputs, "0001-gemm.patch")
    assert (
        "| `0001-gemm.patch` | 1 | skipped |"
        in (ov.root / ".overlay" / "last-rebase.md").read_text()
    )
    # verify right after the sync: the errors the run announced: entry 1 stays for the
    # user to move or delete, and it names a file that is gone (FIX021); the patched tree
    # holds the fork's submodule, which export refuses (LAY007). Once the user deletes the
    # entry and stops carrying the submodule, verify is clean.
    assert "LAY007" in done.output, done.output
    result = cli(ov, "verify")
    assert result.exit_code == 1 and set(
        re.findall(r"error (\w+\d{3})", result.output)
    ) == {"FIX021", "LAY007"}, result.output
    assert f"{KDIR} is a submodule" in result.output
    manifest = ov.root / PDIR / "overlay.toml"
    manifest.write_text(
        manifest.read_text().replace(
            'exclude = ["mlx/backend/cuda/**"',
            f'exclude = ["{KDIR}", "mlx/backend/cuda/**"',
        )
    )
    write_fixes(ov)
    with (ov.root / "LOCAL_FIXES.md").open("a") as fh:
        fh.write(f"- `{KDIR}`: a submodule in the fork.\n")
    assert_verify_clean(ov)


def test_case13_deleting_the_work_files_then_continue_stops_as_changes_nothing(ov, w):
    outputs: list[str] = []
    submodule_stop(ov, w, outputs)
    delete_work_files(ov)
    empty = cli(ov, "sync", "--continue")
    outputs.append(empty.output)
    assert (ov.root / PDIR / "0001-gemm.patch").exists()  # never deleted by --continue
    assert empty.exit_code == 1 and "changes nothing on the new base" in empty.output, (
        empty.output
    )
    again = cli(ov, "sync", "--continue")  # still no word: still stopped, patch kept
    assert again.exit_code == 1 and (ov.root / PDIR / "0001-gemm.patch").exists()
    done = cli(ov, "sync", "--skip")
    outputs.append(done.output)
    assert done.exit_code == 0 and not (ov.root / PDIR / "0001-gemm.patch").exists()
    forked = cli(ov, "tree", "--layer", "forked").output.strip()
    assert (
        Store().out("ls-tree", forked, "--", KDIR) == f"160000 commit {w.base}\t{KDIR}"
    )
    never_called_upstream(outputs, "0001-gemm.patch")


# -- case 14: a fix deletes a file the new pin edits ------------------------------------------------
def test_case14_modify_delete_is_named_and_continue_never_drops_the_patch(ov, w):
    add_patch(ov, "0001-drop-ops.patch", {"mlx/ops.cpp": None}, fix=1)
    write_fixes(ov, [("Drop the ops file.", ["mlx/ops.cpp"])])
    assert_verify_clean(ov)
    stop = cli(
        ov, "rebase", "--onto", w.pin_clean
    )  # pin_clean edits mlx/ops.cpp line 2
    assert stop.exit_code == 1, stop.output
    assert "patch 0001-drop-ops.patch conflicts with the new base" in stop.output
    assert "mlx/ops.cpp (CONFLICT (modify/delete)" in stop.output
    # Both versions shown: the new base's file, and what the patch was made to delete.
    assert work_file(ov, "mlx/ops.cpp").read_text() == lines(
        "ops", change={2: "ops 2 upstream"}
    )
    assert work_file(ov, "mlx/ops.cpp.pre-image").read_text() == lines("ops")
    # --continue without a decision (the file left in place): the patch is not deleted.
    undecided = cli(ov, "rebase", "--continue")
    assert (
        undecided.exit_code == 1
        and "changes nothing on the new base" in undecided.output
    ), undecided.output
    assert (ov.root / PDIR / "0001-drop-ops.patch").exists()
    assert "0001-drop-ops.patch" in (ov.root / PDIR / "series").read_text()
    assert cli(ov, "rebase", "--continue").exit_code == 1  # still stopped, still kept
    assert (ov.root / PDIR / "0001-drop-ops.patch").exists()
    skipped = cli(ov, "rebase", "--skip")
    assert skipped.exit_code == 0, skipped.output
    assert "0001-drop-ops.patch: skipped" in skipped.output
    assert not (ov.root / PDIR / "0001-drop-ops.patch").exists()
    assert (ov.root / PDIR / "series").read_text() == ""
    # verify right after: exit 0 (entry 1 stays, as the skip said: only a FIX024 warning).
    result = cli(ov, "verify")
    assert result.exit_code == 0, result.output
    assert set(re.findall(r"(?:error|warning) (\w+\d{3})", result.output)) <= {"FIX024"}


def test_case14_deleting_the_work_file_keeps_the_deletion(ov, w):
    # The other decision: delete the file there -> the patch now deletes the new base's version.
    add_patch(ov, "0001-drop-ops.patch", {"mlx/ops.cpp": None}, fix=1)
    write_fixes(ov, [("Drop the ops file.", ["mlx/ops.cpp"])])
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 1
    work_file(ov, "mlx/ops.cpp").unlink()
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output
    assert "0001-drop-ops.patch: resolved" in done.output
    store, layers = layers_of(ov)
    assert "mlx/ops.cpp" not in tree_paths(store, layers.patched)
    assert_verify_clean(ov)


# -- a hunk whose context also matches elsewhere, through a rebase ------------------------------------


def test_context_matching_another_block_is_never_placed_there_through_a_rebase(ov, w):
    _pin_a, data = blocks_overlay(ov, w)
    assert_verify_clean(ov)
    # The pin inserts 7 lines above the first block: the first block now sits exactly where the
    # hunk says (the blocks are 7 lines apart), so `git apply` alone would change the first block.
    pin_b = w.upstream.commit(
        {"mlx/blocks.cpp": two_blocks(inserted=7)}, "upstream inserts 7 lines"
    )
    done = cli(ov, "rebase", "--onto", pin_b)
    assert done.exit_code == 0, done.output
    assert "patch 0001-second-block.patch: merged" in done.output
    # What `git apply` alone does with the old patch on the new pin: it changes the first block.
    store = Store()
    scratch = ov.root.parent / "scratch.patch"
    scratch.write_bytes(data)
    with store.scratch_index(store.tree_of(pin_b)) as env:
        assert (
            store.git(
                "apply", "--cached", str(scratch), env=env, check=False
            ).returncode
            == 0
        )
        naive = read_blob(
            store, store.out("write-tree", env=env), "mlx/blocks.cpp"
        ).decode()
    assert naive.index("state = 2;") < naive.index("state = 1;")
    # The engine: the fix lands on the block it was made on (the second).
    assert patched_blob(ov, "mlx/blocks.cpp").decode() == two_blocks(
        inserted=7, second="state = 2;"
    )
    assert_verify_clean(ov)


# -- a patch half of which is upstream keeps its other half ------------------------------------------
def test_patch_half_upstream_keeps_the_other_half(ov, w):
    add_patch(
        ov,
        "0001-two-hunks.patch",
        {"mlx/ops.cpp": lines("ops", change={5: "ops 5 fixed", 25: "ops 25 fixed"})},
        fix=1,
    )
    assert patch_bytes(ov, "0001-two-hunks.patch").count(b"\n@@ ") == 2
    write_fixes(ov, [("Two fixes to ops.", ["mlx/ops.cpp"])])
    assert_verify_clean(ov)
    upstream_branch(w, "half", w.base)
    picked = w.upstream.commit(
        {"mlx/ops.cpp": lines("ops", change={5: "ops 5 fixed"})}, "cherry-pick one hunk"
    )
    done = cli(ov, "rebase", "--onto", picked)
    assert done.exit_code == 0, done.output
    assert (
        "patch 0001-two-hunks.patch: merged" in done.output
        and "upstream"
        not in done.output.split("0001-two-hunks.patch", 1)[1].splitlines()[0]
    )
    data = patch_bytes(ov, "0001-two-hunks.patch")
    assert data.count(b"\n@@ ") == 1
    assert (
        b"+ops 25 fixed\n" in data
        and b"+ops 5 fixed" not in data
        and b"-ops 5\n" not in data
    )
    assert "0001-two-hunks.patch" in (ov.root / PDIR / "series").read_text()
    assert (
        patched_blob(ov, "mlx/ops.cpp")
        == lines("ops", change={5: "ops 5 fixed", 25: "ops 25 fixed"}).encode()
    )
    assert (
        "| `0001-two-hunks.patch` | 1 | merged |"
        in (ov.root / ".overlay" / "last-rebase.md").read_text()
    )
    assert_verify_clean(ov)


# -- add/add conflict, run from a directory that holds the same path ---------------------------------
def test_add_add_conflict_writes_only_under_dot_overlay(ov, w, tmp_path, monkeypatch):
    add_patch(
        ov, "0001-extra.patch", {"mlx/extra.cpp": "int extra() { return 1; }\n"}, fix=1
    )
    write_fixes(ov, [("Add extra.", ["mlx/extra.cpp"])])
    upstream_branch(w, "addadd", w.base)
    new_pin = w.upstream.commit(
        {"mlx/extra.cpp": "int extra() { return 2; }\n"}, "upstream adds extra.cpp"
    )
    scratch = tmp_path / "scratch"
    for rel, text in {
        "mlx/extra.cpp": "mine, not overlay's\n",
        "notes.txt": "keep me\n",
        "mlx/core.cpp": "unrelated\n",
        ".overlay/rebase/work/mlx/extra.cpp": "decoy\n",
    }.items():
        (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
        (scratch / rel).write_text(text)
    monkeypatch.chdir(scratch)
    scratch_before = tree_hash(scratch)
    overlay_before = tree_hash(ov.root, skip=".overlay")
    stop = cli(ov, "rebase", "--onto", new_pin)
    assert stop.exit_code == 1, stop.output
    assert "patch 0001-extra.patch conflicts with the new base" in stop.output
    # (git's -z conflict type for an add/add content conflict is "CONFLICT (contents)")
    assert "mlx/extra.cpp (CONFLICT (" in stop.output
    text = work_file(ov, "mlx/extra.cpp").read_text()
    assert text.startswith(
        "<<<<<<< new base\nint extra() { return 2; }\n||||||| patch pre-image\n"
    )
    assert (
        "=======\nint extra() { return 1; }\n>>>>>>> patch 0001-extra.patch\n" in text
    )
    assert tree_hash(scratch) == scratch_before  # the process cwd is untouched
    assert (
        tree_hash(ov.root, skip=".overlay") == overlay_before
    )  # nothing outside .overlay/
    assert sorted(p.name for p in ov.root.iterdir()) == [
        ".overlay",
        "LOCAL_FIXES.md",
        PDIR,
    ]
    assert cli(ov, "rebase", "--abort").exit_code == 0
    assert tree_hash(scratch) == scratch_before
