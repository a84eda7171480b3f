"""The patch-engine cases 10-18 of shared/cases (and the extra engine outcomes) on real repositories.

Each test builds its own upstream + fork (``build_world``) and an overlay, runs the
CLI as a user would (``overlay rebase`` / ``sync`` / ``refresh`` / ``verify``), and
asserts the outcome the case names. ``overlay verify`` must exit 0 right after every
run that completes (no refresh in between): see :func:`assert_verify_clean`.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest
from gitfixtures import (
    CLOSING,
    Overlay,
    cli,
    git,
    lines,
    make_patch,
    read_blob,
    tree_paths,
)

from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records import fixes
from overlay.records.manifest import load_manifest
from overlay.records.series import parse_patch

PDIR = "patches-rocm"
WORK = Path(".overlay") / "rebase" / "work"


# -- shared helpers -----------------------------------------------------------------------
@pytest.fixture
def ov(tmp_path, w):
    """An overlay on the merge base, empty series, a verify-clean LOCAL_FIXES.md."""
    o = Overlay(tmp_path / "overlay", w)
    write_fixes(o)
    return o


def layers_of(o, **kw):
    store = Store()
    return store, compute_layers(store, load_manifest(str(o.root)), str(o.root), **kw)


def add_patch(
    o,
    name,
    edits,
    *,
    fix=1,
    subject="rocm: a fix",
    description="Why the change is needed.",
    modes=None,
):
    """Make a patch on the current ``patched`` layer, add it to the series, return its bytes."""
    store, layers = layers_of(o)
    data, _ = make_patch(
        store,
        layers.patched,
        edits,
        fix=fix,
        subject=subject,
        description=description,
        modes=modes,
    )
    o.add_patch(name, data)
    return data


def fixes_text(o, entries=(), retarget=(), *, fork=None, pin=None) -> str:
    """A LOCAL_FIXES.md verify accepts: ``entries`` = [(title, [files])] in the kernels section
    (numbered 1..n), ``retarget`` = [(title, [files])] numbered after them."""
    w = o.world
    manifest = load_manifest(str(o.root))
    repo = fixes.fork_repo_from_url(str(w.fork.path))
    out = [
        f"# Local changes relative to {repo}@{(fork or manifest.fork_commit)[:8]}\n\n",
        f"## Retarget onto the MLX pin ({(pin or manifest.pin)[:8]})\n\n",
    ]
    n = 0
    for title, files in retarget:
        n += 1
        out.append(
            f"{n}. **{title}** Touches {', '.join(f'`{f}`' for f in files)}. {CLOSING}\n\n"
        )
    out.append("## Fixes to the fork's kernels\n\n")
    for title, files in entries:
        n += 1
        out.append(
            f"{n}. **{title}** Touches {', '.join(f'`{f}`' for f in files)}. {CLOSING}\n\n"
        )
    out.append(
        "## Dropped from the vendored set\n\n"
        "- `docs/rocm.md`: fork documentation.\n"
        "- `mlx/backend/metal/kernels.cpp`: Metal is not carried.\n"
    )
    return "".join(out)


def write_fixes(o, entries=(), retarget=(), **kw) -> None:
    (o.root / "LOCAL_FIXES.md").write_text(fixes_text(o, entries, retarget, **kw))


def assert_verify_clean(o) -> None:
    """`overlay verify` exits 0 (run right after a completed rebase or sync, no refresh)."""
    result = cli(o, "verify")
    assert result.exit_code == 0, result.output


def patched_blob(o, path) -> bytes:
    store, layers = layers_of(o)
    return read_blob(store, layers.patched, path)


def patch_bytes(o, name) -> bytes:
    return (o.root / PDIR / name).read_bytes()


def work_file(o, rel) -> Path:
    return o.root / WORK / rel


def tree_hash(top: Path, *, skip: str | None = None) -> str:
    """sha256 over every file's relative path and bytes under ``top`` (``skip``: a top-level name)."""
    h = hashlib.sha256()
    for path in sorted(p for p in top.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(top)
        if skip and rel.parts[0] == skip:
            continue
        h.update(
            str(rel).encode() + b"\0" + (path.read_bytes() if path.is_file() else b"->")
        )
    return h.hexdigest()


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


def upstream_branch(w, name, start) -> None:
    """Put the upstream work repository on a new branch ``name`` at ``start``."""
    git(w.upstream.path, "checkout", "-q", "-b", name, start)


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


# -- case 15: upstream renames a file a fix edits ----------------------------------------------------
@pytest.mark.parametrize(
    "upstream_edit", [False, True], ids=["rename-100", "rename-with-edit"]
)
def test_case15_fix_follows_an_upstream_rename(ov, w, upstream_edit):
    add_patch(
        ov,
        "0001-ops.patch",
        {"mlx/ops.cpp": lines("ops", change={20: "ops 20 fixed"})},
        fix=1,
    )
    write_fixes(ov, [("Fix ops 20.", ["mlx/ops.cpp"])])
    assert_verify_clean(ov)
    upstream_branch(w, "rename", w.base)
    git(w.upstream.path, "mv", "mlx/ops.cpp", "mlx/operations.cpp")
    renamed = (
        lines("ops", change={2: "ops 2 upstream"}) if upstream_edit else lines("ops")
    )
    new_pin = w.upstream.commit(
        {"mlx/operations.cpp": renamed}, "upstream renames ops.cpp"
    )
    done = cli(ov, "rebase", "--onto", new_pin)
    assert done.exit_code == 0, done.output
    # The fix landed in the renamed file; the old name is gone.
    store, layers = layers_of(ov)
    expected = lines(
        "ops",
        change={2: "ops 2 upstream", 20: "ops 20 fixed"}
        if upstream_edit
        else {20: "ops 20 fixed"},
    )
    assert read_blob(store, layers.patched, "mlx/operations.cpp") == expected.encode()
    assert "mlx/ops.cpp" not in tree_paths(store, layers.patched)
    data = patch_bytes(ov, "0001-ops.patch")
    assert (
        b"+++ b/mlx/operations.cpp" in data
        and b"mlx/ops.cpp" not in data.split(b"\n---\n", 1)[1]
    )
    assert "followed a rename: now changes mlx/operations.cpp" in done.output
    # The run owns the entry's file names it moved: the entry names the new path, and
    # verify is clean right after (issue 25, item 7), with no hand edit.
    assert "LOCAL_FIXES.md entry 1 now names mlx/operations.cpp" in done.output
    assert (ov.root / "LOCAL_FIXES.md").read_text() == fixes_text(
        ov, [("Fix ops 20.", ["mlx/operations.cpp"])]
    )
    assert_verify_clean(ov)


# -- case 16: a bare `---` line in the message, then notes, then the trailers -------------------------
HEAD16 = {
    "notes-then-trailers-then-separator": (
        "Keep the ops table in sync.\n---\nNotes: a reviewer asked for this; see the thread.\n\n"
        "Local-Fix: 1\nForwarded: not-needed\n---\n"
    ),
    "notes-then-trailers": (
        "Keep the ops table in sync.\n\n---\nNotes: a reviewer asked for this.\n  Indented note line.\n\n"
        "Local-Fix: 1\nForwarded: not-needed\n"
    ),
}


def head16(variant: str) -> bytes:
    return (
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        b"From: overlay <overlay@localhost>\nSubject: [PATCH] rocm: keep ops in sync\n\n"
        + HEAD16[variant].encode()
    )


def split_at_diff(data: bytes) -> tuple[bytes, bytes]:
    i = data.index(b"diff --git ")
    return data[:i], data[i:]


def patch16(ov, variant: str) -> tuple[Path, bytes]:
    from overlay.records.patchfmt import tree_diff

    store, layers = layers_of(ov)
    _data, new_tree = make_patch(
        store,
        layers.patched,
        {"mlx/ops.cpp": lines("ops", change={20: "ops 20 fixed"})},
    )
    data = head16(variant) + tree_diff(store, layers.patched, new_tree)
    path = ov.add_patch("0001-ops.patch", data)
    write_fixes(ov, [("Keep ops in sync.", ["mlx/ops.cpp"])])
    return path, data


@pytest.mark.parametrize("variant", sorted(HEAD16))
def test_case16_refresh_and_rebase_keep_every_byte_before_the_diff(ov, w, variant):
    path, data = patch16(ov, variant)
    head = head16(variant)
    assert split_at_diff(data)[0] == head
    refreshed = cli(ov, "refresh")
    assert refreshed.exit_code == 0, refreshed.output
    assert path.read_bytes() == data  # on its pre-image: nothing to change
    # A rebase that rewrites the patch (a 3-way carry: pin_clean edits ops line 2 near nothing
    # of ours, but the pre-image blob changes) keeps every byte before the diff.
    done = cli(ov, "rebase", "--onto", w.pin_clean)
    assert done.exit_code == 0, done.output
    assert "patch 0001-ops.patch: merged" in done.output
    new = path.read_bytes()
    assert new != data and split_at_diff(new)[0] == head
    assert b"+ops 20 fixed" in new and b" ops 2 upstream" not in new.split(b"@@", 1)[0]
    # And a refresh after it changes nothing either.
    assert cli(ov, "refresh").exit_code == 0 and path.read_bytes() == new


def hints(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.strip().startswith("hint:")]


@pytest.mark.parametrize(
    "variant", ["notes-then-trailers-then-separator", "notes-then-trailers"]
)
def test_case16_no_finding_hint_leads_to_deleting_text(ov, w, variant):
    patch16(ov, variant)
    result = cli(ov, "verify")
    for hint in hints(result.output):
        assert not re.search(r"\b(delete|remove|drop)\b", hint, re.I), result.output


# -- case 17: a resolution recorded in an aborted run is forgotten ---------------------------------
RR = Path(".overlay") / "rr-cache"
CORE_RESOLVED = lines(
    "core", change={5: "core 5 upstream rewrite // rocm hook", 25: "core 25 upstream"}
)


def rr_entries(o) -> set[str]:
    d = o.root / RR
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


def test_case17_abort_forgets_what_the_run_recorded(ov, w):
    add_patch(
        ov,
        "0001-ops.patch",
        {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})},
        fix=2,
    )
    write_fixes(
        ov,
        [("Ops 2.", ["mlx/ops.cpp"])],
        retarget=[("Keep the ROCm hook.", ["mlx/core.cpp"])],
    )
    assert_verify_clean(ov)
    before = rr_entries(ov)
    first = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert (
        first.exit_code == 1
        and "mlx/core.cpp: the fork delta conflicts" in first.output
    )
    # A (bad) resolution is recorded when --continue takes it ...
    work_file(ov, "mlx/core.cpp").write_text(
        lines("core", change={5: "core 5 BAD", 25: "core 25 upstream"})
    )
    later = cli(ov, "rebase", "--continue")
    # ... and the run goes on into a later stop (the patch conflicts with upstream's ops 2).
    assert (
        later.exit_code == 1
        and "patch 0001-ops.patch conflicts with the new base" in later.output
    )
    recorded = rr_entries(ov) - before
    assert recorded and any(not n.endswith(".path") for n in recorded)
    aborted = cli(ov, "rebase", "--abort")
    assert aborted.exit_code == 0, aborted.output
    assert rr_entries(ov) == before  # the run's rr-cache records are gone
    # A new run stops again instead of reusing the bad resolution.
    again = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert (
        again.exit_code == 1
        and "mlx/core.cpp: the fork delta conflicts" in again.output
    )
    assert "reused" not in again.output
    assert cli(ov, "rebase", "--abort").exit_code == 0


def test_case17_abort_after_a_run_killed_while_committing_forgets_too(ov, w):
    # The resolution is recorded by --continue, the process is SIGKILLed while the run writes
    # its results (before it completes); --abort then forgets the record as well.
    import sys

    write_fixes(ov, retarget=[("Keep the ROCm hook.", ["mlx/core.cpp"])])
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    work_file(ov, "mlx/core.cpp").write_text(
        lines("core", change={5: "core 5 BAD", 25: "core 25 upstream"})
    )
    env = dict(
        os.environ,
        OVERLAY_TEST_KILL_AT="commit",
        PYTHONPATH=str(Path(__file__).resolve().parent.parent),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "overlay.cli",
            "-C",
            str(ov.root),
            "rebase",
            "--continue",
        ],
        env=env,
        capture_output=True,
    )
    assert proc.returncode == -9
    assert rr_entries(ov)  # recorded before the kill
    assert cli(ov, "rebase", "--abort").exit_code == 0
    assert rr_entries(ov) == set()
    again = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert (
        again.exit_code == 1
        and "mlx/core.cpp: the fork delta conflicts" in again.output
    )


def test_case17_reused_resolution_is_shown_and_forget_forgets_it(ov, w):
    write_fixes(ov, retarget=[("Keep the ROCm hook.", ["mlx/core.cpp"])])
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    work_file(ov, "mlx/core.cpp").write_text(CORE_RESOLVED)
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output
    assert_verify_clean(ov)
    back = cli(
        ov, "rebase", "--onto", w.base
    )  # no conflict there: the resolution file goes
    assert back.exit_code == 0 and "resolution mlx/core.cpp: removed" in back.output, (
        back.output
    )
    assert_verify_clean(ov)
    reused = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert reused.exit_code == 0, reused.output
    assert "resolution mlx/core.cpp: reused" in reused.output
    assert (
        "review" in reused.output
        and "overlay rebase --forget mlx/core.cpp" in reused.output
    )
    assert (
        ov.root / PDIR / "resolved" / "mlx" / "core.cpp"
    ).read_text() == CORE_RESOLVED
    assert_verify_clean(ov)
    # Forget it (the run is complete): the count is reported, and the next run stops.
    forgot = cli(ov, "rebase", "--forget", "mlx/core.cpp")
    assert (
        forgot.exit_code == 0
        and "forgot 1 recorded resolution(s) for mlx/core.cpp" in forgot.output
    )
    assert rr_entries(ov) == set()
    none = cli(ov, "rebase", "--forget", "mlx/core.cpp")
    assert (
        none.exit_code == 0 and "no recorded resolution for mlx/core.cpp" in none.output
    )
    # The resolution is still in the records: the run that removes it remembers it again
    # (as rerere records what it sees), and says so; forgetting it then makes the next
    # run onto that conflict stop.
    removed = cli(ov, "rebase", "--onto", w.base)
    assert (
        removed.exit_code == 0
        and "stays in the rr-cache"
        in (ov.root / ".overlay" / "last-rebase.md").read_text()
    )
    assert_verify_clean(ov)
    assert len({n for n in rr_entries(ov) if not n.endswith(".path")}) == 1
    assert cli(ov, "rebase", "--forget", "mlx/core.cpp").exit_code == 0
    stops = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert (
        stops.exit_code == 1
        and "mlx/core.cpp: the fork delta conflicts" in stops.output
    )


# -- case 18: the fork merges an upstream commit newer than the pin ----------------------------------
def test_case18_fork_ahead_of_the_pin_is_refused_then_allowed(ov, w):
    # Upstream main moves past the pin (pin_clean, pin_conflict, then one more); the fork
    # merges main's tip with `git merge` (settling the core.cpp conflict in its merge).
    ahead = w.upstream.commit(
        {
            "mlx/ops.cpp": lines(
                "ops", change={2: "ops 2 upstream", 15: "ops 15 upstream feature"}
            )
        },
        "upstream feature after the pin",
    )
    git(w.fork.path, "fetch", "-q", "origin")
    try:
        git(w.fork.path, "merge", "-q", "--no-edit", ahead)
    except AssertionError:  # the expected conflict in mlx/core.cpp
        (w.fork.path / "mlx" / "core.cpp").write_text(CORE_RESOLVED)
        git(w.fork.path, "add", "mlx/core.cpp")
        git(w.fork.path, "commit", "-q", "--no-edit")
    merged = git(w.fork.path, "rev-parse", "HEAD")
    assert (
        git(w.fork.path, "rev-list", "--parents", "-1", merged).count(" ") == 2
    )  # a merge commit
    before = tree_hash(ov.root)
    assert not (ov.root / ".overlay").exists()
    refused = cli(ov, "sync", "--fork", merged)
    assert refused.exit_code == 2, refused.output
    assert (
        "3 upstream commit(s)" in refused.output
        and "--allow-fork-ahead" in refused.output
    )
    for sha, subject in (
        (ahead, "upstream feature after the pin"),
        (w.pin_conflict, "upstream rewrites core 5"),
        (w.pin_clean, "upstream work"),
    ):
        assert f"{sha[:12]} {subject}" in refused.output, refused.output
    # Nothing changed but the rebase lock file the refused command held (it stays, empty).
    assert tree_hash(ov.root, skip=".overlay") == before
    assert sorted(p.name for p in (ov.root / ".overlay").iterdir()) == [
        ".gitignore",
        "rebase.lock",
    ]
    allowed = cli(ov, "sync", "--fork", merged, "--allow-fork-ahead")
    assert allowed.exit_code == 0, allowed.output
    assert f'commit = "{merged}"' in (ov.root / PDIR / "overlay.toml").read_text()
    # verify asks the manifest the same question: MAN004 names the commits, and a team
    # that carries them on purpose says so with --skip.
    reported = cli(ov, "verify")
    assert reported.exit_code == 1, reported.output
    assert "MAN004" in reported.output and "3 upstream commit(s)" in reported.output, (
        reported.output
    )
    assert f"{ahead[:12]} upstream feature after the pin" in reported.output
    assert cli(ov, "verify", "--skip", "MAN004").exit_code == 0


# -- a hunk whose context also matches elsewhere, through a rebase ------------------------------------
BLOCK = "lock();\nstate = 1;\nunlock();\n"


def two_blocks(inserted: int = 0, second: str = "state = 1;") -> str:
    header = "".join(f"h{i}\n" for i in range(1, 11))
    new = "".join(f"new {i}\n" for i in range(1, inserted + 1))
    sep = "// sep\n" * 4
    return (
        header
        + new
        + sep
        + BLOCK
        + sep
        + BLOCK.replace("state = 1;", second)
        + sep
        + "t1\nt2\nt3\n"
    )


def blocks_overlay(ov, w) -> tuple[str, bytes]:
    """An overlay whose one patch changes the second of two identical blocks, made on a
    new pin ``pin_a``; returns ``(pin_a, the patch's bytes)``."""
    upstream_branch(w, "blocks", w.base)
    pin_a = w.upstream.commit(
        {"mlx/blocks.cpp": two_blocks()}, "upstream adds two identical blocks"
    )
    ov.write_manifest(pin_a)
    data = add_patch(
        ov,
        "0001-second-block.patch",
        {"mlx/blocks.cpp": two_blocks(second="state = 2;")},
        fix=1,
    )
    write_fixes(ov, [("Second block.", ["mlx/blocks.cpp"])], pin=pin_a)
    return pin_a, data


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


# -- a hostile ~/.gitconfig does not change what refresh writes --------------------------------------
ALG_OLD = [
    "y = 2;",
    "int b;",
    "}",
    "int a;",
    "",
    "int b;",
    "{",
    "return;",
    "int a;",
    "",
    "{",
    "x = 1;",
]
ALG_NEW = [
    "y = 2;",
    "int b;",
    "}",
    "",
    "int a;",
    "",
    "x = 1;",
    "int b;",
    "return;",
    "{",
    "return;",
    "int a;",
    "",
    "{",
]  # myers and patience diff these two differently


def test_user_gitconfig_does_not_change_refreshed_bytes(ov, w, monkeypatch, tmp_path):
    alg = "mlx/backend/rocm/alg.c"
    fork2 = w.fork.commit({alg: "\n".join(ALG_OLD) + "\n"}, "fork adds alg.c")
    ov.write_manifest(w.base, fork=fork2)
    edits = {
        alg: "\n".join(ALG_NEW) + "\n",
        "mlx/backend/rocm/device.cpp": None,
        "mlx/backend/rocm/device_impl.cpp": lines(
            "device", change={30: "device 30 impl"}
        ),
        "mlx/backend/rocm/device.h": None,
        "mlx/backend/rocm/device_impl.h": "#pragma once\n",
    }
    data = add_patch(ov, "0001-impl.patch", edits)
    assert data.count(b"\nrename from ") == 2
    # Abbreviated index lines: refresh has to regenerate the diff (and so runs git diff).
    short = re.sub(
        rb"(?m)^index ([0-9a-f]{7})[0-9a-f]{33}\.\.([0-9a-f]{7})[0-9a-f]{33}",
        rb"index \1..\2",
        data,
    )
    assert short != data
    path = ov.root / PDIR / "0001-impl.patch"

    def refresh() -> bytes:
        path.write_bytes(short)
        result = cli(ov, "refresh")
        assert result.exit_code == 0 and "rewrote 0001-impl.patch" in result.output, (
            result.output
        )
        return path.read_bytes()

    plain = refresh()
    assert plain == data  # byte-stable: the same bytes the fixture's tree_diff gave
    hostile = (
        "[diff]\n\trenameLimit = 1\n\talgorithm = patience\n\trenames = false\n\tnoprefix = true\n"
        "[merge]\n\tconflictStyle = zdiff3\n"
    )
    config = Path(
        os.environ["GIT_CONFIG_GLOBAL"]
    )  # where conftest points git's global config
    config.write_text(config.read_text() + hostile)
    xdg = tmp_path / "xdg"
    (xdg / "git").mkdir(parents=True)
    (xdg / "git" / "config").write_text(hostile)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    (Path(os.environ["HOME"]) / ".gitconfig").write_text(config.read_text())
    # The config is live for a plain git child (so the test would notice if overlay read it).
    assert (
        subprocess.run(
            ["git", "config", "--global", "diff.algorithm"],
            stdout=subprocess.PIPE,
            check=True,
        ).stdout.strip()
        == b"patience"
    )
    assert refresh() == plain
    monkeypatch.setenv(
        "GIT_CONFIG_GLOBAL", str(xdg / "git" / "config")
    )  # set it ourselves, too
    assert refresh() == plain


# -- LOCAL_FIXES.md with a BOM and CRLF line ends ----------------------------------------------------
def bom_crlf_run(ov, w, *, bom: bool, verify: bool) -> None:
    """A rebase then a sync with LOCAL_FIXES.md written with CRLF line ends (and a BOM when
    ``bom``); after each, the file keeps both and names the new pin / fork commit; with
    ``verify``, `overlay verify` exits 0 before and after each run."""
    add_patch(
        ov,
        "0001-device.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={9: "d9"})},
    )
    lf = ov.root / "LOCAL_FIXES.md"
    prefix = b"\xef\xbb\xbf" if bom else b""

    def write(**kw):
        text = fixes_text(ov, [("Device fix.", ["mlx/backend/rocm/device.cpp"])], **kw)
        lf.write_bytes(prefix + text.replace("\n", "\r\n").encode())

    def check(fork: str, pin: str) -> None:
        data = lf.read_bytes()
        assert data.startswith(prefix + b"# Local changes relative to ")
        assert data.count(b"\n") == data.count(b"\r\n") and b"\r\r" not in data
        assert (
            f"@{fork[:8]}\r\n".encode() in data
            and f"MLX pin ({pin[:8]})\r\n".encode() in data
        )
        write(fork=fork, pin=pin)  # what the file must now hold, byte for byte
        assert lf.read_bytes() == data

    write()
    if verify:
        assert_verify_clean(ov)
    done = cli(ov, "rebase", "--onto", w.pin_clean)
    assert done.exit_code == 0, done.output
    check(w.fork_commit, w.pin_clean)
    if verify:
        assert_verify_clean(ov)
    fork2 = w.fork.commit(
        {"mlx/backend/rocm/other.cpp": "other\n"}, "fork adds other.cpp"
    )
    synced = cli(ov, "sync", "--fork", fork2)
    assert synced.exit_code == 0, synced.output
    check(fork2, w.pin_clean)
    if verify:
        assert_verify_clean(ov)


def test_local_fixes_bom_and_crlf_survive_rebase_and_sync(ov, w):
    # verify is asserted in the BOM test further down (kept apart: it failed on a BOM, FIX001).
    bom_crlf_run(ov, w, bom=True, verify=False)


def test_local_fixes_crlf_verify_clean_through_rebase_and_sync(ov, w):
    bom_crlf_run(ov, w, bom=False, verify=True)


def test_local_fixes_with_a_bom_verify_clean_through_rebase_and_sync(ov, w):
    bom_crlf_run(ov, w, bom=True, verify=True)
