"""The edit's work tree: a record trusts git's stat data only where it is proven
(``trust_stat_data``), and whatever the files went through, the tree it reads is the
one git reads when it hashes every file; an edit that starts from the spare work tree
the last one ended with holds what a new checkout holds."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import time
from io import BytesIO
from pathlib import Path

from gitfixtures import PATCH, cli, git, lines
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_edit import DEVICE, HEADER, workdir_of

from overlay.edit.worktree import RACY_BYTES_MAX, trust_stat_data
from overlay.edit.writes import SPARE
from overlay.git.store import Store

FILES = {f"src/f{i}.txt": f"line {i}\n" * (i + 1) for i in range(6)}


def _checkout(tmp: Path, files: dict[str, str] = FILES) -> Path:
    """A repository whose work tree and index are as ``overlay edit`` leaves them,
    dated ten seconds ago: every file written within the index's second, just before
    it. (Dated back, so that what the test does next, in the same second as the
    setup, comes in a later second than the checkout, as a user's edit does; a copy
    of the index dated now then changes what git compares.)"""
    work = tmp / "work"
    work.mkdir()
    git(work, "init", "-q")
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "base")
    for path in files:
        (work / path).unlink()
    git(work, "reset", "-q", "--hard")
    past = time.time_ns() - 10 * 1_000_000_000
    for path in files:
        os.utime(work / path, ns=(past, past))
    git(work, "update-index", "-q", "--refresh")  # the stat data follows
    os.utime(work / ".git" / "index", ns=(past + 1000, past + 1000))
    return work


def _tree(work: Path, index: Path | None) -> str:
    """``git add -A`` then ``write-tree`` on ``index`` (``None``: a new index, so git
    hashes every file: the truth)."""
    env = dict(os.environ)
    if index is None:
        index = work / ".git" / "truth.index"
        index.unlink(missing_ok=True)
    env["GIT_INDEX_FILE"] = str(index)
    for args in (["add", "-A", "--", "."], ["write-tree"]):
        proc = subprocess.run(
            ["git", *args], cwd=work, env=env, capture_output=True, check=True
        )
    return proc.stdout.decode().strip()


def _private_copy(work: Path) -> Path:
    copy = work / ".git" / "private.index"
    shutil.copy2(work / ".git" / "index", copy)
    return copy


def _same_stamp_rewrite(path: Path, text: str) -> None:
    """Rewrite ``path`` in place (same inode) and put its mtime back to the very
    nanosecond it had: only ctime tells the edit."""
    before = path.stat()
    with open(path, "r+") as fh:
        fh.write(text)
        fh.truncate()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_fresh_checkout_is_trusted_and_reads_as_git_reads_it(tmp_path):
    work = _checkout(tmp_path)
    copy = _private_copy(work)
    before = copy.stat().st_mtime_ns
    assert trust_stat_data(str(work), str(copy)) is True
    assert copy.stat().st_mtime_ns > before
    assert _tree(work, copy) == _tree(work, None)


def test_an_edit_git_would_see_leaves_the_copy_trusted(tmp_path):
    work = _checkout(tmp_path)
    (work / "src/f1.txt").write_text("longer than before\n" * 9)
    (work / "src/f2.txt").unlink()
    (work / "src/new.txt").write_text("new\n")
    copy = _private_copy(work)
    assert trust_stat_data(str(work), str(copy)) is True
    assert _tree(work, copy) == _tree(work, None)


def test_a_same_size_rewrite_with_the_old_mtime_is_not_trusted(tmp_path):
    """The edit git misses at seconds: same size, same mtime second; the copy keeps
    its date, so git compares content and reads the edit."""
    work = _checkout(tmp_path)
    path = work / "src/f3.txt"
    _same_stamp_rewrite(path, path.read_text().replace("line", "LINE"))
    copy = _private_copy(work)
    before = copy.stat().st_mtime_ns
    assert trust_stat_data(str(work), str(copy)) is False
    assert copy.stat().st_mtime_ns == before
    assert _tree(work, copy) == _tree(work, None)


def test_racy_entries_with_their_content_unchanged_are_trusted(tmp_path):
    """Entries as new as their index (at nanoseconds) are compared by content, as git
    compares them: unchanged bytes leave the copy trusted, changed bytes do not."""
    work = _checkout(tmp_path)
    copy = _private_copy(work)
    first = (work / "src/f0.txt").stat().st_mtime_ns
    os.utime(copy, ns=(first, first))  # every entry racy
    assert trust_stat_data(str(work), str(copy)) is True
    assert _tree(work, copy) == _tree(work, None)
    _same_stamp_rewrite(work / "src/f5.txt", (work / "src/f5.txt").read_text().upper())
    copy = _private_copy(work)
    os.utime(copy, ns=(first, first))
    assert trust_stat_data(str(work), str(copy)) is False
    assert _tree(work, copy) == _tree(work, None)


def test_racy_entries_beyond_the_byte_budget_are_left_to_git(tmp_path):
    big = {"big.bin": "x" * (RACY_BYTES_MAX + 1)}
    work = _checkout(tmp_path, big)
    copy = _private_copy(work)
    stamp = (work / "big.bin").stat().st_mtime_ns
    os.utime(copy, ns=(stamp, stamp))  # the entry as new as its index
    assert trust_stat_data(str(work), str(copy)) is False


def test_an_unreadable_listing_changes_nothing(tmp_path):
    work = _checkout(tmp_path)
    copy = work / ".git" / "private.index"
    copy.write_bytes(b"not an index")
    before = time.time_ns() - 10 * 1_000_000_000
    os.utime(copy, ns=(before, before))  # old enough for dating it to matter
    assert trust_stat_data(str(work), str(copy)) is False
    assert copy.stat().st_mtime_ns == before


def test_an_index_of_this_very_second_is_left_alone(tmp_path):
    """Dated now, it would still be in its own second: git finds every entry racy
    whatever its date, so nothing is asked of git and the date stays."""
    work = _checkout(tmp_path)
    copy = _private_copy(work)
    # Half a second ahead: the check below runs within the index's second even when
    # this line runs at the end of one.
    stamp = time.time_ns() + 500_000_000
    os.utime(copy, ns=(stamp, stamp))
    assert trust_stat_data(str(work), str(copy)) is False
    assert copy.stat().st_mtime_ns == stamp


#: What may happen to a file between the checkout and the record.
EDITS = st.sampled_from(
    ["keep", "same-size same-stamp", "same-size", "append", "delete", "touch"]
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(edits=st.lists(EDITS, min_size=len(FILES), max_size=len(FILES)))
def test_whatever_the_files_went_through_the_tree_is_gits(tmp_path_factory, edits):
    work = _checkout(tmp_path_factory.mktemp("wt"))
    for path, edit in zip(sorted(FILES), edits, strict=True):
        file = work / path
        text = file.read_text()
        if edit == "same-size same-stamp":
            _same_stamp_rewrite(file, text.upper())
        elif edit == "same-size":
            file.write_text(text.upper())
        elif edit == "append":
            file.write_text(text + "more\n")
        elif edit == "delete":
            file.unlink()
        elif edit == "touch":
            file.touch()
    copy = _private_copy(work)
    trust_stat_data(str(work), str(copy))
    assert _tree(work, copy) == _tree(work, None)


def test_the_user_index_is_left_alone(tmp_path):
    work = _checkout(tmp_path)
    index = work / ".git" / "index"
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    _same_stamp_rewrite(work / "src/f0.txt", "LINE 0\n")
    trust_stat_data(str(work), str(_private_copy(work)))
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before


def test_a_file_the_user_committed_in_the_work_tree_reaches_the_store(clean):
    """The user's own ``git add`` and ``git commit`` in the work tree write the blob
    into the work tree's objects only; the record copies what the tree needs into the
    store, so the patch, the layers and verify all read it."""
    assert cli(clean, "edit", "--new", "0002-committed").exit_code == 0
    work = clean.root / ".overlay" / "edit" / "0002-committed"
    added = work / "mlx" / "backend" / "rocm" / "committed.h"
    added.write_text("#pragma once\n// committed by hand\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "by hand")
    blob = git(work, "rev-parse", "HEAD:mlx/backend/rocm/committed.h")
    result = cli(
        clean, "record", "-m", "rocm: committed", "--description", "Why it is there."
    )
    assert result.exit_code == 0, result.output
    assert Store().has_object(blob, "blob")  # the store of the tests (conftest)
    patch = (clean.root / "patches-rocm" / "0002-committed.patch").read_text()
    assert "+// committed by hand" in patch
    verify = cli(clean, "verify")
    assert verify.exit_code == 0 and "no findings" in verify.output.lower(), (
        verify.output
    )


def test_a_record_writes_the_work_tree_objects_into_the_store_not_the_checkout(clean):
    """git writes the recorded blob straight into the store: the work tree's own object
    directory stays empty (no copy afterwards), and the patch, layers and verify read
    the blob from the store."""
    assert cli(clean, "edit", "--new", "0002-direct").exit_code == 0
    work = clean.root / ".overlay" / "edit" / "0002-direct"
    (work / "mlx" / "backend" / "rocm" / "direct.h").write_text("// straight in\n")
    result = cli(
        clean,
        "record",
        "--keep",
        "-m",
        "rocm: direct",
        "--description",
        "Why it is there.",
    )
    assert result.exit_code == 0, result.output
    own = work / ".git" / "objects"
    assert sorted(p.name for p in own.iterdir()) == ["info", "pack"]
    assert not list((own / "pack").iterdir())
    blob = git(work, "hash-object", "mlx/backend/rocm/direct.h")
    assert Store().has_object(blob, "blob")
    assert cli(clean, "edit", "--abort").exit_code == 0
    verify = cli(clean, "verify")
    assert verify.exit_code == 0 and "no findings" in verify.output.lower()


def test_a_work_tree_path_git_took_but_a_record_may_not_hold_is_refused(clean):
    assert cli(clean, "edit", "--new", "0002-odd").exit_code == 0
    work = clean.root / ".overlay" / "edit" / "0002-odd"
    before = {p.name: p.read_bytes() for p in (clean.root / "patches-rocm").iterdir()}
    (work / "mlx" / "back\\slash.h").write_text("// odd\n")
    result = cli(clean, "record", "-m", "rocm: odd", "--description", "Why.")
    assert result.exit_code == 2, result.output
    assert result.output.startswith("overlay: refusing work tree path")
    assert "Traceback" not in result.output
    assert {
        p.name: p.read_bytes() for p in (clean.root / "patches-rocm").iterdir()
    } == before


# -- the spare work tree (overlay/edit/writes.py SPARE) --------------------------------
# The work tree an edit ends with is kept, and the next edit starts from it holding
# exactly what a new checkout holds, whatever was left in it; where git refuses it, a
# new checkout is made.


def _git(work: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=work, check=True, capture_output=True, text=True
    ).stdout


def _is_a_new_checkout(work: Path) -> None:
    """Every file of the work tree is HEAD's, with its mode, and nothing else is there
    (not even what git ignores); HEAD is on the edit's branch, and git's template
    (sample hooks) is not there."""
    assert _git(work, "symbolic-ref", "HEAD").strip() == "refs/heads/overlay-edit"
    assert _git(work, "rev-parse", "overlay-edit") == _git(work, "rev-parse", "HEAD")
    assert (work / ".git" / "info").is_dir()
    assert not (work / ".git" / "hooks").exists()
    assert (
        _git(work, "status", "--porcelain", "--ignored", "--untracked-files=all") == ""
    )
    archive = subprocess.run(
        ["git", "archive", "HEAD"], cwd=work, check=True, capture_output=True
    ).stdout
    want = {}
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                want[member.name] = (data, bool(member.mode & 0o100))
    have = {}
    for dirpath, dirnames, filenames in os.walk(work):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            path = Path(dirpath) / name
            have[path.relative_to(work).as_posix()] = (
                path.read_bytes(),
                os.access(path, os.X_OK),
            )
    assert have == want


def test_the_next_edit_starts_from_the_spare_as_from_a_new_checkout(clean):
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 locked", 9: "device 9 locked"})
    )
    (work / ".git" / "info" / "exclude").write_text("build/\n*.o\n")
    (work / "build").mkdir()
    (work / "build" / "x.o").write_bytes(b"\x7fELF")
    done = cli(clean, "record")
    assert done.exit_code == 0, done.output
    spare = clean.root / ".overlay" / "edit" / SPARE
    assert not work.exists() and (spare / ".git").is_dir()
    # Whatever is in the spare when the next edit starts: a file changed, one made
    # executable, one deleted, one new.
    (spare / HEADER).write_text("stale\n")
    (spare / DEVICE).chmod(0o755)
    (spare / "README.md").unlink(missing_ok=True)
    (spare / "new-file.txt").write_text("left behind\n")
    _next_edit_starts_anew(clean, work)
    assert "+device 9 locked" in _git(work, "diff", "HEAD~1", "--", DEVICE)
    # It works as a new one does: the next change is recorded.
    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 locked", 9: "device 9 locked", 12: "d12"})
    )
    assert cli(clean, "record").exit_code == 0
    assert b"+d12" in (clean.root / "patches-rocm" / PATCH).read_bytes()


def _next_edit_starts_anew(clean, work: Path) -> None:
    """``overlay edit PATCH`` again: it takes (or replaces) the spare and its work tree
    ``work`` is a new checkout's."""
    again = cli(clean, "edit", PATCH)
    assert again.exit_code == 0, again.output
    assert not (clean.root / ".overlay" / "edit" / SPARE).exists()
    _is_a_new_checkout(work)


def test_a_spare_git_refuses_is_replaced_by_a_new_checkout(clean):
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    assert cli(clean, "edit", "--abort").exit_code == 0  # an abort keeps it as well
    spare = clean.root / ".overlay" / "edit" / SPARE
    (spare / ".git" / "index").write_bytes(b"not an index")  # git refuses to read it
    (spare / "new-file.txt").write_text("left behind\n")
    _next_edit_starts_anew(clean, work)


def test_the_last_edits_git_settings_do_not_follow_into_the_next(clean):
    # A new checkout's .git: not the configuration (a file mode git no longer sees),
    # hooks, stash, refs or excludes the last edit's user left in its own.
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    _git(work, "config", "core.fileMode", "false")
    (work / "run.sh").write_text("#!/bin/sh\n")
    _git(work, "add", "run.sh")
    _git(work, "stash")
    _git(work, "tag", "left-behind")
    hook = work / ".git" / "hooks" / "reference-transaction"
    hook.parent.mkdir(exist_ok=True)  # the checkout has no template's hooks/
    hook.write_text("#!/bin/sh\necho hook ran >> ../hook.log\n")
    hook.chmod(0o755)
    (work / ".git" / "info" / "exclude").write_text("*.log\n")
    assert cli(clean, "edit", "--abort").exit_code == 0
    spare = clean.root / ".overlay" / "edit" / SPARE
    (spare / DEVICE).chmod(0o755)  # git, told to ignore modes, would not restore it
    _next_edit_starts_anew(clean, work)
    assert not os.access(work / DEVICE, os.X_OK)
    assert _git(work, "config", "--get-all", "core.fileMode").strip() in ("", "true")
    assert _git(work, "stash", "list") == "" and _git(work, "tag") == ""
    assert not (work / ".git" / "hooks" / "reference-transaction").exists()
    assert not (clean.root / ".overlay" / "edit" / "hook.log").exists()


def test_a_spare_that_is_no_checkout_is_replaced(clean):
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    spare = clean.root / ".overlay" / "edit" / SPARE
    spare.mkdir()
    (spare / "stray.txt").write_text("no .git here\n")
    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 locked", 9: "device 9 locked"})
    )
    done = cli(clean, "record")
    assert done.exit_code == 0, done.output
    # The record's work tree takes the place of the useless one, and says so.
    assert (spare / ".git").is_dir() and not (spare / "stray.txt").exists()
    assert (
        f"moved the work tree .overlay/edit/{work.name} to .overlay/edit/{SPARE}, "
        "where the next edit starts" in done.output
    )
    shutil.rmtree(spare / ".git")  # and when the next edit meets one
    _next_edit_starts_anew(clean, work)


def test_one_spare_at_most(clean):
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    assert cli(clean, "edit", "--abort").exit_code == 0
    spare = clean.root / ".overlay" / "edit" / SPARE
    os.rename(spare, clean.root / "kept")  # out of the way while a second edit starts
    started = cli(clean, "edit", PATCH)
    os.rename(clean.root / "kept", spare)
    assert cli(clean, "edit", "--abort").exit_code == 0
    assert not work.exists()
    assert sorted(os.listdir(spare.parent)) == [".gitignore", SPARE]


def test_a_record_from_inside_the_work_tree_says_the_directory_moved(
    clean, monkeypatch
):
    """The shell that ran record from inside the work tree is in the spare now (a
    rename, not a removal): record says so, and where the next edit resets it; that
    edit says it was made from the spare, and --abort where the work tree went."""
    started = cli(clean, "edit", PATCH)
    work = clean.root / workdir_of(started.output)
    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 locked", 9: "device 9 locked"})
    )
    monkeypatch.chdir(work / "mlx")
    done = cli(clean, "record")
    assert done.exit_code == 0, done.output
    spare = clean.root / ".overlay" / "edit" / SPARE
    assert (
        f"note: the current directory moved with it (now {spare / 'mlx'}); cd to the "
        "repository: what you change there the next `overlay edit` resets"
    ) in done.output
    monkeypatch.chdir(clean.root)
    assert "made from" not in started.output  # the first edit: a new checkout
    again = cli(clean, "edit", PATCH)
    assert again.exit_code == 0, again.output
    assert (
        f"(made from .overlay/edit/{SPARE}, the last edit's work tree: its files are "
        "this layer's now, what git does not track there is gone)"
    ) in again.output
    aborted = cli(clean, "edit", "--abort")
    assert aborted.exit_code == 0, aborted.output
    assert (
        f"threw away the edit of {PATCH} (its work tree .overlay/edit/{work.name} "
        f"moved to .overlay/edit/{SPARE}, where the next edit starts) "
        "(no unrecorded change)"
    ) in aborted.output
    assert "note:" not in aborted.output  # run from the repository: nothing moved
