"""`overlay ci` end to end on a fixture overlay: stages, JUnit, JSON, golden Markdown."""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner

from gitfixtures import lines, make_patch
from overlay import fixes
from overlay.cli import main
from overlay.gitstore import Store
from overlay.layers import compute_layers
from overlay.manifest import load_manifest

GOLDEN = Path(__file__).parent / "golden" / "ci_summary.md"

SUITES = """\
[suites.quick]
child = ["{python}", "{child}"]
runs = 3
deadline = 30
backend = "any"
hardware = "none"
proves = 1

[[suites.quick.markers]]
stream = "stdout"
text = "overlay-suite: done"
expect = "exactly 1"

[suites.needs_amd]
child = "absent_child"
backend = "rocm"
hardware = "amd-gpu"
proves = 1
"""


def make_clean_overlay(overlay, world):
    store = Store()
    layers = compute_layers(store, load_manifest(str(overlay.root)), str(overlay.root))
    patch, _ = make_patch(store, layers.forked, {"mlx/backend/rocm/device.cpp":
                                                 lines("device", change={3: "device 3 locked"})},
                          subject="rocm: lock the device")
    overlay.add_patch("0001-lock.patch", patch)
    repo = fixes.fork_repo_from_url(str(world.fork.path))
    (overlay.root / "LOCAL_FIXES.md").write_text(
        f"# Local changes relative to {repo}@{world.fork_commit[:8]}\n\n"
        f"## Retarget onto the MLX pin ({world.base[:8]})\n\n## Fixes to the fork's kernels\n\n"
        "1. **Lock the device.** `mlx/backend/rocm/device.cpp` now locks. "
        "Applies to the fork; kept in mlxcelverse under the 2026-10-06 fork policy, not proposed there.\n\n"
        "## Dropped from the vendored set\n\n- `docs/rocm.md`: docs.\n- `mlx/backend/metal/kernels.cpp`: Metal.\n")
    child = overlay.root / "child.py"
    child.write_text("print('overlay-suite: done')\n")
    (overlay.root / "patches-rocm" / "suites").mkdir()
    (overlay.root / "patches-rocm" / "suites" / "suites.toml").write_text(
        SUITES.format(python=sys.executable, child=child))


def test_ci_end_to_end(overlay, world, tmp_path, monkeypatch):
    make_clean_overlay(overlay, world)
    monkeypatch.setenv("OVERLAY_SUITE_HARDWARE", "none")
    out = tmp_path / "out"
    out.mkdir()
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "ci", "--only", "verify", "--only", "suites",
                                       "--junit", str(out / "ci.xml"), "--json", str(out / "ci.json"),
                                       "--markdown", str(out / "ci.md")])
    assert result.exit_code == 0, result.output
    assert "verify  PASSED" in result.output
    assert "build   SKIPPED  not requested" in result.output
    assert "suites  PASSED" in result.output

    # JUnit: well-formed, and every count agrees with the children (what pytest and Jenkins read).
    root = ET.parse(out / "ci.xml").getroot()
    assert root.tag == "testsuites"
    total = {"tests": 0, "failures": 0, "skipped": 0}
    for ts in root.findall("testsuite"):
        cases = ts.findall("testcase")
        counts = {"tests": len(cases), "failures": sum(1 for c in cases if c.find("failure") is not None),
                  "skipped": sum(1 for c in cases if c.find("skipped") is not None)}
        for key, value in counts.items():
            assert int(ts.get(key)) == value
            total[key] += value
        assert all(c.get("classname") and c.get("name") for c in cases)
    for key, value in total.items():
        assert int(root.get(key)) == value
    assert [ts.get("name") for ts in root.findall("testsuite")] == ["verify", "build", "suites"]

    summary = json.loads((out / "ci.json").read_text())
    assert summary["failed"] is False and [s["status"] for s in summary["stages"]] == ["passed", "skipped", "passed"]

    md = (out / "ci.md").read_text()
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(md)
    assert md == GOLDEN.read_text()


def test_ci_fails_on_a_verify_error(overlay, world, monkeypatch):
    make_clean_overlay(overlay, world)
    monkeypatch.setenv("OVERLAY_SUITE_HARDWARE", "none")
    overlay.write_series([])  # the patch is now an orphan: SER002
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "ci", "--only", "verify"])
    assert result.exit_code == 1 and "verify  FAILED" in result.output


def test_ci_build_stage_skips_without_a_toolchain(overlay, world, monkeypatch, tmp_path):
    make_clean_overlay(overlay, world)
    monkeypatch.setenv("OVERLAY_TOOLCHAIN_DIR", str(tmp_path / "no-toolchain"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "ci", "--only", "build"])
    assert result.exit_code == 0, result.output
    assert "build   SKIPPED" in result.output and "ROCm" in result.output
