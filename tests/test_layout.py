"""Every record, state and build path named once (overlay/layout.py): no module of the
package or of the tests binds a second name to a ``layout`` path, and outside layout.py
the package spells none of them as a literal; the two finders are shown to find planted
examples."""

from __future__ import annotations

import ast
from pathlib import Path

from overlay import layout

ROOT = Path(__file__).resolve().parent.parent


def _layout_attr(node: ast.AST) -> bool:
    """Whether ``node`` is ``layout.NAME``."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "layout"
        and node.attr.isupper()
    )


def _derived_from_layout(node: ast.AST) -> bool:
    """Whether ``node`` is a ``layout`` path or a string made from one (``layout.X``,
    ``f"{layout.X}/y"``, ``layout.X + "/"``, ``os.path.join(layout.X, ...)``); a set or
    tuple of several names is not one path."""
    if _layout_attr(node):
        return True
    if isinstance(node, ast.JoinedStr | ast.FormattedValue | ast.BinOp | ast.Call):
        return any(_derived_from_layout(n) for n in ast.iter_child_nodes(node))
    return False


def layout_rebindings(source: str) -> list[int]:
    """Lines of ``source`` that give a ``layout`` path a second name: a module- or
    class-level name bound to one (or to a path made from one), or an import from
    ``overlay.layout``."""
    hits = []
    bodies = [ast.parse(source).body]
    while bodies:
        for stmt in bodies.pop():
            if isinstance(stmt, ast.ClassDef):
                bodies.append(stmt.body)
            elif isinstance(stmt, ast.ImportFrom) and stmt.module == "overlay.layout":
                hits.append(stmt.lineno)
            elif (
                isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None
            ):
                if _derived_from_layout(stmt.value):
                    hits.append(stmt.lineno)
    return sorted(hits)


def _layout_paths() -> set[str]:
    """``layout``'s paths that no other word spells: those with a ``/``, ``.`` or ``-``
    (not ``build``, ``src``, ``work``, ``suites``: words that name other things too),
    and the file names at their ends (``overlay.toml``, ``state.json``)."""
    values = {
        v
        for k, v in vars(layout).items()
        if k.isupper() and isinstance(v, str) and "\n" not in v
    }
    paths = {v for v in values if any(c in v for c in "/.-")}
    return paths | {v.rsplit("/", 1)[-1] for v in paths if "." in v.rsplit("/", 1)[-1]}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def layout_literals(source: str, paths: set[str]) -> list[tuple[int, str]]:
    """``(line, text)`` of each string literal of ``source`` (an f-string's pieces
    included, docstrings not) that spells one of ``paths`` as a path: the path itself,
    a path under it, or a piece ending in it. Text with a space in it (a message, an
    option's help) names the path for a reader and is not counted."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        text = node.value.strip("/")
        if id(node) in skip or not text or any(c.isspace() for c in text):
            continue
        if any(
            text == p or text.startswith(p + "/") or text.endswith("/" + p)
            for p in paths
        ):
            hits.append((node.lineno, node.value))
    return sorted(hits)


def _sources(*tops: str) -> list[tuple[str, str]]:
    return [
        (path.relative_to(ROOT).as_posix(), path.read_text())
        for top in tops
        for path in sorted((ROOT / top).rglob("*.py"))
        if path.relative_to(ROOT).as_posix() != "overlay/layout.py"
    ]


def test_no_module_gives_a_layout_path_a_second_name():
    """Every module (tests too) says ``layout.X`` where it means that path: no alias
    that could drift from it or mean something else (``STATE_DIR`` was once both
    ``.overlay`` and ``.overlay/rebase``)."""
    found = {
        rel: hits
        for rel, text in _sources("overlay", "tests", "benchmarks")
        if (hits := layout_rebindings(text))
    }
    assert found == {}, f"use layout.X where it is needed: {found}"


def test_no_module_spells_a_layout_path():
    """Outside ``overlay/layout.py`` the package names its paths only through it (the
    tests spell them, to pin where the files are)."""
    paths = _layout_paths()
    found = {
        rel: hits
        for rel, text in _sources("overlay")
        if (hits := layout_literals(text, paths))
    }
    assert found == {}, f"name these paths with layout.X: {found}"


def test_the_layout_checks_find_what_they_look_for():
    aliases = """
from overlay.layout import SERIES
from overlay import layout
MANIFEST_PATH = layout.MANIFEST
STATE_FILE: str = f"{layout.REBASE_STATE_DIR}/state.json"
PREFIX = layout.RESOLVED_DIR + "/"
WORK = os.path.join(layout.REBASE_STATE_DIR, layout.WORK)
class Paths:
    LOCK = layout.REBASE_LOCK
OURS = {layout.EXPORT_STAMP, layout.EXPORT_LOCK}
def f():
    path = layout.MANIFEST
"""
    assert layout_rebindings(aliases) == [2, 4, 5, 6, 7, 9]
    spelled = """
\"\"\"Reads patches-rocm/series.\"\"\"
a = open(os.path.join(root, "patches-rocm", "series"))
b = ".overlay/rebase"
c = f"{root}/LOCAL_FIXES.md"
d = os.path.join(root, "build", backend)
e = "report written to .overlay/last-rebase.md"
f = ".overlay-built.json"
g = "patches-rocm/overlay.toml"
h = os.path.basename(x) == "state.json"
"""
    assert [line for line, _ in layout_literals(spelled, _layout_paths())] == [
        3,
        4,
        5,
        9,
        10,
    ]
