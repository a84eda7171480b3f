"""``overlay import whole-file`` (overlay/importer/): a whole-file overlay made from
fixture repositories becomes a manifest, resolutions and a series, and round-trips.

The overlay holds: a core file where the fork's hook conflicts with the pin (plus a local
change outside the conflict), a core file with the fork's hook and a local fix, backend
changes named by one entry and by two, local-only files (text, binary, an executable),
a fork file it drops, a file git ignores and a note that is not part of the tree."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from gitfixtures import CLOSING, git, lines

from overlay import importer
from overlay.cli import main
from overlay.errors import OverlayError
from overlay.records import fixes

BINARY = bytes(range(256)) * 3 + b"\x00\r\n\x00"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


class Team:
    """A team repository holding a whole-file overlay directory, on a private world."""

    def __init__(self, tmp: Path, w, *, abbreviate: bool = False):
        self.w = w
        self.fork2 = w.fork.commit(
            {
                "mlx/backend/rocm/event.cpp": lines("event"),
                "mlx/backend/rocm/legacy.cpp": "a legacy path of the fork\n",
                "mlx/ops.cpp": lines("ops", change={10: "ops 10 // rocm hook"}),
            },
            "fork: events, a legacy file, an ops hook",
        )
        self.pin = w.pin_conflict
        self.root = tmp / "team"
        self.root.mkdir()
        git(self.root, "init", "-q")
        (self.root / ".gitignore").write_text(".DS_Store\n")
        self.dir = self.root / "whole"
        commit = self.fork2[:12] if abbreviate else self.fork2
        self.write(
            "UPSTREAM",
            f"# where the overlay comes from\nsource: {w.fork.path}\nbranch: rocm-support\n"
            f"commit: {commit}\nfork_upstream_merge_base: {w.base}\n"
            f"retargeted_to_mlx_pin: {self.pin}\nsynced_on: 2026-01-01\n",
        )
        self.write("README.md", "How we copy these files over MLX.\n")
        self.write("LOCAL_FIXES.md", self.local_fixes())
        self.write(
            "CMakeLists.txt",
            "project(mlx)\noption(MLX_BUILD_METAL on)\noption(MLX_BUILD_ROCM off)\n",
        )
        self.write(
            "mlx/core.cpp",
            lines(
                "core",
                change={
                    5: "core 5 upstream rewrite // rocm hook",
                    15: "core 15 local fix",
                    25: "core 25 upstream",
                },
            ),
        )
        self.write(
            "mlx/ops.cpp",
            lines(
                "ops",
                change={
                    2: "ops 2 upstream",
                    10: "ops 10 // rocm hook",
                    20: "ops 20 clamped",
                },
            ),
        )
        self.write(
            "mlx/backend/rocm/device.cpp",
            lines("device", change={3: "device 3 locked", 9: "device 9 counted"}),
        )
        self.write("mlx/backend/rocm/device.h", "#pragma once\n#include <mutex>\n")
        self.write(
            "mlx/backend/rocm/event.cpp",
            lines("event", change={7: "event 7 reports errors"}),
        )
        self.write("mlx/backend/rocm/pinned.cu", "// a pinned host arena\n")
        self.write("mlx/backend/rocm/kernels.bin", BINARY)
        self.write("mlx/backend/rocm/gen.sh", "#!/bin/sh\necho table\n")
        os.chmod(self.dir / "mlx/backend/rocm/gen.sh", 0o755)
        self.write("mlx/backend/rocm/.DS_Store", b"\x00\x00\x00\x01Bud1")

    def write(self, rel: str, content: str | bytes) -> None:
        path = self.dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)

    def local_fixes(self) -> str:
        repo = fixes.fork_repo_from_url(str(self.w.fork.path))
        return f"""# Local changes relative to {repo}@{self.fork2[:8]}

## Retarget onto the MLX pin ({self.pin[:8]})

1. **Carry the core hook onto the pin.** The pin rewrote line 5 of `mlx/core.cpp`; the
   resolution keeps upstream's line with the fork's hook after it:
   `patches-rocm/resolved/mlx/core.cpp`.

## Fixes to the fork's kernels

2. **Ops: clamp the tail.** `mlx/ops.cpp` read past the end at line 20. {CLOSING}

3. **Device: lock the handle.** `mlx/backend/rocm/device.cpp` and
   `mlx/backend/rocm/device.h` share the handle under a lock. {CLOSING}

4. **Device: count the streams.** `device.cpp` counts the streams it made. {CLOSING}
   (acme/mlx-port#7)

5. **Events report errors.** `mlx/backend/rocm/event.cpp` keeps the error. {CLOSING}

6. **Pinned arena.** Adds `mlx/backend/rocm/pinned.cu` and its table
   `mlx/backend/rocm/kernels.bin`. {CLOSING}

8. **Core: keep line 15.** `mlx/core.cpp` keeps its local line 15. {CLOSING}

## Fixes to the fork's build

7. **Generate the kernel table.** `mlx/backend/rocm/gen.sh` writes it. {CLOSING}

## Dropped from the vendored set

- `mlx/backend/rocm/legacy.cpp`: the fork's legacy path; nothing here uses it.
- `docs/rocm.md`: the fork's documentation.
- `mlx/backend/metal/kernels.cpp`: Metal is not carried.
"""

    def run(self, *args: str):
        # upstream is a local repository: no test touches the network
        return invoke(
            "-C",
            str(self.root),
            "import",
            "whole-file",
            str(self.dir),
            "--upstream-url",
            str(self.w.upstream.path),
            *args,
        )


@pytest.fixture
def team(tmp_path, w):
    return Team(tmp_path, w)


def pin_checkout_with_overlay(team: Team, dest: Path) -> None:
    """What the team does by hand: the pin checked out, the overlay copied over it."""
    dest.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(team.w.upstream.path), "archive", team.pin],
        stdout=subprocess.PIPE,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    for src in [team.dir / "CMakeLists.txt", *sorted((team.dir / "mlx").rglob("*"))]:
        rel = src.relative_to(team.dir)
        if src.is_dir() or src.name == ".DS_Store":
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def files_of(root: Path) -> dict[str, tuple[bytes, bool]]:
    out = {}
    for p in root.rglob("*"):
        if p.is_file() and not p.name.startswith(".overlay-export"):
            out[str(p.relative_to(root))] = (
                p.read_bytes(),
                bool(p.stat().st_mode & stat.S_IXUSR),
            )
    return out


def test_round_trip(team, tmp_path):
    result = team.run()
    assert result.exit_code == 0, result.output
    out = result.output
    # every file and what it became
    assert "mlx/core.cpp" in out and "resolution" in out
    rows = {
        line.split()[0]: line.split()[1]
        for line in out.splitlines()[2:]
        if line.startswith("  ")
    }
    assert rows == {
        "CMakeLists.txt": "unchanged",
        "mlx/backend/rocm/.DS_Store": "ignored",
        "mlx/backend/rocm/device.cpp": "patch",
        "mlx/backend/rocm/device.h": "patch",
        "mlx/backend/rocm/event.cpp": "patch",
        "mlx/backend/rocm/gen.sh": "created",
        "mlx/backend/rocm/kernels.bin": "created",
        "mlx/backend/rocm/legacy.cpp": "dropped",
        "mlx/backend/rocm/pinned.cu": "created",
        "mlx/core.cpp": "resolution",
        "mlx/ops.cpp": "patch",
        "README.md": "skipped",
    }, out
    assert "named by entries 3 and 4: one patch for all of them" in out
    assert "verify: no findings" in out and "round trip: patched" in out

    pdir = team.root / "patches-rocm"
    series = (pdir / "series").read_text().split()
    assert series == [
        "0001-fixes-1-8.patch",
        "0002-ops-clamp-the-tail.patch",
        "0003-device-lock-the-handle.patch",
        "0004-fixes-3-4.patch",
        "0005-events-report-errors.patch",
        "0006-pinned-arena.patch",
        "0007-generate-the-kernel-table.patch",
    ]
    both = (pdir / "0004-fixes-3-4.patch").read_text()
    assert "Local-Fix: 3\nLocal-Fix: 4\nForwarded: not-needed\n---\n" in both
    assert "Subject: [PATCH] Local fixes 3 and 4: device.cpp\n" in both
    assert "GIT binary patch" in (pdir / "0006-pinned-arena.patch").read_text()
    assert (
        "new file mode 100755"
        in (pdir / "0007-generate-the-kernel-table.patch").read_text()
    )
    # the resolution is git's merge with the overlay's line in the conflict region;
    # the local line 15 is the patch on top, pointing at both entries that name core.cpp
    resolution = (pdir / "resolved" / "mlx" / "core.cpp").read_text()
    assert resolution == lines(
        "core",
        change={5: "core 5 upstream rewrite // rocm hook", 25: "core 25 upstream"},
    )
    first = (pdir / "0001-fixes-1-8.patch").read_text()
    assert "+core 15 local fix" in first and "Local-Fix: 1\nLocal-Fix: 8\n" in first
    manifest = (pdir / "overlay.toml").read_text()
    assert (
        '"mlx/backend/rocm/legacy.cpp"' in manifest
        and f'commit = "{team.fork2}"' in manifest
    )
    assert (team.root / "LOCAL_FIXES.md").read_bytes() == (
        team.dir / "LOCAL_FIXES.md"
    ).read_bytes()
    assert (
        (team.root / ".overlay" / "last-import.md")
        .read_text()
        .startswith("## overlay import whole-file")
    )
    assert not [n for n in os.listdir(team.root / ".overlay") if n.endswith(".tmp")]

    # round trip: the export equals the pin checkout with the overlay copied over it, byte for byte
    exported = tmp_path / "export"
    done = invoke("-C", str(team.root), "export", str(exported))
    assert done.exit_code == 0, done.output
    by_hand = tmp_path / "by-hand"
    pin_checkout_with_overlay(team, by_hand)
    assert files_of(exported) == files_of(by_hand)

    # verify: no findings at all; refresh would not change a byte
    verified = invoke("-C", str(team.root), "verify")
    assert verified.exit_code == 0 and "no findings" in verified.output.lower(), (
        verified.output
    )
    check = invoke("-C", str(team.root), "refresh", "--check")
    assert check.exit_code == 0 and "0 of 7 patch(es) would change" in check.output, (
        check.output
    )


def test_abbreviated_commits_and_json_report(tmp_path, w):
    team = Team(tmp_path, w, abbreviate=True)
    result = team.run("--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["upstream"]["commit"] == team.fork2
    assert report["round_trip"]["equal"] and report["findings"] == []
    assert report["counts"] == {
        "created": 3,
        "dropped": 1,
        "ignored": 1,
        "patch": 4,
        "resolution": 1,
        "skipped": 1,
        "unchanged": 1,
    }
    assert report["closing_sentence"] == {"text": CLOSING, "from": "entry 8"}
    assert "UPSTREAM keys not used: synced_on" in report["notes"]
    md = invoke(
        "-C",
        str(tmp_path / "elsewhere"),
        "import",
        "whole-file",
        str(team.dir),
        "--upstream-url",
        str(w.upstream.path),
        "--format",
        "markdown",
    )
    assert (
        md.exit_code == 2 and "no such directory" in md.output
    )  # the target must exist


def test_a_file_no_entry_names_gets_no_local_fix(team):
    team.write("mlx/backend/rocm/unnamed.cpp", "// nobody explains this\n")
    result = team.run()
    assert result.exit_code == 1, result.output
    assert "named by no entry: the patch has no Local-Fix trailer" in result.output
    assert (
        "error FIX017" in result.output
    )  # the true finding: the change is unexplained
    data = (team.root / "patches-rocm" / "0008-unnamed-cpp.patch").read_text()
    assert (
        "Subject: [PATCH] Add mlx/backend/rocm/unnamed.cpp" in data
        and "\nLocal-Fix:" not in data
    )


def test_the_overlay_holding_the_pins_file_drops_the_fork_change(team):
    # The overlay keeps upstream's ops.cpp: the fork's hook there is not carried.
    team.write("mlx/ops.cpp", lines("ops", change={2: "ops 2 upstream"}))
    team.write(
        "LOCAL_FIXES.md",
        team.local_fixes()
        .replace(
            f"2. **Ops: clamp the tail.** `mlx/ops.cpp` read past the end at line 20. {CLOSING}",
            f"2. **Ops: clamp the tail.** Nothing left to change. {CLOSING}",
        )
        .replace(
            "- `docs/rocm.md`",
            "- `mlx/ops.cpp`: upstream's file is kept.\n- `docs/rocm.md`",
        ),
    )
    result = team.run("--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [
        (r["kind"], r["note"]) for r in report["files"] if r["path"] == "mlx/ops.cpp"
    ] == [
        (
            "dropped",
            "the overlay holds the pin's file; the fork's change to it is not carried",
        )
    ]
    assert '"mlx/ops.cpp"' in (team.root / "patches-rocm" / "overlay.toml").read_text()
    # the one finding is true: entry 2 no longer has a patch
    assert [(f["code"], f["severity"], f["line"]) for f in report["findings"]] == [
        ("FIX024", "warning", 11)
    ]


def test_refuses_records_and_writes_nothing(team):
    (team.root / "patches-rocm").mkdir()
    (team.root / "patches-rocm" / "series").write_text("0001-old.patch\n")
    result = team.run()
    assert result.exit_code == 2 and result.output.startswith(
        "overlay: patches-rocm/ is not empty"
    ), result.output
    assert sorted(os.listdir(team.root / "patches-rocm")) == ["series"]
    assert not (team.root / "LOCAL_FIXES.md").exists()
    (team.root / "LOCAL_FIXES.md").write_text("# ours\n")
    shutil.rmtree(team.root / "patches-rocm")
    result = team.run()
    assert (
        result.exit_code == 2
        and "LOCAL_FIXES.md exists with other content" in result.output
    )
    assert (team.root / "LOCAL_FIXES.md").read_text() == "# ours\n"
    # --force moves both aside, nothing is lost
    (team.root / "patches-rocm").mkdir()
    (team.root / "patches-rocm" / "series").write_text("0001-old.patch\n")
    result = team.run("--force")
    assert result.exit_code == 0, result.output
    backup = [
        n for n in os.listdir(team.root / ".overlay") if n.startswith("import-backup-")
    ]
    assert len(backup) == 1 and f"moved to .overlay/{backup[0]}" in result.output
    kept = team.root / ".overlay" / backup[0]
    assert (kept / "LOCAL_FIXES.md").read_text() == "# ours\n"
    assert (kept / "patches-rocm" / "series").read_text() == "0001-old.patch\n"


def test_fix_list_shows_a_patch_under_every_entry_it_names(team):
    assert team.run().exit_code == 0
    listed = invoke("-C", str(team.root), "fix", "list")
    assert listed.exit_code == 0, listed.output
    numbers: dict[str, set[str]] = {}
    entry = None
    for line in listed.output.splitlines():
        if not line.startswith(" " * 7):
            entry = line.split(".", 1)[0].strip()
        elif line.strip().startswith("patch: ") and "(no patch)" not in line:
            numbers.setdefault(line.split("patch: ", 1)[1], set()).add(entry)
    assert any(len(n) >= 2 for n in numbers.values()), (
        listed.output
    )  # the file named by two entries


def test_an_import_while_another_command_holds_the_records_is_refused(team):
    """The import writes records: it takes the one records' lock a rebase, refresh,
    fix new and record take, and is refused at once while another command holds it."""
    from overlay.fs.records_lock import state_lock

    with state_lock(str(team.root), "rebase --continue"):
        result = team.run()
    assert result.exit_code == 2, result.output
    assert (
        "`overlay rebase --continue`" in result.output
        and ".overlay/rebase.lock" in result.output
    )
    assert (
        not (team.root / "patches-rocm").exists()
        and not (team.root / "LOCAL_FIXES.md").exists()
    )
    assert team.run().exit_code == 0


def test_the_state_directory_hides_itself_from_git(team):
    """.overlay/ holds its own `.gitignore` of `*`, so a records repository's `git
    status` never lists it; only where a rule of the repository brings it back does
    the import say to ignore it."""
    subprocess.run(["git", "init", "-q", str(team.root)], check=True)
    first = team.run()
    assert first.exit_code == 0, first.output
    assert "next: commit patches-rocm/ and LOCAL_FIXES.md" in first.output
    assert ".gitignore" not in first.output
    assert (team.root / ".overlay" / ".gitignore").read_text().endswith("*\n")
    status = subprocess.run(
        ["git", "-C", str(team.root), "status", "--porcelain", "--untracked-files=all"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert status and ".overlay" not in status, status
    (team.root / ".overlay" / ".gitignore").unlink()  # a clone made by an older overlay
    again = team.run("--force")
    assert again.exit_code == 0, again.output
    assert "add `/.overlay/` to .gitignore" not in again.output
    assert (team.root / ".overlay" / ".gitignore").exists()


def test_a_merge_base_that_is_not_an_ancestor_of_the_fork_is_refused(team):
    """A typo'd merge base (here the fork commit itself) would make the whole fork
    "changes" of the overlay, a patch per file: refused with one line instead."""
    text = (team.dir / "UPSTREAM").read_text()
    team.write(
        "UPSTREAM",
        text.replace(
            f"fork_upstream_merge_base: {team.w.base}",
            f"fork_upstream_merge_base: {team.fork2}",
        ),
    )
    result = team.run()
    assert result.exit_code == 2, result.output
    assert "is not an ancestor of the fork commit" in result.output.splitlines()[0]
    assert (
        not (team.root / "patches-rocm").exists()
        and not (team.root / "LOCAL_FIXES.md").exists()
    )


def test_a_failed_check_or_a_killed_import_leaves_nothing(team, monkeypatch):
    def broken(*_a, **_k):
        raise OverlayError(
            "internal: the imported records do not reproduce the overlay: (test)"
        )

    monkeypatch.setattr(importer.writing, "_self_check", broken)
    result = team.run()
    assert result.exit_code == 2 and "do not reproduce" in result.output
    assert (
        not (team.root / "patches-rocm").exists()
        and not (team.root / "LOCAL_FIXES.md").exists()
    )
    assert [
        n
        for n in os.listdir(team.root / ".overlay")
        if n not in ("rebase.lock", ".gitignore")
    ] == []
    monkeypatch.undo()
    # a temp directory a killed import left behind is removed by the next import
    stale = team.root / ".overlay" / "import-killed12.tmp"
    (stale / "patches-rocm").mkdir(parents=True)
    result = team.run()
    assert result.exit_code == 0, result.output
    assert not stale.exists()


@pytest.mark.parametrize(
    "upstream, words",
    [
        (
            "source: x\nbranch: b\ncommit: abcdef1\n",
            "missing fork_upstream_merge_base, retargeted_to_mlx_pin",
        ),
        (
            "source: x\nbranch: b\ncommit: main\nfork_upstream_merge_base: abcdef1\nretargeted_to_mlx_pin: abcdef1\n",
            "commit must be a commit SHA",
        ),
        ("source x\n", "line 1 is not 'key: value'"),
        ("source: x\nsource: y\n", "line 2: source is given twice"),
    ],
)
def test_bad_upstream_is_one_line(team, upstream, words):
    team.write("UPSTREAM", upstream)
    result = team.run()
    assert result.exit_code == 2 and words in result.output, result.output
    assert result.output.count("\n") == 2 and result.output.startswith(
        "overlay: UPSTREAM: "
    )  # + hint
    assert not (team.root / "patches-rocm").exists()


def test_bad_overlay_directory(team, tmp_path):
    os.symlink("/etc/hostname", team.dir / "mlx" / "link.cpp")
    result = team.run()
    assert (
        result.exit_code == 2
        and "mlx/link.cpp: overlay file is a symlink" in result.output
    ), result.output
    (team.dir / "mlx" / "link.cpp").unlink()
    (team.dir / "UPSTREAM").unlink()
    result = team.run()
    assert result.exit_code == 2 and "holds no UPSTREAM record" in result.output
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke(
        "-C",
        str(team.root),
        "import",
        "whole-file",
        str(empty),
        "--upstream-url",
        "/nowhere",
    )
    assert result.exit_code == 2 and "holds no UPSTREAM record" in result.output


def test_closing_sentence_given_or_missing(team):
    text = team.local_fixes()
    cut = text.index("## Fixes to the fork's kernels")
    team.write("LOCAL_FIXES.md", text[:cut] + text[text.index("## Dropped") :])
    result = team.run()
    assert result.exit_code == 2 and "--closing-sentence" in result.output
    result = team.run("--closing-sentence", CLOSING)
    assert "closing sentence from --closing-sentence" in result.output


def test_split_resolution():
    auto = b"a\n<<<<<<< ours\nb1\n=======\nb2\n>>>>>>> theirs\nc\nd\n"
    # the overlay's choice inside the region, and a change outside it
    resolution, whole = importer.split_resolution(auto, b"a\nb1 b2\nc\nd local\n")
    assert (resolution, whole) == (b"a\nb1 b2\nc\nd\n", False)
    # nothing outside the region: the file is the resolution
    assert importer.split_resolution(auto, b"a\nb\nc\nd\n") == (b"a\nb\nc\nd\n", True)
    # the line next to the region changed too: no anchor, the whole file (LAY005 will say so)
    assert importer.split_resolution(auto, b"a local\nb\nc\nd\n") == (
        b"a local\nb\nc\nd\n",
        True,
    )
    # no text conflict (modify/delete)
    assert importer.split_resolution(None, b"x\n") == (b"x\n", True)


def test_parse_upstream_and_helpers():
    up = importer.parse_upstream(
        'source = "acme/mlx"\nbranch: rocm\ncommit: ABCDEF1\n'
        "fork_upstream_merge_base: 1234567\nretargeted_to_mlx_pin: 7654321\n"
    )
    assert (up.source, up.branch, up.commit) == ("acme/mlx", "rocm", "abcdef1")
    assert importer.fork_url_of("acme/mlx") == "https://github.com/acme/mlx.git"
    assert (
        importer.fork_url_of("https://example.invalid/f.git")
        == "https://example.invalid/f.git"
    )
    doc = fixes.parse(
        f"# T\n\n## Fixes to the fork's build\n\n3. **X.** Text. {CLOSING} (#4)\n\n"
        "## Fixes to the fork's kernels\n\n2. **Y.** Text. Applies to the fork.\n"
    )
    assert importer.infer_closing_sentence(doc) == (CLOSING, 3)
    with pytest.raises(OverlayError):
        importer.parse_upstream("")


def test_interrupt_says_what_was_written(team, monkeypatch):
    def interrupt(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(importer.writing, "_self_check", interrupt)
    result = team.run()
    assert result.exit_code == 130 and "no record was written" in result.output, (
        result.output
    )
    assert not (team.root / "patches-rocm").exists()
    monkeypatch.undo()
    from overlay.checks import verify as checks

    monkeypatch.setattr(
        checks, "verify", interrupt
    )  # after the rename, before the report
    result = team.run()
    assert (
        result.exit_code == 130 and "after the records were written" in result.output
    ), result.output


def test_a_file_name_that_is_not_utf8_is_one_line_naming_it(team):
    os.makedirs(team.dir / "mlx" / "backend" / "rocm", exist_ok=True)
    name = os.path.join(os.fsencode(team.dir), b"mlx/backend/rocm/caf\xe9.cpp")
    with open(name, "wb") as fh:
        fh.write(b"int x;\n")
    result = team.run()
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("overlay:")]
    assert len(lines) == 1, result.output
    assert '"mlx/backend/rocm/caf\\351.cpp"' in lines[0], lines[0]  # as git quotes it
    assert "not UTF-8" in lines[0]
    assert not (team.root / "patches-rocm").exists()
