"""Pin sanity (overlay/checks/pins.py): a new pin that is the fork commit or on no
upstream branch is refused without ``--force``; a backwards pin names the patches that
cite upstream commits it lacks, and FIX027 keeps saying so while it holds; a fork ahead
of the pin (it merged upstream commits the pin lacks) is refused until allowed, and what
a sync does not carry is said until acknowledged."""

from __future__ import annotations

import json
import os
import textwrap

from gitfixtures import cli, git, git_calls, lines, overlay_lines, overlay_process
from seriesfixtures import (
    CORE_RESOLVED,
    PDIR,
    add_patch,
    assert_verify_clean,
    tree_hash,
    upstream_branch,
    write_fixes,
)

from overlay.checks import pins
from overlay.git.store import EMPTY_TREE, Store


def citing_overlay(ov, w):
    ov.write_manifest(w.pin_clean)
    add_patch(
        ov,
        "0001-follow.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={3: "d3"})},
        fix=1,
    )
    (ov.root / "LOCAL_FIXES.md").write_text(
        textwrap.dedent(f"""\
        # Local changes relative to x/fork@{w.fork_commit[:8]}

        ## Retarget onto the MLX pin ({w.pin_clean[:8]})

        1. **Follow upstream ops.** Upstream {w.pin_clean[:9]} (upstream work) changed
           ops; `mlx/backend/rocm/device.cpp` follows it.

        """)
    )


def fix027(o) -> list[dict]:
    out = cli(o, "verify", "--only", "FIX", "--format", "json")
    return [f for f in json.loads(out.output)["findings"] if f["code"] == "FIX027"]


def test_verify_keeps_the_backwards_warning_while_it_holds(ov, w):
    citing_overlay(ov, w)
    assert fix027(ov) == []
    back = cli(ov, "rebase", "--onto", w.base)
    assert back.exit_code == 0, back.output
    out = back.output.splitlines()
    warned = [i for i, ln in enumerate(out) if "which the new pin lacks" in ln]
    done = [i for i, ln in enumerate(out) if ln.startswith("rebase complete")]
    assert warned and done and warned[-1] < done[0], back.output  # before the result
    # The report a reviewer reads holds the warning too, not only this terminal.
    md = (ov.root / ".overlay" / "last-rebase.md").read_text()
    warnings = md.split("### Warnings\n\n", 1)[1].split("\n\n", 1)[0]
    assert "which the new pin lacks" in warnings, md
    assert "does not descend from the current pin" in warnings, md
    (found,) = fix027(ov)
    assert found["code"] == "FIX027" and found["severity"] == "error"
    assert "0001-follow.patch" in found["message"]
    assert w.pin_clean[:9] in found["message"]
    assert found["path"] == "LOCAL_FIXES.md"
    assert cli(ov, "verify").exit_code == 1
    # The pin has the commit again: the finding goes.
    again = cli(ov, "rebase", "--onto", w.pin_clean)
    assert again.exit_code == 0, again.output
    assert fix027(ov) == []


def test_an_entry_without_a_patch_is_not_told_to_change_its_patch(ov, w):
    citing_overlay(ov, w)
    fixes = ov.root / "LOCAL_FIXES.md"
    fixes.write_text(fixes.read_text().replace("1. **Follow", "2. **Follow"))
    assert cli(ov, "rebase", "--onto", w.base).exit_code == 0
    (found,) = fix027(ov)
    assert "LOCAL_FIXES entry 2 (no patch)" in found["message"]
    assert found["hint"].startswith("the entry cites API the pin does not have")


def test_the_warning_comes_before_the_result_line_in_one_captured_stream(ov, w):
    # A pipe buffers stdout and not stderr: a log that takes both (2>&1, CI) must
    # still read warning, then result.
    citing_overlay(ov, w)
    proc = overlay_process(ov, "rebase", "--onto", w.base, merged=True)
    out = proc.stdout.splitlines()
    assert proc.returncode == 0, out
    warned = [i for i, ln in enumerate(out) if "which the new pin lacks" in ln]
    done = [i for i, ln in enumerate(out) if ln.startswith("rebase complete")]
    assert warned and done and warned[-1] < done[0], out


def test_case18_fork_ahead_of_the_pin_is_refused_then_allowed(ov, w):
    write_fixes(ov)  # a LOCAL_FIXES.md verify accepts: the last verify must pass
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
    # Nothing changed but the rebase lock file the refused command held (it stays,
    # empty) and the manifest's table kept for the next command.
    assert tree_hash(ov.root, skip=".overlay") == before
    assert sorted(p.name for p in (ov.root / ".overlay").iterdir()) == [
        ".gitignore",
        "manifest-cache.json",
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


def test_rebase_onto_the_fork_commit_is_refused_without_force(ov, w):
    refused = cli(ov, "rebase", "--onto", w.fork_commit)
    assert refused.exit_code == 2, refused.output
    assert "is the fork commit" in refused.output and "--force" in refused.output
    assert not (ov.root / ".overlay" / "rebase").exists()
    forced = cli(ov, "rebase", "--onto", w.fork_commit, "--force")
    assert "accepted because of --force" in forced.output
    assert "refusing" not in forced.output


def test_rebase_onto_a_commit_on_no_upstream_branch_is_refused(ov, w):
    up = w.upstream.path
    git(up, "checkout", "-q", "--detach", w.pin_clean)
    pr = w.upstream.commit(
        {"mlx/ops.cpp": lines("ops", change={3: "ops 3 pull request"})}, "unmerged PR"
    )
    git(up, "update-ref", "refs/pull/7/head", pr)
    git(up, "checkout", "-q", "main")
    refused = cli(ov, "rebase", "--onto", pr)
    assert refused.exit_code == 2, refused.output
    (line,) = overlay_lines(refused.output)
    assert "no upstream branch or tag contains it" in line
    assert "pass --force" in refused.output
    assert cli(ov, "rebase", "--onto", pr, "--force").exit_code == 0


def test_backwards_pin_names_patches_citing_commits_the_pin_lacks(ov, w):
    ov.write_manifest(w.pin_clean)
    add_patch(
        ov,
        "0001-follow.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={3: "d3"})},
        fix=1,
    )
    add_patch(
        ov,
        "0002-other.patch",
        {"mlx/backend/rocm/device.h": "#pragma once\n// other\n"},
        fix=2,
    )
    (ov.root / "LOCAL_FIXES.md").write_text(
        textwrap.dedent(f"""\
        # Local changes relative to x/fork@{w.fork_commit[:8]}

        ## Retarget onto the MLX pin ({w.pin_clean[:8]})

        1. **Follow upstream ops.** Upstream {w.pin_clean[:9]} (upstream work) changed
           ops; `mlx/backend/rocm/device.cpp` follows it.

        2. **Older work.** Upstream {w.base[:10]} is the merge base; `mlx/backend/rocm/device.h`.

        """)
    )
    back = cli(ov, "rebase", "--onto", w.base)
    assert back.exit_code == 0, back.output
    warned = [ln for ln in back.output.splitlines() if "which the new pin lacks" in ln]
    assert len(warned) == 1, back.output
    assert (
        "0001-follow.patch (LOCAL_FIXES entry 1)" in warned[0]
        and w.pin_clean[:9] in warned[0]
    )


def _fork_merging_an_upstream_feature(w):
    """The fork merges a commit of an upstream feature branch (not on main); returns
    ``(feature commit, merged fork commit)``."""
    from gitfixtures import git

    upstream_branch(w, "feature", w.base)
    feature = w.upstream.commit(
        {"mlx/ops.cpp": lines("ops", change={15: "ops 15 feature"})},
        "upstream feature on its own branch",
    )
    git(w.upstream.path, "checkout", "-q", "main")
    git(w.fork.path, "fetch", "-q", "origin")
    git(w.fork.path, "merge", "-q", "--no-edit", feature)
    return feature, git(w.fork.path, "rev-parse", "HEAD")


def test_sync_refuses_a_fork_that_merged_a_commit_of_any_upstream_branch(ov, w):
    feature, merged = _fork_merging_an_upstream_feature(w)
    refused = cli(ov, "sync", "--fork", merged)
    assert refused.exit_code == 2, refused.output
    assert "1 upstream commit(s)" in refused.output, refused.output
    assert f"{feature[:12]} upstream feature on its own branch" in refused.output
    allowed = cli(ov, "sync", "--fork", merged, "--allow-fork-ahead")
    assert allowed.exit_code == 0, allowed.output
    # verify asks the same question of the manifest, by the same definition.
    verify = cli(ov, "verify", "--only", "MAN")
    assert verify.exit_code == 1 and "MAN004" in verify.output, verify.output
    assert feature[:12] in verify.output
    # A rebase is held to it too: the new pin lacks the merged commit...
    refused = cli(ov, "rebase", "--onto", w.pin_clean)
    assert refused.exit_code == 2, refused.output
    assert feature[:12] in refused.output and "--allow-fork-ahead" in refused.output
    # ...and the commit itself is an upstream commit, so it is accepted as a pin.
    moved = cli(ov, "rebase", "--onto", feature)
    assert moved.exit_code == 0, moved.output
    assert cli(ov, "verify", "--only", "MAN").exit_code == 0


def test_rebase_honours_allow_fork_ahead(ov, w):
    _feature, merged = _fork_merging_an_upstream_feature(w)
    assert cli(ov, "sync", "--fork", merged, "--allow-fork-ahead").exit_code == 0
    assert cli(ov, "rebase", "--onto", w.pin_clean).exit_code == 2
    done = cli(ov, "rebase", "--onto", w.pin_clean, "--allow-fork-ahead")
    assert done.exit_code == 0, done.output


def test_sync_names_fork_changes_outside_carry_until_acknowledged(ov, w):
    device = "mlx/backend/rocm/device.cpp"
    add_patch(ov, "0001-device.patch", {device: lines("device", change={9: "d9"})})
    write_fixes(ov, [("Device.", [device])])
    assert_verify_clean(ov)
    fork2 = w.fork.commit(
        {"docs/rocm.md": "fork docs, new page\n", "python/rocm.py": "x = 1\n"},
        "fork documents and binds",
    )
    done = cli(ov, "sync", "--fork", fork2)
    assert done.exit_code == 0, done.output
    assert "not carried: the fork changed 2 path(s) outside [carry]" in done.output
    assert f"docs/rocm.md ({fork2[:12]} fork documents and binds)" in done.output
    assert "overlay sync --ack-uncarried" in done.output
    report = (ov.root / ".overlay" / "last-rebase.md").read_text()
    assert "### Not carried" in report and "`python/rocm.py`" in report
    manifest = (ov.root / PDIR / "overlay.toml").read_text()
    assert f'uncarried-reviewed = "{w.fork_commit}"' in manifest
    # verify says it (info: it does not fail) until the team acknowledges it.
    found = cli(ov, "verify", "--only", "MAN")
    assert found.exit_code == 0 and "MAN005" in found.output, found.output
    assert "2 path(s) outside [carry]" in found.output
    ack = cli(ov, "sync", "--ack-uncarried")
    assert ack.exit_code == 0 and "acknowledged" in ack.output, ack.output
    assert "uncarried-reviewed" not in (ov.root / PDIR / "overlay.toml").read_text()
    assert "# test manifest" in (ov.root / PDIR / "overlay.toml").read_text()
    assert "MAN005" not in cli(ov, "verify", "--only", "MAN").output
    again = cli(ov, "sync", "--ack-uncarried")
    assert again.exit_code == 0 and "nothing to acknowledge" in again.output


def test_the_series_is_read_only_when_an_entry_cites_what_the_pin_lacks(
    ov, w, monkeypatch
):
    """FIX027 and the bump's backwards check name the citing entry's patches from the
    series; with nothing cited that the pin lacks, the series is not read for them."""
    citing_overlay(ov, w)
    read = []
    real = pins.load_series
    monkeypatch.setattr(
        pins, "load_series", lambda root: read.append(root) or real(root)
    )
    store = Store(os.environ["OVERLAY_GIT_DIR"])
    assert (
        pins.pin_lacks_citations(store, str(ov.root), w.pin_clean, w.fork_commit) == []
    )
    assert read == []
    ((line, citation),) = pins.pin_lacks_citations(
        store, str(ov.root), w.base, w.fork_commit
    )
    assert read == [str(ov.root)]
    assert (citation.entry, citation.patches) == (1, ("0001-follow.patch",))
    assert citation.commits == (w.pin_clean[:9],)


def test_upstream_contains_asks_the_branches_then_the_tags(tmp_path, monkeypatch):
    store = Store(str(tmp_path / "store.git"), offline=True)
    # main: a -> b; a tag on c, a commit of no branch; d on nothing at all.
    a, b, c, d = store.commit_chain(
        [
            (EMPTY_TREE, [], "a"),
            (EMPTY_TREE, [0], "b"),
            (EMPTY_TREE, [0], "c, tagged only"),
            (EMPTY_TREE, [0], "d, on nothing"),
        ]
    )
    assert pins.upstream_contains(store, a, fetch=False) is None  # no ref at all
    store.git("update-ref", "refs/remotes/upstream/main", b)
    store.git("update-ref", "refs/tags/v1", c)
    seen = git_calls(monkeypatch)
    assert pins.upstream_contains(store, a, fetch=False) is True
    # On a branch: the tags are not walked.
    assert [args[-1] for args in seen] == ["refs/remotes/upstream/"]
    seen.clear()
    assert pins.upstream_contains(store, c, fetch=False) is True
    assert [args[-1] for args in seen] == ["refs/remotes/upstream/", "refs/tags/"]
    assert pins.upstream_contains(store, d, fetch=False) is False


def test_a_new_pin_at_an_upstream_tip_listed_by_the_plan_needs_no_walk(
    tmp_path, monkeypatch
):
    # A pin bump's plan lists upstream's tips (fork_ahead); its pin check then finds a
    # new pin that is a tip (a bump to main) in that list, and starts no process. A fetch
    # forgets the list: a moved branch is asked of git again.
    up = tmp_path / "up"
    git(tmp_path, "init", "-q", "-b", "main", str(up))
    git(up, "commit", "-q", "--allow-empty", "-m", "a")
    a = git(up, "rev-parse", "HEAD").strip()
    git(up, "commit", "-q", "--allow-empty", "-m", "b")
    b = git(up, "rev-parse", "HEAD").strip()
    store = Store(str(tmp_path / "store.git"))
    store.set_remote("upstream", str(up))
    store.refresh_upstream_refs()
    seen = git_calls(monkeypatch)
    assert store.listed_upstream_tips() is None
    assert pins.fork_ahead(store, b, b) == []  # lists the tips, as the plan does
    assert store.listed_upstream_tips() == [b]
    seen.clear()
    assert pins.upstream_contains(store, b, fetch=False) is True
    assert seen == []  # a tip: no process
    assert pins.upstream_contains(store, a, fetch=False) is True  # below one: a walk
    assert [args[0] for args in seen] == ["for-each-ref"]
    # upstream's main moves on; the fetch forgets the list, and the new tip is found.
    git(up, "commit", "-q", "--allow-empty", "-m", "c")
    c = git(up, "rev-parse", "HEAD").strip()
    store.refresh_upstream_refs()
    assert store.listed_upstream_tips() is None
    assert store.upstream_tips() == [c]
    seen.clear()
    assert pins.upstream_contains(store, c, fetch=False) is True
    assert seen == []
    # A commit on no upstream ref, with the tips listed: one walk per scope, no count.
    (d,) = store.commit_chain([(EMPTY_TREE, [], "d, on nothing")])
    seen.clear()
    assert pins.upstream_contains(store, d, fetch=False) is False
    assert [args[-1] for args in seen] == ["refs/remotes/upstream/", "refs/tags/"]


def test_the_upstream_commits_beyond_a_pin_are_kept_by_pin_and_tips(
    tmp_path, monkeypatch
):
    """fork_ahead compares the fork's own commits with the upstream commits the pin
    lacks; that second list depends on the pin and upstream's tips only and is kept in
    the store: a later fork with the same pin and tips asks git no `rev-list --stdin`,
    and still finds a merged upstream commit; a new tip asks again."""
    store = Store(str(tmp_path / "store.git"), offline=True)
    a, b, f, x = store.commit_chain(
        [
            (EMPTY_TREE, [], "a"),
            (EMPTY_TREE, [0], "b, upstream main"),
            (EMPTY_TREE, [0], "f, an upstream feature"),
            (EMPTY_TREE, [0], "x, the fork's own"),
        ]
    )
    (y,) = store.commit_chain([(EMPTY_TREE, [x, f], "y, the fork merges f")])
    store.git("update-ref", "refs/remotes/upstream/main", b)
    store.git("update-ref", "refs/remotes/upstream/feature", f)
    seen = git_calls(monkeypatch)
    assert pins.fork_ahead(store, x, b) == []
    assert ("rev-list", "--stdin") in seen
    seen.clear()
    ahead = pins.fork_ahead(store, y, b)
    assert [line.split(" ", 1)[1] for line in ahead] == ["f, an upstream feature"]
    assert ("rev-list", "--stdin") not in seen, seen
    # In a new process (a new Store) after upstream grew a branch: asked again.
    (g,) = store.commit_chain([(EMPTY_TREE, [b], "g")])
    store.git("update-ref", "refs/remotes/upstream/other", g)
    again = Store(str(tmp_path / "store.git"), offline=True)
    seen.clear()
    assert pins.fork_ahead(again, y, b) == ahead
    assert ("rev-list", "--stdin") in seen
    # A damaged record is asked of git again, not trusted.
    kept = list((tmp_path / "store.git" / "overlay-ahead").rglob("*.json"))
    assert len(kept) == 2
    for path in kept:
        path.write_text('{"commits": [1, 2]}')
    # (the answer for y itself is remembered as well: forget it, to ask again)
    (tmp_path / "store.git" / "overlay-ancestry.json").unlink()
    seen.clear()
    assert pins.fork_ahead(Store(str(tmp_path / "store.git"), offline=True), y, b)
    assert ("rev-list", "--stdin") in seen


def test_a_sync_walks_once_to_the_pin_for_the_descent_and_the_fork_ahead_check(
    ov, w, monkeypatch
):
    """The sync's descent check (is the old fork commit below the new one) is answered
    by the fork-ahead check's walk from the new fork commit to the pin: one merge-base
    (the sync's merge base), one rev-list of the fork's commits."""
    new = w.fork.commit({"mlx/backend/rocm/more.cpp": "more\n"}, "more rocm")
    seen = git_calls(monkeypatch)
    done = cli(ov, "sync", "--fork", new)
    assert done.exit_code == 0, done.output
    bases = [set(a[1:]) for a in seen if a[0] == "merge-base"]
    assert {new, w.base} in bases, seen  # the sync's merge base: git's answer
    assert {new, w.fork_commit} not in bases, seen  # the descent: from the walk
    assert [a for a in seen if a[0] == "rev-list" and a[1] == new] == [
        ("rev-list", new, f"^{w.base}")
    ], seen
    # A sync to a commit that does not descend is still refused: it is not in the walk,
    # and git's merge-base says why.
    git(w.fork.path, "checkout", "-q", "-b", "side", w.fork_commit)
    side = w.fork.commit({"mlx/backend/rocm/side.cpp": "side\n"}, "a side branch")
    refused = cli(ov, "sync", "--fork", side)
    assert refused.exit_code == 2, refused.output
    assert f"fork commit {side[:12]} does not descend from {new[:12]}" in (
        refused.output
    )


def test_a_sideways_pin_names_patches_citing_commits_the_pin_lacks(ov, w):
    """A pin moved to another upstream branch lacks the cited commit as a pin moved
    back does: the run names the patch when it starts, as verify then reports FIX027."""
    citing_overlay(ov, w)
    upstream_branch(w, "side", w.base)
    side = w.upstream.commit({"docs/side.md": "side\n"}, "a side branch of upstream")
    git(w.upstream.path, "checkout", "-q", "main")
    moved = cli(ov, "rebase", "--onto", side)
    assert moved.exit_code == 0, moved.output
    assert "moving backwards or sideways" in moved.output
    warned = [ln for ln in moved.output.splitlines() if "which the new pin lacks" in ln]
    assert len(warned) == 1 and "0001-follow.patch" in warned[0], moved.output
    assert w.pin_clean[:9] in warned[0]
    assert [f["code"] for f in fix027(ov)] == ["FIX027"]


def test_uncarried_changes_of_a_sideways_fork_name_the_old_sides_commits(ov, w):
    """A fork commit that is no descendant of the old one (a sync sideways, --force)
    drops the old side's changes: the commits behind them are named, marked, instead
    of an empty list."""
    from overlay.records.manifest import load_manifest

    git(w.fork.path, "checkout", "-q", "-b", "side", w.base)
    side = w.fork.commit({"mlx/backend/rocm/side.cpp": "side\n"}, "a side branch")
    store = Store(str(w.fork.path / ".git"), offline=True)
    carry = load_manifest(str(ov.root)).carry
    changes = dict(pins.uncarried_changes(store, carry, w.fork_commit, side))
    assert changes["docs/rocm.md"] == [
        f"{w.fork_commit[:12]} rocm backend (only in the old fork commit)"
    ]
    # forward, nothing is marked
    forward = dict(pins.uncarried_changes(store, carry, w.base, w.fork_commit))
    assert forward["docs/rocm.md"] == [f"{w.fork_commit[:12]} rocm backend"]


def test_sync_there_and_back_leaves_nothing_to_acknowledge(ov, w):
    """A sync forward then back (--force) to the reviewed fork commit: the second
    report names what it no longer carries, marked, but asks for no review, the key
    goes and verify has no MAN005 (the report and verify agree)."""
    device = "mlx/backend/rocm/device.cpp"
    add_patch(ov, "0001-device.patch", {device: lines("device", change={9: "d9"})})
    write_fixes(ov, [("Device.", [device])])
    fork2 = w.fork.commit({"docs/rocm.md": "fork docs, new page\n"}, "fork docs")
    assert cli(ov, "sync", "--fork", fork2).exit_code == 0
    manifest = (ov.root / PDIR / "overlay.toml").read_text()
    assert f'uncarried-reviewed = "{w.fork_commit}"' in manifest
    back = cli(ov, "sync", "--force", "--fork", w.fork_commit)
    assert back.exit_code == 0, back.output
    assert "(only in the old fork commit)" in back.output, back.output
    assert "--ack-uncarried" not in back.output
    assert (
        "--ack-uncarried" not in (ov.root / ".overlay" / "last-rebase.md").read_text()
    )
    assert "uncarried-reviewed" not in (ov.root / PDIR / "overlay.toml").read_text()
    assert "MAN005" not in cli(ov, "verify", "--only", "MAN").output
    # Forward again: the changes await review once more.
    again = cli(ov, "sync", "--fork", fork2)
    assert again.exit_code == 0 and "--ack-uncarried" in again.output, again.output
    found = cli(ov, "verify", "--only", "MAN")
    assert "MAN005" in found.output, found.output
