"""Drift attribution on a stand-in project: a renamed function and a new pure-virtual hook."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gitfixtures import WorkRepo
from overlay.drift import attribute, identifiers, parse_log
from overlay.gitstore import Store

API_V1 = """#pragma once
namespace mlx::core {
int compute_sum(int a, int b);
struct Backend {
  virtual ~Backend() = default;
  virtual void run_kernel() = 0;
};
}
"""
API_V2_RENAMED = API_V1.replace("compute_sum", "accumulate_pair")
API_V3_HOOK = API_V2_RENAMED.replace("  virtual void run_kernel() = 0;\n",
                                     "  virtual void run_kernel() = 0;\n  virtual void synchronize_stream() = 0;\n")
FORK = """#include "api.h"
namespace mlx::core {
struct RocmBackend : Backend {
  void run_kernel() override {}
};
int use() {
  RocmBackend* b = new RocmBackend();
  delete b;
  return compute_sum(1, 2);
}
}
"""


@pytest.fixture
def upstream(tmp_path):
    up = WorkRepo.init(tmp_path / "up")
    old = up.commit({"mlx/api.h": API_V1, "mlx/api.cpp": "int mlx::core::compute_sum(int a,int b){return a+b;}\n"},
                    "v1")
    up.commit({"README.md": "docs\n"}, "Docs only")
    rename = up.commit({"mlx/api.h": API_V2_RENAMED,
                        "mlx/api.cpp": "int mlx::core::accumulate_pair(int a,int b){return a+b;}\n"},
                       "Rename compute_sum to accumulate_pair")
    hook = up.commit({"mlx/api.h": API_V3_HOOK}, "Backends must implement synchronize_stream")
    new = up.commit({"mlx/other.cpp": "int x;\n"}, "Unrelated")
    store = Store(str(tmp_path / "store.git"))
    store.git("fetch", "-q", str(up.path), "main:refs/heads/up")
    return store, old, new, rename, hook


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to produce real diagnostics")
def test_renamed_function_and_new_pure_virtual_are_attributed(upstream, tmp_path):
    store, old, new, rename, hook = upstream
    src = tmp_path / "src"
    (src / "mlx" / "backend" / "rocm").mkdir(parents=True)
    (src / "mlx" / "api.h").write_text(API_V3_HOOK)
    (src / "mlx" / "backend" / "rocm" / "fork.cpp").write_text(FORK)
    proc = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-I", str(src / "mlx"),
                           str(src / "mlx" / "backend" / "rocm" / "fork.cpp")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode != 0
    diags = parse_log(proc.stdout, strip_prefixes=[str(src)])
    assert all(d.path == "mlx/backend/rocm/fork.cpp" for d in diags)
    items = attribute(store, old, new, diags)
    by_commit = {i.commit: i for i in items if i.commit}
    assert rename in by_commit and hook in by_commit
    assert by_commit[rename].identifier == "compute_sum"
    assert by_commit[hook].identifier == "synchronize_stream"
    assert by_commit[hook].subject == "Backends must implement synchronize_stream"
    assert all(i.fork_file == "mlx/backend/rocm/fork.cpp" for i in items)


def test_undefined_symbol_from_a_link_log(upstream):
    store, old, new, _rename, hook = upstream
    log = ("/usr/bin/ld: libmlx.a(fork.o): in function `use()':\n"
           "fork.cpp:(.text+0x1c): undefined reference to `mlx::core::RocmBackend::synchronize_stream()'\n"
           "fork.cpp:(.text+0x1c): undefined reference to `mlx::core::RocmBackend::synchronize_stream()'\n")
    diags = parse_log(log)
    assert [(d.kind, d.message) for d in diags] == [("undefined", "mlx::core::RocmBackend::synchronize_stream()")]
    assert identifiers(diags[0]) == ["RocmBackend", "synchronize_stream"]
    (item,) = attribute(store, old, new, diags)
    assert item.commit == hook and item.identifier == "synchronize_stream"


def test_unattributable_error_says_so(upstream):
    store, old, new, *_ = upstream
    diags = parse_log("mlx/backend/rocm/x.cpp:3:1: error: expected ';' before '}' token\n")
    (item,) = attribute(store, old, new, diags)
    assert item.commit is None and item.fork_file == "mlx/backend/rocm/x.cpp"


def test_drift_cli_reads_a_log(upstream, tmp_path, overlay, world):
    from click.testing import CliRunner

    from overlay.cli import main
    log = tmp_path / "build.log"
    log.write_text("mlx/backend/rocm/device.cpp:4:2: error: 'core' was not declared in this scope\n")
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "drift", "--log", str(log), "--from", world.base,
                                       "--format", "markdown"])
    assert result.exit_code == 1, result.output
    assert "| `mlx/backend/rocm/device.cpp:4` | error: 'core' was not declared" in result.output
    assert "not attributed" in result.output


def test_errors_in_system_headers_land_where_they_were_instantiated():
    log = (
        "/usr/include/c++/16/bits/stl_construct.h: In instantiation of 'void std::_Construct(_Tp*)':\n"
        "/src/mlx/backend/rocm/custom_kernel.cpp:246:40:   required from here\n"
        "/usr/include/c++/16/bits/stl_construct.h:129:28: error: no matching function for call to "
        "'construct_at(mlx::core::fast::CustomKernel*&, std::allocator<int>&)'\n"
        "  \u2022 there is 1 candidate\n"
        "    \u2022 candidate 1: 'mlx::core::fast::CustomKernel::CustomKernel(int, mlx::core::CompileOptions::Data)'\n"
        "/usr/include/c++/16/bits/stl_construct.h:133:7: error: no matching function for call to "
        "'mlx::core::fast::CustomKernel::CustomKernel(int)'\n")
    (diag,) = parse_log(log, strip_prefixes=["/src"])
    assert (diag.path, diag.line) == ("mlx/backend/rocm/custom_kernel.cpp", 246)
    assert any("CompileOptions::Data" in n for n in diag.notes)
    names = identifiers(diag)
    assert "CompileOptions" in names and "allocator" not in names and "construct_at" in names


def test_owner_of_an_undefined_member_is_the_file_defining_its_siblings(tmp_path):
    from overlay.drift import DriftItem, Diagnostic, owners_from_tree
    backend = tmp_path / "mlx" / "backend" / "rocm"
    backend.mkdir(parents=True)
    (backend / "event.hip").write_text("void Event::wait() {}\nvoid Event::signal() {}\n")
    (backend / "primitives.cpp").write_text("void Add::eval_gpu() {}\nvoid Sub::eval_gpu() {}\n")
    items = [DriftItem(Diagnostic("undefined", None, None, "mlx::core::Event::error()"), None, None, None, [], None),
             DriftItem(Diagnostic("undefined", None, None, "mlx::core::NewOp::eval_gpu(int)"), None, None, None, [],
                       None)]
    owners_from_tree(str(tmp_path), items)
    assert [i.fork_file for i in items] == ["mlx/backend/rocm/event.hip", "mlx/backend/rocm/primitives.cpp"]
