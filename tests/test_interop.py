"""Interop with the real tools: the claim that `git am` and quilt accept overlay's
series, and that a series made by `git format-patch --full-index` is read as written.

Each test makes the fixes as commits in a plain git repository holding the forked
layer, so the patches are git's own, not overlay's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from gitfixtures import cli, git, lines

PDIR = "patches-rocm"
DEVICE = "mlx/backend/rocm/device.cpp"


def _tree_of_dir(path: Path) -> str:
    """A digest of every file under ``path`` (names, bytes, executable bit), ignoring
    quilt's ``.pc`` and git's ``.git``."""
    h = hashlib.sha256()
    for f in sorted(
        p for p in path.rglob("*") if p.is_file() and not {".pc", ".git"} & set(p.parts)
    ):
        h.update(
            str(f.relative_to(path)).encode()
            + b"\0"
            + bytes([os.access(f, os.X_OK)])
            + f.read_bytes()
        )
    return h.hexdigest()


def _export(o, layer: str, dest: Path) -> None:
    result = cli(o, "export", str(dest), "--layer", layer)
    assert result.exit_code == 0, result.output
    for name in (".overlay-export.json", ".overlay-export.lock"):
        (dest / name).unlink(missing_ok=True)


def _fix_commits(o, tmp_path: Path) -> tuple[Path, str]:
    """A git repository of the forked layer with two fix commits on top; returns it and
    the base commit."""
    work = tmp_path / "work"
    _export(o, "forked", work)
    git(work, "init", "-q")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "forked layer")
    base = git(work, "rev-parse", "HEAD")
    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 // bounds checked"})
    )
    git(
        work,
        "commit",
        "-q",
        "-am",
        "rocm: check the device index\n\nA negative index read past the table.\n\n"
        "Local-Fix: 1\nForwarded: not-needed",
    )
    (work / DEVICE).write_text(
        lines(
            "device", change={3: "device 3 // bounds checked", 20: "device 20 locked"}
        )
    )
    (work / "mlx" / "backend" / "rocm" / "pool.h").write_text(
        "#pragma once\n// a pool\n"
    )
    git(work, "add", "-A")
    git(
        work,
        "commit",
        "-q",
        "-m",
        "rocm: lock the pool\n\nTwo threads shared it.\n\n"
        "Local-Fix: 2\nForwarded: not-needed",
    )
    return work, base


def _format_patch_series(o, work: Path, base: str) -> list[str]:
    out = git(
        work, "format-patch", "--full-index", "-o", str(o.root / PDIR), f"{base}..HEAD"
    )
    names = [Path(line).name for line in out.splitlines()]
    (o.root / PDIR / "series").write_text("".join(n + "\n" for n in names))
    return names


def test_a_git_format_patch_series_is_read_as_written(ov, tmp_path):
    work, base = _fix_commits(ov, tmp_path)
    names = _format_patch_series(ov, work, base)
    tree = cli(ov, "tree", "--layer", "patched")
    assert tree.exit_code == 0, tree.output
    assert tree.output.strip() == git(work, "rev-parse", "HEAD^{tree}")
    before = {n: (ov.root / PDIR / n).read_bytes() for n in names}
    # refresh owns only the From line, Date, the diffstat and the diff (git's version
    # footer goes with the diff): every other byte is the author's.
    assert cli(ov, "refresh").exit_code == 0
    for name, old in before.items():
        new = (ov.root / PDIR / name).read_bytes()
        assert new.startswith(b"From 0000000000000000000000000000000000000000 ")
        assert (
            b"\nDate: " not in new
            and b" files changed" not in new
            and b" file changed" not in new
        )
        head = old.split(b"\n---\n", 1)[0]
        kept = b"\n".join(
            line for line in head.split(b"\n")[1:] if not line.startswith(b"Date: ")
        )
        assert new.split(b"\n---\n", 1)[0].split(b"\n", 1)[1] == kept
        old_diff = old.split(b"\ndiff --git ", 1)[1]
        assert (
            new.split(b"\ndiff --git ", 1)[1]
            == old_diff[: old_diff.rindex(b"\n-- \n") + 1]
        )
    refreshed = {n: (ov.root / PDIR / n).read_bytes() for n in names}
    assert cli(ov, "refresh").exit_code == 0
    assert {
        n: (ov.root / PDIR / n).read_bytes() for n in names
    } == refreshed  # byte-stable from here on
    assert cli(ov, "tree", "--layer", "patched").output.strip() == git(
        work, "rev-parse", "HEAD^{tree}"
    )
    check = cli(ov, "verify", "--only", "SER", "--only", "LAY")
    assert check.exit_code == 0, check.output


def test_git_am_applies_overlays_series_to_the_same_tree(ov, tmp_path):
    work, base = _fix_commits(ov, tmp_path)
    _format_patch_series(ov, work, base)
    assert cli(ov, "refresh").exit_code == 0
    patched = cli(ov, "tree", "--layer", "patched").output.strip()
    git(work, "checkout", "-q", "-b", "am", base)
    series = (ov.root / PDIR / "series").read_text().split()
    git(work, "am", "-q", *[str(ov.root / PDIR / n) for n in series])
    assert git(work, "rev-parse", "HEAD^{tree}") == patched
    assert git(work, "log", "-1", "--format=%s%n%b", "HEAD").startswith(
        "rocm: lock the pool\nTwo threads"
    )
    assert "Local-Fix: 2" in git(work, "log", "-1", "--format=%(trailers)", "HEAD")


@pytest.mark.skipif(
    shutil.which("quilt") is None, reason="quilt is not installed (.ci/run installs it)"
)
def test_quilt_push_applies_overlays_series_to_the_same_tree(ov, tmp_path):
    work, base = _fix_commits(ov, tmp_path)
    _format_patch_series(ov, work, base)
    assert cli(ov, "refresh").exit_code == 0
    expected = tmp_path / "expected"
    _export(ov, "patched", expected)
    quilted = tmp_path / "quilted"
    _export(ov, "forked", quilted)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUILT")}
    env["QUILT_PATCHES"] = str(ov.root / PDIR)
    env["QUILTRC"] = os.devnull  # no user quiltrc
    proc = subprocess.run(
        ["quilt", "push", "-a"],
        cwd=quilted,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout
    assert "fuzz" not in proc.stdout.lower() and "offset" not in proc.stdout.lower(), (
        proc.stdout
    )
    assert _tree_of_dir(quilted) == _tree_of_dir(expected)
