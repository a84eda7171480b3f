"""The front end's link check (overlay/build/symbols.py) on small synthetic C++ units:
which ``mlx::core`` functions each unit defines and references, compiled by the host's
g++ (or clang++) as ``overlay build --check`` compiles them. Skipped without those
compilers; no toolchain, no network."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from overlay.build.runlog import BuildLog
from overlay.build.symbols import (
    compiler_family,
    compiler_word,
    front_end_link_check,
    hip_symbols_commands,
    is_hip,
    symbols_argv,
    symbols_path,
    unit_shell,
)
from overlay.build.toolchain import Toolchain

HOST = Toolchain("host", "host compilers")

needs_gxx = pytest.mark.skipif(
    shutil.which("g++") is None or shutil.which("nm") is None,
    reason="needs g++ and nm (apt-get install g++ binutils)",
)
needs_clang = pytest.mark.skipif(
    shutil.which("clang++") is None, reason="needs clang++ (apt-get install clang)"
)

HEADER = """#pragma once
#include <vector>
namespace mlx::core {
struct Thing { int v; int get() const; };
int defined_here(int x);
int never_defined(int x);          // declared for every backend, defined by none here
void slice_fill_gpu(Thing& t);     // a new free function: the link-only break
inline int helper(int x) { return defined_here(x) + 1; }  // inline: every user defines it
template <typename T> T twice(T x) { return x + x; }
namespace detail { int hidden_ns(int); }
}
"""

UNITS = {
    # defines two functions and a member; uses a template and the inline helper
    "a.cpp": '#include "h.h"\nnamespace mlx::core {\n'
    "int defined_here(int x) { return twice(x); }\n"
    "int Thing::get() const { return helper(v); }\n"
    "namespace detail { int hidden_ns(int x) { return x; } }\n}\n",
    # references what a.cpp defines, and two functions nobody defines
    "b.cpp": '#include "h.h"\n'
    "int use(mlx::core::Thing& t) {\n"
    "  std::vector<mlx::core::Thing> v{t};\n"
    "  mlx::core::slice_fill_gpu(t);\n"
    "  return v[0].get() + mlx::core::detail::hidden_ns(1) + mlx::core::helper(2)\n"
    "    + mlx::core::never_defined(3);\n}\n",
    # references a function outside mlx::core: not the link check's business
    "c.cpp": "int outside(int);\nint c_use() { return outside(1); }\n",
}


def _compile(tmp_path: Path, compiler: str, family: str) -> dict[str, str]:
    """Every unit through :func:`unit_shell` as the check runs it; ``{unit: object}``."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "h.h").write_text(HEADER)
    objects = {}
    for name, text in UNITS.items():
        (src / name).write_text(text)
        out = symbols_path(str(tmp_path / "backend"), name)
        words = [compiler, "-O3", "-DNDEBUG", "-std=c++17", "-c", str(src / name)]
        words += ["-o", "ignored.o", "-MD", "-MF", "ignored.d"]
        line = unit_shell(words, out, family)
        proc = subprocess.run(
            ["sh", "-c", f"cd {src} && {line}"], capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        assert Path(out).is_file() and not (src / "ignored.o").exists()
        objects[name] = out
    return objects


def _check(tmp_path: Path, objects, uncompiled=None):
    log = BuildLog(str(tmp_path / "build.log"))
    try:
        return front_end_link_check(
            objects, uncompiled or {}, HOST, [], str(tmp_path), log
        )
    finally:
        log.close()


@needs_gxx
def test_gcc_lto_objects_give_the_undefined_mlx_core_functions(tmp_path):
    objects = _compile(tmp_path, "g++", "gcc")
    check = _check(tmp_path, objects)
    assert check.front_end and check.skipped is None and check.members == 3
    assert [(u.symbol, u.referenced_from) for u in check.undefined] == [
        ("mlx::core::never_defined(int)", ["b.cpp"]),
        ("mlx::core::slice_fill_gpu(mlx::core::Thing&)", ["b.cpp"]),
    ]
    report = check.report()
    assert report[0] == (
        "link: undefined symbol: mlx::core::never_defined(int) (referenced from b.cpp) "
        "[no upstream commit attributed]"
    )
    assert report[-1].startswith(
        "link check (front end): 2 undefined mlx::core symbol(s) over 3 unit(s)"
    )
    # the log has the line `overlay drift --log` reads, once per symbol
    log = (tmp_path / "build.log").read_text()
    assert log.count("link check: undefined symbol: mlx::core::slice_fill_gpu(") == 1


@needs_gxx
def test_a_unit_that_did_not_compile_leaves_what_it_names_undecided(tmp_path):
    objects = _compile(tmp_path, "g++", "gcc")
    # d.cpp failed: it mentions slice_fill_gpu, so it may be the one defining it
    check = _check(
        tmp_path, objects, {"d.cpp": "void slice_fill_gpu(Thing& t) { t.v = 0 }"}
    )
    assert [u.symbol for u in check.undefined] == ["mlx::core::never_defined(int)"]
    assert [u.symbol for u in check.undecided] == [
        "mlx::core::slice_fill_gpu(mlx::core::Thing&)"
    ]
    assert "1 undecided" in check.report()[-1]
    log = (tmp_path / "build.log").read_text()
    assert "undefined symbol: mlx::core::slice_fill_gpu" not in log  # not attributed
    # a unit whose text is unknown (a generated source) may define anything
    check = _check(tmp_path, objects, {"build/cpu/obj/gen.cpp": None})
    assert check.undefined == [] and len(check.undecided) == 2


@needs_gxx
def test_defining_the_function_in_one_more_unit_clears_it(tmp_path):
    objects = _compile(tmp_path, "g++", "gcc")
    fix = tmp_path / "src" / "fix.cpp"
    fix.write_text(
        '#include "h.h"\nnamespace mlx::core {\nvoid slice_fill_gpu(Thing& t) { t.v = 0; }\n'
        "int never_defined(int x) { return x; }\n}\n"
    )
    out = symbols_path(str(tmp_path / "backend"), "fix.cpp")
    line = unit_shell(["g++", "-std=c++17", "-c", str(fix)], out, "gcc")
    subprocess.run(["sh", "-c", f"cd {fix.parent} && {line}"], check=True)
    check = _check(tmp_path, {**objects, "fix.cpp": out})
    assert check.undefined == [] and check.members == 4


@needs_clang
def test_clang_plain_objects_give_the_same_set(tmp_path):
    objects = _compile(tmp_path, "clang++", "clang")
    check = _check(tmp_path, objects)
    assert [u.symbol for u in check.undefined] == [
        "mlx::core::never_defined(int)",
        "mlx::core::slice_fill_gpu(mlx::core::Thing&)",
    ]


def test_the_symbol_commands_replace_the_object_and_keep_the_flags():
    words = ["/b/launch/custom", "/usr/bin/c++", "-DX", "-O3", "-g", "-flto=auto"]
    words += ["-MD", "-MT", "o.o", "-MF", "o.o.d", "-o", "o.o", "-c", "a.cpp"]
    assert compiler_word(words) == "/usr/bin/c++"
    assert symbols_argv(words, "/s/a.o", "gcc") == [
        "/b/launch/custom",
        "/usr/bin/c++",
        "-DX",
        "-O3",
        "a.cpp",
        "-O0",
        "-g0",
        "-flto",
        "-fno-fat-lto-objects",
        "-c",
        "-o",
        "/s/a.o",
    ]
    assert symbols_argv(["clang++", "-c", "a.cpp"], "a.o", "clang") == [
        "clang++",
        "a.cpp",
        "-O0",
        "-g0",
        "-c",
        "-o",
        "a.o",
    ]
    hip = ["/b/launch/custom", "/usr/local/bin/hipcc", "-c", "/s/x.hip", "-o", "x.o"]
    hip += ["--offload-arch=gfx1030", "-fPIC", "-parallel-jobs=2"]
    assert is_hip(hip) and not is_hip(words)
    device, host = hip_symbols_commands(hip, "/s/x.o")
    assert device[-2:] == ["--offload-device-only", "-fsyntax-only"]
    assert host[-6:] == ["--offload-host-only", "-O0", "-g0", "-c", "-o", "/s/x.o"]
    assert "--offload-arch=gfx1030" in device and "--offload-arch=gfx1030" in host
    line = unit_shell(hip, "/s/x.o", "clang")
    assert line.startswith("rm -f /s/x.o && mkdir -p /s && { ")
    assert '[ "$d" = 0 ] && [ "$h" = 0 ]' in line  # either run failing fails the unit


def test_compiler_families_from_version_lines():
    assert (
        compiler_family(
            "g++ (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022 Free Software Foundation"
        )
        == "gcc"
    )
    assert compiler_family("c++ (Debian 16.2.0-4) 16.2.0\n") == "gcc"
    assert compiler_family("Debian clang version 22.1.8 (3)\nTarget: x86_64") == "clang"
    assert compiler_family("HIP version: 7.2\nAMD clang version 20") == "other"
    assert compiler_family("") == "other"
