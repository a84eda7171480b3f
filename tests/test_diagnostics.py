"""One compiler-log parser under `overlay build`'s attribution and `overlay drift`.

The same log goes through both paths; they must place every error at the same
tree line (an error inside a system header lands on the tree line that
instantiated it, in both).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from gitfixtures import lines, make_patch

from overlay.build import parse_diagnostics
from overlay.diagnostics import Diagnostic, merge_same_place, parse_log, prefix_locator
from overlay.drift import identifiers
from overlay.drift import parse_log as drift_parse_log
from overlay.gitstore import Store
from overlay.layers import compute_layers
from overlay.manifest import load_manifest

SRC = "/work/build/rocm/src"
OBJ = "/work/build/rocm/obj"
DEVICE = "mlx/backend/rocm/device.cpp"


def _instantiated_log(src: str = SRC) -> str:
    """GCC 16's output for an error inside libstdc++ instantiated from device.cpp:25."""
    return (
        f"In file included from /usr/include/c++/16/memory:69,\n"
        f"                 from {src}/{DEVICE}:2:\n"
        "/usr/include/c++/16/bits/stl_construct.h: In instantiation of "
        "'void std::_Construct(_Tp*, _Args&& ...) [with _Tp = mlx::core::fast::CustomKernel]':\n"
        "/usr/include/c++/16/bits/alloc_traits.h:657:19:   required from 'static void "
        "std::allocator_traits<std::allocator<void> >::construct(...)'\n"
        f"{src}/{DEVICE}:25:40:   required from here\n"
        "   25 |   auto k = std::make_shared<CustomKernel>(stream);\n"
        "      |            ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~^~~~~~~~\n"
        "/usr/include/c++/16/bits/stl_construct.h:129:28: error: no matching function for "
        "call to 'construct_at(mlx::core::fast::CustomKernel*&, mlx::core::Stream&)'\n"
        "  \u2022 there is 1 candidate\n"
        "    \u2022 candidate 1: 'mlx::core::fast::CustomKernel::CustomKernel("
        "mlx::core::Stream, mlx::core::CompileOptions::Data)'\n"
    )


def test_build_and_drift_place_a_system_header_error_at_the_instantiating_line():
    log = _instantiated_log()
    built, other = parse_diagnostics(log, SRC, OBJ)
    drifted = drift_parse_log(log, strip_prefixes=[SRC])
    assert [(d.path, d.line, d.in_tree) for d in built] == [(DEVICE, 25, True)]
    assert [(d.path, d.line) for d in drifted] == [(DEVICE, 25)]
    assert other == []
    (diag,) = built
    assert diag.col == 40 and diag.message.startswith("no matching function")
    assert diag.reported_at == "/usr/include/c++/16/bits/stl_construct.h:129"
    # the bullet notes stay with their error, in both
    for d in (diag, drifted[0]):
        assert any("CompileOptions::Data" in n for n in d.notes)
    assert "CompileOptions" in identifiers(drifted[0])


@pytest.fixture
def store(isolated_git):
    return Store(str(isolated_git / "store.git"))


def _layers(overlay, store):
    return compute_layers(
        store, load_manifest(str(overlay.root)), str(overlay.root), stepwise=True
    )


def test_build_attributes_the_instantiating_line_to_its_patch_hunk(overlay, store):
    from overlay.build import attribute_diagnostics

    base = _layers(overlay, store)
    data, _tree = make_patch(
        store,
        base.patched,
        {DEVICE: lines("device", change={3: "device 3 patched", 25: "make_shared"})},
        subject="rocm: device",
    )
    overlay.add_patch("0001-device.patch", data)
    layers = _layers(overlay, store)
    diags, _other = parse_diagnostics(_instantiated_log(), SRC, OBJ)
    attribute_diagnostics(store, layers, diags)
    (diag,) = diags
    assert diag.attribution() == "patch 0001-device.patch hunk #2"
    assert diag.format() == (
        f"{DEVICE}:25:40: error: {diag.message} [patch 0001-device.patch hunk #2] "
        "(instantiated here; the error is in /usr/include/c++/16/bits/stl_construct.h:129)"
    )


def test_a_later_header_error_without_instantiation_stays_in_the_header():
    """A ``required from here`` belongs to its own context: a later error in a system
    header, reached through a plain include, is not moved to the old line."""
    log = _instantiated_log() + (
        f"In file included from {SRC}/mlx/ops.cpp:1:\n"
        "/usr/include/x.h:9:2: error: 'foo' does not name a type\n"
    )
    built, _ = parse_diagnostics(log, SRC, OBJ)
    drifted = drift_parse_log(log, strip_prefixes=[SRC])
    expected = [(DEVICE, 25), ("/usr/include/x.h", 9)]
    assert [(d.path, d.line) for d in built] == expected
    assert [(d.path, d.line) for d in drifted] == expected
    assert not built[1].in_tree and built[1].attribution() == "outside the tree"


def test_repeats_count_and_same_place_errors_merge_for_drift():
    log = (
        f"{SRC}/mlx/a.cpp:3:7: error: use of undeclared identifier 'x'\n"
        f"{SRC}/mlx/a.cpp:3:7: error: use of undeclared identifier 'x'\n"
        f"{SRC}/mlx/a.cpp:3:9: error: use of undeclared identifier 'y'\n"
        f"{SRC}/mlx/a.cpp:3:9: note: did you mean 'z'\n"
    )
    parsed = parse_log(log, prefix_locator([SRC]))
    assert [(d.message[-3:], d.count) for d in parsed.diagnostics] == [
        ("'x'", 2),
        ("'y'", 1),
    ]
    (merged,) = merge_same_place(parsed.diagnostics)
    assert merged.notes == ["use of undeclared identifier 'y'", "did you mean 'z'"]
    assert parsed.diagnostics[0].notes == []  # merging copies, it does not change


def test_linker_undefined_references_in_both_views():
    log = (
        "/usr/bin/ld: libmlx.a(fork.o): in function `use()':\n"
        "fork.cpp:(.text+0x1c): undefined reference to `mlx::core::Event::error() const'\n"
        "ld.lld: error: undefined symbol: mlx::core::NewOp::eval_gpu(int)\n"
        "clang: error: linker command failed with exit code 1\n"
    )
    built, other = parse_diagnostics(log, SRC, OBJ)
    assert built == [] and other == [
        "fork.cpp:(.text+0x1c): undefined reference to `mlx::core::Event::error() const'",
        "ld.lld: error: undefined symbol: mlx::core::NewOp::eval_gpu(int)",
        "clang: error: linker command failed with exit code 1",
    ]
    assert drift_parse_log(log) == [
        Diagnostic(
            "undefined", None, None, "mlx::core::Event::error() const", in_tree=False
        ),
        Diagnostic(
            "undefined", None, None, "mlx::core::NewOp::eval_gpu(int)", in_tree=False
        ),
    ]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_real_gcc_output_lands_on_the_tree_line_in_both(tmp_path):
    src = tmp_path / "src"
    (src / "mlx").mkdir(parents=True)
    (src / "mlx" / "k.cpp").write_text(
        "#include <vector>\n"
        "struct NoDefault { NoDefault(int) {} };\n"
        "int f() {\n"
        "  std::vector<NoDefault> v(3);\n"
        "  return (int)v.size();\n"
        "}\n"
    )
    proc = subprocess.run(
        ["g++", "-std=c++17", "-fsyntax-only", str(src / "mlx" / "k.cpp")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    built, _ = parse_diagnostics(proc.stderr, str(src), str(tmp_path / "obj"))
    drifted = drift_parse_log(proc.stderr, strip_prefixes=[str(src)])
    assert {(d.path, d.line) for d in built} == {("mlx/k.cpp", 4)}
    assert [(d.path, d.line) for d in drifted] == [("mlx/k.cpp", 4)]
    assert all(d.in_tree and d.reported_at for d in built)
