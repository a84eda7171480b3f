"""Each record has one module that reads and writes it, as quilt keeps
``insert_in_series``, ``remove_from_series`` and ``rename_in_series`` in one file: the
manifest, the series and the patch files, the resolutions, ``LOCAL_FIXES.md``, the run
state, the last run's report and the export's stamp (:data:`OWNERS`). A check over every
module of the package, with its own table of owners; the series' one line-ending rule
is tested with its writers (tests/test_records_series.py)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


#: Each record: the ``layout`` names that spell its path, and the module (or package,
#: ending in ``/``) that reads and writes it. Every other module goes through the
#: owner's functions.
OWNERS = {
    "manifest": ({"MANIFEST"}, "overlay/records/manifest.py"),
    "series": ({"SERIES"}, "overlay/records/series.py"),
    "patch files": ({"PATCH_DIR"}, "overlay/records/series.py"),
    "resolutions": ({"RESOLVED_DIR"}, "overlay/records/resolutions.py"),
    "LOCAL_FIXES.md": ({"LOCAL_FIXES"}, "overlay/records/fixes/"),
    "run state": ({"REBASE_STATE", "STATE_JSON"}, "overlay/rebase/state.py"),
    "run backup": ({"BACKUP_JSON", "BACKUP"}, "overlay/rebase/backup.py"),
    "last-run report": (
        {"LAST_REBASE_JSON", "LAST_REBASE_MD"},
        "overlay/rebase/report.py",
    ),
    "export stamp": ({"EXPORT_STAMP"}, "overlay/export/stamp.py"),
}

#: Functions (``module::function``) that open records for a reason of their own, never
#: to read or edit one record: why each may.
GENERIC = {
    "overlay/edit/record.py::_journal": "record's journal keeps the bytes of every file "
    "before it writes it (its rollback); the new bytes come from the owners",
    "overlay/importer/writing.py::write_import": "the import moves the records it "
    "staged through their owners into place, and the old ones aside, by renames",
}

#: Calls that read or write the file their arguments name.
_FILE_CALLS = {
    "open",
    "read_text",
    "read_bytes",
    "write_text",
    "write_bytes",
    "unlink",
    "rmtree",
    "atomic_write",
    "write_if_changed",
    "read_record",
    "read_record_text",
    "read_record_dir",
    "scan_record_dir",
}
#: Calls that do only as ``os.X`` or ``shutil.X`` (``str.replace`` touches no file).
_OS_CALLS = {"replace", "rename", "remove", "copy", "copy2", "copyfile", "move"}


def _names(node: ast.AST) -> set[str]:
    return {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Name | ast.Attribute)
    }


def _bindings(node: ast.AST) -> tuple[list[ast.AST], ast.AST | None]:
    """The targets a statement or clause binds and the value they come from."""
    if isinstance(node, ast.Assign):
        return node.targets, node.value
    if isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
        return [node.target], node.value
    if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
        return [node.target], node.iter
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return [node.optional_vars], node.context_expr
    return [], None


def _tainted(body: list[ast.AST], names: set[str]) -> set[str]:
    """``names`` and every local name whose value is made from one of them (a path
    joined from it, a loop over it, a file opened on it), to a fixed point."""
    tainted = set(names)
    changed = True
    while changed:
        changed = False
        for node in body:
            targets, value = _bindings(node)
            if value is None or not _names(value) & tainted:
                continue
            for target in targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name) and n.id not in tainted:
                        tainted.add(n.id)
                        changed = True
    return tainted


def _file_call(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in _FILE_CALLS
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in _OS_CALLS:
        return isinstance(func.value, ast.Name) and func.value.id in ("os", "shutil")
    return func.attr in _FILE_CALLS


def record_opens(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, function)`` of each call in ``source`` that opens, reads, writes,
    renames or deletes the file a path made from one of ``names`` leads to (its
    argument or its receiver names the path, or a local made from it)."""
    hits = set()
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        # The body only: a decorator naming the path (an option's help) opens nothing.
        body = [n for stmt in fn.body for n in ast.walk(stmt)]
        tainted = _tainted(body, names)
        for node in body:
            if not (isinstance(node, ast.Call) and _file_call(node)):
                continue
            parts = [*node.args, *(k.value for k in node.keywords)]
            if isinstance(node.func, ast.Attribute):
                parts.append(node.func.value)
            if any(_names(part) & tainted for part in parts):
                hits.add((node.lineno, fn.name))
    return sorted(hits)


def _foreign_opens(names: set[str], owner: str) -> dict[str, list[int]]:
    """The modules other than ``owner`` (and the :data:`GENERIC` functions) that open
    the record ``names`` spell: ``{module: [line, ...]}``."""
    found = {}
    for path in sorted((ROOT / "overlay").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == owner or (owner.endswith("/") and rel.startswith(owner)):
            continue
        hits = [
            line
            for line, fn in record_opens(path.read_text(), names)
            if f"{rel}::{fn}" not in GENERIC
        ]
        if hits:
            found[rel] = hits
    return found


@pytest.mark.parametrize("record", sorted(OWNERS))
def test_no_module_but_the_owner_opens_a_record(record):
    names, owner = OWNERS[record]
    assert _foreign_opens(names, owner) == {}, f"read and write it through {owner}"


def test_each_owner_exists_and_opens_its_record():
    for names, owner in OWNERS.values():
        paths = (
            sorted((ROOT / owner).rglob("*.py"))
            if owner.endswith("/")
            else [ROOT / owner]
        )
        assert any(record_opens(p.read_text(), names) for p in paths), owner


def test_each_generic_function_opens_a_record():
    """An excuse that no longer excuses anything goes."""
    every = set().union(*(names for names, _owner in OWNERS.values()))
    used = set()
    for key in GENERIC:
        rel, fn = key.split("::")
        if any(f == fn for _l, f in record_opens((ROOT / rel).read_text(), every)):
            used.add(key)
    assert used == set(GENERIC)


@pytest.mark.parametrize("record", sorted(OWNERS))
def test_a_planted_open_of_each_record_is_found(record):
    names, _owner = OWNERS[record]
    name = sorted(names)[0]
    planted = textwrap.dedent(
        f"""
        def planted(root):
            with open(os.path.join(root, layout.{name}), "rb") as fh:
                return fh.read()
        """
    )
    assert record_opens(planted, names) == [(3, "planted")]


def test_the_record_finder_follows_the_forms_a_path_takes():
    source = textwrap.dedent(
        """
        def through_a_local(root):
            path = os.path.join(root, layout.MANIFEST)
            return Path(path).read_text()

        def in_a_loop(root, report):
            for rel in (layout.LAST_REBASE_JSON, layout.LAST_REBASE_MD):
                atomic_write(layout.under(root, rel), report)

        def renamed_into_place(root, tmp):
            os.replace(tmp, os.path.join(root, layout.LOCAL_FIXES))

        def as_a_record(root, name):
            return read_record(root, f"{layout.PATCH_DIR}/{name}", what="patch")

        def deleted(root, rel):
            full = os.path.join(root, layout.RESOLVED_DIR, rel)
            os.unlink(full)

        def said_only(root):
            print(f"see {layout.SERIES}")
            with open(os.path.join(root, "other")) as fh:
                return fh.read()

        def a_string_replace(root):
            rel = layout.SERIES
            return rel.replace("/", os.sep)

        def through_the_owner(root, text):
            series.write_series(root, text)
        """
    )
    every = {
        "MANIFEST",
        "LAST_REBASE_JSON",
        "LAST_REBASE_MD",
        "LOCAL_FIXES",
        "PATCH_DIR",
        "RESOLVED_DIR",
        "SERIES",
    }
    assert [fn for _line, fn in record_opens(source, every)] == [
        "through_a_local",
        "in_a_loop",
        "renamed_into_place",
        "as_a_record",
        "deleted",
    ]
