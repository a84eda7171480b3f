"""The package's import graph has no cycle (issue 27).

Every import of an ``overlay`` module counts, at module level or inside a function or
an ``if TYPE_CHECKING:`` block alike: a cycle hidden by a function-local import is
still two modules that each need the other. ``from overlay.x import y`` is an edge to
``overlay.x.y`` when that is a module, else to ``overlay.x``.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "overlay").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the ``overlay`` modules it imports (its own package's ``__init__``
    excluded only where the module is that ``__init__``)."""
    modules = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            for target in targets:
                found = resolve(target) if target.startswith("overlay") else None
                if found and found != name:
                    edges.add(found)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: The modules that may start a git process themselves (the git layer); everything
#: else goes through them (``Store.git``, ``run_git``, ``git_ignored``, ...).
GIT_MODULES = {
    "overlay/git/env.py",
    "overlay/git/run.py",
    "overlay/git/objects.py",
    "overlay/git/store.py",
    "overlay/git/fetch.py",
    "overlay/git/ancestry.py",
}

_SPAWNS = {
    "run",
    "Popen",
    "call",
    "check_call",
    "check_output",
    "posix_spawn",
    "posix_spawnp",
    "execvp",
    "execv",
}


def _starts_git(tree: ast.AST) -> list[int]:
    """Lines of process starts (subprocess, os.posix_spawn*, os.exec*) whose arguments
    name git: the string ``"git"`` or ``git_executable()``."""
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in _SPAWNS:
            continue
        inner = [n for a in node.args for n in ast.walk(a)]
        if any(isinstance(n, ast.Constant) and n.value == "git" for n in inner) or any(
            isinstance(n, ast.Call) and getattr(n.func, "id", "") == "git_executable"
            for n in inner
        ):
            hits.append(node.lineno)
    return hits


def test_git_is_started_only_from_the_git_modules():
    found = {}
    for path in sorted((ROOT / "overlay").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in GIT_MODULES:
            continue
        hits = _starts_git(ast.parse(path.read_text()))
        if hits:
            found[rel] = hits
    assert found == {}, (
        f"start git through the git layer ({sorted(GIT_MODULES)}): {found}"
    )


def test_the_git_start_finder_finds_one():
    code = 'import subprocess\nsubprocess.run(["git", "status"])\nos.posix_spawnp("git", [])\n'
    assert _starts_git(ast.parse(code)) == [2, 3]


def _comment_lines(source: str) -> dict[int, str]:
    """Line number -> the text of the comment on that line (``#`` dropped)."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


def unexplained_local_imports(source: str) -> list[int]:
    """Lines of the imports inside a function (outside ``if TYPE_CHECKING:``) that give
    no reason: a comment of three words or more on the statement's own lines, or on the
    line right above it or above the first import of its run of imports (the domain
    imports of a CLI command can share one reason)."""
    comments = _comment_lines(source)
    lines = source.splitlines()

    def reason(node: ast.stmt) -> bool:
        own = range(node.lineno, (node.end_lineno or node.lineno) + 1)
        if any(len(comments.get(n, "").split()) >= 3 for n in own):
            return True
        above = node.lineno - 1
        return (
            above >= 1
            and lines[above - 1].lstrip().startswith("#")
            and len(comments.get(above, "").split()) >= 3
        )

    found: list[int] = []

    def visit(body: list[ast.stmt], in_function: bool) -> None:
        first = None
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                first = first or stmt
                if in_function and not (reason(stmt) or reason(first)):
                    found.append(stmt.lineno)
                continue
            first = None
            if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
                visit(stmt.orelse, in_function)
                continue
            inner = in_function or isinstance(
                stmt, (ast.FunctionDef, ast.AsyncFunctionDef)
            )
            for field in ("body", "orelse", "finalbody"):
                value = getattr(stmt, field, None)
                if isinstance(value, list):
                    visit(value, inner)
            for part in (*getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())):
                visit(part.body, inner)

    visit(ast.parse(source).body, False)
    return found


def test_every_function_local_import_says_why():
    """An import inside a function is there to keep a heavy or command-specific group
    (jinja2, rich, email, tomlkit, a command's domain modules) out of the start-up of
    the commands that do not need it; anything else belongs at the top of the module.
    The reason is written beside it, so the next reader can tell which it is."""
    found = {}
    for path in sorted((ROOT / "overlay").rglob("*.py")):
        lines = unexplained_local_imports(path.read_text())
        if lines:
            found[path.relative_to(ROOT).as_posix()] = lines
    assert found == {}, (
        "move these imports to the top of their module, or say in a comment why "
        f"they wait for the call: {found}"
    )


def test_the_local_import_checker_finds_one_without_a_reason():
    code = """\
import os


def plain():
    import json

    return json


def explained():
    import tomlkit  # tomlkit: only a rewrite of the manifest needs it

    # the command's domain modules load when it runs, not at start-up
    from overlay.checks import verify
    from overlay.records import fixes

    return tomlkit, verify, fixes


def typing_only():
    if TYPE_CHECKING:
        from overlay.layers import Layers
    import shutil  # why?

    class Inner:
        def method(self):
            try:
                import email.parser
            except ImportError:
                import email
            return email


class AtClassLevel:
    import re
"""
    assert unexplained_local_imports(code) == [5, 23, 28, 30]
