// hipblaslt_race: the race lab's child for local fix 2 (docs/race-lab.md).
//
// Seed 000's workload, on the host model: the exported
// mlx/backend/rocm/gemms/hipblaslt_gemm.cpp (forked or patched, whichever tree
// it was built from) runs against hip_stub.cpp and hipblaslt_stub.cpp. One
// shared rocm::Device; 8 threads, each with its own CommandEncoder and so its
// own stream, allocate their buffers, meet at a barrier before any GEMM has
// run in the process, then run 33 rounds of
//   * bf16 [64, 64] x transpose([64, 64])    through hipblaslt_gemm (encoder)
//   * bf16 [4, 64, 64] x [4, 64, 64]          through hipblaslt_gemm_batched
//   * f32  [64, 128] x [128, 64]              through hipblaslt_gemm_rowmajor_on_stream
//   * bf16 [64, 64] x [64, 64]                through hipblaslt_gemm_raw
// with integer inputs from per-thread seeds (bf16 in -1..1, f32 in -4..4),
// every output copied back and compared exactly with a host int32 reference.
// All threads use the same shapes, so they contend on the same handle, pipe
// keys and workspace. Before each GEMM the thread asks is_hipblaslt_available()
// as MLX's matmul does; a "no" while hipBLASLt works is the init-window
// misroute of seed 000 (that GEMM would have gone to rocBLAS).
//
// Findings are "overlay-suite: report <kind>: ..." lines on stderr (kinds
// exact-output-mismatch, hipblaslt-exception, hipblaslt-misroute, and the
// model's own, see racelab.h). The child exits 1 when any was printed, else
// prints "overlay-suite: done" last and exits 0. A sanitizer that finds
// something makes the exit status nonzero on its own (TSan: 66 at exit;
// ASan: stops at the first error).
//
// Settings (environment): OVERLAY_RACE_THREADS (8), OVERLAY_RACE_ROUNDS (33),
// and the model's OVERLAY_STUB_* (hipblaslt_stub.cpp).

#include "race_driver.h"
#include "racelab.h"

#include "mlx/array.h"
#include "mlx/backend/rocm/allocator.h"
#include "mlx/backend/rocm/device.h"
#include "mlx/backend/rocm/gemms/hipblaslt_gemm.h"

#include <hipblaslt/hipblaslt.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace mx = mlx::core;
namespace rocm = mlx::core::rocm;
using namespace racelab::driver;

namespace {

// A device buffer of the model, and an MLX array over it for the encoder paths.
struct DeviceBuffer {
  void* ptr{nullptr};
  size_t bytes{0};
  rocm::RocmBuffer rb{};

  DeviceBuffer(size_t n) : bytes(n) {
    if (hipMalloc(&ptr, n) != hipSuccess) {
      throw std::runtime_error("hipMalloc failed");
    }
    rb.data = ptr;
    rb.size = n;
    rb.is_managed = false;
    rb.device = 0;
    rb.host_shadow = nullptr;
    rb.host_dirty = false;
    rb.alloc_stream = nullptr;
  }
  ~DeviceBuffer() {
    (void)hipFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  mx::array as_array(mx::Shape shape, mx::Dtype dtype) {
    // The driver owns the memory: the array's deleter does nothing.
    return mx::array(mx::allocator::Buffer(&rb), std::move(shape), dtype,
                     [](mx::allocator::Buffer) {});
  }
};

struct Counts {
  std::atomic<int> gemms{0};
  std::atomic<int> exact{0};
  std::atomic<int> mismatched{0};
  std::atomic<int> threw{0};
  std::atomic<int> misrouted{0};
};

struct Gemm {
  const char* name;
  int batch, M, N, K;
  bool b_transposed;
  bool bf16;
  int lo, hi;
};

constexpr Gemm kTN{"bf16 [64,64] x transpose([64,64]) via hipblaslt_gemm", 1, 64, 64, 64, true,
                   true, -1, 1};
constexpr Gemm kBatched{"bf16 [4,64,64] x [4,64,64] via hipblaslt_gemm_batched", 4, 64, 64, 64,
                        false, true, -1, 1};
constexpr Gemm kF32{"f32 [64,128] x [128,64] via hipblaslt_gemm_rowmajor_on_stream", 1, 64, 64,
                    128, false, false, -4, 4};
constexpr Gemm kRaw{"bf16 [64,64] x [64,64] via hipblaslt_gemm_raw", 1, 64, 64, 64, false, true, -1,
                    1};

struct ThreadState {
  int t;
  rocm::CommandEncoder encoder;
  hipStream_t stream;
  // One set of buffers per GEMM kind, allocated before the barrier.
  DeviceBuffer a[4] = {DeviceBuffer(64 * 64 * 2), DeviceBuffer(4 * 64 * 64 * 2),
                       DeviceBuffer(64 * 128 * 4), DeviceBuffer(64 * 64 * 2)};
  DeviceBuffer b[4] = {DeviceBuffer(64 * 64 * 2), DeviceBuffer(4 * 64 * 64 * 2),
                       DeviceBuffer(128 * 64 * 4), DeviceBuffer(64 * 64 * 2)};
  DeviceBuffer c[4] = {DeviceBuffer(64 * 64 * 2), DeviceBuffer(4 * 64 * 64 * 2),
                       DeviceBuffer(64 * 64 * 4), DeviceBuffer(64 * 64 * 2)};

  ThreadState(int t_, rocm::Device& dev)
      : t(t_), encoder(dev), stream(static_cast<hipStream_t>(encoder.stream())) {}
};


// Runs one GEMM of kind `g` (index `gi`) on the thread's stream and checks it.
void run_gemm(ThreadState& st, int gi, const Gemm& g, int r, std::mt19937& rng, Counts& counts) {
  auto A = ints(rng, static_cast<size_t>(g.batch) * g.M * g.K, g.lo, g.hi);
  auto B = ints(rng, static_cast<size_t>(g.batch) * g.K * g.N, g.lo, g.hi);
  auto ref = reference(A, B, g.batch, g.M, g.N, g.K, g.b_transposed);
  counts.gemms.fetch_add(1, std::memory_order_relaxed);
  // MLX's matmul routes a GEMM to hipBLASLt only when this says yes.
  if (!rocm::is_hipblaslt_available()) {
    counts.misrouted.fetch_add(1, std::memory_order_relaxed);
    finding("hipblaslt-misroute", st.t, r,
            std::string(g.name) + ": is_hipblaslt_available() said no; it would go to rocBLAS");
    return;
  }
  auto ha = encode(A, g.bf16);
  auto hb = encode(B, g.bf16);
  std::vector<uint8_t> hc(ref.size() * (g.bf16 ? 2 : 4));
  DeviceBuffer& da = st.a[gi];
  DeviceBuffer& db = st.b[gi];
  DeviceBuffer& dc = st.c[gi];
  hipStream_t s = st.stream;
  (void)hipMemcpyAsync(da.ptr, ha.data(), ha.size(), hipMemcpyHostToDevice, s);
  (void)hipMemcpyAsync(db.ptr, hb.data(), hb.size(), hipMemcpyHostToDevice, s);
  (void)hipMemsetAsync(dc.ptr, 0, hc.size(), s);
  try {
    static const float one = 1.0f, zero = 0.0f;
    if (&g == &kTN) {
      auto a = da.as_array({64, 64}, mx::bfloat16);
      auto b = db.as_array({64, 64}, mx::bfloat16);
      auto c = dc.as_array({64, 64}, mx::bfloat16);
      rocm::hipblaslt_gemm(st.encoder, false, true, 64, 64, 64, 1.0f, a, 64, b, 64, 0.0f, c, 64,
                           mx::bfloat16);
    } else if (&g == &kBatched) {
      auto a = da.as_array({4, 64, 64}, mx::bfloat16);
      auto b = db.as_array({4, 64, 64}, mx::bfloat16);
      auto c = dc.as_array({4, 64, 64}, mx::bfloat16);
      rocm::hipblaslt_gemm_batched(st.encoder, false, false, 64, 64, 64, 1.0f, a, 64, 64 * 64, b,
                                   64, 64 * 64, 0.0f, c, 64, 64 * 64, 4, mx::bfloat16);
    } else if (&g == &kF32) {
      rocm::hipblaslt_gemm_rowmajor_on_stream(s, 0, false, false, 64, 64, 128, 1.0f, da.ptr, 128,
                                              db.ptr, 64, 0.0f, dc.ptr, 64, mx::float32);
    } else {
      // Column-major convention: C^T = B^T A^T, so B goes first.
      rocm::hipblaslt_gemm_raw(s, HIPBLAS_OP_N, HIPBLAS_OP_N, 64, 64, 64, &one, db.ptr, 64, da.ptr,
                               64, &zero, dc.ptr, 64, /*bf16*/ 2, HIPBLAS_COMPUTE_32F);
    }
  } catch (const std::exception& e) {
    (void)hipStreamSynchronize(s);
    counts.threw.fetch_add(1, std::memory_order_relaxed);
    finding("hipblaslt-exception", st.t, r, std::string(g.name) + ": " + e.what());
    return;
  }
  (void)hipMemcpyAsync(hc.data(), dc.ptr, hc.size(), hipMemcpyDeviceToHost, s);
  (void)hipStreamSynchronize(s);
  std::string bad = mismatch(hc, ref, g.bf16);
  if (bad.empty()) {
    counts.exact.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  counts.mismatched.fetch_add(1, std::memory_order_relaxed);
  finding("exact-output-mismatch", st.t, r, std::string(g.name) + ": " + bad);
}

} // namespace

int main() {
  const int threads = static_cast<int>(racelab::env_int("OVERLAY_RACE_THREADS", 8));
  const int rounds = static_cast<int>(racelab::env_int("OVERLAY_RACE_ROUNDS", 33));
  const long long run = racelab::env_int("OVERLAY_RUN_INDEX", 1);
  std::printf(
      "race-lab: hipblaslt_race on the host model of HIP and hipBLASLt (not a GPU run): %d threads x "
      "%d rounds, workspace %lld bytes, fail-once at call %lld\n",
      threads, rounds, racelab::env_int("OVERLAY_STUB_WORKSPACE", 0),
      racelab::env_int("OVERLAY_STUB_FAIL_ONCE_AT", 0));
  std::fflush(stdout);

  rocm::Device device(0);
  Barrier barrier(threads);
  Counts counts;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      bool waited = false;
      try {
        (void)hipSetDevice(0);
        ThreadState st(t, device);
        std::mt19937 rng(0x5eed0000u + static_cast<uint32_t>(run) * 977u +
                         static_cast<uint32_t>(t));
        barrier.arrive_and_wait();
        waited = true;
        const Gemm* gemms[4] = {&kTN, &kBatched, &kF32, &kRaw};
        for (int r = 0; r < rounds; ++r) {
          for (int gi = 0; gi < 4; ++gi) {
            run_gemm(st, gi, *gemms[gi], r, rng, counts);
          }
        }
        (void)hipStreamSynchronize(st.stream);
      } catch (const std::exception& e) {
        finding("hipblaslt-exception", t, -1, std::string("thread setup or teardown: ") + e.what());
      }
      if (!waited) {
        barrier.arrive_and_wait(); // do not leave the others waiting
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  int reports = racelab::report_count();
  std::printf(
      "race-lab: %d GEMMs: %d exact, %d mismatched, %d threw, %d misrouted; %d report(s)\n",
      counts.gemms.load(), counts.exact.load(), counts.mismatched.load(), counts.threw.load(),
      counts.misrouted.load(), reports);
  if (reports != 0) {
    std::fflush(stdout);
    return 1;
  }
  std::printf("overlay-suite: done\n");
  std::fflush(stdout);
  return 0;
}
