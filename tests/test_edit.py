"""The quilt-like loop (overlay/edit/): `overlay edit` prepares a work tree,
`overlay record` writes the patch, its LOCAL_FIXES.md entry and its series line.

Real fixture repositories (``gitfixtures``), no network. The end-to-end test is
the newcomer's path: a new fix in at most five commands, `verify` clean, and an
export into an existing export without `--force`.
"""

from __future__ import annotations

import os
import re
import subprocess

from click.testing import CliRunner
from gitfixtures import (
    CLOSING,
    PATCH,
    cli,
    lines,
    local_fixes,
    make_patch,
    overlay_lines,
    records_hash,
)

from overlay import edit as edit_mod
from overlay.cli import main
from overlay.edit import writes as edit_writes
from overlay.engine.layers import compute_layers
from overlay.engine.refresh import refresh_series
from overlay.git.store import Store
from overlay.records import fixes
from overlay.records.manifest import load_manifest

PDIR = "patches-rocm"
DEVICE = "mlx/backend/rocm/device.cpp"
HEADER = "mlx/backend/rocm/device.h"


def workdir_of(output: str):
    """The work tree `overlay edit` printed ("edit the files under DIR (")."""
    m = re.search(r"^edit the files under (.+?) \(", output, re.M)
    assert m, output
    return m.group(1)


def verify_clean(o) -> None:
    result = cli(o, "verify")
    assert result.exit_code == 0 and "no findings" in result.output.lower(), (
        result.output
    )


# -- the newcomer's path ------------------------------------------------------------------


def test_a_new_fix_in_five_commands_verify_clean_export_without_force(
    clean, tmp_path, monkeypatch
):
    dest = tmp_path / "export"
    assert (
        cli(clean, "export", str(dest)).exit_code == 0
    )  # the export the newcomer already has
    # The newcomer first tried the change in the export itself (stumble 7): it stays.
    new_header = '#pragma once\nstatic_assert(sizeof(int) == 4, "bounds");\n'
    (dest / HEADER).write_text(new_header)
    commands = 0

    def overlay(*args, cwd=None):
        nonlocal commands
        commands += 1
        monkeypatch.chdir(cwd or clean.root)
        result = CliRunner().invoke(main, list(args))
        assert "Traceback" not in result.output, result.output
        return result

    # 1. overlay edit --new NAME
    started = overlay("edit", "--new", "0002-bounds-check")
    assert started.exit_code == 0, started.output
    work = clean.root / workdir_of(started.output)
    assert work == clean.root / ".overlay" / "edit" / "0002-bounds-check"
    assert (
        not (tmp_path / HEADER).exists() and not (clean.root / HEADER).exists()
    )  # never in the cwd
    # 2. edit the file under the printed directory (a git checkout of the patched layer)
    assert (work / DEVICE).read_text() == lines("device", change={3: "device 3 locked"})
    (work / HEADER).write_text(new_header)
    # 3. overlay record, run from inside the work tree (the root is found upwards)
    recorded = overlay(
        "record",
        "-m",
        "rocm: check the device index bounds",
        "--description",
        "An index past the device count read past the table.",
        "--forwarded",
        "no",
        cwd=work / "mlx" / "backend",
    )
    assert recorded.exit_code == 0, recorded.output
    assert "recorded patches-rocm/0002-bounds-check.patch" in recorded.output
    assert "added entry 2 to LOCAL_FIXES.md" in recorded.output
    # 4. overlay verify
    verified = overlay("verify")
    assert verified.exit_code == 0 and "no findings" in verified.output.lower(), (
        verified.output
    )
    # 5. overlay export DEST: no --force, no hand edit reported, nothing left to write
    exported = overlay("export", str(dest))
    assert exported.exit_code == 0, exported.output
    assert (
        "by hand since the export" not in exported.output
        and "0 written" in exported.output
    ), exported.output
    assert commands <= 5

    patch = (clean.root / PDIR / "0002-bounds-check.patch").read_text()
    assert "Subject: [PATCH] rocm: check the device index bounds\n" in patch
    assert (
        "\nLocal-Fix: 2\nForwarded: no\n---\ndiff --git a/mlx/backend/rocm/device.h"
        in patch
    )
    assert (
        clean.root / PDIR / "series"
    ).read_text() == f"{PATCH}\n0002-bounds-check.patch\n"
    entry = fixes.load(clean.root / "LOCAL_FIXES.md").entry(2)
    assert entry.section == "kernels" and entry.title.startswith(
        "Check the device index bounds"
    )
    assert HEADER in entry.files and CLOSING.split()[0] in entry.text
    assert not work.exists() and not (clean.root / ".overlay" / "edit.json").exists()
    assert (
        cli(clean, "refresh", "--check").exit_code == 0
    )  # byte-stable as refresh writes it
    assert cli(clean, "status", "--dest", str(dest)).output.count("by hand") == 0


def test_fix_new_and_record_add_the_entry_with_the_same_code(clean, monkeypatch):
    calls = []
    original = fixes.plan_entry

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    # edit (record) calls the package's name, fix new's add_entry the module's own.
    monkeypatch.setattr(fixes, "plan_entry", spy)
    monkeypatch.setattr(fixes.new, "plan_entry", spy)
    assert (
        cli(
            clean,
            "fix",
            "new",
            "--section",
            "kernels",
            "--title",
            "T",
            "--file",
            DEVICE,
        ).exit_code
        == 0
    )
    assert cli(clean, "edit", "--new", "x").exit_code == 0
    (clean.root / ".overlay/edit/x" / HEADER).write_text("#pragma once\n// x\n")
    assert cli(clean, "record", "-m", "rocm: x", "--description", "Why.").exit_code == 0
    assert len(calls) == 2 and calls[0].keys() == calls[1].keys()
    assert calls[0]["closing_sentence"] == calls[1]["closing_sentence"] == CLOSING


# -- editing an existing patch ----------------------------------------------------------------


def two_patches(o):
    """0001 changes device.cpp line 3, 0002 line 20 of the same file."""
    store = Store()
    layers = compute_layers(store, load_manifest(str(o.root)), str(o.root))
    second, _ = make_patch(
        store,
        layers.patched,
        {
            DEVICE: lines(
                "device", change={3: "device 3 locked", 20: "device 20 checked"}
            )
        },
        subject="rocm: check twenty",
        fix=2,
    )
    o.add_patch("0002-twenty.patch", second)
    (o.root / "LOCAL_FIXES.md").write_text(
        local_fixes(
            o.world,
            extra=(
                f"\n2. **Check twenty.** `mlx/backend/rocm/device.cpp` checks line twenty. {CLOSING}\n"
            ),
        )
    )
    verify_clean(o)
    return second


def test_edit_an_existing_patch_rewrites_it_in_place(clean):
    before = (clean.root / PDIR / PATCH).read_bytes()
    started = cli(clean, "edit", PATCH)
    assert started.exit_code == 0, started.output
    work = clean.root / workdir_of(started.output)
    # The work tree holds the patch's result; its git history is layer below -> patch.
    assert (work / DEVICE).read_text() == lines("device", change={3: "device 3 locked"})
    whole = subprocess.run(
        ["git", "diff", "HEAD~1", "--", DEVICE],
        cwd=work,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert "+device 3 locked" in whole.stdout
    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 locked", 9: "device 9 locked"})
    )
    done = cli(clean, "record")
    assert done.exit_code == 0, done.output
    after = (clean.root / PDIR / PATCH).read_bytes()
    assert after != before and b"+device 9 locked" in after
    head = lambda data: data.split(b"\ndiff --git ", 1)[0]  # noqa: E731
    assert head(after) == head(
        before
    )  # the message, trailers and author keep every byte
    assert (clean.root / PDIR / "series").read_text() == f"{PATCH}\n"
    verify_clean(clean)


def test_record_with_a_new_message_keeps_the_author_and_trailers(clean):
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    (work / DEVICE).write_text(lines("device", change={3: "device 3 locked!"}))
    done = cli(
        clean,
        "record",
        "-m",
        "rocm: lock the device harder",
        "--description",
        "Harder.",
    )
    assert done.exit_code == 0, done.output
    text = (clean.root / PDIR / PATCH).read_text()
    assert (
        "Subject: [PATCH] rocm: lock the device harder\n\nHarder.\n\nLocal-Fix: 1\nForwarded: not-needed\n"
        in text
    )
    assert cli(clean, "refresh", "--check").exit_code == 0


def test_later_patch_is_carried_onto_the_change(clean):
    second = two_patches(clean)
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 locked", 10: "device 10 too"})
    )
    done = cli(clean, "record")
    assert done.exit_code == 0, done.output
    assert "carried 0002-twenty.patch onto the change" in done.output
    carried = (clean.root / PDIR / "0002-twenty.patch").read_bytes()
    assert carried != second and b"+device 20 checked" in carried
    verify_clean(clean)


def test_a_later_patch_that_conflicts_refuses_the_record_and_writes_nothing(clean):
    two_patches(clean)
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 locked", 20: "device 20 mine"})
    )
    before = records_hash(clean)
    refused = cli(clean, "record")
    assert refused.exit_code == 1, refused.output
    (line,) = overlay_lines(refused.output)
    assert "0002-twenty.patch conflicts" in line and "nothing was recorded" in line
    assert records_hash(clean) == before
    assert (
        work.is_dir() and (clean.root / ".overlay" / "edit.json").is_file()
    )  # the edit is kept
    assert cli(clean, "edit", "--abort").exit_code == 0
    assert not work.exists()


def test_new_patch_goes_after_the_named_one(clean):
    two_patches(clean)
    started = cli(clean, "edit", "--new", "0001a-header", "--after", PATCH)
    assert started.exit_code == 0, started.output
    work = clean.root / workdir_of(started.output)
    assert (work / DEVICE).read_text() == lines(
        "device", change={3: "device 3 locked"}
    )  # 0002 not applied
    (work / HEADER).write_text("#pragma once\n// header\n")
    done = cli(clean, "record", "-m", "rocm: header", "--description", "Why.")
    assert done.exit_code == 0, done.output
    assert "after 0001-rocm-lock-the-device.patch" in done.output
    assert (clean.root / PDIR / "series").read_text().split() == [
        PATCH,
        "0001a-header.patch",
        "0002-twenty.patch",
    ]
    entry = fixes.load(clean.root / "LOCAL_FIXES.md").entry(3)
    assert entry is not None and HEADER in entry.files
    assert "Local-Fix: 3\n" in (clean.root / PDIR / "0001a-header.patch").read_text()
    verify_clean(clean)


def test_after_takes_a_unique_start_of_a_name_and_says_which_option_was_wrong(clean):
    two_patches(clean)
    started = cli(clean, "edit", "--new", "0001a-header", "--after", "0001")
    assert started.exit_code == 0, started.output
    work = clean.root / workdir_of(started.output)
    assert (work / DEVICE).read_text() == lines(
        "device", change={3: "device 3 locked"}
    )  # on 0001, not on 0002
    assert cli(clean, "edit", "--abort").exit_code == 0
    wrong = cli(clean, "edit", "--new", "0001a-header", "--after", "0009")
    assert wrong.exit_code == 2
    (line,) = overlay_lines(wrong.output)
    assert line == "overlay: --after 0009.patch is not in patches-rocm/series"
    assert "--new NAME" not in wrong.output  # --new was given


def test_keep_leaves_the_work_tree_for_another_round(clean):
    cli(clean, "edit", "--new", "0002-x")
    work = clean.root / ".overlay" / "edit" / "0002-x"
    (work / HEADER).write_text("#pragma once\n// one\n")
    first = cli(clean, "record", "-m", "rocm: x", "--description", "Why.", "--keep")
    assert first.exit_code == 0 and "kept the work tree" in first.output, first.output
    assert (
        f"patches-rocm/series: 0002-x.patch after {PATCH}" in first.output
    )  # where the line really went
    assert (
        subprocess.run(["git", "diff", "--quiet"], cwd=work).returncode == 0
    )  # at the recorded patch
    (work / HEADER).write_text("#pragma once\n// two\n")
    second = cli(clean, "record")
    assert second.exit_code == 0, second.output
    assert "+// two" in (clean.root / PDIR / "0002-x.patch").read_text()
    assert (clean.root / PDIR / "series").read_text().count("0002-x.patch") == 1
    verify_clean(clean)


def test_an_edit_in_the_same_second_as_the_index_is_recorded(clean):
    """git trusts an entry's stat data only when the entry is older than its index
    file; a same-size rewrite in the same second as the index is "racily clean" and
    compared by content. The record read a copy of the index stamped later, so such
    an edit (seen under load, right after ``--keep``) said "nothing to record"."""
    cli(clean, "edit", "--new", "0002-x")
    work = clean.root / ".overlay" / "edit" / "0002-x"
    header = work / HEADER
    header.write_text("#pragma once\n// one\n")
    first = cli(clean, "record", "-m", "rocm: x", "--description", "Why.", "--keep")
    assert first.exit_code == 0, first.output

    def git(*args):
        return subprocess.run(["git", *args], cwd=work, capture_output=True)

    # One second S for the file, the index entry and the index file; ctime cannot be
    # set back, so git is told to leave it out, as it may within one second.
    git("config", "core.trustctime", "false")
    second = int(header.stat().st_mtime) - 100
    os.utime(header, (second, second))
    assert git("update-index", "--refresh").returncode == 0
    os.utime(work / ".git" / "index", (second, second))
    header.write_text("#pragma once\n// two\n")  # the same size
    os.utime(header, (second, second))
    assert git("diff", "--quiet").returncode == 1  # git itself sees the edit
    again = cli(clean, "record")
    assert again.exit_code == 0, again.output
    assert "+// two" in (clean.root / PDIR / "0002-x.patch").read_text()


def test_message_from_the_editor_when_a_terminal_is_there(clean, monkeypatch):
    cli(clean, "edit", "--new", "0002-ed")
    (clean.root / ".overlay/edit/0002-ed" / HEADER).write_text("#pragma once\n// ed\n")
    monkeypatch.setattr("overlay.cli.editing._interactive", lambda: True)
    seen = []

    def fake_edit(text, **_kw):
        seen.append(text)
        return "# a comment\nrocm: from the editor\n\nThe reason, from the editor.\n# more comment\n"

    monkeypatch.setattr("click.edit", fake_edit)
    done = cli(clean, "record")
    assert done.exit_code == 0, done.output
    assert "Lines starting with '#' are ignored" in seen[0]
    text = (clean.root / PDIR / "0002-ed.patch").read_text()
    assert (
        "Subject: [PATCH] rocm: from the editor\n\nThe reason, from the editor.\n"
        in text
    )


# -- bad input: one overlay: line, a documented exit code, nothing written -----------------------


def test_bad_input_is_one_line_and_exit_2(clean):
    cases = [
        (["edit", "0009-nope.patch"], "is not in patches-rocm/series"),
        (["edit", "--new", PATCH], "already exists"),
        (["edit", "--new", "../escape"], "bad patch name"),
        (["edit", PATCH, "--after", PATCH], "--after goes with --new"),
        # --after alone is not the plain `edit` that shows the edit in progress
        (["edit", "--after", PATCH], "--after goes with --new"),
        (["edit", PATCH, "--new", "0002-y"], "not both (got "),
        # a patch's own name is no rename (refused before a work tree is made)
        (
            ["edit", "--rename", PATCH, "0001"],
            "already has that name: nothing to rename",
        ),
        # not in the series: said as for any edit, whatever the new name
        (
            ["edit", "--rename", "0009-nope", "0009-nope"],
            "is not in patches-rocm/series",
        ),
        (["record"], "no edit in progress"),
    ]
    before = records_hash(clean)
    for args, words in cases:
        result = cli(clean, *args)
        assert result.exit_code == 2, (args, result.output)
        (line,) = overlay_lines(result.output)
        assert words in line, (args, line)
    assert records_hash(clean) == before
    edits = clean.root / ".overlay" / "edit"
    assert not (clean.root / ".overlay" / "edit.json").exists()
    assert not edits.exists() or [p.name for p in edits.iterdir()] == [
        ".gitignore"
    ]  # no work tree left


def test_plain_edit_with_none_open_says_so_and_how_to_start(clean):
    """``overlay edit`` alone answers a question: with no edit open it says so, names
    both ways to start one, exits 0 and writes nothing."""
    before = records_hash(clean)
    result = cli(clean, "edit")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("no edit in progress: `overlay edit PATCH`")
    assert "--new NAME" in result.output
    assert records_hash(clean) == before
    assert not (clean.root / ".overlay" / "edit.json").exists()


def test_record_refusals_write_nothing(clean):
    assert cli(clean, "edit", "--new", "0002-x").exit_code == 0
    work = clean.root / ".overlay" / "edit" / "0002-x"
    before = records_hash(clean)
    nothing = cli(clean, "record", "-m", "rocm: x", "--description", "Why.")
    assert nothing.exit_code == 1 and "changes nothing" in nothing.output, (
        nothing.output
    )
    (work / HEADER).write_text("#pragma once\n// x\n")
    for args, code, words in [
        (["record"], 2, "needs a subject and a description"),  # no terminal for $EDITOR
        (
            ["record", "-m", "rocm: x", "--description", "Why.", "--fix", "99"],
            2,
            "has no entry 99",
        ),
        # an entry that does not name the touched file would fail verify (FIX020): refused before writing
        (
            ["record", "-m", "rocm: x", "--description", "Why.", "--fix", "1"],
            2,
            f"does not name {HEADER}",
        ),
        (
            ["record", "-m", "rocm: x", "--description", "  "],
            2,
            "the description is empty",
        ),
    ]:
        result = cli(clean, *args)
        assert result.exit_code == code, (args, result.output)
        (line,) = overlay_lines(result.output)
        assert words in line, (args, line)
    (work / "docs").mkdir(exist_ok=True)
    (work / "docs" / "notes.md").write_text("not carried\n")
    uncarried = cli(clean, "record", "-m", "rocm: x", "--description", "Why.")
    assert (
        uncarried.exit_code == 2
        and "docs/notes.md, which the manifest does not carry" in uncarried.output
    )
    assert records_hash(clean) == before


def test_record_of_an_unchanged_patch_is_nothing_to_record_and_keeps_the_work_tree(
    clean,
):
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    before = records_hash(clean)
    same = cli(clean, "record")
    assert same.exit_code == 1 and "nothing to record" in same.output, same.output
    assert work.is_dir() and records_hash(clean) == before


def test_abort_says_which_unrecorded_changes_it_throws_away(clean):
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    (work / HEADER).write_text("#pragma once\n// lost\n")
    dropped = cli(clean, "edit", "--abort")
    assert dropped.exit_code == 0, dropped.output
    assert f"unrecorded change(s) to {HEADER}" in dropped.output
    assert (
        f"patches-rocm/{PATCH} keeps what `overlay record` last wrote" in dropped.output
    )
    assert not work.exists()


def test_a_second_edit_names_the_first_and_the_same_one_is_resumed(clean):
    assert cli(clean, "edit", "--new", "0002-x").exit_code == 0
    again = cli(clean, "edit", "--new", "0002-x")
    assert again.exit_code == 0 and "already prepared" in again.output
    other = cli(clean, "edit", PATCH)
    assert (
        other.exit_code == 2
        and "an edit of 0002-x.patch is in progress" in other.output
    )
    (clean.root / ".overlay" / "edit" / "0002-x" / HEADER).write_text("// x\n")
    shown = cli(clean, "edit")
    assert (
        shown.exit_code == 0
        and f"/.overlay/edit/0002-x: 1 file(s) changed: {HEADER}" in shown.output
    ), shown.output
    dropped = cli(clean, "edit", "--abort")
    assert (
        dropped.exit_code == 0
        and "threw away the edit of 0002-x.patch" in dropped.output
    )
    assert cli(clean, "edit", "--abort").output.startswith("no edit in progress")
    assert cli(clean, "edit", PATCH).exit_code == 0


def test_record_refuses_when_the_records_changed_since_edit(clean):
    # A new patch on the patched layer: a message-only change below it leaves that layer as it was.
    cli(clean, "edit", "--new", "0002-x")
    (clean.root / ".overlay/edit/0002-x" / HEADER).write_text("#pragma once\n// x\n")
    target = clean.root / PDIR / PATCH
    target.write_bytes(
        target.read_bytes().replace(b"Why the change", b"Why, the change")
    )
    ok = cli(clean, "record", "-m", "rocm: x", "--description", "Why.")
    assert ok.exit_code == 0, ok.output
    # An existing patch whose file changed after `overlay edit`: not recorded over it.
    cli(clean, "edit", PATCH)
    (clean.root / ".overlay" / "edit" / PATCH[: -len(".patch")] / DEVICE).write_text(
        "changed\n"
    )
    target.write_bytes(
        target.read_bytes().replace(b"Why, the change", b"Why; the change")
    )
    before = records_hash(clean)
    stale = cli(clean, "record")
    assert stale.exit_code == 2 and "changed since `overlay edit`" in stale.output, (
        stale.output
    )
    assert records_hash(clean) == before


def test_edit_and_record_are_refused_during_a_rebase(ov, w):
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    refused = cli(ov, "edit", "--new", "x")
    assert refused.exit_code == 2 and "a rebase is in progress" in refused.output
    assert cli(ov, "rebase", "--abort").exit_code == 0


def test_an_error_while_writing_puts_back_what_was_written(clean, monkeypatch):
    cli(clean, "edit", "--new", "0002-x")
    (clean.root / ".overlay/edit/0002-x" / HEADER).write_text("#pragma once\n// x\n")
    before = records_hash(clean)
    real = edit_writes.atomic_write

    def failing(path, data, **kw):
        if str(path).endswith("series"):
            raise OSError(28, "No space left on device")
        return real(path, data, **kw)

    monkeypatch.setattr(edit_writes, "atomic_write", failing)
    result = cli(clean, "record", "-m", "rocm: x", "--description", "Why.")
    assert result.exit_code != 0
    assert records_hash(clean) == before  # the patch file and the entry are gone again
    assert not (clean.root / PDIR / "0002-x.patch").exists()


def test_recorded_patch_is_what_refresh_writes(clean):
    cli(clean, "edit", "--new", "0002-x")
    work = clean.root / ".overlay" / "edit" / "0002-x"
    (work / HEADER).unlink()  # a deletion
    (work / "mlx/backend/rocm/na\u00efve.cpp").write_bytes(
        b"caf\xc3\xa9\n"
    )  # a name git quotes
    os.chmod(work / DEVICE, 0o755)  # a mode change
    assert cli(clean, "record", "-m", "rocm: x", "--description", "Why.").exit_code == 0
    store = Store()
    layers = compute_layers(
        store, load_manifest(str(clean.root)), str(clean.root), stepwise=True
    )
    assert all(not r.changed for r in refresh_series(store, layers))
    verify_clean(clean)


def test_a_long_description_is_wrapped_as_the_series_is_written():
    long = "word " * 40
    wrapped = edit_mod.wrap_message(
        long
        + "\n\n- a list item that is kept exactly as it was written, long or not at all\n"
    )
    first, second = wrapped.split("\n\n")
    assert (
        max(len(ln) for ln in first.split("\n")) <= 72
        and " ".join(first.split()) == long.strip()
    )
    assert (
        second
        == "- a list item that is kept exactly as it was written, long or not at all"
    )
    assert edit_mod.wrap_message("short line\nkept as is") == "short line\nkept as is"


def test_a_sync_with_an_edit_open_says_so_before_any_other_refusal(clean, world):
    """A sync to a fork commit that does not descend from the current one would be
    refused with a ``--force`` hint; with an edit open the user must hear about the
    edit first (passing ``--force`` would only meet that refusal next)."""
    older = subprocess.run(
        ["git", "rev-parse", f"{world.fork_commit}^"],
        cwd=world.fork.path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert cli(clean, "edit", "--new", "0002-x").exit_code == 0
    before = records_hash(clean)
    refused = cli(clean, "sync", "--fork", older)
    assert refused.exit_code == 2, refused.output
    (line,) = overlay_lines(refused.output)
    assert "edit of 0002-x.patch" in line and "--force" not in refused.output
    assert records_hash(clean) == before


def new_patch(o, name: str, line: int) -> None:
    started = cli(o, "edit", "--new", name)
    assert started.exit_code == 0, started.output
    work = o.root / ".overlay" / "edit" / name
    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 locked", line: f"device {line} fixed"})
    )
    recorded = cli(
        o, "record", "-m", f"rocm: fix {line}", "--description", "Why it is needed."
    )
    assert recorded.exit_code == 0, recorded.output


def test_a_unique_prefix_names_a_patch_an_ambiguous_one_is_refused(clean):
    started = cli(clean, "edit", "0001")
    assert started.exit_code == 0, started.output
    assert PATCH in started.output
    assert cli(clean, "edit", "--abort").exit_code == 0
    new_patch(clean, "0001-second", 20)
    both = cli(clean, "edit", "0001")
    assert both.exit_code == 2
    assert f"0001-second.patch, {PATCH}" in both.output or (
        PATCH in both.output and "0001-second.patch" in both.output
    )
    assert "Traceback" not in both.output
    assert cli(clean, "edit", "0001-r").exit_code == 0


def test_rename_keeps_every_byte_and_the_series_place(clean):
    new_patch(clean, "0002-later", 20)
    before = (clean.root / PDIR / PATCH).read_bytes()
    renamed = cli(clean, "edit", "--rename", "0001-lock-device", "0001")
    assert renamed.exit_code == 0, renamed.output
    assert f"renamed {PDIR}/{PATCH} to {PDIR}/0001-lock-device.patch" in renamed.output
    assert not (clean.root / PDIR / PATCH).exists()
    assert (clean.root / PDIR / "0001-lock-device.patch").read_bytes() == before
    assert (clean.root / PDIR / "series").read_text() == (
        "0001-lock-device.patch\n0002-later.patch\n"
    )
    assert not (clean.root / ".overlay" / "edit.json").exists()
    verified = cli(clean, "verify")
    assert verified.exit_code == 0, verified.output
    # A taken name is refused, and so is renaming during an edit through edit --rename.
    taken = cli(clean, "edit", "--rename", "0002-later", "0001")
    assert taken.exit_code == 2 and "already exists" in taken.output
    # record --name renames the patch being edited as it records it.
    assert cli(clean, "edit", "0002").exit_code == 0
    work = clean.root / ".overlay" / "edit" / "0002-later"
    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 locked", 20: "device 20 fixed twice"})
    )
    recorded = cli(clean, "record", "--name", "0002-fix-twenty")
    assert recorded.exit_code == 0, recorded.output
    assert (clean.root / PDIR / "series").read_text() == (
        "0001-lock-device.patch\n0002-fix-twenty.patch\n"
    )
    assert not (clean.root / PDIR / "0002-later.patch").exists()
    assert cli(clean, "verify").exit_code == 0


def test_a_new_patch_is_authored_by_the_git_identity_of_the_repository(clean):
    subprocess.run(["git", "init", "-q", str(clean.root)], check=True)
    for key, value in (
        ("user.name", "Ada Lovelace"),
        ("user.email", "ada@example.org"),
    ):
        subprocess.run(["git", "-C", str(clean.root), "config", key, value], check=True)
    new_patch(clean, "0002-later", 20)
    data = (clean.root / PDIR / "0002-later.patch").read_text()
    assert "From: Ada Lovelace <ada@example.org>\n" in data


def test_an_existing_patch_touching_a_file_its_entry_does_not_name_is_refused_with_the_way_out(
    clean,
):
    """The entry came from the patch's own Local-Fix, not from --fix: the hint says to
    name the file there, not to leave out an option the user never gave."""
    assert cli(clean, "edit", PATCH).exit_code == 0
    work = clean.root / ".overlay" / "edit" / PATCH.removesuffix(".patch")
    (work / HEADER).write_text((work / HEADER).read_text() + "// more\n")
    before = records_hash(clean)
    result = cli(clean, "record")
    assert result.exit_code == 2, result.output
    assert f"does not name {HEADER}" in result.output
    assert "of LOCAL_FIXES.md (in backticks), then run `overlay record` again" in (
        result.output
    )
    assert "--fix" not in result.output
    assert records_hash(clean) == before


def test_a_mode_change_is_named_in_what_record_says(clean):
    # A `chmod +x` in the work tree goes into the patch (old mode / new mode); record's
    # line says so, not only the line counts.
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    (work / DEVICE).chmod(0o755)
    done = cli(clean, "record")
    assert done.exit_code == 0, done.output
    assert f"{DEVICE} +1 -1 (mode 100644 -> 100755)" in done.output, done.output
    data = (clean.root / PDIR / PATCH).read_bytes()
    assert b"old mode 100644\nnew mode 100755\n" in data
