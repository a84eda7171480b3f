"""The main job on the real upstreams (skipped unless the mirrors are configured).

Run with ``OVERLAY_UPSTREAM_URL=<ml-explore/mlx mirror> OVERLAY_FORK_URL=<NripeshN/mlx mirror>``.
"""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from overlay.cli import main
from overlay.gitstore import Store
from overlay.layers import compute_layers
from overlay.manifest import load_manifest

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
    fork_rocm = [e for e in store.ls_tree(fork_tree) if e[3].startswith("mlx/backend/rocm/")]
    assert len(fork_rocm) == 106 and len(rocm) >= 106

    # The carried core files (outside the backend) equal the fork's, unless a patch touches them.
    core = [p for p in layers.carried_changes if not p.startswith("mlx/backend/rocm/")]
    assert len(core) == 15
    patched_by_series = set().union(*(r.patch.touched for r in layers.patches)) if layers.patches else set()
    with store.cat_file() as cat:
        fork_blobs = {e[3]: e[2] for e in store.ls_tree(fork_tree)}
        for path in core:
            if path in patched_by_series or any(c.path == path for c in layers.conflicts):
                continue
            assert (dest / path).read_bytes() == cat.read(fork_blobs[path])[1], path
    assert not (dest / "mlx/backend/cuda/custom_kernel.cpp").read_bytes() == \
        store.git("cat-file", "blob", f"{fork_tree}:mlx/backend/cuda/custom_kernel.cpp").stdout

    second = runner.invoke(main, ["-C", str(ROOT), "export", str(dest)])
    assert ": 0 written, 0 removed" in second.output, second.output
    assert os.path.exists(dest / ".overlay-export.json")
