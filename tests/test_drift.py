"""Drift attribution on a stand-in project: a renamed function and a new pure-virtual hook."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from gitfixtures import WorkRepo

from overlay.drift import attribute, identifiers, log_errors, render_text
from overlay.git.store import Store

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
API_V3_HOOK = API_V2_RENAMED.replace(
    "  virtual void run_kernel() = 0;\n",
    "  virtual void run_kernel() = 0;\n  virtual void synchronize_stream() = 0;\n",
)
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
    old = up.commit(
        {
            "mlx/api.h": API_V1,
            "mlx/api.cpp": "int mlx::core::compute_sum(int a,int b){return a+b;}\n",
        },
        "v1",
    )
    up.commit({"README.md": "docs\n"}, "Docs only")
    rename = up.commit(
        {
            "mlx/api.h": API_V2_RENAMED,
            "mlx/api.cpp": "int mlx::core::accumulate_pair(int a,int b){return a+b;}\n",
        },
        "Rename compute_sum to accumulate_pair",
    )
    hook = up.commit(
        {"mlx/api.h": API_V3_HOOK}, "Backends must implement synchronize_stream"
    )
    new = up.commit({"mlx/other.cpp": "int x;\n"}, "Unrelated")
    store = Store(str(tmp_path / "store.git"))
    store.git("fetch", "-q", str(up.path), "main:refs/heads/up")
    return store, old, new, rename, hook


@pytest.mark.skipif(
    shutil.which("g++") is None, reason="needs g++ to produce real diagnostics"
)
def test_renamed_function_and_new_pure_virtual_are_attributed(upstream, tmp_path):
    store, old, new, rename, hook = upstream
    src = tmp_path / "src"
    (src / "mlx" / "backend" / "rocm").mkdir(parents=True)
    (src / "mlx" / "api.h").write_text(API_V3_HOOK)
    (src / "mlx" / "backend" / "rocm" / "fork.cpp").write_text(FORK)
    proc = subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-fsyntax-only",
            "-I",
            str(src / "mlx"),
            str(src / "mlx" / "backend" / "rocm" / "fork.cpp"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.returncode != 0
    diags = log_errors(proc.stdout, strip_prefixes=[str(src)])
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
    log = (
        "/usr/bin/ld: libmlx.a(fork.o): in function `use()':\n"
        "fork.cpp:(.text+0x1c): undefined reference to `mlx::core::RocmBackend::synchronize_stream()'\n"
        "fork.cpp:(.text+0x1c): undefined reference to `mlx::core::RocmBackend::synchronize_stream()'\n"
    )
    diags = log_errors(log)
    assert [(d.kind, d.message) for d in diags] == [
        ("undefined", "mlx::core::RocmBackend::synchronize_stream()")
    ]
    assert identifiers(diags[0]) == ["RocmBackend", "synchronize_stream"]
    (item,) = attribute(store, old, new, diags)
    assert item.commit == hook and item.identifier == "synchronize_stream"


def test_unattributable_error_says_so(upstream):
    store, old, new, *_ = upstream
    diags = log_errors(
        "mlx/backend/rocm/x.cpp:3:1: error: expected ';' before '}' token\n"
    )
    (item,) = attribute(store, old, new, diags)
    assert item.commit is None and item.fork_file == "mlx/backend/rocm/x.cpp"


def test_drift_cli_reads_a_log(upstream, tmp_path, overlay, world):
    from click.testing import CliRunner

    from overlay.cli import main

    log = tmp_path / "build.log"
    log.write_text(
        "mlx/backend/rocm/device.cpp:4:2: error: 'core' was not declared in this scope\n"
    )
    result = CliRunner().invoke(
        main,
        [
            "-C",
            str(overlay.root),
            "drift",
            "--log",
            str(log),
            "--from",
            world.base,
            "--format",
            "markdown",
        ],
    )
    assert result.exit_code == 1, result.output
    assert (
        "| `mlx/backend/rocm/device.cpp:4` | error: 'core' was not declared"
        in result.output
    )
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
        "'mlx::core::fast::CustomKernel::CustomKernel(int)'\n"
    )
    (diag,) = log_errors(log, strip_prefixes=["/src"])
    assert (diag.path, diag.line) == ("mlx/backend/rocm/custom_kernel.cpp", 246)
    assert any("CompileOptions::Data" in n for n in diag.notes)
    names = identifiers(diag)
    assert (
        "CompileOptions" in names
        and "allocator" not in names
        and "construct_at" in names
    )


def test_owner_of_an_undefined_member_is_the_file_defining_its_siblings(tmp_path):
    from overlay.drift import Diagnostic, DriftItem, owners_from_tree

    backend = tmp_path / "mlx" / "backend" / "rocm"
    backend.mkdir(parents=True)
    (backend / "event.hip").write_text(
        "void Event::wait() {}\nvoid Event::signal() {}\n"
    )
    (backend / "primitives.cpp").write_text(
        "void Add::eval_gpu() {}\nvoid Sub::eval_gpu() {}\n"
    )
    items = [
        DriftItem(
            Diagnostic("undefined", None, None, "mlx::core::Event::error()"),
            None,
            None,
            None,
            [],
            None,
        ),
        DriftItem(
            Diagnostic("undefined", None, None, "mlx::core::NewOp::eval_gpu(int)"),
            None,
            None,
            None,
            [],
            None,
        ),
    ]
    owners_from_tree(str(tmp_path), items)
    assert [i.fork_file for i in items] == [
        "mlx/backend/rocm/event.hip",
        "mlx/backend/rocm/primitives.cpp",
    ]


def test_owner_of_an_undefined_free_function_defines_its_header_siblings(tmp_path):
    """A new function of ``gpu/slicing.h`` belongs in the ROCm file that
    defines that header's other functions, not in the file that calls ``core::`` most."""
    from overlay.drift import Diagnostic, DriftItem, owners_from_tree

    gpu = tmp_path / "mlx" / "backend" / "gpu"
    gpu.mkdir(parents=True)
    (gpu / "slicing.h").write_text(
        "#pragma once\nnamespace mlx::core {\n"
        "void slice_gpu(\n    const array& in,\n    array& out);\n"
        "void concatenate_gpu(const std::vector<array>& inputs, array& out);\n"
        "array compute_dynamic_offset(const array& indices, const Stream& s);\n"
        "void slice_update_gpu(const array& in, array& out);\n"
        "} // namespace mlx::core\n"
    )
    (gpu / "primitives.h").write_text(
        "namespace mlx::core {\nvoid eval_gpu_helper(int x);\n}\n"
    )
    backend = tmp_path / "mlx" / "backend" / "rocm"
    backend.mkdir(parents=True)
    (backend / "slicing.cpp").write_text(
        "namespace mlx::core {\n"
        "void concatenate_gpu(\n    const std::vector<array>& inputs,\n    array& out) {\n"
        "  if (compute_dynamic_offset(inputs[0], s).size()) {\n  }\n}\n"
        "array compute_dynamic_offset(const array& indices, const Stream& s) {\n"
        "  return indices;\n}\n}\n"
    )
    (backend / "eval.cpp").write_text(
        "namespace mlx::core::rocm {\n"
        "void eval(array& arr) {\n"
        "  mlx::core::slice_gpu(arr, arr);\n  mlx::core::concatenate_gpu({arr}, arr);\n"
        "  mlx::core::synchronize(s);\n  core::detail::retain(arr);\n"
        "  core::scheduler::notify_new_task(s);\n}\n}\n"
    )
    items = [
        DriftItem(
            Diagnostic(
                "undefined",
                None,
                None,
                "mlx::core::slice_update_gpu(mlx::core::array const&, mlx::core::array&)",
            ),
            None,
            None,
            None,
            [],
            None,
        ),
    ]
    owners_from_tree(str(tmp_path), items)
    assert items[0].fork_file == "mlx/backend/rocm/slicing.cpp"


def test_free_function_owner_counts_definitions_not_calls():
    from overlay.drift.owners import defined_functions, free_function_owner

    assert defined_functions(
        "void f(int x) {\n  if (g(x)) {\n  }\n  return h(x);\n}\n"
        "array k(\n    int a,\n    int b) const {\n}\nvoid decl(int);\n"
    ) == {"f", "k"}
    headers = {"a.h": "void new_fn(int);\nvoid one(int);\nvoid two(int);\n"}
    sources = {
        "r/calls.cpp": "void main_() {\n  one(1);\n  two(2);\n}\n",
        "r/defs.cpp": "void one(int x) {\n}\n",
        "r/defs.h": "void two(int x) {\n}\n",  # a header is not a backend source here
    }
    assert free_function_owner("new_fn", headers, sources) == "r/defs.cpp"
    assert free_function_owner("unknown", headers, sources) is None


# ------------------------------------------ an error about a member's declaration

STREAM_V1 = (
    "#pragma once\nnamespace mlx::core {\nstruct Stream {\n  int index;\n};\n}\n"
)
STREAM_V2 = (
    "#pragma once\nnamespace mlx::core {\nstruct Stream {\n  int idx; bool raise_errors;\n};\n"
    "void synchronize(Stream s);\n}\n"
)
SDPA_V1 = """#pragma once
#include "mlx/stream.h"
namespace mlx::core {
struct array {};
}
namespace mlx::core::fast {
class ScaledDotProductAttention {
 public:
  static bool use_fallback(const array& q,
                           Stream s);
};
}
"""
SDPA_V2 = SDPA_V1.replace(
    "use_fallback(const array& q,", "use_fallback(const array& q, bool force_fused,"
)
SDPA_FORK = """#include "mlx/fast_primitives.h"
namespace mlx::core::fast {
bool ScaledDotProductAttention::use_fallback(const array& q, Stream s) {
  return true;
}
int stream_index(Stream s) { return s.index; }
}
"""


@pytest.fixture
def sdpa_range(tmp_path):
    """old..new where upstream changed ``use_fallback``'s declaration (B, the cause), a
    ``Stream`` line in another header (A: the rarer quoted name, which outranked the
    declaration before) and added a call of ``use_fallback`` elsewhere (C)."""
    up = WorkRepo.init(tmp_path / "up")
    old = up.commit(
        {
            "mlx/stream.h": STREAM_V1,
            "mlx/fast_primitives.h": SDPA_V1,
            "mlx/fast.cpp": "bool f(){return use_fallback(q, s);}\n",
        },
        "v1",
    )
    a = up.commit(
        {"mlx/stream.h": STREAM_V2}, "Raise cpu stream errors from synchronize (#4338)"
    )
    b = up.commit(
        {
            "mlx/fast_primitives.h": SDPA_V2,
            "mlx/fast.cpp": "bool f(){return use_fallback(q, false, s);}\n",
        },
        "Add force_fused option to scaled_dot_product_attention (#4185)",
    )
    c = up.commit(
        {"mlx/backend/cpu/sdpa.cpp": "bool g(){return use_fallback(q, true, s);}\n"},
        "Use the fallback on CPU streams",
    )
    new = up.commit({"README.md": "docs\n"}, "Docs")
    store = Store(str(tmp_path / "store.git"))
    store.git("fetch", "-q", str(up.path), "main:refs/heads/up")
    return store, old, new, a, b, c


@pytest.mark.skipif(
    shutil.which("g++") is None, reason="needs g++ to produce real diagnostics"
)
def test_no_declaration_matches_goes_to_the_commit_that_changed_the_declaration(
    sdpa_range, tmp_path
):
    store, old, new, a, b, c = sdpa_range
    src = tmp_path / "src"
    (src / "mlx" / "backend" / "rocm").mkdir(parents=True)
    (src / "mlx" / "stream.h").write_text(STREAM_V2)
    (src / "mlx" / "fast_primitives.h").write_text(SDPA_V2)
    (src / "mlx" / "backend" / "rocm" / "sdpa.cpp").write_text(SDPA_FORK)
    proc = subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-fsyntax-only",
            "-I",
            str(src),
            str(src / "mlx" / "backend" / "rocm" / "sdpa.cpp"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.returncode != 0
    diags = log_errors(proc.stdout, strip_prefixes=[str(src)])
    decl = next(d for d in diags if "no declaration matches" in d.message)
    assert (decl.path, decl.line) == ("mlx/backend/rocm/sdpa.cpp", 3)
    assert "Stream" in decl.message  # the rarer quoted name is right there on the line
    member = next(d for d in diags if "has no member named" in d.message)
    items = {id(i.diagnostic): i for i in attribute(store, old, new, diags)}
    item = items[id(decl)]
    assert item.commit == b, (
        item
    )  # not a ("via 'Stream'"), not c (a call, not the declaration)
    assert item.identifier == "use_fallback" and item.declared_in == [
        "mlx/fast_primitives.h"
    ]
    assert (
        item.subject == "Add force_fused option to scaled_dot_product_attention (#4185)"
    )
    # "'struct mlx::core::Stream' has no member named 'index'": Stream's own declaration changed in a
    assert items[id(member)].commit == a and items[id(member)].declared_in == [
        "mlx/stream.h"
    ]
    text = render_text(list(items.values()))
    assert "(via 'use_fallback', declared in mlx/fast_primitives.h)" in text


def test_clang_and_gcc_member_messages_use_the_declaration(sdpa_range):
    store, old, new, a, b, _c = sdpa_range
    log = (
        "mlx/backend/rocm/sdpa.cpp:3:34: error: out-of-line definition of 'use_fallback' does not match any "
        "declaration in 'mlx::core::fast::ScaledDotProductAttention'\n"
        "mlx/backend/rocm/sdpa.hip:9:12: error: no matching function for call to "
        "\u2018mlx::core::fast::ScaledDotProductAttention::use_fallback(mlx::core::array&, mlx::core::Stream&)\u2019\n"
        "mlx/backend/rocm/event.cpp:4:5: error: no member named 'index' in 'mlx::core::Stream'\n"
    )
    items = attribute(store, old, new, log_errors(log))
    assert [(i.diagnostic.line, i.commit, i.identifier) for i in items] == [
        (3, b, "use_fallback"),
        (9, b, "use_fallback"),
        (4, a, "index"),
    ]


def test_member_reference_reads_the_member_and_its_class():
    from overlay.drift import Diagnostic, member_reference

    def ref(message: str):
        return member_reference(Diagnostic("error", "x.cpp", 1, message))

    assert ref(
        "no declaration matches 'bool mlx::core::fast::ScaledDotProductAttention::use_fallback("
        "const mlx::core::array&, mlx::core::Stream)'"
    ) == ("use_fallback", "ScaledDotProductAttention")
    assert ref(
        "no matching function for call to 'mlx::core::fast::CustomKernel::CustomKernel(int)'"
    ) == ("CustomKernel", "CustomKernel")
    assert ref(
        "no matching function for call to 'construct_at(std::vector<int, std::allocator<int> >&)'"
    ) == ("construct_at", None)
    assert ref(
        "\u2018class mlx::core::rocm::Device\u2019 has no member named \u2018set_current_prim\u2019"
    ) == ("set_current_prim", "Device")
    assert ref("'set_current_prim' is not a member of 'mlx::core::rocm'") == (
        "set_current_prim",
        "rocm",
    )
    assert ref("use of undeclared identifier 'x'") is None


# A declaration as clang-format writes a long one: one parameter a line. The bump adds a
# parameter on a line of its own, which does not name the member (the real 772bc8a00).
SDPA_ML_V1 = """#pragma once
#include "mlx/stream.h"
namespace mlx::core::fast {
class ScaledDotProductAttentionVJP {
 public:
  static bool use_fallback(const array& q, Stream s);
};
class ScaledDotProductAttention {
 public:
  static bool use_fallback(
      const array& q,
      bool output_logsumexp,
      Stream s);
  static bool supports_bool_mask();
};
}
"""
SDPA_ML_V2 = SDPA_ML_V1.replace(
    "      bool output_logsumexp,\n",
    "      bool output_logsumexp,\n      bool force_fused,\n",
)


def test_declaration_spans_cover_every_line_of_the_declaration_in_its_class():
    from overlay.drift import declaration_spans

    assert declaration_spans(
        SDPA_ML_V2, "use_fallback", "ScaledDotProductAttention"
    ) == [(10, 14)]
    assert declaration_spans(
        SDPA_ML_V2, "use_fallback", "ScaledDotProductAttentionVJP"
    ) == [(6, 6)]
    assert declaration_spans(SDPA_ML_V2, "use_fallback", None) == [(6, 6), (10, 14)]
    assert declaration_spans(SDPA_ML_V2, "nothing_like_it", None) == []


def test_a_parameter_added_on_its_own_line_goes_to_the_commit_that_added_it(tmp_path):
    up = WorkRepo.init(tmp_path / "up")
    old = up.commit(
        {"mlx/stream.h": STREAM_V1, "mlx/fast_primitives.h": SDPA_ML_V1}, "v1"
    )
    a = up.commit(
        {"mlx/stream.h": STREAM_V2}, "Raise cpu stream errors from synchronize (#4338)"
    )
    b = up.commit(
        {"mlx/fast_primitives.h": SDPA_ML_V2},
        "Add force_fused option to scaled_dot_product_attention (#4185)",
    )
    up.commit(
        {
            "mlx/fast_primitives.h": SDPA_ML_V2.replace(
                "supports_bool_mask();", "supports_bool_mask();\n  static bool other();"
            )
        },
        "Add another member",
    )
    new = up.commit({"README.md": "docs\n"}, "Docs")
    store = Store(str(tmp_path / "store.git"))
    store.git("fetch", "-q", str(up.path), "main:refs/heads/up")
    log = (
        "mlx/backend/rocm/scaled_dot_product_attention.cpp:144:6: error: no declaration matches "
        "\u2018bool mlx::core::fast::ScaledDotProductAttention::use_fallback(const mlx::core::array&, bool, "
        "mlx::core::Stream)\u2019\n"
    )
    (item,) = attribute(store, old, new, log_errors(log))
    assert item.commit == b, (
        item
    )  # not a, via the quoted 'Stream'; not the commit after it in the header
    assert item.identifier == "use_fallback" and item.declared_in == [
        "mlx/fast_primitives.h"
    ]
    assert item.also == []
    assert a != b
