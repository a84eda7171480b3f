"""``tools/verify-rocm.sh`` (``make verify-rocm``) run with a stand-in ``overlay`` and
``make``: the script's own logic (stages, skips, reasons, required stages) without a
build."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

VERIFY_ROCM = Path(__file__).resolve().parent.parent / "tools" / "verify-rocm.sh"


def verify_rocm_stand_ins(directory: Path, overlay_script: str) -> tuple[Path, Path]:
    """Write into ``directory`` an executable ``overlay`` (``overlay_script``, a shell
    script) and a ``make`` that exits 0; returns their paths."""
    overlay, make = directory / "overlay", directory / "make"
    overlay.write_text(overlay_script)
    make.write_text("#!/bin/sh\nexit 0\n")
    for exe in (overlay, make):
        exe.chmod(0o755)
    return overlay, make


def run_verify_rocm(
    cwd: Path, overlay: Path, make: Path, **env: str
) -> subprocess.CompletedProcess:
    """Run the script from ``cwd`` with the stand-ins (``OVERLAY``, ``MAKE``), within
    60 s: the caller's own ``OVERLAY_*`` variables (``OVERLAY_REQUIRE``,
    ``OVERLAY_STAGES``, ...) are dropped, ``env`` is added. Output as text."""
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("OVERLAY_")}
    run_env.update(OVERLAY=str(overlay), MAKE=str(make), **env)
    return subprocess.run(
        ["bash", str(VERIFY_ROCM)],
        env=run_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
