"""The main job on the real upstreams (skipped unless the mirrors are configured).

Run with ``OVERLAY_UPSTREAM_URL=<ml-explore/mlx mirror> OVERLAY_FORK_URL=<NripeshN/mlx mirror>``.
"""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from overlay.cli import main
from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest

ROOT = Path(__file__).resolve().parent.parent


def test_real_tree_status_and_export(real_mirrors, tmp_path):
    manifest = load_manifest(str(ROOT))
    store = Store()
    layers = compute_layers(store, manifest, str(ROOT))
    runner = CliRunner()
    tree = runner.invoke(main, ["-C", str(ROOT), "tree"])
    assert tree.exit_code == 0, tree.output
    assert tree.output.strip() == layers.patched
    status = runner.invoke(main, ["-C", str(ROOT), "status"])
    assert status.exit_code == 0, status.output

    dest = tmp_path / "src"
    first = runner.invoke(main, ["-C", str(ROOT), "export", str(dest)])
    assert first.exit_code == 0, first.output
    rocm = [p for p in (dest / "mlx/backend/rocm").rglob("*") if p.is_file()]
    fork_tree = store.tree_of(manifest.fork_commit)
    fork_rocm = [
        e for e in store.ls_tree(fork_tree) if e[3].startswith("mlx/backend/rocm/")
    ]
    assert len(fork_rocm) == 106 and len(rocm) >= 106

    # The carried core files (outside the backend) equal the fork's where upstream did not
    # also change them since the merge base (those are 3-way merges or resolutions).
    core = [p for p in layers.carried_changes if not p.startswith("mlx/backend/rocm/")]
    assert len(core) == 15
    patched_by_series = (
        set().union(*(r.patch.touched for r in layers.patches))
        if layers.patches
        else set()
    )
    base_blobs = {e[3]: e[2] for e in store.ls_tree(store.tree_of(manifest.merge_base))}
    pin_blobs = {e[3]: e[2] for e in store.ls_tree(store.tree_of(manifest.pin))}
    compared = 0
    with store.cat_file() as cat:
        fork_blobs = {e[3]: e[2] for e in store.ls_tree(fork_tree)}
        for path in core:
            if path in patched_by_series or base_blobs.get(path) != pin_blobs.get(path):
                continue
            assert (dest / path).read_bytes() == cat.read(fork_blobs[path])[1], path
            compared += 1
    assert compared >= 1
    assert (
        not (dest / "mlx/backend/cuda/custom_kernel.cpp").read_bytes()
        == store.git(
            "cat-file", "blob", f"{fork_tree}:mlx/backend/cuda/custom_kernel.cpp"
        ).stdout
    )

    second = runner.invoke(main, ["-C", str(ROOT), "export", str(dest)])
    assert ": 0 written, 0 removed" in second.output, second.output
    assert os.path.exists(dest / ".overlay-export.json")


# The project's own overlay verifies clean, and each mutation of a
# scratch copy is caught with the right code.
import re  # noqa: E402
import shutil  # noqa: E402

import pytest  # noqa: E402

from overlay.checks.verify import verify  # noqa: E402
from overlay.workspace import Workspace  # noqa: E402


def _scratch_overlay(tmp_path) -> Path:
    dest = tmp_path / "overlay"
    shutil.copytree(ROOT / "patches-rocm", dest / "patches-rocm")
    shutil.copy(ROOT / "LOCAL_FIXES.md", dest / "LOCAL_FIXES.md")
    return dest


def _codes(root: Path) -> set[str]:
    return {
        f.code for f in verify(Workspace(str(root))).findings if f.severity == "error"
    }


def test_real_overlay_verifies_clean(real_mirrors):
    result = verify(Workspace(str(ROOT)))
    assert [f for f in result.findings if f.severity == "error"] == []


def _edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, count))


@pytest.mark.parametrize(
    "mutation, code",
    [
        ("gap", "FIX007"),
        ("unnamed-file", "FIX020"),
        ("short-closing", "FIX013"),
        ("upstream-mark", "FIX014"),
        ("wrong-pin", "FIX004"),
        ("marker-in-resolution", "LAY003"),
        ("not-in-series", "SER002"),
        ("refresh-drift", "SER011"),
    ],
)
def test_real_overlay_mutations_are_caught(real_mirrors, tmp_path, mutation, code):
    root = _scratch_overlay(tmp_path)
    assert _codes(root) == set()
    lf = root / "LOCAL_FIXES.md"
    manifest = load_manifest(str(root))
    if mutation == "gap":
        _edit(lf, "\n3. **", "\n4. **")
    elif mutation == "unnamed-file":
        _edit(lf, "`mlx/backend/rocm/gemms/hipblaslt_gemm.h`", "the header")
    elif mutation == "short-closing":
        _edit(lf, "not proposed there.", "not proposed.")
    elif mutation == "upstream-mark":
        _edit(lf, "\n2. **", "\n2. **Upstreaming candidate.** **")
    elif mutation == "wrong-pin":
        _edit(lf, f"({manifest.pin[:8]})", "(deadbeef)")
    elif mutation == "marker-in-resolution":
        res = (
            root / "patches-rocm" / "resolved" / "mlx" / "backend" / "rocm" / "device.h"
        )
        res.parent.mkdir(parents=True)
        res.write_text("<<<<<<< ours\n=======\n>>>>>>> theirs\n")
    elif mutation == "not-in-series":
        series = root / "patches-rocm" / "series"
        series.write_text(
            "".join(
                ln + "\n"
                for ln in series.read_text().split()
                if not ln.startswith("0003")
            )
        )
    elif mutation == "refresh-drift":
        patch = next((root / "patches-rocm").glob("0002-*.patch"))
        text = patch.read_text()
        patch.write_text(
            re.sub(
                r"^(index [0-9a-f]{7})[0-9a-f]{33}", r"\1", text, count=1, flags=re.M
            )
        )
    assert code in _codes(root)


# A whole-file overlay made from this project's own exported tree
# (the files that differ from the pin, an UPSTREAM of fork 75915908, merge base
# 39886de4, pin 3a621991, and this LOCAL_FIXES.md) imports, exports byte-identical
# to the pin with the overlay copied over it, and verifies with no findings.
def test_real_whole_file_import_round_trip(real_mirrors, tmp_path):
    import subprocess

    from overlay.git.store import Store as _Store

    runner = CliRunner()
    manifest = load_manifest(str(ROOT))
    store = _Store()
    layers = compute_layers(store, manifest, str(ROOT))
    exported = tmp_path / "exported"
    assert (
        runner.invoke(main, ["-C", str(ROOT), "export", str(exported)]).exit_code == 0
    )
    differ = [p for *_r, p in store.diff_tree(layers.pin, layers.patched)]
    assert (
        len(differ) > 100
    )  # 123 at pin 3a621991 (docs/import.md); the overlay now holds what it holds
    whole = tmp_path / "whole"
    for path in differ:
        (whole / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(exported / path, whole / path)
    # The record of this repository's own overlay: its fork commit, merge base and pin.
    (whole / "UPSTREAM").write_text(
        f"source: https://github.com/NripeshN/mlx\nbranch: rocm-support\n"
        f"commit: {manifest.fork_commit}\nfork_upstream_merge_base: {manifest.merge_base}\n"
        f"retargeted_to_mlx_pin: {manifest.pin}\n"
    )
    shutil.copy(ROOT / "LOCAL_FIXES.md", whole / "LOCAL_FIXES.md")
    target = tmp_path / "target"
    target.mkdir()
    subprocess.run(["git", "init", "-q", str(target)], check=True)
    result = runner.invoke(
        main,
        ["-C", str(target), "import", "whole-file", str(whole), "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    import json

    report = json.loads(result.output)
    assert report["findings"] == [] and report["round_trip"]["equal"]
    assert (
        report["round_trip"]["patched"] == layers.patched
    )  # the very tree this overlay makes
    assert len(
        [f for f in report["files"] if f["kind"] not in ("skipped", "ignored")]
    ) == len(differ)

    again = tmp_path / "again"
    assert runner.invoke(main, ["-C", str(target), "export", str(again)]).exit_code == 0
    by_hand = tmp_path / "by-hand"
    by_hand.mkdir()
    archive = store.git("archive", manifest.pin).stdout
    subprocess.run(["tar", "-x", "-C", str(by_hand)], input=archive, check=True)
    for path in differ:
        (by_hand / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(whole / path, by_hand / path)
    mine = {
        str(p.relative_to(again)): p.read_bytes()
        for p in again.rglob("*")
        if p.is_file() and not p.name.startswith(".overlay-export")
    }
    theirs = {
        str(p.relative_to(by_hand)): p.read_bytes()
        for p in by_hand.rglob("*")
        if p.is_file()
    }
    assert mine == theirs
    verified = runner.invoke(main, ["-C", str(target), "verify"])
    assert verified.exit_code == 0 and "no findings" in verified.output.lower(), (
        verified.output
    )


def test_real_abbreviated_index_lines_refresh_back_to_the_original(
    real_mirrors, tmp_path
):
    """0003's `index` lines cut to git format-patch's 7 hex: SER008 and
    SER011 for it alone (no false SER010 for the later patches on its files), and
    `overlay refresh` gives the original bytes back."""
    root = _scratch_overlay(tmp_path)
    patch = root / "patches-rocm" / "0003-pinned-host-arena.patch"
    original = patch.read_bytes()
    short = re.sub(
        rb"^index ([0-9a-f]{7})[0-9a-f]{33}\.\.([0-9a-f]{7})[0-9a-f]{33}",
        rb"index \1..\2",
        original,
        flags=re.M,
    )
    assert short != original
    patch.write_bytes(short)
    # SER011 is right too: a refresh writes the full names.
    assert _codes(root) == {"SER008", "SER011"}
    done = CliRunner().invoke(main, ["-C", str(root), "refresh"])
    assert done.exit_code == 0, done.output
    assert patch.read_bytes() == original
    assert _codes(root) == set()
