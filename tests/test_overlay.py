"""The package as a whole: shape checks over every module of ``overlay/`` and the
README's promises.

The import graph has no cycle (every import counts, at module level, inside a function or
an ``if TYPE_CHECKING:`` block: a cycle hidden by a function-local import is still two
modules that each need the other; ``from overlay.x import y`` is an edge to
``overlay.x.y`` when that is a module, else to ``overlay.x``); git is started only from
``overlay/git/``; a function-local import says why; no module is over 600 lines; the
design map names every module; no module cites an issue or a trial; XML, jinja2 and the
progress display each have one home; ``tests/`` mirrors the package; the README's
commands exist; no module defines a named tuple or a dataclass under deferred
annotations."""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

from overlay.cli import main

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


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def test_readme_setup_puts_overlay_on_path():
    setup = (
        _readme()
        .split("## Set-up on a fresh machine", 1)[1]
        .split("```sh", 1)[1]
        .split("```", 1)[0]
    )
    assert ". .venv/bin/activate" in setup
    dry = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "run"],
        capture_output=True,
        text=True,
        env=dict(os.environ, MAKEFLAGS=""),
    )
    if dry.returncode != 0 and "No rule" in dry.stderr:
        pytest.fail(dry.stderr)
    assert ". .venv/bin/activate" in dry.stdout  # make run says how to reach `overlay`


def test_every_readme_command_exists():
    text = _readme()
    commands = set(main.list_commands(None))
    shown = set(re.findall(r"`overlay ([a-z]+)", text))
    assert shown and shown <= commands, shown - commands
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.M))
    shown_make = set(re.findall(r"`make ([a-z][a-z-]*)`", text)) | set(
        re.findall(r"^make ([a-z-]+)", text, re.M)
    )
    assert shown_make and shown_make <= targets, shown_make - targets


#: docs/design.md §3: a module a newcomer can hold. Complexity is ruff's (C90, 15).
MAX_MODULE_LINES = 600


def test_no_module_is_over_the_line_limit():
    """No module is over 600 lines (ruff does not count lines; this does)."""
    long = {
        path.relative_to(ROOT).as_posix(): n
        for path in sorted((ROOT / "overlay").rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these along their sections (docs/design.md §3): {long}"


def _map_rows() -> list[str]:
    text = (ROOT / "docs" / "design.md").read_text()
    start = text.index("\n## 3.")
    end = text.index("\n## 4.", start)
    return [line for line in text[start:end].splitlines() if line.startswith("|")]


def unmapped(rows: list[str], modules: list[str]) -> list[str]:
    """The module paths (relative to ``overlay/``) that no row of the map names."""
    missing = []
    for rel in modules:
        parts = rel.removesuffix(".py").split("/")
        if parts[-1] == "__init__":
            package = "/".join(parts[:-1]) + "/"
            if package == "/" or any(
                t.startswith(package)
                for row in rows
                for t in re.findall(r"`([^`]+)`", row)
            ):
                continue  # the package (or the root package) is in the map
        named = False
        for row in rows:
            ticks = re.findall(r"`([^`]+)`", row)
            if rel in ticks or (len(parts) == 1 and f"{parts[0]}.py" in ticks):
                named = True
            # a package row: `pkg/` or `pkg/sub/` with the module's name in the row
            for depth in range(1, len(parts)):
                package = "/".join(parts[:depth]) + "/"
                rest = parts[depth:]
                if any(t == package or t.endswith("/" + package) for t in ticks) and (
                    not rest or re.search(rf"`{re.escape(rest[0])}(/|`| \(|\b)", row)
                ):
                    named = True
            if len(parts) > 1 and "/".join(parts) + "/" in ticks:
                named = True
        if not named:
            missing.append(rel)
    return missing


def test_every_module_is_in_the_design_map():
    modules = sorted(
        p.relative_to(ROOT / "overlay").as_posix()
        for p in (ROOT / "overlay").rglob("*.py")
    )
    assert unmapped(_map_rows(), modules) == []


def test_the_map_check_finds_a_missing_module():
    rows = [
        "| git | `git/store.py` | the store |",
        "| cli | `cli/` | `trees`, `runs` |",
    ]
    assert unmapped(
        rows, ["git/store.py", "cli/trees.py", "cli/other.py", "new.py"]
    ) == [
        "cli/other.py",
        "new.py",
    ]


_HISTORY = re.compile(r"\bissues?\s+#?\d+|\bnew user's trial", re.IGNORECASE)


def history_mentions(text: str) -> list[int]:
    """Lines of ``text`` that cite an issue by number or a new user's trial."""
    return [n for n, line in enumerate(text.splitlines(), 1) if _HISTORY.search(line)]


def test_no_module_cites_an_issue_or_a_trial():
    found = {}
    for path in sorted((ROOT / "overlay").rglob("*")):
        if path.suffix not in (".py", ".j2"):
            continue
        lines = history_mentions(path.read_text(encoding="utf-8"))
        if lines:
            found[path.relative_to(ROOT).as_posix()] = lines
    assert found == {}, (
        "say what the code does and why; the history goes to the commit message "
        f"and a figure worth keeping to docs/: {found}"
    )


def test_the_history_finder_finds_issues_and_trials():
    text = (
        '"""The verdict cache (issue 14).\n'
        "Kept for a run of issues 8 and 16; see Issue #30 item 3.\n"
        "Found by a new user's trial.\n"
        "A patch may serve several entries; docs/design.md §5 says how.\n"
        "The issue is a race in the allocator; 14 issues of the lock remain.\n"
    )
    assert history_mentions(text) == [1, 2, 3]


_RECORD_CLASS = re.compile(
    r"^class \w+\(NamedTuple\)|^@(dataclasses\.)?dataclass", re.M
)


def deferred_records(text: str) -> bool:
    """Whether ``text`` defines a named tuple or a dataclass under
    ``from __future__ import annotations`` (their string annotations are compiled
    or matched one by one at import)."""
    return bool(_RECORD_CLASS.search(text)) and bool(
        re.search(r"^from __future__ import annotations$", text, re.M)
    )


def test_no_named_tuple_or_dataclass_under_deferred_annotations():
    found = [
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / "overlay").rglob("*.py"))
        if deferred_records(path.read_text(encoding="utf-8"))
    ]
    assert found == [], (
        "drop `from __future__ import annotations` where a NamedTuple or dataclass "
        f"is defined (docs/design.md §10): {found}"
    )


def test_the_deferred_annotation_finder_finds_one():
    nt = "class Row(NamedTuple):\n    a: str\n"
    dc = "@dataclasses.dataclass\nclass S:\n    a: str\n"
    future = "from __future__ import annotations\n\n"
    assert deferred_records(future + nt) and deferred_records(future + dc)
    assert not deferred_records(nt) and not deferred_records(future + "class A:\n")


def test_one_xml_writer_one_jinja_environment_one_progress_display():
    """XML is built only in overlay/report/junit.py, jinja2 set up only in
    overlay/report/templating.py (a second writer is how the ci bug came about), a live
    line drawn only by overlay/report/progress.py (suites had a raw-ANSI one of its own)."""
    import pathlib
    import re

    import overlay

    pkg = pathlib.Path(overlay.__file__).parent
    xml = re.compile(r"xml\.etree|ElementTree|saxutils|xml\.dom|lxml|&lt;|&amp;")
    jinja = re.compile(r"jinja2\.(Environment|Template)\b|from jinja2 import")
    live = re.compile(r"rich\.live|\\x1b\[2K|\\r\\x1b")
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).as_posix()
        text = path.read_text(encoding="utf-8")
        if rel != "report/junit.py":
            assert not xml.search(text), f"{rel} builds or escapes XML itself"
        if rel != "report/templating.py":
            assert not jinja.search(text), f"{rel} makes its own jinja2 environment"
        if rel != "report/progress.py":
            assert not live.search(text), f"{rel} draws its own live progress line"


#: Test files that test no one module or package, each with the reason it has a name
#: of its own. Every other ``tests/test_*.py`` is named by the path of what it tests.
CROSS_CUTTING = {
    "test_benchmarks.py": "the benchmark scripts' shared runner (benchmarks/_record.py): "
    "medians and spread of the runs, every target checked",
    "test_cases.py": "the public-cases corpus: each case runs every command it touches",
    "test_ci_example.py": "the GitHub Actions example of docs/examples/, linted as "
    "GitHub reads it",
    "test_fuzz.py": "the fuzz of every record (tests/fuzzlib.py, docs/fuzz.md)",
    "test_interop.py": "the series read and applied by git am and quilt",
    "test_isolation.py": "the test suite's own isolation (tests/conftest.py)",
    "test_kill_sweep.py": "every write point of record and import killed "
    "(tests/killsweep.py)",
    "test_real_link_break.py": "a link-only break on the real mirrors and toolchain",
    "test_real_mirrors.py": "the commands on the real upstream and fork mirrors",
    "test_record_owners.py": "each record read and written by one module: a check over "
    "every module of overlay/, with its own table of owners",
}


def package_paths(root: Path) -> tuple[set[str], set[str]]:
    """The names a test file may take under ``root`` (the ``overlay/`` directory): every
    module and package by its path with ``_`` for ``/`` (``build_attribute`` for
    ``build/attribute.py``, ``records_fixes`` for ``records/fixes/``, ``overlay`` for
    the package as a whole), and the packages among them."""
    names, packages = {"overlay"}, set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            if len(parts) > 1:
                packages.add("_".join(parts[:-1]))
                names.add("_".join(parts[:-1]))
        elif not parts[-1].startswith("__"):
            names.add("_".join(parts))
    return names, packages


def misnamed_tests(
    tests: list[str], names: set[str], packages: set[str], allowed: set[str]
) -> tuple[list[str], list[str]]:
    """``(files, packages)``: the test files (``test_*.py``) that name no module or
    package of ``names`` and are not in ``allowed``, and the ``packages`` that no test
    file names, themselves or through a module of theirs."""
    named = {t.removeprefix("test_").removesuffix(".py") for t in tests}
    files = sorted(
        t
        for t in tests
        if t not in allowed and t.removeprefix("test_").removesuffix(".py") not in names
    )
    untested = sorted(
        p for p in packages if not any(n == p or n.startswith(p + "_") for n in named)
    )
    return files, untested


def test_every_test_file_is_named_by_the_module_it_tests():
    """``tests/`` mirrors the package: the test of ``overlay/<pkg>/<module>.py`` is
    ``tests/test_<pkg>_<module>.py``, of a package ``tests/test_<pkg>.py``, of a top-level
    module ``tests/test_<module>.py``; the files in :data:`CROSS_CUTTING` say why they
    are not. Every package has a test file."""
    names, packages = package_paths(ROOT / "overlay")
    tests = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert misnamed_tests(tests, names, packages, set(CROSS_CUTTING)) == ([], [])
    assert set(CROSS_CUTTING) <= set(tests), "an allowed file that is gone"


def test_the_test_name_check_finds_a_misnamed_file_and_an_untested_package():
    names = {"overlay", "build", "build_cache", "records", "records_fixes", "layout"}
    packages = {"build", "records", "records_fixes"}
    tests = [
        "test_build_cache.py",
        "test_records.py",
        "test_layout.py",
        "test_first_week.py",
        "test_build_cache_speed.py",
        "test_corpus.py",
    ]
    assert misnamed_tests(tests, names, packages, {"test_corpus.py"}) == (
        ["test_build_cache_speed.py", "test_first_week.py"],
        ["records_fixes"],
    )
