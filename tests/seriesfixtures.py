"""Overlays with a series and a LOCAL_FIXES.md that ``verify`` accepts, for the tests that
run the commands as a user would (rebase, sync, refresh, verify) on ``gitfixtures``'
worlds: patches made on the current patched layer, entries written for them, and the
paths and bytes a test reads back."""

from __future__ import annotations

import hashlib
from pathlib import Path

from gitfixtures import (
    CLOSING,
    PATCH,
    cli,
    git,
    lines,
    make_patch,
    read_blob,
)

from overlay.engine.layers import compute_layers
from overlay.git.store import EMPTY_TREE, Store
from overlay.records import fixes
from overlay.records.manifest import load_manifest
from overlay.records.patchfmt import format_patch, tree_diff

PDIR = "patches-rocm"
WORK = (
    Path(".overlay") / "rebase" / "work"
)  # where a stopped run puts the files to resolve


def layers_of(o, **kw):
    """``(store, layers)`` of the overlay ``o`` as it is now (``kw``: compute_layers's options)."""
    store = Store()
    return store, compute_layers(store, load_manifest(str(o.root)), str(o.root), **kw)


def add_patch(
    o,
    name,
    edits,
    *,
    fix=1,
    subject="rocm: a fix",
    description="Why the change is needed.",
    modes=None,
):
    """Make a patch on the current ``patched`` layer, add it to the series, return its bytes."""
    store, layers = layers_of(o)
    data, _ = make_patch(
        store,
        layers.patched,
        edits,
        fix=fix,
        subject=subject,
        description=description,
        modes=modes,
    )
    o.add_patch(name, data)
    return data


def fixes_text(o, entries=(), retarget=(), *, fork=None, pin=None) -> str:
    """A LOCAL_FIXES.md verify accepts: ``entries`` = [(title, [files])] in the kernels section
    (numbered 1..n), ``retarget`` = [(title, [files])] numbered after them."""
    w = o.world
    manifest = load_manifest(str(o.root))
    repo = fixes.fork_repo_from_url(str(w.fork.path))
    out = [
        f"# Local changes relative to {repo}@{(fork or manifest.fork_commit)[:8]}\n\n",
        f"## Retarget onto the MLX pin ({(pin or manifest.pin)[:8]})\n\n",
    ]
    n = 0
    for title, files in retarget:
        n += 1
        out.append(
            f"{n}. **{title}** Touches {', '.join(f'`{f}`' for f in files)}. {CLOSING}\n\n"
        )
    out.append("## Fixes to the fork's kernels\n\n")
    for title, files in entries:
        n += 1
        out.append(
            f"{n}. **{title}** Touches {', '.join(f'`{f}`' for f in files)}. {CLOSING}\n\n"
        )
    out.append(
        "## Dropped from the vendored set\n\n"
        "- `docs/rocm.md`: fork documentation.\n"
        "- `mlx/backend/metal/kernels.cpp`: Metal is not carried.\n"
    )
    return "".join(out)


def write_fixes(o, entries=(), retarget=(), **kw) -> None:
    (o.root / "LOCAL_FIXES.md").write_text(fixes_text(o, entries, retarget, **kw))


def assert_verify_clean(o) -> None:
    """`overlay verify` exits 0 (run right after a completed rebase or sync, no refresh)."""
    result = cli(o, "verify")
    assert result.exit_code == 0, result.output


def patched_blob(o, path) -> bytes:
    """The bytes of ``path`` in the overlay's patched layer."""
    store, layers = layers_of(o)
    return read_blob(store, layers.patched, path)


def patch_bytes(o, name) -> bytes:
    """The bytes of the patch file ``name``."""
    return (o.root / PDIR / name).read_bytes()


def work_file(o, rel) -> Path:
    """Where a stopped run put ``rel`` for the user to resolve."""
    return o.root / WORK / rel


def tree_hash(top: Path, *, skip: str | None = None) -> str:
    """sha256 over every file's relative path and bytes under ``top`` (``skip``: a top-level name)."""
    h = hashlib.sha256()
    for path in sorted(p for p in top.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(top)
        if skip and rel.parts[0] == skip:
            continue
        h.update(
            str(rel).encode() + b"\0" + (path.read_bytes() if path.is_file() else b"->")
        )
    return h.hexdigest()


def upstream_branch(w, name, start) -> None:
    """Put the upstream work repository on a new branch ``name`` at ``start``."""
    git(w.upstream.path, "checkout", "-q", "-b", name, start)


#: A block that appears twice in mlx/blocks.cpp (see :func:`two_blocks`).
BLOCK = "lock();\nstate = 1;\nunlock();\n"


def two_blocks(inserted: int = 0, second: str = "state = 1;") -> str:
    """mlx/blocks.cpp: a header, ``inserted`` new lines, then :data:`BLOCK` twice (the second
    with ``second`` for its middle line)."""
    header = "".join(f"h{i}\n" for i in range(1, 11))
    new = "".join(f"new {i}\n" for i in range(1, inserted + 1))
    sep = "// sep\n" * 4
    return (
        header
        + new
        + sep
        + BLOCK
        + sep
        + BLOCK.replace("state = 1;", second)
        + sep
        + "t1\nt2\nt3\n"
    )


def blocks_overlay(ov, w) -> tuple[str, bytes]:
    """An overlay whose one patch changes the second of two identical blocks, made on a
    new pin ``pin_a``; returns ``(pin_a, the patch's bytes)``."""
    upstream_branch(w, "blocks", w.base)
    pin_a = w.upstream.commit(
        {"mlx/blocks.cpp": two_blocks()}, "upstream adds two identical blocks"
    )
    ov.write_manifest(pin_a)
    data = add_patch(
        ov,
        "0001-second-block.patch",
        {"mlx/blocks.cpp": two_blocks(second="state = 2;")},
        fix=1,
    )
    write_fixes(ov, [("Second block.", ["mlx/blocks.cpp"])], pin=pin_a)
    return pin_a, data


#: mlx/core.cpp with the fork delta's conflict at the pin resolved (the ROCm hook kept).
CORE_RESOLVED = lines(
    "core", change={5: "core 5 upstream rewrite // rocm hook", 25: "core 25 upstream"}
)


def made_elsewhere(ov, tmp_path, path: str, before: str, after: str) -> bytes:
    """A patch of ``path`` from ``before`` to ``after`` made in another clone (its blobs
    are in no store of this test's), added to the series with a verify-clean entry;
    returns its bytes."""
    other = Store(str(tmp_path / "elsewhere.git"))
    trees = [
        other.edit_tree(EMPTY_TREE, {path: ("100644", other.hash_blob(t.encode()))})
        for t in (before, after)
    ]
    data = format_patch(
        "rocm: made elsewhere",
        "Made in another clone.",
        [("Local-Fix", "1"), ("Forwarded", "not-needed")],
        tree_diff(other, *trees),
    )
    ov.add_patch("0001-elsewhere.patch", data)
    write_fixes(ov, [("Elsewhere.", [path])])
    return data


def abbreviate_index_line(o):
    """Cut the first ``index`` line of the ``clean`` overlay's patch to 12 hex digits."""
    path = o.root / "patches-rocm" / PATCH
    data = path.read_bytes()
    start = data.index(b"\nindex ") + len(b"\nindex ")
    old, rest = data[start:].split(b"..", 1)
    path.write_bytes(data[:start] + old[:12] + b".." + rest)


def add_unlisted_patch(o):
    """A copy of the ``clean`` overlay's patch that the series does not list."""
    (o.root / "patches-rocm" / "0002-stray.patch").write_bytes(
        (o.root / "patches-rocm" / PATCH).read_bytes()
    )


def manifest_text(o) -> str:
    """The manifest's text."""
    return (o.root / "patches-rocm" / "overlay.toml").read_text()


def stopped_run(ov, w) -> None:
    """A rebase stopped on the fork-delta conflict in mlx/core.cpp, its work file resolved."""
    stop = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert stop.exit_code == 1, stop.output
    (ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp").write_text(
        CORE_RESOLVED
    )


def core_resolved_run(ov, w) -> Path:
    """A rebase onto w.pin_conflict whose fork-delta conflict in mlx/core.cpp is
    resolved and completed (``--continue``); returns ``.overlay/rr-cache``, where the
    resolution is now recorded."""
    stop = cli(ov, "rebase", "--onto", w.pin_conflict)
    assert stop.exit_code == 1, stop.output
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp"
    work.write_text(lines("core", change={5: "core 5 both", 25: "core 25 upstream"}))
    done = cli(ov, "rebase", "--continue")
    assert done.exit_code == 0, done.output
    return ov.root / ".overlay" / "rr-cache"
