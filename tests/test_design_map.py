"""docs/design.md §3, the module map, names every module of the package (issue 27): a
newcomer finds each thing there once. A module is named by its path (`pkg/mod.py`,
`mod.py`), or by its package (`pkg/`) with its own name in backticks in that row."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _map_rows() -> list[str]:
    text = (ROOT / "docs" / "design.md").read_text()
    start = text.index("\n## 3.")
    end = text.index("\n## 4.", start)
    return [line for line in text[start:end].splitlines() if line.startswith("|")]


def unmapped(rows: list[str], modules: list[str]) -> list[str]:
    """The module paths (relative to ``overlay/``) that no row of the map names."""
    missing = []
    for rel in modules:
        parts = rel.removesuffix(".py").split("/")
        if parts[-1] == "__init__":
            package = "/".join(parts[:-1]) + "/"
            if package == "/" or any(
                t.startswith(package)
                for row in rows
                for t in re.findall(r"`([^`]+)`", row)
            ):
                continue  # the package (or the root package) is in the map
        named = False
        for row in rows:
            ticks = re.findall(r"`([^`]+)`", row)
            if rel in ticks or (len(parts) == 1 and f"{parts[0]}.py" in ticks):
                named = True
            # a package row: `pkg/` or `pkg/sub/` with the module's name in the row
            for depth in range(1, len(parts)):
                package = "/".join(parts[:depth]) + "/"
                rest = parts[depth:]
                if any(t == package or t.endswith("/" + package) for t in ticks) and (
                    not rest or re.search(rf"`{re.escape(rest[0])}(/|`| \(|\b)", row)
                ):
                    named = True
            if len(parts) > 1 and "/".join(parts) + "/" in ticks:
                named = True
        if not named:
            missing.append(rel)
    return missing


def test_every_module_is_in_the_design_map():
    modules = sorted(
        p.relative_to(ROOT / "overlay").as_posix()
        for p in (ROOT / "overlay").rglob("*.py")
    )
    assert unmapped(_map_rows(), modules) == []


def test_the_map_check_finds_a_missing_module():
    rows = [
        "| git | `git/store.py` | the store |",
        "| cli | `cli/` | `trees`, `runs` |",
    ]
    assert unmapped(
        rows, ["git/store.py", "cli/trees.py", "cli/other.py", "new.py"]
    ) == [
        "cli/other.py",
        "new.py",
    ]
