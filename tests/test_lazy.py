"""A package's names imported from its modules when first used (overlay/lazy.py), and the
packages that use it: their typed imports and their lazy map name the same things."""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest
from gitfixtures import fresh_python

from overlay.lazy import attach

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``lazypkg`` with two modules, each recording that it was imported."""
    pkg = tmp_path / "lazypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            from overlay.lazy import attach

            LOADED = []
            __getattr__, __dir__ = attach(
                __name__, {"one": "first", "ONE": "first", "two": "second"}
            )
            """
        )
    )
    for name, body in (("first", "one = 1\nONE = 'I'\n"), ("second", "two = 2\n")):
        (pkg / f"{name}.py").write_text(
            f"import lazypkg\nlazypkg.LOADED.append({name!r})\n{body}"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [m for m in sys.modules if m == "lazypkg" or m.startswith("lazypkg.")]:
        del sys.modules[name]


def test_a_name_loads_its_module_only_when_used(package):
    import lazypkg

    assert lazypkg.LOADED == []
    assert lazypkg.two == 2
    assert lazypkg.LOADED == ["second"]
    from lazypkg import one

    assert one == 1
    assert lazypkg.LOADED == ["second", "first"]
    assert lazypkg.__dict__["ONE"] == "I"  # the module's other names came with it
    assert dir(lazypkg) == ["ONE", "one", "two"]


def test_an_unknown_name_is_an_attribute_error(package):
    import lazypkg

    with pytest.raises(AttributeError, match="no attribute 'three'"):
        lazypkg.three  # noqa: B018
    with pytest.raises(ImportError):
        from lazypkg import three  # noqa: F401


def test_a_name_that_is_also_a_module_is_refused():
    with pytest.raises(ValueError, match="record also name its modules"):
        attach("overlay.edit", {"record": "record", "start_edit": "start"})


def _lazy_packages() -> list[Path]:
    return sorted(
        p for p in (ROOT / "overlay").rglob("__init__.py") if "attach(" in p.read_text()
    )


def test_packages_with_lazy_names_exist():
    names = {p.parent.relative_to(ROOT).as_posix() for p in _lazy_packages()}
    assert {"overlay/edit", "overlay/records/fixes"} <= names


@pytest.mark.parametrize(
    "init", _lazy_packages(), ids=lambda p: p.parent.relative_to(ROOT).as_posix()
)
def test_the_typed_imports_and_the_lazy_map_agree(init):
    # The names a type checker sees (the `if TYPE_CHECKING:` imports) are exactly the
    # names the package gives at run time (the map given to attach), from the same
    # modules; both agree with __all__.
    tree = ast.parse(init.read_text())
    package = ".".join(init.parent.relative_to(ROOT).parts)
    typed: dict[str, str] = {}
    mapped: dict[str, str] = {}
    exported: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                assert imp.module.startswith(package + ".")
                for alias in imp.names:
                    typed[alias.name] = imp.module[len(package) + 1 :]
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            mapping = node.value.args[1]
            assert isinstance(mapping, ast.Dict)
            mapped = {
                ast.literal_eval(k): ast.literal_eval(v)
                for k, v in zip(mapping.keys, mapping.values, strict=True)
                if k is not None
            }
        elif isinstance(node, ast.Assign) and any(
            getattr(t, "id", "") == "__all__" for t in node.targets
        ):
            exported = ast.literal_eval(node.value)
    assert typed and typed == mapped
    assert sorted(exported) == sorted(mapped)


def test_the_heading_rewrite_loads_none_of_the_checks():
    # What a completed rebase loads of LOCAL_FIXES.md's package: the file's bytes and
    # the heading rewrite, not the checks and the new-entry code.
    code = (
        "import sys\n"
        "from overlay.records import fixes\n"
        "fixes.set_heading_pins\n"
        "from overlay.edit import refuse_during_edit\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('overlay.'))))\n"
    )
    loaded = fresh_python(code).split()
    assert "overlay.records.fixes.rewrite" in loaded
    assert "overlay.edit.session" in loaded
    for heavy in (
        "overlay.records.fixes.wording",
        "overlay.records.fixes.cross_checks",
        "overlay.records.fixes.new",
        "overlay.edit.record",
        "overlay.edit.start",
    ):
        assert heavy not in loaded


def test_a_lazy_pattern_compiles_on_first_use_and_answers_as_the_pattern(monkeypatch):
    import re

    from overlay.lazy import lazy_pattern

    compiled = []
    real = re.compile
    monkeypatch.setattr(re, "compile", lambda *a: compiled.append(a) or real(*a))
    hunk = lazy_pattern(rb"^@@ -(\d+)(?:,(\d+))? @@")
    word = lazy_pattern(r"^[a-z]+$", re.I)
    assert compiled == []  # nothing compiled at definition
    assert hunk.match(b"@@ -3,4 @@").groups() == (b"3", b"4")
    assert compiled == [(rb"^@@ -(\d+)(?:,(\d+))? @@", 0)]
    assert hunk.match(b"@@ -1 @@")  # a method asked for again is the one kept
    assert len(compiled) == 1
    assert word.fullmatch("MiXed") and not word.fullmatch("two words")
    assert word.sub("x", "abc") == "x" and word.pattern == "^[a-z]+$"
    # one compile per pattern, whatever attributes are asked for
    assert compiled[1:] == [(r"^[a-z]+$", re.I)]
    broken = lazy_pattern(r"(unclosed")
    with pytest.raises(re.error):
        broken.match("x")


def test_compile_all_compiles_every_lazy_pattern_once(monkeypatch):
    import re

    from overlay import lazy

    monkeypatch.setattr(lazy, "_MADE", [])
    compiled = []
    real = re.compile
    monkeypatch.setattr(re, "compile", lambda *a: compiled.append(a) or real(*a))
    used = lazy.lazy_pattern(r"a+")
    assert used.match("aa")
    unused = lazy.lazy_pattern(rb"b+", re.M)
    assert lazy.compile_all() == 2
    assert compiled == [
        (r"a+", 0),
        (rb"b+", re.M),
    ]  # the used one is not compiled again
    assert unused.fullmatch(b"bb") and unused.pattern == rb"b+"
    assert len(compiled) == 2  # answered from what compile_all compiled


def test_the_servers_preload_leaves_every_pattern_of_overlay_compiled():
    # A worker forked after the preload finds them compiled: each command it serves
    # would otherwise compile those it uses again (6 M instructions of a pin bump).
    out = fresh_python(
        "from overlay.server.daemon import preload\n"
        "failed = preload()\n"
        "from overlay import lazy\n"
        "left = [p._args for p in lazy._MADE if '_compiled' not in p.__dict__]\n"
        "print(len(lazy._MADE), failed, left)\n"
    )
    made, failed, left = out.split(" ", 2)
    assert int(made) > 50, out  # every module's patterns, not a few
    assert (failed, left.strip()) == ("[]", "[]"), out
