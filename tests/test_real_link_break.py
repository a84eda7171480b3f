"""The real mirrors: a link-only break fails the per-PR gate.

An upstream commit that declares a new free function in ``mlx/backend/gpu/slicing.h``,
defines it for Metal and CUDA and calls it from the shared ``gpu/primitives.cpp``
compiles for ROCm and leaves it with an undefined symbol. The commit is written here,
a few lines, in the test's own copy of upstream (nothing of upstream is committed to
this repository). ``overlay ci --only verify,check --require verify,check`` must pass
on the real tree at the pin (no false undefined symbol) and fail after the rebase onto
that commit, naming the symbol and the commit.

Needs ``OVERLAY_UPSTREAM_URL``/``OVERLAY_FORK_URL`` (the mirrors) and the ROCm
compile-only toolchain (``tools/rocm-toolchain.sh``); skipped without them, with the
reason. Two whole-tree checks: many minutes of CPU on a cold compiler cache (the
cache keys on paths relative to the test's directory, so a second run is cheaper).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from gitfixtures import git

from overlay.build import ToolchainError, default_toolchain_root, find_toolchain
from overlay.cli import main
from overlay.records.manifest import load_manifest

ROOT = Path(__file__).resolve().parent.parent
#: Read before the isolation fixture moves HOME: where this machine's toolchain lies.
TOOLCHAIN_ROOT = default_toolchain_root()

SUBJECT = "gpu: slice_share_gpu takes the input's buffer for a whole-array slice"
NAME = "slice_share_gpu"
DECLARATION = f"""
// Share the input's buffer when the slice is the whole array.
void {NAME}(const array& in, array& out, const Stream& s);
"""
DEFINITION = f"""
void {NAME}(const array& in, array& out, const Stream& s) {{
  out.copy_shared_buffer(in);
}}
"""
CALL_AT = "  slice_gpu(in, out, start_indices_, strides_, stream());\n"
CALL = f"  if (start_indices_.empty()) {{\n    {NAME}(in, out, stream());\n    return;\n  }}\n"
END = "} // namespace mlx::core"


def _toolchain_or_skip() -> None:
    os.environ["OVERLAY_TOOLCHAIN_DIR"] = TOOLCHAIN_ROOT
    try:
        find_toolchain("rocm", None, repo_root=str(ROOT))
    except ToolchainError as exc:
        pytest.skip(f"needs the ROCm toolchain: {exc.message}")


def _scratch_overlay(dest: Path) -> Path:
    """A copy of this repository's records (manifest, series, patches, fixes)."""
    dest.mkdir()
    shutil.copytree(ROOT / "patches-rocm", dest / "patches-rocm")
    for name in ("LOCAL_FIXES.md", ".gitattributes"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dest / name)
    return dest


def _break_commit(mirror: str, repo: Path, pin: str) -> str:
    """The link-only break as one commit on ``pin`` in the test's copy of upstream (a
    clone sharing the mirror's objects, never checked out: the commit is made on its
    index)."""
    git(repo.parent, "clone", "-q", "--shared", "--no-checkout", mirror, str(repo))
    git(repo, "read-tree", pin)
    for path, (old, new) in (
        ("mlx/backend/gpu/slicing.h", ("\n" + END, DECLARATION + "\n" + END)),
        ("mlx/backend/metal/slicing.cpp", ("\n" + END, DEFINITION + "\n" + END)),
        ("mlx/backend/cuda/slicing.cpp", ("\n" + END, DEFINITION + "\n" + END)),
        ("mlx/backend/gpu/primitives.cpp", (CALL_AT, CALL + CALL_AT)),
    ):
        text = git(repo, "show", f"{pin}:{path}") + "\n"
        assert old in text, (path, old)
        # the file's last namespace close; the one slice_gpu call of Slice::eval_gpu
        head, _sep, tail = text.rpartition(old)
        blob = git(
            repo, "hash-object", "-w", "--stdin", input=(head + new + tail).encode()
        )
        git(repo, "update-index", "--cacheinfo", f"100644,{blob},{path}")
    tree = git(repo, "write-tree")
    commit = git(repo, "commit-tree", tree, "-p", pin, "-m", SUBJECT)
    # on a branch: "upstream" is what upstream's branches reach
    git(repo, "update-ref", "refs/heads/main", commit)
    return commit


def _ci(root: Path):
    return CliRunner().invoke(
        main,
        ["-C", str(root), "ci", "--only", "verify,check", "--require", "verify,check"]
        + ["--arch", "gfx1030", "--markdown", str(root / "ci.md")],
    )


def test_real_link_only_break_fails_the_per_pr_gate(
    real_mirrors, tmp_path, monkeypatch
):
    _toolchain_or_skip()
    monkeypatch.setenv("OVERLAY_TOOLCHAIN_DIR", TOOLCHAIN_ROOT)
    # ccache keys on paths relative to the test's directory: a later run hits
    monkeypatch.setenv("CCACHE_BASEDIR", str(tmp_path))
    monkeypatch.setenv("CCACHE_NOHASHDIR", "1")
    ov = _scratch_overlay(tmp_path / "overlay")
    pin = load_manifest(str(ov)).pin

    # the real tree at the pin: no undefined symbol, so the gate passes
    res = _ci(ov)
    assert res.exit_code == 0, res.output
    assert (
        "link check (front end): 0 undefined"
        in (ov / "build" / "rocm" / "build.log").read_text()
    )

    upstream = _break_commit(
        real_mirrors["OVERLAY_UPSTREAM_URL"], tmp_path / "upstream", pin
    )
    monkeypatch.setenv("OVERLAY_UPSTREAM_URL", str(tmp_path / "upstream"))
    res = CliRunner().invoke(main, ["-C", str(ov), "rebase", "--onto", upstream])
    assert res.exit_code == 0 and "rebase complete" in res.output, res.output

    res = _ci(ov)
    assert res.exit_code == 1, res.output
    assert NAME in res.output and upstream[:12] in res.output, res.output
    text = (ov / "ci.md").read_text()
    assert NAME in text and upstream[:12] in text
    log = (ov / "build" / "rocm" / "build.log").read_text()
    line = next(x for x in log.splitlines() if x.startswith("link check: undefined"))
    assert f"mlx::core::{NAME}(mlx::core::array const&" in line
    assert "link check (front end): 1 undefined mlx::core symbol(s)" in log
    # the report line, as the full build's link check prints it, with the fork file
    report = res.output + text
    assert f"upstream {upstream[:12]} {SUBJECT}" in report
    assert "mlx/backend/gpu/primitives.cpp" in report
    assert "fork file to follow: mlx/backend/rocm/slicing.cpp" in report
