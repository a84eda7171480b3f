"""``overlay refresh`` (overlay/engine/refresh.py): every byte before a patch's diff is
kept (shared case 16), the user's git configuration never changes the bytes written,
the series is read and each patch parsed once, and each rewrite says why."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from gitfixtures import PATCH, cli, lines, make_patch
from seriesfixtures import PDIR, add_patch, layers_of, write_fixes

HEAD16 = {
    "notes-then-trailers-then-separator": (
        "Keep the ops table in sync.\n---\nNotes: a reviewer asked for this; see the thread.\n\n"
        "Local-Fix: 1\nForwarded: not-needed\n---\n"
    ),
    "notes-then-trailers": (
        "Keep the ops table in sync.\n\n---\nNotes: a reviewer asked for this.\n  Indented note line.\n\n"
        "Local-Fix: 1\nForwarded: not-needed\n"
    ),
}


def head16(variant: str) -> bytes:
    return (
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        b"From: overlay <overlay@localhost>\nSubject: [PATCH] rocm: keep ops in sync\n\n"
        + HEAD16[variant].encode()
    )


def split_at_diff(data: bytes) -> tuple[bytes, bytes]:
    i = data.index(b"diff --git ")
    return data[:i], data[i:]


def patch16(ov, variant: str) -> tuple[Path, bytes]:
    from overlay.records.patchfmt import tree_diff

    store, layers = layers_of(ov)
    _data, new_tree = make_patch(
        store,
        layers.patched,
        {"mlx/ops.cpp": lines("ops", change={20: "ops 20 fixed"})},
    )
    data = head16(variant) + tree_diff(store, layers.patched, new_tree)
    path = ov.add_patch("0001-ops.patch", data)
    write_fixes(ov, [("Keep ops in sync.", ["mlx/ops.cpp"])])
    return path, data


@pytest.mark.parametrize("variant", sorted(HEAD16))
def test_case16_refresh_and_rebase_keep_every_byte_before_the_diff(ov, w, variant):
    path, data = patch16(ov, variant)
    head = head16(variant)
    assert split_at_diff(data)[0] == head
    refreshed = cli(ov, "refresh")
    assert refreshed.exit_code == 0, refreshed.output
    assert path.read_bytes() == data  # on its pre-image: nothing to change
    # A rebase that rewrites the patch (a 3-way carry: pin_clean edits ops line 2 near nothing
    # of ours, but the pre-image blob changes) keeps every byte before the diff.
    done = cli(ov, "rebase", "--onto", w.pin_clean)
    assert done.exit_code == 0, done.output
    assert "patch 0001-ops.patch: merged" in done.output
    new = path.read_bytes()
    assert new != data and split_at_diff(new)[0] == head
    assert b"+ops 20 fixed" in new and b" ops 2 upstream" not in new.split(b"@@", 1)[0]
    # And a refresh after it changes nothing either.
    assert cli(ov, "refresh").exit_code == 0 and path.read_bytes() == new


def hints(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.strip().startswith("hint:")]


@pytest.mark.parametrize(
    "variant", ["notes-then-trailers-then-separator", "notes-then-trailers"]
)
def test_case16_no_finding_hint_leads_to_deleting_text(ov, w, variant):
    patch16(ov, variant)
    result = cli(ov, "verify")
    for hint in hints(result.output):
        assert not re.search(r"\b(delete|remove|drop)\b", hint, re.I), result.output


ALG_OLD = [
    "y = 2;",
    "int b;",
    "}",
    "int a;",
    "",
    "int b;",
    "{",
    "return;",
    "int a;",
    "",
    "{",
    "x = 1;",
]


ALG_NEW = [
    "y = 2;",
    "int b;",
    "}",
    "",
    "int a;",
    "",
    "x = 1;",
    "int b;",
    "return;",
    "{",
    "return;",
    "int a;",
    "",
    "{",
]  # myers and patience diff these two differently


def test_user_gitconfig_does_not_change_refreshed_bytes(ov, w, monkeypatch, tmp_path):
    alg = "mlx/backend/rocm/alg.c"
    fork2 = w.fork.commit({alg: "\n".join(ALG_OLD) + "\n"}, "fork adds alg.c")
    ov.write_manifest(w.base, fork=fork2)
    edits = {
        alg: "\n".join(ALG_NEW) + "\n",
        "mlx/backend/rocm/device.cpp": None,
        "mlx/backend/rocm/device_impl.cpp": lines(
            "device", change={30: "device 30 impl"}
        ),
        "mlx/backend/rocm/device.h": None,
        "mlx/backend/rocm/device_impl.h": "#pragma once\n",
    }
    data = add_patch(ov, "0001-impl.patch", edits)
    assert data.count(b"\nrename from ") == 2
    # Abbreviated index lines: refresh has to regenerate the diff (and so runs git diff).
    short = re.sub(
        rb"(?m)^index ([0-9a-f]{7})[0-9a-f]{33}\.\.([0-9a-f]{7})[0-9a-f]{33}",
        rb"index \1..\2",
        data,
    )
    assert short != data
    path = ov.root / PDIR / "0001-impl.patch"

    def refresh() -> bytes:
        path.write_bytes(short)
        result = cli(ov, "refresh")
        assert result.exit_code == 0 and "rewrote 0001-impl.patch" in result.output, (
            result.output
        )
        return path.read_bytes()

    plain = refresh()
    assert plain == data  # byte-stable: the same bytes the fixture's tree_diff gave
    hostile = (
        "[diff]\n\trenameLimit = 1\n\talgorithm = patience\n\trenames = false\n\tnoprefix = true\n"
        "[merge]\n\tconflictStyle = zdiff3\n"
    )
    config = Path(
        os.environ["GIT_CONFIG_GLOBAL"]
    )  # where conftest points git's global config
    config.write_text(config.read_text() + hostile)
    xdg = tmp_path / "xdg"
    (xdg / "git").mkdir(parents=True)
    (xdg / "git" / "config").write_text(hostile)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    (Path(os.environ["HOME"]) / ".gitconfig").write_text(config.read_text())
    # The config is live for a plain git child (so the test would notice if overlay read it).
    assert (
        subprocess.run(
            ["git", "config", "--global", "diff.algorithm"],
            stdout=subprocess.PIPE,
            check=True,
        ).stdout.strip()
        == b"patience"
    )
    assert refresh() == plain
    monkeypatch.setenv(
        "GIT_CONFIG_GLOBAL", str(xdg / "git" / "config")
    )  # set it ourselves, too
    assert refresh() == plain


def test_refresh_reads_and_parses_each_patch_once(clean, monkeypatch):
    """The series is read once per `refresh` (the layers take the patches already read),
    and a batch of reads resolves the patches' directory once, not once per patch."""
    from gitfixtures import cli

    from overlay.records import series

    parsed: list[str] = []
    real_parse = series.parse_patch
    monkeypatch.setattr(
        series,
        "parse_patch",
        lambda data, name, *a, **k: (
            parsed.append(name) or real_parse(data, name, *a, **k)
        ),
    )
    assert cli(clean, "refresh", "--check").exit_code == 0
    assert parsed == [PATCH]

    resolved: list[str] = []
    real_realpath = os.path.realpath
    monkeypatch.setattr(
        os.path,
        "realpath",
        lambda p, *a, **k: resolved.append(p) or real_realpath(p, *a, **k),
    )
    series.load_series(str(clean.root))
    one = len(resolved)
    for k in range(2, 6):  # the same patch under four more names
        (clean.root / "patches-rocm" / f"000{k}-copy.patch").write_bytes(
            (clean.root / "patches-rocm" / PATCH).read_bytes()
        )
    names = [f"000{k}-copy.patch" for k in range(2, 6)]
    (clean.root / "patches-rocm" / "series").write_text(
        "\n".join([PATCH, *names]) + "\n"
    )
    resolved.clear()
    assert [p.name for p in series.load_series(str(clean.root))] == [PATCH, *names]
    assert len(resolved) == one, resolved


def test_rewrite_reasons_name_each_kind_of_line_a_refresh_owns():
    from overlay.engine.refresh import rewrite_reasons

    new = (
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        b"Subject: [PATCH] x\n\n---\ndiff --git a/f b/f\n"
        b"index " + b"a" * 40 + b".." + b"b" * 40 + b" 100644\n"
        b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
    )
    assert rewrite_reasons(new, new) == []
    old = (
        new.replace(b"a" * 40 + b".." + b"b" * 40, b"aaaaaaa..bbbbbbb")
        .replace(b"@@ -1 +1 @@", b"@@ -7 +7 @@")
        .replace(b"Subject:", b"Date: Mon, 1 Jan 2024 00:00:00 +0000\nSubject:")
    )
    assert rewrite_reasons(old, new) == [
        "Date header dropped",
        "index lines made full-length",
        "hunk line numbers",
    ]
