"""A copy of the real overlay with N synthetic patches after its own series.

Used by ``series_bench.py`` and ``export_bench.py`` (issue 14's long series). The
copy holds the real records (``patches-rocm/``, ``LOCAL_FIXES.md``); patch ``i`` of
the synthetic ones appends one comment line to the ``(i-1) mod M``-th of the ``M``
text files of ``mlx/backend/rocm/`` in the ``patched`` tree, so that a file is touched
by about ``N / M`` patches in a row, as a long series of fixes does. Every synthetic
patch is byte-stable (its diff is what ``overlay refresh`` would write) and points
at one new ``LOCAL_FIXES.md`` entry naming every file they touch, so ``overlay
verify`` of the copy finds nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records import fixes
from overlay.records.manifest import load_manifest
from overlay.records.patchfmt import format_patch, tree_diffs

CLOSING = (
    "Applies to the fork; kept in mlxcelverse under the 2026-10-06 fork policy, "
    "not proposed there."
)


def make_overlay(store: Store, src_root: str, dest: str, n: int) -> dict:
    """Copy the overlay at ``src_root`` to ``dest`` with ``n`` synthetic patches appended.

    Args:
        store: a store holding the real overlay's commits; the synthetic blobs and
            trees are written into it.
        src_root: the real overlay repository.
        dest: where the copy goes (must not exist).
        n: how many synthetic patches.
    Returns:
        ``{"patched": tree of the real series, "expected": tree after the synthetic
        ones, "files": how many files they touch}``.
    """
    shutil.copytree(
        os.path.join(src_root, "patches-rocm"), os.path.join(dest, "patches-rocm")
    )
    shutil.copy2(
        os.path.join(src_root, "LOCAL_FIXES.md"), os.path.join(dest, "LOCAL_FIXES.md")
    )
    subprocess.run(["git", "init", "-q", dest], check=True)
    layers = compute_layers(store, load_manifest(dest), dest)
    if n == 0:
        return {"patched": layers.patched, "expected": layers.patched, "files": 0}
    files = sorted(
        e
        for e in store.ls_tree(layers.patched)
        if e[0] == "100644"
        and e[3].startswith("mlx/backend/rocm/")
        and e[3].endswith((".cpp", ".h", ".hip"))
    )
    with store.cat_file() as cat:
        content = {path: cat.read(oid)[1] for _m, _k, oid, path in files}
    order = [files[i % len(files)][3] for i in range(n)]
    touched = sorted(set(order))
    # Every intermediate blob, written by one hash-object.
    with tempfile.TemporaryDirectory() as tmp:
        names = []
        for i, path in enumerate(order, 1):
            content[path] += f"// overlay series benchmark {i}\n".encode()
            name = os.path.join(tmp, str(i))
            with open(name, "wb") as fh:
                fh.write(content[path])
            names.append(name)
        blobs = store.out(
            "hash-object",
            "-w",
            "--no-filters",
            "--stdin-paths",
            input=("\n".join(names) + "\n").encode(),
        ).split()
    trees = [layers.patched]
    with store.scratch_index(layers.patched) as env:
        for path, blob in zip(order, blobs, strict=True):
            store.git("update-index", "--cacheinfo", f"100644,{blob},{path}", env=env)
            trees.append(store.out("write-tree", env=env))
    diffs = tree_diffs(store, list(zip(trees, trees[1:], strict=False)))
    # The next free entry number (the real series takes new entries as it grows).
    number = fixes.next_number(fixes.load(os.path.join(dest, "LOCAL_FIXES.md")))
    series_path = os.path.join(dest, "patches-rocm", "series")
    with open(series_path, "a", encoding="utf-8") as series:
        for i, (path, diff) in enumerate(zip(order, diffs, strict=True), 1):
            name = (
                f"{1000 + i:05d}-bench-{os.path.basename(path).replace('.', '-')}.patch"
            )
            body = format_patch(
                f"bench: touch {path}",
                f"Benchmark patch {i} of the long series.",
                [("Local-Fix", str(number)), ("Forwarded", "not-needed")],
                diff,
                author="overlay local fixes <overlay@localhost>",
            )
            with open(os.path.join(dest, "patches-rocm", name), "wb") as fh:
                fh.write(body)
            series.write(name + "\n")
    fixes_path = os.path.join(dest, "LOCAL_FIXES.md")
    with open(fixes_path, encoding="utf-8") as fh:
        text = fh.read()
    entry = (
        f"{number}. **Benchmark series.** Synthetic patches of the long-series benchmark append "
        "one comment line each to "
        + ", ".join(f"`{p}`" for p in touched)
        + f". {CLOSING}\n\n"
    )
    text, count = re.subn(
        r"(?m)^## Fixes to the fork's build$",
        lambda m: entry + m.group(0),
        text,
        count=1,
    )
    assert count == 1
    with open(fixes_path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return {"patched": layers.patched, "expected": trees[-1], "files": len(touched)}
