"""What a run goes to and the checks before it starts (overlay/rebase/plan.py): a run
in progress is named, a sync to an older fork commit says backwards, and a second start
while a run is stopped is refused before anything is resolved."""

from __future__ import annotations

import os

from gitfixtures import cli, git


def test_onto_the_current_pin_during_a_run_names_the_run(ov, w):
    assert cli(ov, "rebase", "--onto", w.pin_conflict).exit_code == 1
    again = cli(ov, "rebase", "--onto", w.base)  # the manifest still holds the old pin
    assert again.exit_code == 2, again.output
    assert "nothing to do" not in again.output
    assert "a rebase is in progress" in again.output and "--continue" in again.output


def test_sync_to_an_older_fork_commit_says_backwards(ov, w):
    older = cli(ov, "sync", "--fork", w.base)
    assert older.exit_code == 2
    assert "older than the current" in older.output and "backwards" in older.output
    assert "rewritten" not in older.output


def test_second_rebase_while_stopped_is_refused_before_resolving(ov, w):
    stopped = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert stopped.exit_code == 1, stopped.output
    again = cli(ov, "rebase", "--onto", "ab" * 20)
    assert again.exit_code == 2, again.output
    assert "in progress" in again.output, again.output
    assert "not found" not in again.output and "fetch" not in again.output


def test_sync_to_a_fork_commit_with_no_history_in_common_says_so(ov, w):
    # A root commit of its own, pushed to the fork remote: it shares nothing with the pin.
    w.fork.commit({"mlx/core.cpp": "an unrelated fork\n"}, "rewritten from scratch")
    root = git(
        w.fork.path,
        "commit-tree",
        git(w.fork.path, "rev-parse", "HEAD^{tree}"),
        "-m",
        "root",
    )
    git(w.fork.path, "update-ref", "refs/heads/unrelated", root)
    result = cli(ov, "sync", "--fork", root)
    assert result.exit_code == 2, result.output
    assert f"fork commit {root[:12]} and pin" in result.output
    assert "no common ancestor" in result.output and "--merge-base" in result.output
    assert not (ov.root / ".overlay" / "rebase").exists()


def _fork_manifest(ov) -> str:
    return (ov.root / "patches-rocm" / "overlay.toml").read_text()


def test_sync_to_another_fork_branch_by_name_records_the_branch(ov, w):
    git(w.fork.path, "checkout", "-q", "-b", "rocm-support-memory")
    memory = w.fork.commit({"mlx/backend/rocm/pool.cpp": "a pool\n"}, "memory pool")
    done = cli(ov, "sync", "--fork", "rocm-support-memory")
    assert done.exit_code == 0, done.output
    assert "[fork] branch: rocm-support -> rocm-support-memory" in done.output
    manifest = _fork_manifest(ov)
    assert 'branch = "rocm-support-memory"' in manifest and memory in manifest
    report = (ov.root / ".overlay" / "last-rebase.md").read_text()
    assert "rocm-support -> rocm-support-memory" in report
    assert "rocm-support-memory" in cli(ov, "status").output


def test_sync_by_sha_off_the_branch_takes_the_one_branch_holding_it(ov, w):
    on_branch = w.fork.commit({"mlx/backend/rocm/a.cpp": "a\n"}, "on the branch")
    git(w.fork.path, "checkout", "-q", "-b", "rocm-support-memory", w.fork_commit)
    memory = w.fork.commit({"mlx/backend/rocm/pool.cpp": "a pool\n"}, "memory pool")
    # The store learns the fork's branches as a fetch by name leaves them.
    assert cli(ov, "sync", "--fork", "rocm-support").exit_code == 0
    assert f'commit = "{on_branch}"' in _fork_manifest(ov)
    assert 'branch = "rocm-support"' in _fork_manifest(ov)
    side = cli(ov, "sync", "--force", "--fork", memory)
    assert side.exit_code == 0, side.output
    assert (
        "[fork] branch: rocm-support -> rocm-support-memory: "
        f"fork commit {memory[:12]} is not on rocm-support"
    ) in side.output
    assert 'branch = "rocm-support-memory"' in _fork_manifest(ov)
    # A commit on the recorded branch (an ancestor of its tip) keeps it, silently.
    git(w.fork.path, "checkout", "-q", "rocm-support-memory")
    tip = w.fork.commit({"mlx/backend/rocm/pool.cpp": "a pool, 2\n"}, "pool 2")
    assert cli(ov, "sync", "--fork", "rocm-support-memory").exit_code == 0
    back = cli(ov, "sync", "--force", "--fork", memory)
    assert back.exit_code == 0 and "[fork] branch" not in back.output, back.output
    assert 'branch = "rocm-support-memory"' in _fork_manifest(ov)
    assert tip not in _fork_manifest(ov)


def test_sync_by_sha_on_no_fork_branch_keeps_the_branch_and_says_so(ov, w):
    git(w.fork.path, "checkout", "-q", "-b", "scratch")
    loose = w.fork.commit({"mlx/backend/rocm/x.cpp": "x\n"}, "loose")
    git(w.fork.path, "checkout", "-q", "rocm-support")
    assert cli(ov, "sync", "--fork", "rocm-support").exit_code == 0  # fetches branches
    git(w.fork.path, "branch", "-q", "-D", "scratch")
    assert cli(ov, "sync", "--fork", "rocm-support").exit_code == 0  # prunes scratch
    done = cli(ov, "sync", "--fork", loose)
    assert done.exit_code == 0, done.output
    assert f"fork commit {loose[:12]} is not on rocm-support" in done.output
    assert (
        "no fork branch holds it: [fork] branch still says rocm-support" in done.output
    )
    assert 'branch = "rocm-support"' in _fork_manifest(ov)


def test_sync_by_sha_asks_the_fork_which_branch_holds_it(ov, w):
    """The store never fetched the fork's branches by name (every fetch was by SHA):
    the sync fetches them to place the commit."""
    git(w.fork.path, "checkout", "-q", "-b", "rocm-support-memory")
    memory = w.fork.commit({"mlx/backend/rocm/pool.cpp": "a pool\n"}, "memory pool")
    git(w.fork.path, "checkout", "-q", "rocm-support")
    w.fork.commit({"mlx/backend/rocm/a.cpp": "a\n"}, "on the branch")
    store = os.environ["OVERLAY_GIT_DIR"]
    assert not os.path.exists(store) or not git(
        store, "for-each-ref", "refs/remotes/fork/"
    )
    done = cli(ov, "sync", "--fork", memory)
    assert done.exit_code == 0, done.output
    assert "[fork] branch: rocm-support -> rocm-support-memory" in done.output
    assert 'branch = "rocm-support-memory"' in _fork_manifest(ov)


def test_an_empty_ref_is_refused_as_one_not_taken_for_none(ov, w):
    for args in (
        ("sync", "--fork", ""),
        ("rebase", "--onto", ""),
        ("sync", "--fork", w.fork_commit, "--merge-base", ""),
    ):
        refused = cli(ov, *args)
        assert refused.exit_code == 2, (args, refused.output)
        assert "a ref may not be empty" in refused.output, refused.output
        assert "nothing to do" not in refused.output
    with_action = cli(ov, "sync", "--continue", "--fork", "")
    assert with_action.exit_code == 2 and "give one of them" in with_action.output
    bare = cli(ov, "sync")
    assert bare.exit_code == 2 and "--drop" in bare.output, bare.output
