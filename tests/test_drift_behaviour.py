"""``overlay drift --behaviour`` (overlay/drift/behaviour.py): the ROCm functors, compiled for the
host through the shim, against upstream's CPU functors, on a small stand-in tree (no
fork or upstream code) and a small upstream history for the attribution."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gitfixtures import WorkRepo

from overlay.drift.behaviour import (
    attribute,
    compare_functors,
    cpu_functors,
    render_text,
    rocm_functors,
)
from overlay.git.store import Store

needs_gxx = pytest.mark.skipif(
    shutil.which("g++") is None,
    reason="needs g++ to compile the functors (apt-get install g++)",
)

ROCM_BINARY = """#pragma once
#include <hip/hip_runtime.h>
#include <type_traits>
namespace mlx::core::rocm {
template <typename T, int N> struct hip_array { T data_[N]; T& operator[](int i) { return data_[i]; } };
struct Add {
  template <typename T>
  __device__ T operator()(T x, T y) { return x + y; }
};
struct FloorDivide {
  template <typename T>
  __device__ T operator()(T x, T y) {
    if constexpr (std::is_integral_v<T>) { return x / y; } else { return truncf(x / y); }
  }
};
struct Remainder {
  template <typename T>
  __device__ T operator()(T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      auto r = x % y;
      if (r != 0 && (r < 0 != y < 0)) r += y;
      return r;
    } else {
      T r = fmodf(x, y);
      if (r != 0 && (r < 0 != y < 0)) r += y;
      return r;
    }
  }
};
struct BitwiseAnd {
  template <typename T>
  __device__ T operator()(T x, T y) { return x.no_such_member; }
};
struct DivMod {
  template <typename T>
  __device__ hip_array<T, 2> operator()(T x, T y) { return {FloorDivide{}(x, y), Remainder{}(x, y)}; }
};
}
"""
ROCM_UNARY = """#pragma once
#include <hip/hip_runtime.h>
namespace mlx::core::rocm {
struct ErfInv {
  template <typename T>
  __device__ T operator()(T x) { return erfinvf(x); }
};
struct Negative {
  template <typename T>
  __device__ T operator()(T x) { return -x; }
};
struct Conjugate {
  template <typename T>
  __device__ T operator()(T x) { return x; }
};
}
"""
ROCM_TERNARY = """#pragma once
namespace mlx::core::rocm {
struct Select {
  template <typename T>
  __device__ T operator()(bool c, T x, T y) { return c ? x : y; }
};
}
"""
CPU_BINARY = """#pragma once
#include <cmath>
namespace mlx::core::detail {
struct Add { template <typename T> T operator()(T x, T y) { return x + y; } };
struct Divide { template <typename T> T operator()(T x, T y) { return x / y; } };
struct Remainder {
  template <typename T> T operator()(T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      auto r = x % y;
      if (r != 0 && (r < 0 != y < 0)) r += y;
      return r;
    } else {
      T r = std::fmod(x, y);
      if (r != 0 && (r < 0 != y < 0)) r += y;
      return r;
    }
  }
};
struct BitwiseAnd { template <typename T> T operator()(T x, T y) { return x & y; } };
struct Select { template <typename T> T operator()(bool c, T x, T y) { return c ? x : y; } };
}
"""
CPU_UNARY = """#pragma once
namespace mlx::core::detail {
struct Negative { template <typename T> T operator()(T x) { return -x; } };
}
"""


def _tree(root: Path) -> Path:
    files = {
        "mlx/backend/rocm/device/binary_ops.hpp": ROCM_BINARY,
        "mlx/backend/rocm/device/unary_ops.hpp": ROCM_UNARY,
        "mlx/backend/rocm/device/ternary_ops.hpp": ROCM_TERNARY,
        "mlx/backend/cpu/binary_ops.h": CPU_BINARY,
        "mlx/backend/cpu/unary_ops.h": CPU_UNARY,
        "mlx/types/complex.h": "#pragma once\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_functor_names_are_read_from_both_kinds_of_header():
    assert rocm_functors(ROCM_UNARY) == ["ErfInv", "Negative", "Conjugate"]
    assert cpu_functors(
        "DEFAULT_OP(Abs, abs)\nDEFAULT_BOOL_OP(Equal, operator==)\nstruct Sigmoid {\n"
    ) == {"Abs", "Equal", "Sigmoid"}


@needs_gxx
def test_a_truncating_floor_divide_disagrees_and_the_rest_is_accounted_for(tmp_path):
    report = compare_functors(str(_tree(tmp_path / "src")), str(tmp_path / "obj"))
    by = {f.name: f for f in report.functors}
    assert {f.name for f in report.disagreeing} == {"FloorDivide", "DivMod"}
    cases, bad = by["FloorDivide"].checked["int32_t"]
    assert cases == 129 * 128 and bad > 0  # every pair but the zero divisors
    examples = {
        (i, r, e) for t, i, r, e in by["FloorDivide"].examples if t == "int32_t"
    }
    assert ("-64, 3", "-21", "-22") in examples
    assert by["FloorDivide"].checked["float"][1] > 0
    for name in ("Add", "Remainder", "Negative", "Select"):
        assert by[name].checked and not by[name].disagrees, name
    assert "erfinvf" in by["ErfInv"].not_checked["*"]
    assert "no input domain" in by["Conjugate"].not_checked["*"]
    # a functor that does not compile for the host is listed per type, with the error
    assert set(by["BitwiseAnd"].not_checked) == {"int8_t", "int32_t", "uint32_t"}
    assert "no_such_member" in by["BitwiseAnd"].not_checked["int32_t"]
    # without an upstream commit the disagreement is listed, but it is not drift
    assert report.drifted == []
    text = render_text(report)
    assert "differs, no upstream change (not drift): FloorDivide int32_t" in text
    assert "not checked ErfInv: calls erfinvf" in text


@needs_gxx
def test_the_upstream_commit_that_changed_the_reference_is_named(tmp_path):
    up = WorkRepo.init(tmp_path / "upstream")
    trunc = "void DivMod::eval_cpu(int x) {\n  auto q = trunc(x);\n}\n"
    old = up.commit(
        {
            "mlx/backend/cpu/binary.cpp": trunc,
            "mlx/backend/cpu/binary_ops.h": CPU_BINARY,
        },
        "base",
    )
    up.commit({"README": "docs\n"}, "Docs only")
    fix = up.commit(
        {"mlx/backend/cpu/binary.cpp": trunc.replace("trunc", "floor")},
        "Fix divmod truncating the quotient",
    )
    new = up.commit({"mlx/other.cpp": "int x;\n"}, "Unrelated")
    store = Store(str(tmp_path / "store.git"))
    store.git("fetch", "-q", str(up.path), "main:refs/heads/up")
    report = compare_functors(str(_tree(tmp_path / "src")), str(tmp_path / "obj"))
    attribute(store, old, new, report)
    assert {f.name for f in report.drifted} == {"FloorDivide", "DivMod"}
    by = {f.name: f for f in report.functors}
    assert [c[0] for c in by["FloorDivide"].commits] == [fix]
    text = render_text(report, old)
    assert (
        f"reference changed by upstream {fix[:12]} Fix divmod truncating the quotient "
        "(DivMod::eval_cpu in mlx/backend/cpu/binary.cpp)" in text
    )
    assert "behaviour drift: FloorDivide int32_t:" in text


def test_drift_without_log_or_behaviour_is_a_usage_error(tmp_path):
    from click.testing import CliRunner

    from overlay.cli import main

    res = CliRunner().invoke(main, ["-C", str(tmp_path), "drift"])
    assert res.exit_code == 2, res.output
    assert "overlay: drift needs --log FILE or --behaviour" in res.output
    assert "Traceback" not in res.output
