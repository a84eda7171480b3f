// rocblas_handle_concurrency: suite child for local fix 1 (rocBLAS handle
// and stream binding).
//
// The shape of seed 000's child on the rocBLAS path only: 8 threads, each on
// its own GPU stream, meet at a barrier before any GPU matmul has run in the
// process (so they race Device's rocBLAS initialization), then run 33 rounds
// of f32 GEMMs, which the fork routes to rocBLAS:
//   * f32 [64, 128] x [128, 64]            (dense rocBLAS GEMM)
//   * f32 [64, 64] x transpose([64, 64])   (rocBLAS with a transposed operand)
//   * f32 [4, 64, 64] x [4, 64, 64]        (strided-batched rocBLAS GEMM)
// with integer inputs from per-thread seeds in -4..4, each output compared
// exactly with a host int32 reference. A rocBLAS call enqueued on another
// thread's stream (the shared-handle rebind race) shows as a mismatch: the
// output is read before the GEMM that writes it has run.

#include "gemm_suite.h"

namespace mx = mlx::core;
using namespace overlay_suite;

int main() {
  return run_suite(
      "rocblas_handle_concurrency",
      [](int, int, std::mt19937& rng, mx::Stream s) -> std::string {
        {
          auto A = ints(rng, 64 * 128, -4, 4);
          auto B = ints(rng, 128 * 64, -4, 4);
          auto a = to_array(A, {64, 128}, mx::float32, s);
          auto b = to_array(B, {128, 64}, mx::float32, s);
          auto out = mx::matmul(a, b, s);
          mx::eval(out);
          auto e = compare(
              out, reference(A, B, 1, 64, 64, 128, false), "f32 64x128x64");
          if (!e.empty())
            return e;
        }
        {
          auto A = ints(rng, 64 * 64, -4, 4);
          auto B = ints(rng, 64 * 64, -4, 4);
          auto a = to_array(A, {64, 64}, mx::float32, s);
          auto b = to_array(B, {64, 64}, mx::float32, s);
          auto out = mx::matmul(a, mx::transpose(b, s), s);
          mx::eval(out);
          auto e =
              compare(out, reference(A, B, 1, 64, 64, 64, true), "f32 64x64 TN");
          if (!e.empty())
            return e;
        }
        {
          auto A = ints(rng, 4 * 64 * 64, -4, 4);
          auto B = ints(rng, 4 * 64 * 64, -4, 4);
          auto a = to_array(A, {4, 64, 64}, mx::float32, s);
          auto b = to_array(B, {4, 64, 64}, mx::float32, s);
          auto out = mx::matmul(a, b, s);
          mx::eval(out);
          auto e = compare(
              out, reference(A, B, 4, 64, 64, 64, false), "f32 batched 4x64x64");
          if (!e.empty())
            return e;
        }
        return "";
      });
}
