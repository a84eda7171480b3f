"""What a run goes to and the checks before it starts (overlay/rebase/plan.py): a run
in progress is named, a sync to an older fork commit says backwards, and a second start
while a run is stopped is refused before anything is resolved."""

from __future__ import annotations

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
