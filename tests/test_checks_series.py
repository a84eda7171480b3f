"""A patch's bytes: refresh never turns a text diff into a binary one (SER015), and
verify reports a symlink a patch points out of the tree (SER016) (issue 13)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from gitfixtures import (
    cli,
    lines,
    make_patch,
)
from gitfixtures import (
    overlay_process as run,
)
from gitfixtures import (
    refusal_line as one_line_refusal,
)

from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest

# -- a NUL byte never turns a text patch into GIT binary patch ------------------------------


def _nul_series(ov) -> tuple[Path, Path]:
    """Two patches on mlx/ops.cpp; the first one's added line gets a NUL byte. The index
    lines go (a patch made by hand), so git applies the text as it is."""
    store = Store()
    layers = compute_layers(store, load_manifest(str(ov.root)), str(ov.root))
    first, tree = make_patch(
        store, layers.patched, {"mlx/ops.cpp": lines("ops", change={3: "ops 3 fixed"})}
    )
    second, _ = make_patch(
        store,
        tree,
        {"mlx/ops.cpp": lines("ops", change={3: "ops 3 fixed", 20: "ops 20 fixed"})},
        fix=2,
    )
    paths = []
    for name, data in (("0001-a.patch", first), ("0002-b.patch", second)):
        data = re.sub(rb"index [0-9a-f]{40}\.\.[0-9a-f]{40} 100644\n", b"", data)
        paths.append(ov.add_patch(name, data))
    paths[0].write_bytes(
        paths[0].read_bytes().replace(b"+ops 3 fixed", b"+ops 3 fi\0xed")
    )
    return paths[0], paths[1]


def test_refresh_refuses_to_turn_a_nul_byte_into_a_binary_patch(ov):
    first, second = _nul_series(ov)
    before = (first.read_bytes(), second.read_bytes())
    nul_line = before[0][: before[0].index(b"\0")].count(b"\n") + 1
    for args in (("refresh",), ("refresh", "0002-b.patch"), ("refresh", "--check")):
        result = run(ov, *args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert (
            f"patches-rocm/0001-a.patch:{nul_line}: error SER015 mlx/ops.cpp: a line of its text diff holds "
            "a NUL byte" in result.stdout
        )
        assert (
            "refresh refused" in one_line_refusal(result.stderr)
            and "no patch was written" in result.stderr
        )
        assert (first.read_bytes(), second.read_bytes()) == before
        assert b"GIT binary patch" not in first.read_bytes() + second.read_bytes()


def test_verify_reports_the_nul_byte_and_the_next_patch_it_would_turn(ov):
    first, _second = _nul_series(ov)
    data = first.read_bytes()
    nul_line = data[: data.index(b"\0")].count(b"\n") + 1
    result = cli(ov, "verify", "--only", "SER", "--format", "json")
    assert result.exit_code == 1, result.output
    found = [
        (f["code"], f["path"], f["line"]) for f in json.loads(result.output)["findings"]
    ]
    assert ("SER015", "patches-rocm/0001-a.patch", nul_line) in found
    header = next(
        i
        for i, ln in enumerate(
            (ov.root / "patches-rocm" / "0002-b.patch").read_bytes().split(b"\n"), 1
        )
        if ln.startswith(b"diff --git")
    )
    assert ("SER015", "patches-rocm/0002-b.patch", header) in found
    assert not any(
        code == "SER011" for code, _p, _l in found
    )  # no "run overlay refresh" for them


# -- a symlink out of the tree ------------------------------------------------------------


@pytest.mark.parametrize(
    "target, why",
    [
        ("/etc", "absolute target"),
        ("../../x", "escapes the tree"),
        ("../.git/config", "points into .git"),
    ],
)
def test_verify_reports_a_patch_that_adds_a_symlink_out_of_the_tree(ov, target, why):
    store = Store()
    layers = compute_layers(store, load_manifest(str(ov.root)), str(ov.root))
    data, _ = make_patch(
        store,
        layers.patched,
        {"mlx/evil": target, "mlx/ok": "core.cpp"},
        modes={"mlx/evil": "120000", "mlx/ok": "120000"},
    )
    ov.add_patch("0001-links.patch", data)
    result = cli(ov, "verify", "--only", "SER", "--format", "json")
    assert result.exit_code == 1, result.output
    found = [f for f in json.loads(result.output)["findings"] if f["code"] == "SER016"]
    header = next(
        i
        for i, ln in enumerate(data.split(b"\n"), 1)
        if ln.startswith(b"diff --git a/mlx/evil")
    )
    assert [(f["path"], f["line"]) for f in found] == [
        ("patches-rocm/0001-links.patch", header)
    ]
    assert f"symlink 'mlx/evil' -> '{target}': {why}" in found[0]["message"]
    exported = cli(ov, "export", str(ov.root.parent / "dest"))
    assert (
        exported.exit_code == 2
        and f"refusing symlink 'mlx/evil' -> '{target}'" in exported.output
    )


def test_a_link_out_through_another_link_is_blamed_on_the_patch_that_makes_it(ov):
    store = Store()
    layers = compute_layers(store, load_manifest(str(ov.root)), str(ov.root))
    first, tree = make_patch(
        store, layers.patched, {"mlx/up": ".."}, modes={"mlx/up": "120000"}
    )
    second, _ = make_patch(
        store, tree, {"mlx/out": "up/../x"}, modes={"mlx/out": "120000"}, fix=2
    )
    ov.add_patch("0001-up.patch", first)
    ov.add_patch("0002-out.patch", second)
    result = cli(ov, "verify", "--only", "SER", "--format", "json")
    found = [
        (f["path"], f["message"])
        for f in json.loads(result.output)["findings"]
        if f["code"] == "SER016"
    ]
    assert len(found) == 1 and found[0][0] == "patches-rocm/0002-out.patch", found
    assert "'mlx/out' -> 'up/../x': escapes the tree" in found[0][1]
