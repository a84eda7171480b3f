// hipblaslt_concurrency: suite child for local fix 2 (hipBLASLt GEMM state).
//
// Seed 000's child: 8 threads, each on its own GPU stream, meet at a barrier
// before any GPU matmul has run in the process, then run 33 rounds of
//   * bf16 [64, 64] x transpose([64, 64])   (hipBLASLt TN pipe)
//   * bf16 [4, 64, 64] x [4, 64, 64]         (hipblaslt_gemm_batched)
//   * f32  [64, 128] x [128, 64]             (rocBLAS)
// with integer inputs from per-thread seeds (bf16 in -1..1, f32 in -4..4),
// each output cast to float32 and compared exactly with a host int32
// reference. All threads use the same shapes, so they contend on the same
// hipBLASLt handle, pipe keys and workspaces. The suite definition expects
// "[hipBLASLt caps] device" once on stderr (the bf16 GEMMs reached hipBLASLt)
// and removes MLX_NO_HIPBLASLT and MLX_HIPBLASLT_NO_PIPE_CACHE.

#include "gemm_suite.h"

namespace mx = mlx::core;
using namespace overlay_suite;

int main() {
  return run_suite(
      "hipblaslt_concurrency",
      [](int, int, std::mt19937& rng, mx::Stream s) -> std::string {
        // bf16 [64, 64] x transpose([64, 64])
        {
          auto A = ints(rng, 64 * 64, -1, 1);
          auto B = ints(rng, 64 * 64, -1, 1);
          auto a = to_array(A, {64, 64}, mx::bfloat16, s);
          auto b = to_array(B, {64, 64}, mx::bfloat16, s);
          auto out = mx::astype(
              mx::matmul(a, mx::transpose(b, s), s), mx::float32, s);
          mx::eval(out);
          auto e = compare(
              out, reference(A, B, 1, 64, 64, 64, true), "bf16 64x64 TN");
          if (!e.empty())
            return e;
        }
        // bf16 batched [4, 64, 64] x [4, 64, 64]
        {
          auto A = ints(rng, 4 * 64 * 64, -1, 1);
          auto B = ints(rng, 4 * 64 * 64, -1, 1);
          auto a = to_array(A, {4, 64, 64}, mx::bfloat16, s);
          auto b = to_array(B, {4, 64, 64}, mx::bfloat16, s);
          auto out = mx::astype(mx::matmul(a, b, s), mx::float32, s);
          mx::eval(out);
          auto e = compare(
              out, reference(A, B, 4, 64, 64, 64, false), "bf16 batched 4x64x64");
          if (!e.empty())
            return e;
        }
        // f32 [64, 128] x [128, 64]
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
        return "";
      });
}
