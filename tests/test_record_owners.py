"""Each record has one module that reads and writes it, as quilt keeps
``insert_in_series``, ``remove_from_series`` and ``rename_in_series`` in one file:
``patches-rocm/series`` in ``overlay/records/series.py`` (its writers and their one
line-ending rule: tests/test_records_series.py), the last run's report
(``.overlay/last-rebase.json`` and ``.md``) in ``overlay/rebase/report.py``. A check over
every module of the package, with its own table of owners."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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
