"""``overlay doctor``: what this machine can do for the overlay, one line per item.

Checks: git (2.38+ for ``merge-tree --write-tree``), the git store and whether it
holds the manifest's commits, the remotes (reachable with ``git ls-remote``),
CMake and Ninja, a ROCm toolchain (``hipcc`` on PATH or under ``$ROCM_PATH``, or a
chroot made by ``tools/rocm-toolchain.sh``) with its version, and the GPUs visible
(AMD through ``/dev/kfd``, NVIDIA through ``nvidia-smi``).
"""

import dataclasses
import re
import subprocess
from typing import TYPE_CHECKING

from overlay.build import find_toolchain
from overlay.errors import GitError, OverlayError
from overlay.git.run import git_version, remote_reachable
from overlay.suites.runner import detect_platform

if TYPE_CHECKING:
    from overlay.workspace import Workspace

#: Oldest git whose ``merge-tree --write-tree`` the layer engine uses (git 2.38).
MIN_GIT = (2, 38)


@dataclasses.dataclass
class Check:
    """One line of the report: ``status`` is ``ok``, ``warn`` or ``fail``."""

    name: str
    status: str
    detail: str


def _out(argv: list[str], timeout: float = 10.0) -> str | None:
    try:
        proc = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (
        proc.stdout.decode("utf-8", "replace").strip() if proc.returncode == 0 else None
    )


def run_checks(ws: "Workspace", *, network: bool = True) -> list[Check]:
    """Every check, in report order; inside or outside an overlay repository.

    Args:
        ws: the workspace: its store (nothing is fetched; one that cannot be opened is
            the ``git store`` line's failure), its manifest (one that cannot be read is
            the ``manifest`` line's failure) and :attr:`Workspace.base`, where the
            toolchain is looked for.
        network: probe the remotes with ``git ls-remote`` (10 s each).
    Returns:
        The checks. Nothing is raised for what the checks report.
    """
    try:
        store = ws.store
    except GitError:
        store = None  # reported by the git store line
    checks: list[Check] = []
    version = git_version()
    if version is None:
        checks.append(Check("git", "fail", "git not found on PATH"))
    else:
        nums = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
        checks.append(
            Check(
                "git",
                "ok" if nums >= MIN_GIT else "fail",
                version
                + ("" if nums >= MIN_GIT else f" (need {MIN_GIT[0]}.{MIN_GIT[1]}+)"),
            )
        )
    try:
        manifest = ws.manifest
    except Exception as exc:  # reported, not raised
        checks.append(Check("manifest", "fail", getattr(exc, "message", str(exc))))
        manifest = None
    checks.append(
        Check(
            "git store",
            "ok" if store else "fail",
            store.git_dir if store else "cannot be opened",
        )
    )
    if manifest is not None and store is not None:
        missing = [
            label
            for label, sha in (
                ("pin", manifest.pin),
                ("fork commit", manifest.fork_commit),
                ("merge base", manifest.merge_base),
            )
            if not store.has_object(sha)
        ]
        checks.append(
            Check(
                "pinned objects",
                "ok" if not missing else "warn",
                "all in the store"
                if not missing
                else f"missing {', '.join(missing)} (fetched on the next online command)",
            )
        )
        for name, url in manifest.remote_urls().items():
            if not network:
                checks.append(Check(f"remote {name}", "ok", f"{url} (not probed)"))
                continue
            reachable = remote_reachable(url, timeout=10.0)
            # Unreachable matters only while pinned objects are missing: then nothing can work.
            status = "ok" if reachable else ("fail" if missing else "warn")
            checks.append(
                Check(
                    f"remote {name}",
                    status,
                    f"{url} ({'reachable' if reachable else 'not reachable'})"
                    + (
                        ""
                        if reachable or not missing
                        else "; set OVERLAY_UPSTREAM_URL / OVERLAY_FORK_URL to local mirrors"
                    ),
                )
            )
    for tool in ("cmake", "ninja"):
        out = _out([tool, "--version"])
        checks.append(
            Check(
                tool,
                "ok" if out else "warn",
                out.splitlines()[0] if out else f"{tool} not found",
            )
        )
    try:  # the same choice `overlay build --backend rocm` makes
        checks.append(
            Check(
                "ROCm toolchain",
                "ok",
                find_toolchain("rocm", None, repo_root=ws.base).description,
            )
        )
    except OverlayError as exc:
        checks.append(Check("ROCm toolchain", "warn", exc.message))
    platform = detect_platform()
    for hw in ("amd-gpu", "nvidia-gpu"):
        present = hw in platform.hardware
        checks.append(
            Check(
                hw,
                "ok" if present else "warn",
                platform.reasons.get(hw, "present" if present else "absent"),
            )
        )
    return checks
