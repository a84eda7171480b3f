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
from overlay.build.diagnostics import (
    Diagnostic,
    merge_same_place,
    parse_log,
    prefix_locator,
)
from overlay.drift import identifiers, log_errors
from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest

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
    drifted = log_errors(log, strip_prefixes=[SRC])
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


#: libstdc++ 16 as clang++-22 prints its path.
CXX = "/usr/lib/gcc/x86_64-linux-gnu/16/../../../../include/c++/16"
KERNEL = "mlx/backend/rocm/custom_kernel.cpp"


def _clang_log(src: str = SRC) -> str:
    """Real output of Debian clang 22.1.8 (the ROCm toolchain chroot's, hipcc's clang)
    for ``clang++-22 -std=c++17 -fsyntax-only k.cpp``, where line 6 of k.cpp is
    ``auto k = std::make_shared<CustomKernel>(s);`` and the only constructor takes two
    ints; k.cpp's path rewritten to ``{src}/{KERNEL}``. The error comes first, then
    the instantiation chain as notes, innermost first, then the candidates."""
    return (
        f"In file included from {src}/{KERNEL}:1:\n"
        f"In file included from {CXX}/memory:68:\n"
        f"In file included from {CXX}/bits/stl_tempbuf.h:61:\n"
        f"{CXX}/bits/stl_construct.h:133:38: error: no matching constructor for initialization of 'CustomKernel'\n"
        "  133 |       ::new(static_cast<void*>(__p)) _Tp(std::forward<_Args>(__args)...);\n"
        "      |                                      ^   ~~~~~~~~~~~~~~~~~~~~~~~~~~~\n"
        f"{CXX}/bits/alloc_traits.h:845:9: note: in instantiation of function template specialization 'std::_Construct<CustomKernel, int &>' requested here\n"
        "  845 |         { std::_Construct(__p, std::forward<_Args>(__args)...); }\n"
        "      |                ^\n"
        f"{CXX}/bits/shared_ptr_base.h:671:30: note: in instantiation of function template specialization 'std::allocator_traits<std::allocator<void>>::construct<CustomKernel, int &>' requested here\n"
        "  671 |           allocator_traits<_Alloc>::construct(__a, _M_ptr(),\n"
        "      |                                     ^\n"
        f"{CXX}/bits/shared_ptr_base.h:1038:6: note: in instantiation of function template specialization 'std::_Sp_counted_ptr_inplace<CustomKernel, std::allocator<void>, __gnu_cxx::_S_atomic>::_Sp_counted_ptr_inplace<int &>' requested here\n"
        " 1038 |             _Sp_cp_type(__a._M_a, std::forward<_Args>(__args)...);\n"
        "      |             ^\n"
        f"{CXX}/bits/shared_ptr_base.h:1813:14: note: in instantiation of function template specialization 'std::__shared_count<>::__shared_count<CustomKernel, std::allocator<void>, int &>' requested here\n"
        " 1813 |         : _M_ptr(), _M_refcount(_M_ptr, __tag, std::forward<_Args>(__args)...)\n"
        "      |                     ^\n"
        f"{CXX}/bits/shared_ptr.h:463:4: note: in instantiation of function template specialization 'std::__shared_ptr<CustomKernel>::__shared_ptr<std::allocator<void>, int &>' requested here\n"
        "  463 |         : __shared_ptr<_Tp>(__tag, std::forward<_Args>(__args)...)\n"
        "      |           ^\n"
        f"{CXX}/bits/shared_ptr.h:1065:14: note: in instantiation of function template specialization 'std::shared_ptr<CustomKernel>::shared_ptr<std::allocator<void>, int &>' requested here\n"
        " 1065 |       return shared_ptr<_Tp>(_Sp_alloc_shared_tag<_Alloc>{__a},\n"
        "      |              ^\n"
        f"{src}/{KERNEL}:6:17: note: in instantiation of function template specialization 'std::make_shared<CustomKernel, int &>' requested here\n"
        "    6 |   auto k = std::make_shared<CustomKernel>(s);\n"
        "      |                 ^\n"
        f"{src}/{KERNEL}:2:8: note: candidate constructor (the implicit copy constructor) not viable: no known conversion from 'int' to 'const CustomKernel' for 1st argument\n"
        "    2 | struct CustomKernel {\n"
        "      |        ^~~~~~~~~~~~\n"
        f"{src}/{KERNEL}:2:8: note: candidate constructor (the implicit move constructor) not viable: no known conversion from 'int' to 'CustomKernel' for 1st argument\n"
        "    2 | struct CustomKernel {\n"
        "      |        ^~~~~~~~~~~~\n"
        f"{src}/{KERNEL}:3:3: note: candidate constructor not viable: requires 2 arguments, but 1 was provided\n"
        "    3 |   CustomKernel(int stream, int opts) {}\n"
        "      |   ^            ~~~~~~~~~~~~~~~~~~~~\n"
        "1 error generated.\n"
    )


def test_build_and_drift_place_a_clang_system_header_error_at_the_instantiating_line():
    log = _clang_log()
    built, other = parse_diagnostics(log, SRC, OBJ)
    drifted = log_errors(log, strip_prefixes=[SRC])
    assert [(d.path, d.line, d.col, d.in_tree) for d in built] == [
        (KERNEL, 6, 17, True)
    ]
    assert [(d.path, d.line) for d in drifted] == [(KERNEL, 6)]
    assert other == []
    (diag,) = built
    assert (
        diag.message == "no matching constructor for initialization of 'CustomKernel'"
    )
    assert diag.reported_at == f"{CXX}/bits/stl_construct.h:133"
    # the chain and the candidate notes stay with their error, in both; no note
    # (the in-tree candidates at lines 2 and 3 included) became an error of its own
    for d in (diag, drifted[0]):
        assert d.notes[0] == f"in {CXX}/bits/stl_construct.h:133"
        assert len(d.notes) == 1 + 7 + 3
        assert d.notes[-1].startswith("candidate constructor not viable: requires 2")
    assert "CustomKernel" in identifiers(drifted[0])


def test_clang_chain_moves_to_the_first_tree_frame_only_on_requested_here_notes():
    """Innermost first: the first ``requested here`` in the tree wins (not a later,
    outer one); a ``candidate`` note in the tree before it moves nothing."""
    log = (
        f"{CXX}/bits/stl_construct.h:133:38: error: no matching constructor\n"
        f"{SRC}/{KERNEL}:3:3: note: candidate constructor not viable\n"
        f"{CXX}/bits/alloc_traits.h:845:9: note: in instantiation of function "
        "template specialization 'std::_Construct<K>' requested here\n"
        f"{SRC}/{KERNEL}:20:5: note: in instantiation of function template "
        "specialization 'make<K>' requested here\n"
        f"{SRC}/{KERNEL}:40:7: note: in instantiation of function template "
        "specialization 'outer<K>' requested here\n"
    )
    built, _ = parse_diagnostics(log, SRC, OBJ)
    drifted = log_errors(log, strip_prefixes=[SRC])
    assert [(d.path, d.line, d.col) for d in built] == [(KERNEL, 20, 5)]
    assert [(d.path, d.line) for d in drifted] == [(KERNEL, 20)]
    assert built[0].notes[1] == "candidate constructor not viable"


def test_a_clang_header_error_repeated_from_two_units_counts_once_per_tree_line():
    """The same header error requested from the same tree line twice is one error
    printed twice; requested from two tree lines it is two errors."""
    other = _clang_log().replace(
        ":6:17: note: in instantiation", ":9:3: note: in instantiation"
    )
    built, _ = parse_diagnostics(_clang_log() + _clang_log() + other, SRC, OBJ)
    assert [(d.line, d.count) for d in built] == [(6, 2), (9, 1)]
    assert all(d.reported_at == f"{CXX}/bits/stl_construct.h:133" for d in built)


def test_build_attributes_the_clang_instantiating_line_to_its_patch_hunk(
    overlay, store
):
    from overlay.build import attribute_diagnostics

    base = _layers(overlay, store)
    data, _tree = make_patch(
        store,
        base.patched,
        {KERNEL: lines("kernel", change={6: "make_shared", 25: "kernel 25 patched"})},
        subject="rocm: custom kernel",
    )
    overlay.add_patch("0001-kernel.patch", data)
    layers = _layers(overlay, store)
    diags, _other = parse_diagnostics(_clang_log(), SRC, OBJ)
    attribute_diagnostics(store, layers, diags)
    (diag,) = diags
    assert diag.attribution() == "patch 0001-kernel.patch hunk #1"
    assert diag.format() == (
        f"{KERNEL}:6:17: error: {diag.message} [patch 0001-kernel.patch hunk #1] "
        f"(instantiated here; the error is in {CXX}/bits/stl_construct.h:133)"
    )


def test_a_clang_header_error_without_a_tree_frame_stays_in_the_header():
    """Every ``requested here`` in a header (an error reached only through other
    headers): the error stays where it was printed, its notes with it, and the next
    error is its own."""
    log = (
        f"{CXX}/bits/stl_construct.h:133:38: error: no matching constructor\n"
        f"{CXX}/bits/alloc_traits.h:845:9: note: in instantiation of function "
        "template specialization 'std::_Construct<K>' requested here\n"
        "/usr/include/x.h:7:1: note: in instantiation of function template "
        "specialization 'std::make_shared<K>' requested here\n"
        f"{SRC}/mlx/ops.cpp:4:2: error: use of undeclared identifier 'y'\n"
    )
    built, _ = parse_diagnostics(log, SRC, OBJ)
    drifted = log_errors(log, strip_prefixes=[SRC])
    expected = [(f"{CXX}/bits/stl_construct.h", 133), ("mlx/ops.cpp", 4)]
    assert [(d.path, d.line) for d in built] == expected
    assert [(d.path, d.line) for d in drifted] == expected
    header = built[0]
    assert not header.in_tree and header.reported_at is None
    assert header.attribution() == "outside the tree"
    assert len(header.notes) == 2 and built[1].notes == []


def test_a_clang_tree_error_with_notes_is_not_moved():
    """An error in the tree stays on its line, even when ``requested here`` notes
    name other tree lines; its notes stay with it."""
    log = (
        f"{SRC}/{KERNEL}:12:3: error: no member named 'eval' in 'K'\n"
        f"{SRC}/{KERNEL}:30:9: note: in instantiation of member function "
        "'Op<K>::run' requested here\n"
        f"{SRC}/{KERNEL}:2:8: note: 'K' declared here\n"
    )
    built, _ = parse_diagnostics(log, SRC, OBJ)
    drifted = log_errors(log, strip_prefixes=[SRC])
    assert [(d.path, d.line, d.col) for d in built] == [(KERNEL, 12, 3)]
    assert [(d.path, d.line) for d in drifted] == [(KERNEL, 12)]
    for d in (built[0], drifted[0]):
        assert d.reported_at is None
        assert d.notes == [
            "in instantiation of member function 'Op<K>::run' requested here",
            "'K' declared here",
        ]


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
    drifted = log_errors(log, strip_prefixes=[SRC])
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
    assert log_errors(log) == [
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
    drifted = log_errors(proc.stderr, strip_prefixes=[str(src)])
    assert {(d.path, d.line) for d in built} == {("mlx/k.cpp", 4)}
    assert [(d.path, d.line) for d in drifted] == [("mlx/k.cpp", 4)]
    assert all(d.in_tree and d.reported_at for d in built)
