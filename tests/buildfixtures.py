"""The stand-in CMake project of ``tests/data/cmake-mini`` (an upstream and a fork that
adds a "ROCm" backend), read into the files of a commit, and an overlay on it."""

from __future__ import annotations

import os
from pathlib import Path

from gitfixtures import Overlay, World

from overlay.git.store import Store

DATA = Path(__file__).parent / "data" / "cmake-mini"


def project_files(base: Path) -> dict[str, str]:
    return {
        str(p.relative_to(base)): p.read_text()
        for p in sorted(base.rglob("*"))
        if p.is_file()
    }


def project_text(base: Path, rel: str, change: dict[int, str]) -> str:
    lines = (base / rel).read_text().splitlines()
    for number, text in change.items():
        lines[number - 1] = text
    return "".join(f"{line}\n" for line in lines)


def stand_in_overlay(root: Path, world: World, pin: str | None = None) -> Overlay:
    """An overlay on ``world`` with an empty series and a minimal LOCAL_FIXES.md."""
    o = Overlay(root, world, pin=pin)
    (o.root / "LOCAL_FIXES.md").write_text(
        f"# Local changes relative to x/fork@{world.fork_commit[:8]}\n\n"
        f"## Retarget onto the MLX pin ({(pin or world.base)[:8]})\n\n## Fixes to the fork's kernels\n\n"
    )
    return o


def isolated_store() -> Store:
    return Store(os.environ["OVERLAY_GIT_DIR"])
