"""Issue 14 for `overlay verify`: --only computes only what its families need, and gives
exactly the findings of a full run of those families."""

from __future__ import annotations

import pytest

from gitfixtures import CLOSING, lines, make_patch
from overlay import checks, fixes
from overlay.checks import FAMILIES, verify
from overlay.gitstore import Store
from overlay.layers import compute_layers
from overlay.manifest import load_manifest

PATCH = "0001-rocm-lock-the-device.patch"


def local_fixes(world, *, base=None, closing=CLOSING) -> str:
    repo = fixes.fork_repo_from_url(str(world.fork.path))
    return (f"# Local changes relative to {repo}@{world.fork_commit[:8]}\n\n"
            f"## Retarget onto the MLX pin ({(base or world.base)[:8]})\n\n"
            "## Fixes to the fork's kernels\n\n"
            "1. **Lock the device.** The handle was shared; `mlx/backend/rocm/device.cpp` now owns it under "
            f"a lock. {closing}\n\n"
            "## Dropped from the vendored set\n\n"
            "- `docs/rocm.md`: fork documentation.\n"
            "- `mlx/backend/metal/kernels.cpp`: Metal is not carried.\n")


@pytest.fixture
def clean(overlay, world):
    store = Store()
    layers = compute_layers(store, load_manifest(str(overlay.root)), str(overlay.root))
    patch, _ = make_patch(store, layers.forked, {"mlx/backend/rocm/device.cpp":
                                                 lines("device", change={3: "device 3 locked"})},
                          subject="rocm: lock the device")
    overlay.add_patch(PATCH, patch)
    (overlay.root / "LOCAL_FIXES.md").write_text(local_fixes(world))
    return overlay


def _abbreviate(o):
    path = o.root / "patches-rocm" / PATCH
    data = path.read_bytes()
    start = data.index(b"\nindex ") + len(b"\nindex ")
    old, rest = data[start:].split(b"..", 1)
    path.write_bytes(data[:start] + old[:12] + b".." + rest)


def _unlisted(o):
    (o.root / "patches-rocm" / "0002-stray.patch").write_bytes(
        (o.root / "patches-rocm" / PATCH).read_bytes())


BREAKS = {
    "clean": lambda o, w: None,
    "abbreviated index line (SER008, SER011)": lambda o, w: _abbreviate(o),
    "unlisted patch (SER002)": lambda o, w: _unlisted(o),
    "stale and uncarried resolutions (LAY002, LAY004)": lambda o, w: (
        o.add_resolution("mlx/core.cpp", "whatever\n"), o.add_resolution("docs/index.md", "docs\n")),
    "merge base not an ancestor (MAN003)": lambda o, w: o.write_manifest(w.base, base=w.pin_clean),
    "closing sentence (FIX013)": lambda o, w: (o.root / "LOCAL_FIXES.md").write_text(
        local_fixes(w, closing=CLOSING[:-10] + ".")),
    "patch that does not apply (SER010)": lambda o, w: o.write_manifest(w.pin_conflict),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_only_gives_the_full_runs_findings_of_its_families(clean, world, name):
    BREAKS[name](clean, world)
    full = verify(str(clean.root), Store()).findings
    for family in FAMILIES:
        alone = verify(str(clean.root), Store(), only=[family]).findings
        assert alone == [f for f in full if f.family == family], (name, family)
    pair = verify(str(clean.root), Store(), only=["SER", "FIX"]).findings
    assert pair == [f for f in full if f.family in ("SER", "FIX")]


def test_only_fix_does_no_refresh_and_no_stepwise_layers(clean, monkeypatch):
    verify(str(clean.root), Store())  # the layer cache is warm
    asked = []
    real = checks.compute_layers

    def spy(*args, **kw):
        asked.append(kw.get("stepwise"))
        return real(*args, **kw)

    monkeypatch.setattr(checks, "compute_layers", spy)
    monkeypatch.setattr(checks, "refresh_series", lambda *a: pytest.fail("--only FIX refreshed the series"))
    monkeypatch.setattr(checks, "_fork_ahead_findings", lambda *a: pytest.fail("--only FIX checked MAN004"))
    assert verify(str(clean.root), Store(), only=["FIX"]).findings == []
    assert asked == [False]
    monkeypatch.setattr(checks, "_repo_paths", lambda *a: pytest.fail("--only LAY listed the repository"))
    assert verify(str(clean.root), Store(), only=["LAY"]).findings == []
    assert asked == [False, False]
