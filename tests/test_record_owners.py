"""Each record has one module that reads and writes it (issue 27), as quilt keeps
``insert_in_series``, ``remove_from_series`` and ``rename_in_series`` in one file:
``patches-rocm/series`` in ``overlay/records/series.py`` (with one line-ending rule, the series'
own: the rebase turned CRLF into LF while the edit kept it), the last run's report
(``.overlay/last-rebase.json`` and ``.md``) in ``overlay/rebase/report.py``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from gitfixtures import cli, lines
from seriesfixtures import add_patch, write_fixes

from overlay.records import series

ROOT = Path(__file__).resolve().parent.parent

CRLF = "# the fixes\r\n0001-a.patch\r\n\r\n0002-b.patch  # b\r\n"


@pytest.mark.parametrize("text", [CRLF, CRLF.replace("\r\n", "\n")])
def test_every_writer_keeps_the_series_line_ending(text):
    nl = "\r\n" if "\r\n" in text else "\n"
    added = series.series_with(text, "0003-c.patch", "0001-a.patch")
    assert added.splitlines(keepends=True)[2] == "0003-c.patch" + nl
    assert series.series_with(text, "0003-c.patch", None).endswith(
        "0002-b.patch  # b" + nl + "0003-c.patch" + nl
    )
    assert series.series_renamed(text, "0002-b.patch", "0002-bb.patch") == text.replace(
        "0002-b.patch", "0002-bb.patch"
    )
    assert series.series_keeping(text, {"0002-b.patch"}) == text.replace(
        "0001-a.patch" + nl, ""
    )
    with pytest.raises(series.OverlayError):
        series.series_renamed(text, "0009-x.patch", "y.patch")


def test_a_rebase_that_drops_a_patch_keeps_a_crlf_series(ov, w):
    device = "mlx/backend/rocm/device.cpp"
    data = add_patch(
        ov, "0001-device.patch", {device: lines("device", change={9: "d9"})}
    )
    ov.add_patch("0002-again.patch", data.replace(b"Local-Fix: 1", b"Local-Fix: 2"))
    write_fixes(ov, [("Device.", [device]), ("Again.", [device])])
    path = ov.root / "patches-rocm" / "series"
    path.write_bytes(b"# ours\r\n0001-device.patch\r\n0002-again.patch\r\n")
    done = cli(ov, "rebase", "--onto", w.pin_clean)
    assert done.exit_code == 0, done.output
    assert path.read_bytes() == b"# ours\r\n0001-device.patch\r\n"


#: A record's path names (as the code spells them) -> the module that owns it.
OWNERS = {
    frozenset({"SERIES_PATH", "SERIES"}): "overlay/records/series.py",
    frozenset(
        {"LAST_REBASE_JSON", "LAST_REBASE_MD", "REPORT_JSON", "REPORT_MD"}
    ): "overlay/rebase/report.py",
}

#: Modules that open a record for a reason of their own, never to read or edit it.
GENERIC = {
    # record's journal keeps the bytes of every file before it writes it (its rollback).
    "overlay/edit/record.py",
}


def _opens(tree: ast.AST, names: frozenset[str]) -> list[int]:
    """Lines of the functions that name one of ``names`` and call ``open``: they read
    or write that record themselves."""
    hits = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        # The body only: a decorator naming the path (an option's help) opens nothing.
        body = [n for stmt in fn.body for n in ast.walk(stmt)]
        named = {
            n.id if isinstance(n, ast.Name) else n.attr
            for n in body
            if isinstance(n, ast.Name | ast.Attribute)
        }
        opens = any(
            isinstance(n, ast.Call) and getattr(n.func, "id", None) == "open"
            for n in body
        )
        if opens and named & names:
            hits.append(fn.lineno)
    return hits


@pytest.mark.parametrize("names", sorted(OWNERS, key=sorted), ids=lambda n: min(n))
def test_no_module_but_the_owner_opens_a_record(names):
    owner = OWNERS[names]
    found = {}
    for path in sorted((ROOT / "overlay").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == owner or rel in GENERIC:
            continue
        hits = _opens(ast.parse(path.read_text()), names)
        if hits:
            found[rel] = hits
    assert found == {}, f"read and write it through {owner}: {found}"
