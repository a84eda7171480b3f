"""The workspace: one store with its remotes, one manifest, layers on demand, paths in one place."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from gitfixtures import lines

from overlay import layout
from overlay.cli import main
from overlay.records.series import load_series
from overlay.workspace import Workspace


def test_the_store_points_at_the_manifests_remotes_once_both_are_known(overlay):
    ws = Workspace(str(overlay.root / "patches-rocm"))  # found upwards
    assert ws.root == str(overlay.root)
    store = ws.store
    urls = ws.manifest.remote_urls()
    for name, url in urls.items():
        assert store.out("config", f"remote.{name}.url") == url
    assert ws.store is store  # opened once


def test_layers_are_computed_once_per_set_of_options(overlay, monkeypatch):
    import overlay.engine.layers as layers_module

    calls = []
    real = layers_module.compute_layers

    def counting(*args, **kwargs):
        calls.append(kwargs.get("stepwise"))
        return real(*args, **kwargs)

    monkeypatch.setattr(layers_module, "compute_layers", counting)
    ws = Workspace(str(overlay.root))
    first = ws.layers()
    assert ws.layers() is first
    ws.layers(stepwise=True)
    assert calls == [False, True]


def test_layers_of_another_series_are_kept_apart(clean):
    ws = Workspace(str(clean.root))
    full = ws.layers(stepwise=True)
    # the series as a caller reads it is the one the workspace read: the same layers
    assert ws.layers(stepwise=True, series=load_series(str(clean.root))) is full
    none = ws.layers(stepwise=True, series=[])
    assert none is not full and none.patched == full.forked != full.patched
    assert ws.layers(stepwise=True, series=[]) is none


def test_forgotten_records_are_read_again(clean):
    ws = Workspace(str(clean.root))
    manifest, layers = ws.manifest, ws.layers()
    path = clean.root / "patches-rocm" / "overlay.toml"
    path.write_text(path.read_text().replace("# test manifest", "# rewritten"))
    assert ws.manifest is manifest and ws.layers() is layers  # read once
    ws.forget_records()
    assert ws.manifest is not manifest and ws.layers() is not layers


def _counted(monkeypatch, module, name: str) -> list:
    """Count the calls of ``module.name`` (every caller's, however it imported it)."""
    calls: list = []
    real = getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


@pytest.mark.parametrize("command", [["verify"], ["ci", "--only", "verify"]])
def test_a_command_reads_the_manifest_and_computes_the_layers_once(
    clean, monkeypatch, command
):
    import overlay.engine.layers
    import overlay.records.manifest

    # parse_manifest: load_manifest's own step, whoever bound load_manifest
    parsed = _counted(monkeypatch, overlay.records.manifest, "parse_manifest")
    computed = _counted(monkeypatch, overlay.engine.layers, "compute_layers")
    result = CliRunner().invoke(main, ["-C", str(clean.root), *command])
    assert result.exit_code == 0, result.output
    assert (len(parsed), len(computed)) == (1, 1)


def test_a_rebase_reads_the_manifest_once_per_command(ov, w, monkeypatch):
    import overlay.records.manifest

    parsed = _counted(monkeypatch, overlay.records.manifest, "parse_manifest")
    root = str(ov.root)
    stopped = CliRunner().invoke(main, ["-C", root, "rebase", "--onto", w.pin_conflict])
    assert stopped.exit_code == 1 and "conflicts" in stopped.output
    assert len(parsed) == 1
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp"
    work.write_text(lines("core", change={5: "core 5 upstream rewrite // rocm hook"}))
    parsed.clear()
    done = CliRunner().invoke(main, ["-C", root, "rebase", "--continue"])
    assert done.exit_code == 0, done.output
    assert len(parsed) == 1
    assert (
        f'pin = "{w.pin_conflict}"'
        in (ov.root / "patches-rocm/overlay.toml").read_text()
    )


def test_outside_a_repository_the_base_is_the_start(tmp_path):
    ws = Workspace(str(tmp_path))
    assert ws.found is None and ws.base == str(tmp_path)
    assert ws.suites_path == os.path.join(
        str(tmp_path), "patches-rocm", "suites", "suites.toml"
    )


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
