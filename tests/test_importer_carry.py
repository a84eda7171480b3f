"""``overlay import whole-file`` keeps upstream's later lines (overlay/importer/carry.py).

A whole-file overlay holds copies made before upstream moved on: the fork's file plus a
local fix (a file the fork changes), MLX's file at the fork's merge base plus a local
fix (a core file the fork does not touch). Written over the pin as they are, those
copies would delete every line upstream added since; the import carries each copy's
own change onto the pin instead, and where that carry conflicts it keeps the whole
file and names the upstream lines the patch removes. Real git repositories, no network.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from gitfixtures import CLOSING, WorkRepo, git, lines

from overlay.cli import main
from overlay.records import fixes


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


class Copies:
    """Upstream and a fork with one merge base, a pin that added lines to two core files
    after it, and a team directory whose whole-file overlay was copied before that."""

    def __init__(self, tmp: Path):
        self.up = WorkRepo.init(tmp / "upstream")
        self.base = self.up.commit(
            {
                "CMakeLists.txt": "project(mlx)\n",
                "mlx/array.cpp": lines("array"),
                "mlx/ops.cpp": lines("ops"),
            },
            "base",
        )
        self.fork = WorkRepo.clone(self.up, tmp / "fork", "rocm-support")
        self.fork_commit = self.fork.commit(
            {
                "mlx/ops.cpp": lines("ops", change={5: "ops 5 // rocm hook"}),
                "mlx/backend/rocm/device.cpp": lines("device"),
            },
            "rocm backend and an ops hook",
        )
        # upstream's later work: a line added to the file the fork does not touch,
        # one added to the file it hooks, and a line it rewrites
        array = lines("array", change={20: "array 20 upstream"}).replace(
            "array 12\n", "array 11b upstream added\narray 12\n"
        )
        ops = lines("ops").replace("ops 25\n", "ops 24b upstream added\nops 25\n")
        self.pin = self.up.commit(
            {"mlx/array.cpp": array, "mlx/ops.cpp": ops}, "upstream adds lines"
        )
        self.root = tmp / "team"
        self.root.mkdir()
        git(self.root, "init", "-q")
        self.dir = self.root / "whole"
        self.write(
            "UPSTREAM",
            f"source: {self.fork.path}\nbranch: rocm-support\ncommit: {self.fork_commit}\n"
            f"fork_upstream_merge_base: {self.base}\nretargeted_to_mlx_pin: {self.pin}\n",
        )
        # copied before upstream's later work: the merge base's array.cpp and the
        # fork's ops.cpp, each with a local fix away from upstream's lines
        self.write("mlx/array.cpp", lines("array", change={3: "array 3 local fix"}))
        self.write(
            "mlx/ops.cpp",
            lines("ops", change={5: "ops 5 // rocm hook", 15: "ops 15 local fix"}),
        )
        self.write(
            "mlx/backend/rocm/device.cpp",
            lines("device", change={9: "device 9 locked"}),
        )
        self.write("LOCAL_FIXES.md", self.local_fixes())

    def write(self, rel: str, content: str) -> None:
        path = self.dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)

    def local_fixes(self) -> str:
        repo = fixes.fork_repo_from_url(str(self.fork.path))
        return f"""# Local changes relative to {repo}@{self.fork_commit[:8]}

## Retarget onto the MLX pin ({self.pin[:8]})

## Fixes to the fork's kernels

1. **Array: fix line 3.** `mlx/array.cpp` had the wrong line 3. {CLOSING}

2. **Ops: fix line 15.** `mlx/ops.cpp` had the wrong line 15. {CLOSING}

3. **Device: lock line 9.** `mlx/backend/rocm/device.cpp` locks the handle. {CLOSING}
"""

    def run(self, *args: str):
        return invoke(
            "-C",
            str(self.root),
            "import",
            "whole-file",
            str(self.dir),
            "--upstream-url",
            str(self.up.path),
            *args,
        )

    def exported(self, dest: Path) -> dict[str, str]:
        done = invoke("-C", str(self.root), "export", str(dest))
        assert done.exit_code == 0, done.output
        return {
            str(p.relative_to(dest)): p.read_text()
            for p in dest.rglob("*")
            if p.is_file() and not p.name.startswith(".overlay-export")
        }


def test_a_copy_made_before_upstream_added_a_line_keeps_the_line(tmp_path):
    """Each copy is carried onto the pin, not written over it: no patch deletes "array 11b
    upstream added", "array 20 upstream" and "ops 24b upstream added"."""
    c = Copies(tmp_path)
    result = c.run("--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    files = c.exported(tmp_path / "export")
    array = files["mlx/array.cpp"]
    assert "array 11b upstream added\n" in array and "array 20 upstream\n" in array
    assert "array 3 local fix\n" in array and "array 3\n" not in array
    ops = files["mlx/ops.cpp"]
    assert "ops 24b upstream added\n" in ops
    assert "ops 15 local fix\n" in ops and "ops 5 // rocm hook\n" in ops
    assert "device 9 locked\n" in files["mlx/backend/rocm/device.cpp"]

    # the report says which copies were carried onto the pin, from what, and that no
    # patch removes an upstream line
    assert report["round_trip"]["equal"] and report["removed"] == []
    assert report["round_trip"]["carried"] == [
        {"path": "mlx/array.cpp", "from": "the merge base's file"},
        {"path": "mlx/ops.cpp", "from": "the fork commit's file"},
    ]
    assert report["round_trip"]["whole"] != report["round_trip"]["target"]
    notes = {f["path"]: f["note"] for f in report["files"]}
    assert "carried onto the pin: upstream's later lines kept" in notes["mlx/ops.cpp"]
    # each patch holds the local fix alone
    pdir = c.root / "patches-rocm"
    array_patch = (pdir / "0001-array-fix-line-3.patch").read_text()
    assert "-array 3\n+array 3 local fix\n" in array_patch
    assert "upstream" not in array_patch.split("\n---\n", 1)[1]

    # the records are clean and stable right after the import
    verified = invoke("-C", str(c.root), "verify")
    assert verified.exit_code == 0 and "no findings" in verified.output.lower(), (
        verified.output
    )
    check = invoke("-C", str(c.root), "refresh", "--check")
    assert check.exit_code == 0 and "0 of 3 patch(es) would change" in check.output, (
        check.output
    )
    md = (c.root / ".overlay" / "last-import.md").read_text()
    assert "`mlx/array.cpp` (copied from the merge base's file)" in md
    assert "Upstream lines the records remove" not in md


def test_a_carry_that_conflicts_keeps_the_whole_file_and_names_upstreams_lines(
    tmp_path,
):
    """The local fix rewrites the line upstream rewrote: no merge, so the patch is the
    whole file, and the report names both upstream lines it deletes."""
    c = Copies(tmp_path)
    c.write("mlx/array.cpp", lines("array", change={20: "array 20 local"}))
    c.write(
        "LOCAL_FIXES.md",
        c.local_fixes().replace(
            "`mlx/array.cpp` had the wrong line 3.",
            "`mlx/array.cpp` had the wrong line 20.",
        ),
    )
    result = c.run()
    assert result.exit_code == 0, result.output
    out = result.output
    assert (
        "removes upstream lines: mlx/array.cpp (0001-array-fix-line-3.patch): " in out
    )
    assert "line 12, line 21" in out, out
    assert (
        "conflicts with the pin's file: the patch is the whole file; it removes 2 "
        "upstream line(s)" in out
    ), out
    notes = [n for n in out.splitlines() if n.startswith("note: mlx/array.cpp")]
    assert len(notes) == 1, out
    assert (
        "(lines of the forked layer's file: 12 'array 11b upstream added', 21 'array 20 upstream')"
        in notes[0]
    )

    # the whole file, as the overlay held it; ops.cpp still carried
    files = c.exported(tmp_path / "export")
    assert files["mlx/array.cpp"] == (c.dir / "mlx/array.cpp").read_text()
    assert "ops 24b upstream added\n" in files["mlx/ops.cpp"]

    md = (c.root / ".overlay" / "last-import.md").read_text()
    assert "### Upstream lines the records remove" in md
    assert (
        "| `mlx/array.cpp` | `0001-array-fix-line-3.patch` | the merge base's file "
        "(the carry conflicts) | 12 | `array 11b upstream added` |" in md
    ), md
    assert "| 21 | `array 20 upstream` |" in md
    data = json.loads(c.run("--force", "--format", "json").output)
    assert data["removed"] == [
        {
            "path": "mlx/array.cpp",
            "kind": "patch",
            "record": "0001-array-fix-line-3.patch",
            "from": "the merge base's file",
            "conflict": True,
            "lines": [
                {"line": 12, "text": "array 11b upstream added"},
                {"line": 21, "text": "array 20 upstream"},
            ],
        }
    ]
    assert data["round_trip"]["conflicts"] == ["mlx/array.cpp"]


def test_a_conflicted_file_copied_from_the_fork_keeps_upstreams_line_outside(
    tmp_path, w
):
    """A path where the fork delta conflicts with the pin, copied from the fork before
    upstream rewrote line 25: the resolution holds the overlay's hook in the conflict
    region (and the report names upstream's line 5 it drops there), and the patch on
    top carries the local line 15 alone (the old import's patch also turned "core 25
    upstream" back into "core 25")."""
    from test_importer import Team

    team = Team(tmp_path, w)
    team.write(
        "mlx/core.cpp",
        lines("core", change={5: "core 5 // rocm hook", 15: "core 15 local fix"}),
    )
    result = team.run("--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["findings"] == []
    # in the conflict region the resolution holds the copy's line: upstream's rewrite
    # of line 5 is gone, and the report says so (LAY005 looks outside the regions only)
    assert report["removed"] == [
        {
            "path": "mlx/core.cpp",
            "kind": "resolution",
            "record": "patches-rocm/resolved/mlx/core.cpp",
            "from": "the pin's file",
            "conflict": True,
            "lines": [{"line": 5, "text": "core 5 upstream rewrite"}],
        }
    ]
    row = next(f for f in report["files"] if f["path"] == "mlx/core.cpp")
    assert "the resolution changes or drops 1 upstream line(s)" in row["note"]
    assert {"path": "mlx/core.cpp", "from": "the fork commit's file"} in report[
        "round_trip"
    ]["carried"]
    done = invoke("-C", str(team.root), "export", str(tmp_path / "export"))
    assert done.exit_code == 0, done.output
    assert (tmp_path / "export" / "mlx" / "core.cpp").read_text() == lines(
        "core",
        change={
            5: "core 5 // rocm hook",
            15: "core 15 local fix",
            25: "core 25 upstream",
        },
    )
    first = (team.root / "patches-rocm" / "0001-fixes-1-8.patch").read_text()
    assert "+core 15 local fix" in first and "core 25" not in first
