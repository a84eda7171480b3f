"""The checks of the series and its patch files (overlay/checks/series.py): a patch's
bytes that refresh would turn binary (SER015), a symlink a patch points out of the tree
(SER016) in verify, status and refresh, a hand-broken patch's line and git's reason
(SER004), the mail head of a patch (SER018) and the index lines (SER008)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from gitfixtures import PATCH, cli, lines, make_patch, records_hash
from gitfixtures import overlay_process as run
from gitfixtures import refusal_line as one_line_refusal
from seriesfixtures import PDIR, add_patch

from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[1]

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


def test_hand_broken_patch_gives_the_line_and_gits_reason_and_no_fix024(ov, w):
    from overlay.checks.verify import verify
    from overlay.workspace import Workspace

    data = add_patch(
        ov,
        "0001-device.patch",
        {"mlx/backend/rocm/device.cpp": lines("device", change={3: "device 3 locked"})},
        fix=1,
    )
    (ov.root / "LOCAL_FIXES.md").write_text(
        (ov.root / "LOCAL_FIXES.md").read_text()
        + "1. **Lock.** `mlx/backend/rocm/device.cpp` is locked. "
        "Applies to the fork; kept in mlxcelverse under the 2026-10-06 fork policy, not proposed there.\n"
    )
    broken = data.replace(
        b"+device 3 locked\n", b"+device 3 locked\n+a line typed by hand\n"
    )
    (ov.root / "patches-rocm" / "0001-device.patch").write_bytes(broken)
    hunk_line = (
        broken.split(b"\n").index(
            next(ln for ln in broken.split(b"\n") if ln.startswith(b"@@"))
        )
        + 1
    )
    found = verify(Workspace(str(ov.root))).findings
    (ser004,) = [f for f in found if f.code == "SER004"]
    assert ser004.line == hunk_line and ser004.path == "patches-rocm/0001-device.patch"
    assert "hunk header says -6 +6 lines" in ser004.message
    assert "(git apply: corrupt patch at line" in ser004.message
    assert "refresh` cannot" in ser004.hint
    assert not [f for f in found if f.code == "FIX024"], found
    row = next(
        ln
        for ln in (ROOT / "docs" / "findings.md").read_text().splitlines()
        if ln.startswith("| SER004")
    )
    fix_column = row.rstrip(" |").rsplit(" | ", 1)[1]
    assert "refresh" not in fix_column or "cannot" in fix_column, row


def _codes(o) -> list[tuple[str, str, int | None]]:
    result = cli(o, "verify", "--only", "SER", "--format", "json")
    return [
        (f["code"], f["message"], f["line"])
        for f in json.loads(result.output)["findings"]
    ], result.exit_code


@pytest.mark.parametrize(
    "cut, message, line",
    [
        (b"From 0000000000000000000000000000000000000000 ", "no mbox `From <sha>", 1),
        (b"From: ", "no `From:` author header", None),
    ],
)
def test_a_patch_without_its_mbox_line_or_author_is_ser018(clean, cut, message, line):
    path = clean.root / PDIR / PATCH
    kept = [ln for ln in path.read_bytes().split(b"\n") if not ln.startswith(cut)]
    path.write_bytes(b"\n".join(kept))
    found, code = _codes(clean)
    assert code == 1, found
    ser018 = [(m, ln) for c, m, ln in found if c == "SER018"]
    assert len(ser018) == 1 and message in ser018[0][0], found
    assert ser018[0][1] == line


def test_a_whole_patch_has_no_ser018(clean):
    found, code = _codes(clean)
    assert code == 0 and not [f for f in found if f[0] == "SER018"], found


def _link_out(o) -> None:
    store = Store()
    layers = compute_layers(store, load_manifest(str(o.root)), str(o.root))
    data, _ = make_patch(
        store, layers.patched, {"mlx/evil": "/etc"}, modes={"mlx/evil": "120000"}
    )
    o.add_patch("0001-links.patch", data)


def test_status_and_refresh_fail_on_a_symlink_out_of_the_tree(ov):
    _link_out(ov)
    status = cli(ov, "status")
    assert status.exit_code == 1, status.output
    assert "symlink 'mlx/evil' -> '/etc': absolute target" in status.output
    assert "(verify: SER016)" in status.output
    before = records_hash(ov)
    for args in (["refresh"], ["refresh", "--check"]):
        refreshed = cli(ov, *args)
        assert refreshed.exit_code == 1, (args, refreshed.output)
        assert (
            "SER016" in refreshed.output and "no patch was written" in refreshed.output
        )
    assert records_hash(ov) == before
    assert cli(ov, "verify").exit_code == 1  # as verify and export already said


def test_ser004_hint_names_what_an_empty_patch_and_a_combined_diff_need(ov):
    head = b"From: A <a@b>\nSubject: [PATCH] rocm: x\n\nWhy.\n\nLocal-Fix: 1\n---\n"
    ov.add_patch("0001-empty.patch", head)
    ov.add_patch(
        "0002-merge.patch",
        head + b"diff --cc mlx/core.cpp\nindex 1111111,2222222..3333333\n"
        b"--- a/mlx/core.cpp\n+++ b/mlx/core.cpp\n@@@ -1,1 -1,1 +1,1 @@@\n- a\n -b\n++c\n",
    )
    out = cli(ov, "verify", "--only", "SER").output
    assert "hunk's header counts" not in out, out
    assert "an empty patch changes nothing" in out, out
    assert "combined diff" in out and "overlay edit --new" in out, out


def test_ser008_names_the_index_line_after_a_multibyte_character(ov):
    device = "mlx/backend/rocm/device.cpp"
    data = add_patch(
        ov, "0001-device.patch", {device: lines("device", change={9: "d9"})}
    )
    data = data.replace(
        b"Why the change is needed.", "Why: \u00a9 the change.".encode()
    )
    short = re.sub(
        rb"^index ([0-9a-f]{7})[0-9a-f]{33}\.\.([0-9a-f]{7})[0-9a-f]{33}",
        rb"index \1..\2",
        data,
        flags=re.M,
    )
    (ov.root / PDIR / "0001-device.patch").write_bytes(short)
    want = short[: short.index(b"\nindex ")].count(b"\n") + 2
    out = cli(ov, "verify", "--only", "SER").output
    assert f"0001-device.patch:{want}: error SER008" in out, out
