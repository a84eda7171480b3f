"""Commands that said "all is well" on records that are not (issue 26, item 7): a
patch without its mbox ``From <sha>`` line or its ``From:`` author (SER018), a
``suites.toml`` that declares no suite, and ``status``/``refresh`` on a series that
makes a symlink out of the tree (``export`` refuses it; SER016). Real fixture
repositories, no network."""

from __future__ import annotations

import json

import pytest
from gitfixtures import PATCH, cli, make_patch, records_hash

from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest

PDIR = "patches-rocm"


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


@pytest.mark.parametrize(
    "text",
    ["", "# suites come later\n", "[suites]\n"],
    ids=["empty", "comment", "table"],
)
def test_suite_list_on_a_file_without_suites_is_one_line_and_exit_2(clean, text):
    suites = clean.root / PDIR / "suites"
    suites.mkdir(exist_ok=True)
    (suites / "suites.toml").write_text(text)
    for args in (["suite", "list"], ["suite", "run", "--runs", "1"]):
        result = cli(clean, *args)
        assert result.exit_code == 2, (args, result.output)
        lines = [ln for ln in result.output.splitlines() if ln.startswith("overlay:")]
        assert len(lines) == 1 and "declares no suite" in lines[0], result.output


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
