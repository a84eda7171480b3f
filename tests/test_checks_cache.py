"""The verdict cache of ``overlay verify`` (overlay/checks/cache.py): its answer is keyed
on every input byte (the records, suites.toml, the tool and the store), so that nothing
changed is a hit with the same report and any changed input (even with the same size
and mtime) is a new verdict; the repository's paths are git's list, and what a missing
object decides, or an input changed during the run, is not stored."""

from __future__ import annotations

import os
import subprocess

import pytest
from click.testing import CliRunner
from gitfixtures import PATCH, local_fixes
from seriesfixtures import abbreviate_index_line, add_unlisted_patch

from overlay import layout
from overlay.checks import cache as verdict
from overlay.checks import verify as checks
from overlay.cli import main
from overlay.git.env import ls_files_z
from overlay.git.store import Store


class Runs:
    """``overlay -C ROOT [--offline] verify ...`` in-process, counting the full verifies."""

    def __init__(self, o, monkeypatch):
        self.o = o
        self.computed = 0
        real = checks.verify

        def counting(*args, **kw):
            self.computed += 1
            return real(*args, **kw)

        monkeypatch.setattr(checks, "verify", counting)
        # An online verify fetches the upstream refs once (MAN004): the refs it changes are in
        # the key, so that first verdict is not stored. Warm the store first.
        CliRunner().invoke(main, ["-C", str(o.root), "verify"])

    def __call__(self, *args: str, offline: bool = False):
        before = self.computed
        result = CliRunner().invoke(
            main,
            [
                "-C",
                str(self.o.root),
                *(["--offline"] if offline else []),
                "verify",
                *args,
            ],
        )
        assert result.exit_code in (0, 1), result.output
        return (
            result.exit_code,
            result.output,
            self.computed == before,
        )  # (code, report, cache hit)


def _same_size_same_mtime(path, data: bytes) -> None:
    st = os.stat(path)
    assert len(data) == st.st_size
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_nothing_changed_is_a_hit_with_the_same_report(clean, monkeypatch):
    run = Runs(clean, monkeypatch)
    first = run()
    assert first[2] is False and first[0] == 0
    again = run()
    assert again == (first[0], first[1], True)
    assert run("--format", "json")[2] is False and run("--format", "json")[2] is True
    assert run()[2] is True  # the report of each set of options is kept


EDITS = {
    "manifest": lambda o, w: o.write_manifest(w.base, base=w.pin_clean),
    "series": lambda o, w: o.write_series([]),
    "patch bytes": lambda o, w: abbreviate_index_line(o),
    "a patch file not listed": lambda o, w: add_unlisted_patch(o),
    "LOCAL_FIXES.md": lambda o, w: (o.root / "LOCAL_FIXES.md").write_text(
        local_fixes(w, closing="Nope.")
    ),
    "a resolution": lambda o, w: o.add_resolution("mlx/core.cpp", "whatever\n"),
    "a repository path (FIX015)": lambda o, w: (
        (o.root / "docs" / "x" / "upstream").mkdir(parents=True)
        or (o.root / "docs" / "x" / "upstream" / "0001.patch").write_text("x\n")
    ),
}


@pytest.mark.parametrize("name", list(EDITS))
def test_a_changed_input_changes_the_verdict(clean, world, monkeypatch, name):
    run = Runs(clean, monkeypatch)
    before = run()
    assert run()[2] is True
    EDITS[name](clean, world)
    after = run()
    assert after[2] is False, name
    assert after[:2] != before[:2], name
    assert (
        after[:2]
        == (lambda r: (r.exit_code, r.output))(
            CliRunner().invoke(main, ["-C", str(clean.root), "verify"])
        )
        and run()[2] is True
    )


def test_a_resolution_changed_with_the_same_size_and_mtime(clean, world, monkeypatch):
    run = Runs(clean, monkeypatch)
    clean.add_resolution("mlx/core.cpp", "whatever\n")
    res = clean.root / "patches-rocm" / "resolved" / "mlx" / "core.cpp"
    first = run()
    assert run()[2] is True and "LAY003" not in first[1]
    _same_size_same_mtime(res, b"<<<<<<< \n")
    after = run()
    assert after[2] is False and "LAY003" in after[1]


def test_a_patch_changed_with_the_same_size_and_mtime(clean, monkeypatch):
    run = Runs(clean, monkeypatch)
    assert run()[:1] == (0,) and run()[2] is True
    path = clean.root / "patches-rocm" / PATCH
    _same_size_same_mtime(
        path, path.read_bytes().replace(b"device 3 locked", b"device 3 LOCKED")
    )
    after = run()
    assert after[2] is False and after[0] == 1 and "SER010" in after[1]


def test_suites_toml_the_tool_and_the_store_are_in_the_key(
    clean, monkeypatch, tmp_path
):
    root = str(clean.root)
    key = verdict.inputs(root, None, False)
    assert key == verdict.inputs(root, None, False)
    suites = clean.root / "patches-rocm" / "suites"
    suites.mkdir()
    (suites / "suites.toml").write_text("# none\n")
    assert verdict.inputs(root, None, False) != key
    key = verdict.inputs(root, None, False)
    assert verdict.inputs(root, None, True) != key  # --offline
    assert (
        verdict.inputs(root, str(tmp_path / "other.git"), False) != key
    )  # another store
    monkeypatch.setattr(verdict, "__version__", "0.0.0-other")
    assert verdict.inputs(root, None, False) != key
    monkeypatch.undo()
    store = Store()
    store.ensure_commit(clean.world.pin_clean, ["upstream"])
    key = verdict.inputs(root, None, False)
    store.git(
        "update-ref", "refs/remotes/upstream/main", clean.world.pin_clean
    )  # MAN004 reads these
    assert verdict.inputs(root, None, False) != key
    key = verdict.inputs(root, None, False)
    package_file = os.path.join(os.path.dirname(verdict.__file__), "findings.py")
    st = os.stat(package_file)
    try:
        os.utime(package_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        assert verdict.inputs(root, None, False) != key  # overlay itself changed
    finally:
        os.utime(package_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    monkeypatch.setenv("OVERLAY_FORK_URL", str(clean.world.fork.path))
    assert verdict.inputs(root, None, False) != key
    monkeypatch.delenv("OVERLAY_FORK_URL")
    state = clean.root / ".overlay" / "rebase"
    state.mkdir(parents=True)
    (state / "state.json").write_text("{}")
    assert verdict.inputs(root, None, False) != key


def test_repository_paths_are_git_s_list(clean, monkeypatch):
    """In a git work tree the paths are `git ls-files` (ignored files are not paths)."""
    run = Runs(clean, monkeypatch)
    subprocess.run(["git", "init", "-q", str(clean.root)], check=True)
    upstream = clean.root / "docs" / "x" / "upstream"
    upstream.mkdir(parents=True)
    (upstream / "0001.patch").write_text("x\n")
    assert "FIX015" in run()[1] and run()[2] is True
    (clean.root / ".gitignore").write_text("docs/x/\n")
    after = run()
    assert after[2] is False and "FIX015" not in after[1]


def test_repository_paths_ignore_a_hook_s_git_variables(clean, monkeypatch, tmp_path):
    """Run from a hook of another repository (GIT_DIR and GIT_INDEX_FILE set), the
    paths are still the overlay repository's own, as for every other git child."""
    subprocess.run(["git", "init", "-q", str(clean.root)], check=True)
    subprocess.run(["git", "-C", str(clean.root), "add", "-A"], check=True)
    other = tmp_path / "other"
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    (other / "elsewhere.txt").write_text("x\n")
    subprocess.run(["git", "-C", str(other), "add", "-A"], check=True)
    own = set(ls_files_z(str(clean.root)).split(b"\0"))
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    listed = set(ls_files_z(str(clean.root)).split(b"\0"))
    assert b"patches-rocm/series" in listed and b"elsewhere.txt" not in listed
    assert listed == own


def test_what_a_missing_object_decides_is_not_cached(clean, monkeypatch, tmp_path):
    run = Runs(clean, monkeypatch)
    monkeypatch.setenv("OVERLAY_GIT_DIR", str(tmp_path / "empty.git"))
    first = run(offline=True)
    assert "MAN002" in first[1]
    assert run(offline=True)[2] is False


def test_strict_output_and_a_broken_cache_file(clean, monkeypatch, tmp_path):
    run = Runs(clean, monkeypatch)
    clean.add_resolution("mlx/core.cpp", "whatever\n")
    (clean.root / "LOCAL_FIXES.md").write_text(local_fixes(clean.world))
    code, text, _hit = run()
    assert run()[2] is True
    out = tmp_path / "report.txt"
    hit = CliRunner().invoke(main, ["-C", str(clean.root), "verify", "-o", str(out)])
    assert hit.output == text and out.read_text() == text and hit.exit_code == code
    (clean.root / layout.VERIFY_CACHE).write_bytes(
        b"overlay verify cache 1\n999\nshort"
    )
    assert run()[2] is False and run()[2] is True


def test_an_input_changed_during_the_run_is_not_stored(clean, monkeypatch):
    run = Runs(clean, monkeypatch)
    real = checks.verify

    def editing(*args, **kw):
        result = real(*args, **kw)
        (clean.root / "LOCAL_FIXES.md").write_text(
            local_fixes(clean.world, closing="Changed meanwhile.")
        )
        return result

    monkeypatch.setattr(checks, "verify", editing)
    first = CliRunner().invoke(main, ["-C", str(clean.root), "verify"])
    assert first.exit_code == 0
    second = run()
    assert second[2] is False and second[0] == 1 and "FIX013" in second[1]


def test_a_cached_verdict_still_says_a_run_is_stopped(clean, world, monkeypatch):
    """The key holds the records, not the run state: a verify answered from the cache
    during a stopped rebase still prints the note (and a verify with a note is not
    what the cache keeps)."""
    run = Runs(clean, monkeypatch)
    assert run()[0] == 0 and run()[2] is True
    stopped = CliRunner().invoke(
        main, ["-C", str(clean.root), "rebase", "--onto", world.pin_conflict]
    )
    assert stopped.exit_code == 1, (
        stopped.output
    )  # the core.cpp conflict: the records are unchanged
    for _ in range(
        2
    ):  # whether answered from the cache or computed, every verify says it
        code, report, _hit = run()
        assert "a rebase is in progress" in report
    assert (
        CliRunner().invoke(main, ["-C", str(clean.root), "rebase", "--abort"]).exit_code
        == 0
    )
    code, report, _hit = run()
    assert code == 0 and "in progress" not in report
    assert run()[2] is True  # cached again once no run is in progress
