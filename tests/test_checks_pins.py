"""A pin that lacks an upstream commit a patch follows is a verify finding (issue 30
item 5): "clean" is not "compiles". The run's warning names it once; FIX027 keeps it
while it holds, and goes when the pin has the commit again."""

from __future__ import annotations

import json
import textwrap

from gitfixtures import cli, lines
from test_engine import add_patch


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


def test_the_warning_comes_before_the_result_line_in_one_captured_stream(ov, w):
    # A pipe buffers stdout and not stderr: a log that takes both (2>&1, CI) must
    # still read warning, then result.
    import os
    import subprocess
    import sys
    from pathlib import Path

    citing_overlay(ov, w)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "overlay.cli",
            "-C",
            str(ov.root),
            "rebase",
            "--onto",
            w.base,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
    )
    out = proc.stdout.decode().splitlines()
    assert proc.returncode == 0, out
    warned = [i for i, ln in enumerate(out) if "which the new pin lacks" in ln]
    done = [i for i, ln in enumerate(out) if ln.startswith("rebase complete")]
    assert warned and done and warned[-1] < done[0], out
