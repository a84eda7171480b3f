"""``overlay verify`` (overlay/checks/verify.py) end to end on fixture overlays: one
clean, then each record broken; ``--only`` computes only what its families need and
gives exactly a full run's findings of them, ``--skip`` and ``--strict``, the policy read
from the manifest, MAN003 when the layers fail."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from gitfixtures import CLOSING, PATCH, cli, lines, local_fixes, make_patch
from seriesfixtures import (
    abbreviate_index_line,
    add_patch,
    add_unlisted_patch,
    assert_verify_clean,
    patch_bytes,
    patched_blob,
    write_fixes,
)

from overlay.checks import verify as checks
from overlay.checks.verify import FAMILIES, verify
from overlay.cli import main
from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records import fixes
from overlay.records.manifest import load_manifest
from overlay.workspace import Workspace


def codes(overlay, **kw):
    result = verify(Workspace(str(overlay.root)), **kw)
    return [(f.code, f.path, f.line) for f in result.findings]


def test_clean_overlay_has_no_findings(clean):
    assert codes(clean) == []
    result = CliRunner().invoke(main, ["-C", str(clean.root), "verify"])
    assert result.exit_code == 0 and "no findings" in result.output.lower()


def test_offline_with_a_warm_store(clean, monkeypatch):
    assert codes(clean) == []  # fills the store
    result = CliRunner().invoke(main, ["-C", str(clean.root), "--offline", "verify"])
    assert result.exit_code == 0, result.output


def test_offline_with_a_cold_store_runs_textual_checks(clean, tmp_path):
    result = verify(
        Workspace.of(str(clean.root), Store(str(tmp_path / "cold.git"), offline=True))
    )
    assert [f.code for f in result.findings] == ["MAN002"]
    (clean.root / "LOCAL_FIXES.md").write_text(
        local_fixes(clean.world).replace("1. **", "2. **")
    )
    result = verify(
        Workspace.of(str(clean.root), Store(str(tmp_path / "cold.git"), offline=True))
    )
    assert "FIX007" in [f.code for f in result.findings]


# SER ------------------------------------------------------------------------
def test_patch_missing_from_series(clean):
    clean.write_series([])
    found = codes(clean)
    assert ("SER002", f"patches-rocm/{PATCH}", None) in found


def test_series_names_missing_file_and_duplicate(clean):
    clean.write_series([PATCH, "0002-gone.patch", PATCH])
    found = codes(clean)
    assert ("SER001", "patches-rocm/series", 2) in found
    assert ("SER003", "patches-rocm/series", 3) in found


def test_unparsable_patch(clean):
    (clean.root / "patches-rocm" / PATCH).write_text(
        "Subject: [PATCH] nothing\n\nno diff here\n"
    )
    assert ("SER004", f"patches-rocm/{PATCH}", None) in codes(clean)


def test_no_subject_and_no_description(clean):
    path = clean.root / "patches-rocm" / PATCH
    data = path.read_text().replace("Subject: [PATCH] rocm: lock the device\n", "")
    path.write_text(data.replace("Why the change is needed.\n\n", ""))
    found = {c for c, _p, _l in codes(clean)}
    # The head is the author's: a refresh would not rewrite it, so no SER011.
    assert {"SER005", "SER006"} <= found and "SER011" not in found


def test_patch_touching_uncarried_path(clean, world):
    store = Store()
    layers = compute_layers(store, load_manifest(str(clean.root)), str(clean.root))
    patch, _ = make_patch(store, layers.patched, {"docs/extra.md": "doc\n"}, fix=1)
    clean.add_patch("0002-docs.patch", patch)
    assert ("SER007", "patches-rocm/0002-docs.patch", None) in codes(clean)


def test_short_index_line_and_refresh_drift(clean):
    path = clean.root / "patches-rocm" / PATCH
    text = path.read_text()
    import re

    short = re.sub(
        r"^index ([0-9a-f]{7})[0-9a-f]{33}\.\.([0-9a-f]{7})[0-9a-f]{33}",
        r"index \1..\2",
        text,
        flags=re.M,
    )
    path.write_text(short)
    line = (
        short.splitlines().index(
            next(ln for ln in short.splitlines() if ln.startswith("index "))
        )
        + 1
    )
    found = codes(clean)
    assert ("SER008", f"patches-rocm/{PATCH}", line) in found
    assert ("SER011", f"patches-rocm/{PATCH}", None) in found
    # refresh repairs it byte-stable, and a second refresh changes nothing
    runner = CliRunner()
    assert (
        "1 of 1 patch(es) rewritten"
        in runner.invoke(main, ["-C", str(clean.root), "refresh"]).output
    )
    assert path.read_text() == text
    again = runner.invoke(main, ["-C", str(clean.root), "refresh", "--check"])
    assert again.exit_code == 0 and "0 of 1 patch(es) would change" in again.output


def _grow_fork(clean, world, tmp_path):
    """Move the fork: two lines on top of device.cpp; return the new fork commit."""
    store = Store()
    grown = store.edit_tree(
        store.tree_of(world.fork_commit),
        {
            "mlx/backend/rocm/device.cpp": (
                "100644",
                store.hash_blob(("top 1\ntop 2\n" + lines("device")).encode()),
            )
        },
    )
    fork2 = store.commit_tree(grown, [world.fork_commit], "grow")
    clean.write_manifest(world.base, fork=fork2)
    (clean.root / "LOCAL_FIXES.md").write_text(local_fixes(world, fork_commit=fork2))
    return fork2


def test_moved_context_is_an_error_and_refresh_carries_it(clean, world, tmp_path):
    store = Store()
    layers = compute_layers(store, load_manifest(str(clean.root)), str(clean.root))
    patch, _ = make_patch(
        store,
        layers.forked,
        {
            "mlx/backend/rocm/device.cpp": lines(
                "device", change={20: "device 20 locked"}
            )
        },
        subject="rocm: lock the device",
    )
    (clean.root / "patches-rocm" / PATCH).write_bytes(patch)
    _grow_fork(clean, world, tmp_path)
    found = verify(Workspace(str(clean.root))).findings
    ser = [f for f in found if f.code == "SER010"]
    assert (
        len(ser) == 1
        and ser[0].severity == "error"
        and "context still matches" in ser[0].message
    )
    assert CliRunner().invoke(main, ["-C", str(clean.root), "refresh"]).exit_code == 0
    assert codes(clean) == []


def test_context_conflict_is_an_error_naming_the_hunk(clean, world, tmp_path):
    # The clean patch edits line 3: two new lines on top change its context.
    _grow_fork(clean, world, tmp_path)
    ser = [f for f in verify(Workspace(str(clean.root))).findings if f.code == "SER010"]
    assert len(ser) == 1 and "device.cpp hunk #1" in ser[0].message


def test_patch_that_does_not_apply(clean, world, tmp_path):
    store = Store()
    changed = store.edit_tree(
        store.tree_of(world.fork_commit),
        {
            "mlx/backend/rocm/device.cpp": (
                "100644",
                store.hash_blob(
                    lines("device", change={3: "device 3 rewritten"}).encode()
                ),
            )
        },
    )
    fork2 = store.commit_tree(changed, [world.fork_commit], "rewrite")
    clean.write_manifest(world.base, fork=fork2)
    (clean.root / "LOCAL_FIXES.md").write_text(local_fixes(world, fork_commit=fork2))
    result = verify(Workspace(str(clean.root)))
    ser = [f for f in result.findings if f.code == "SER010"]
    assert len(ser) == 1 and "mlx/backend/rocm/device.cpp hunk #1" in ser[0].message


def test_conflict_marker_in_added_line(clean):
    store = Store()
    layers = compute_layers(store, load_manifest(str(clean.root)), str(clean.root))
    patch, _ = make_patch(
        store,
        layers.patched,
        {"mlx/backend/rocm/device.h": "<<<<<<< ours\n#pragma once\n"},
        fix=1,
    )
    clean.add_patch("0002-marker.patch", patch)
    text = patch.decode().splitlines()
    line = text.index("+<<<<<<< ours") + 1
    found = codes(clean)
    assert ("SER013", "patches-rocm/0002-marker.patch", line) in found


# LAY ------------------------------------------------------------------------
def test_unresolved_conflict_and_its_resolution(clean, world):
    clean.write_manifest(world.pin_conflict)
    (clean.root / "LOCAL_FIXES.md").write_text(
        local_fixes(world, pin=world.pin_conflict)
    )
    assert "LAY001" in [c for c, _p, _l in codes(clean)]
    clean.add_resolution("mlx/core.cpp", "<<<<<<< ours\nresolved badly\n")
    found = codes(clean)
    assert ("LAY003", "patches-rocm/resolved/mlx/core.cpp", 1) in found
    assert "FIX023" in [c for c, _p, _l in found]  # not named by a retarget entry


def test_resolution_that_reverts_upstream_outside_the_conflict(clean, world):
    """LAY005: a resolution may differ from git's merge of pin and fork only inside the
    conflict regions; one that puts back an upstream line elsewhere is reported there."""
    clean.write_manifest(world.pin_conflict)
    (clean.root / "LOCAL_FIXES.md").write_text(
        local_fixes(world, pin=world.pin_conflict)
    )
    good = lines(
        "core",
        change={5: "core 5 upstream rewrite // rocm hook", 25: "core 25 upstream"},
    )
    clean.add_resolution("mlx/core.cpp", good)
    assert "LAY005" not in [c for c, _p, _l in codes(clean)]
    clean.add_resolution(
        "mlx/core.cpp",
        lines("core", change={5: "core 5 upstream rewrite // rocm hook"}),
    )
    found = codes(clean)
    assert ("LAY005", "patches-rocm/resolved/mlx/core.cpp", 25) in found, found


def test_stale_and_uncarried_resolution(clean, world):
    clean.add_resolution("mlx/core.cpp", "whatever\n")
    clean.add_resolution("docs/index.md", "docs\n")
    found = codes(clean)
    assert ("LAY002", "patches-rocm/resolved/mlx/core.cpp", None) in found
    assert ("LAY004", "patches-rocm/resolved/docs/index.md", None) in found


# MAN ------------------------------------------------------------------------
def test_unknown_pin_and_bad_merge_base(clean, world):
    clean.write_manifest("e" * 40)
    assert "MAN001" in [c for c, _p, _l in codes(clean)]
    clean.write_manifest(
        world.base, base=world.pin_clean
    )  # not an ancestor of the fork commit
    assert "MAN003" in [c for c, _p, _l in codes(clean)]


# FIX through verify ----------------------------------------------------------------
def test_fix_mutations_are_caught(clean, world):
    lf = clean.root / "LOCAL_FIXES.md"
    lf.write_text(local_fixes(world, closing=CLOSING[:-10] + "."))
    assert "FIX013" in [c for c, _p, _l in codes(clean)]
    lf.write_text(local_fixes(world, entry_files="`mlx/backend/rocm/device.h`"))
    assert "FIX020" in [c for c, _p, _l in codes(clean)]
    lf.write_text(local_fixes(world, extra="An upstreaming candidate.\n"))
    assert "FIX014" in [c for c, _p, _l in codes(clean)]
    lf.write_text(local_fixes(world, pin=world.pin_clean))
    assert ("FIX004", "LOCAL_FIXES.md", 3) in codes(clean)


def test_formats_and_filters(clean):
    clean.write_series([])
    runner = CliRunner()
    out = runner.invoke(main, ["-C", str(clean.root), "verify", "--format", "json"])
    assert out.exit_code == 1
    data = json.loads(out.output)
    assert {f["code"] for f in data["findings"]} >= {"SER002"}
    gh = runner.invoke(main, ["-C", str(clean.root), "verify", "--format", "github"])
    assert "::error file=patches-rocm/" in gh.output
    junit = runner.invoke(main, ["-C", str(clean.root), "verify", "--format", "junit"])
    import xml.etree.ElementTree as ET

    root = ET.fromstring(junit.output)
    assert int(root.get("failures")) >= 1
    only = runner.invoke(main, ["-C", str(clean.root), "verify", "--only", "MAN"])
    assert only.exit_code == 0
    skipped = runner.invoke(
        main,
        [
            "-C",
            str(clean.root),
            "verify",
            "--skip",
            "SER002",
            "--skip",
            "FIX024",
            "--skip",
            "FIX019",
        ],
    )
    assert skipped.exit_code == 0, skipped.output


def _fix_new(clean, section: str, title: str, path: str):
    """``overlay fix new`` of one entry naming ``path``."""
    return CliRunner().invoke(
        main,
        ["-C", str(clean.root), "fix", "new", "--section", section, "--title", title]
        + ["--file", path],
    )


def test_fix_new_and_list(clean):
    out = _fix_new(clean, "api", "Add the arena.", "mlx/backend/rocm/pinned.cu")
    assert out.exit_code == 0 and "added entry 2" in out.output
    assert "put `Local-Fix: 2` in its patch" in out.output
    text = (clean.root / "LOCAL_FIXES.md").read_text()
    assert "2. **Add the arena.**" in text and "`mlx/backend/rocm/pinned.cu`" in text
    listed = CliRunner().invoke(main, ["-C", str(clean.root), "fix", "list"])
    assert (
        f"patch: patches-rocm/{PATCH}" in listed.output
        and "(no patch)" in listed.output
    )


def test_fix_new_for_a_resolution_asks_for_no_patch(clean):
    # A retarget entry that names only resolutions has no patch to carry Local-Fix.
    out = _fix_new(
        clean, "retarget", "Keep the merged core", "patches-rocm/resolved/mlx/core.cpp"
    )
    assert out.exit_code == 0, out.output
    assert out.output == "added entry 2 to LOCAL_FIXES.md\n"


def test_every_code_is_documented():
    from pathlib import Path

    from overlay.checks.verify import CODES

    doc = (Path(__file__).resolve().parent.parent / "docs" / "findings.md").read_text()
    for code in [*CODES, *fixes.CODES]:
        assert f"| {code} |" in doc, code


def test_verify_strict_fails_on_warnings(ov):
    lenient = CliRunner().invoke(
        main, ["-C", str(ov.root), "--offline", "verify", "--only", "MAN"]
    )
    assert lenient.exit_code == 0 and "MAN002" in lenient.output
    strict = CliRunner().invoke(
        main, ["-C", str(ov.root), "--offline", "verify", "--only", "MAN", "--strict"]
    )
    assert strict.exit_code == 1 and "MAN002" in strict.output


def test_verify_reads_the_policy_from_the_manifest(clean, world):
    old = "Applies to the fork."  # an older form of the closing sentence
    manifest = clean.root / "patches-rocm" / "overlay.toml"
    names = (
        "`mlx/backend/rocm/device.cpp` (see `tests/kv_cache.rs`, `scripts/bench.sh`, "
        "`state.mutex` and `quantized/qmv_tiled_kernel.o`)"
    )
    (clean.root / "LOCAL_FIXES.md").write_text(
        local_fixes(world, closing=old, entry_files=names)
    )
    found = [(f.code, f.message) for f in verify(Workspace(str(clean.root))).findings]
    assert sorted(c for c, _m in found) == ["FIX013", "FIX021", "FIX021"], found
    manifest.write_text(
        manifest.read_text() + f'older-closing-sentences = ["{old}"]\n'
        "closing-sentence-required-from = 2\n"
        'outside-tree = ["tests/**", "scripts/**"]\n'
    )
    assert verify(Workspace(str(clean.root))).findings == []


def test_man003_is_reported_when_the_layers_fail_and_no_hint_sends_to_refresh(ov, w):
    core = "mlx/core.cpp"
    ov.write_manifest(w.pin_clean)
    hooked = lines("core", change={5: "core 5 // rocm hook", 25: "core 25 upstream"})
    assert patched_blob(ov, core).decode() == hooked
    data = add_patch(
        ov,
        "0001-core.patch",
        {
            core: lines(
                "core",
                change={5: "core 5 // rocm hook", 20: "c20", 25: "core 25 upstream"},
            )
        },
    )
    write_fixes(ov, [("Core.", [core])], pin=w.pin_clean)
    assert_verify_clean(ov)
    # A merge base that is not an ancestor of the fork commit: the fork delta from it
    # undoes upstream's line 25, so the patch no longer sits on its pre-image.
    ov.write_manifest(w.pin_clean, base=w.pin_clean)
    only = cli(ov, "verify", "--only", "MAN")
    assert only.exit_code == 1 and "MAN003" in only.output, only.output
    full = cli(ov, "verify")
    assert "MAN003" in full.output and "SER010" in full.output, full.output
    assert "overlay refresh" not in full.output, full.output
    # Findings the wrong merge base makes by itself send nobody to delete records.
    assert "delete it" not in full.output and "add under" not in full.output
    refused = cli(ov, "refresh")
    assert refused.exit_code == 2, refused.output
    assert "not an ancestor" in refused.output and "overlay sync" in refused.output
    assert patch_bytes(ov, "0001-core.patch") == data


BREAKS = {
    "clean": lambda o, w: None,
    "abbreviated index line (SER008, SER011)": lambda o, w: abbreviate_index_line(o),
    "unlisted patch (SER002)": lambda o, w: add_unlisted_patch(o),
    "stale and uncarried resolutions (LAY002, LAY004)": lambda o, w: (
        o.add_resolution("mlx/core.cpp", "whatever\n"),
        o.add_resolution("docs/index.md", "docs\n"),
    ),
    "merge base not an ancestor (MAN003)": lambda o, w: o.write_manifest(
        w.base, base=w.pin_clean
    ),
    "closing sentence (FIX013)": lambda o, w: (o.root / "LOCAL_FIXES.md").write_text(
        local_fixes(w, closing=CLOSING[:-10] + ".")
    ),
    "patch that does not apply (SER010)": lambda o, w: o.write_manifest(w.pin_conflict),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_only_gives_the_full_runs_findings_of_its_families(clean, world, name):
    BREAKS[name](clean, world)
    full = verify(Workspace(str(clean.root))).findings
    for family in FAMILIES:
        alone = verify(Workspace(str(clean.root)), only=[family]).findings
        assert alone == [f for f in full if f.family == family], (name, family)
    pair = verify(Workspace(str(clean.root)), only=["SER", "FIX"]).findings
    assert pair == [f for f in full if f.family in ("SER", "FIX")]


def test_only_fix_does_no_refresh_and_no_stepwise_layers(clean, monkeypatch):
    verify(Workspace(str(clean.root)))  # the layer cache is warm
    import overlay.engine.layers as layers_module

    asked = []
    real = layers_module.compute_layers

    def spy(*args, **kw):
        asked.append(kw.get("stepwise"))
        return real(*args, **kw)

    monkeypatch.setattr(layers_module, "compute_layers", spy)
    monkeypatch.setattr(
        checks,
        "refresh_series",
        lambda *a: pytest.fail("--only FIX refreshed the series"),
    )
    monkeypatch.setattr(
        checks,
        "_fork_ahead_findings",
        lambda *a: pytest.fail("--only FIX checked MAN004"),
    )
    assert verify(Workspace(str(clean.root)), only=["FIX"]).findings == []
    assert asked == [False]
    monkeypatch.setattr(
        checks,
        "_repo_paths",
        lambda *a: pytest.fail("--only LAY listed the repository"),
    )
    assert verify(Workspace(str(clean.root)), only=["LAY"]).findings == []
    assert asked == [False, False]


def test_a_skip_of_a_code_no_finding_has_is_warned_about(clean):
    result = CliRunner().invoke(
        main, ["-C", str(clean.root), "verify", "--skip", "SER01O", "--skip", "SER010"]
    )
    assert result.exit_code == 0, result.output
    assert result.stderr.count("overlay: warning:") == 1
    assert "--skip SER01O: not a finding code" in result.stderr
    retired = CliRunner().invoke(
        main, ["-C", str(clean.root), "verify", "--skip", "SER009"]
    )
    assert retired.exit_code == 0
    assert "--skip SER009: a retired code" in retired.stderr


def test_skip_takes_a_comma_separated_list(clean):
    # Two errors (SER002, and SER008 with SER011), then all skipped in one list.
    add_unlisted_patch(clean)
    abbreviate_index_line(clean)
    plain = CliRunner().invoke(main, ["-C", str(clean.root), "verify"])
    codes = sorted(set(re.findall(r" error ([A-Z]{3}\d{3}) ", plain.output)))
    assert plain.exit_code == 1 and codes == ["SER002", "SER008", "SER011"], codes
    listed = CliRunner().invoke(
        main, ["-C", str(clean.root), "verify", "--skip", ",".join(codes)]
    )
    assert listed.exit_code == 0, listed.output
    assert "warning" not in listed.stderr
