// rocblas_race: the race lab's child for local fix 1 (docs/race-lab.md).
//
// The exported mlx/backend/rocm/device.cpp and worker.cpp (forked or patched)
// run on the host model of HIP and rocBLAS: the real Device (its rocBLAS
// handle, availability check, bf16 probe and stream rebind) and the real
// CommandEncoder (its stream, its Worker). The workload is the suite child
// rocblas_handle_concurrency's: one shared rocm::Device; 8 threads, each with
// its own CommandEncoder and stream, meet at a barrier before any GEMM, then
// run 33 rounds of
//   * f32 [64, 128] x [128, 64]
//   * f32 [64, 64] x transpose([64, 64])
//   * f32 [4, 64, 64] x [4, 64, 64]   (four GEMMs in one launch)
// with integer inputs in -4..4 from per-thread seeds, each output copied back
// on the thread's stream and compared exactly with a host int32 reference.
// Each GEMM is issued as MLX's matmul issues a rocBLAS GEMM: is_rocblas_available()
// (and is_rocblas_bf16_available(), the bf16 route check) first, then inside
// CommandEncoder::launch_kernel set_rocblas_stream(stream) and rocblas_gemm_ex
// on get_rocblas_handle(); the transposed GEMM fetches the handle before the
// lambda binds the stream, as two of the fork's call sites do.
//
// Findings: exact-output-mismatch, rocblas-exception, rocblas-misroute, and the
// model's own (racelab.h). Exit 1 when any was printed, else "overlay-suite:
// done" and 0.

#include "race_driver.h"
#include "racelab.h"

#include "mlx/backend/rocm/device.h"

#include <rocblas/rocblas.h>

#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace rocm = mlx::core::rocm;
using namespace racelab::driver;

namespace {

struct Buffer {
  void* ptr{nullptr};
  explicit Buffer(size_t n) {
    if (hipMalloc(&ptr, n) != hipSuccess) {
      throw std::runtime_error("hipMalloc failed");
    }
  }
  ~Buffer() {
    (void)hipFree(ptr);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

struct Counts {
  std::atomic<int> gemms{0}, exact{0}, mismatched{0}, threw{0}, misrouted{0};
};

struct Gemm {
  const char* name;
  int batch, M, N, K;
  bool b_transposed;
};

constexpr Gemm kGemms[3] = {
    {"f32 [64,128] x [128,64]", 1, 64, 64, 128, false},
    {"f32 [64,64] x transpose([64,64]) (handle fetched before the bind)", 1, 64, 64, 64, true},
    {"f32 [4,64,64] x [4,64,64]", 4, 64, 64, 64, false},
};

// Row-major C = A * B' through rocBLAS's column-major GEMM: C^T = B'^T A^T.
void gemm(rocblas_handle h, const Gemm& g, const float* a, const float* b, float* c) {
  static const float one = 1.0f, zero = 0.0f;
  for (int i = 0; i < g.batch; ++i) {
    const float* ai = a + static_cast<size_t>(i) * g.M * g.K;
    const float* bi = b + static_cast<size_t>(i) * g.K * g.N;
    float* ci = c + static_cast<size_t>(i) * g.M * g.N;
    rocblas_status st = rocblas_gemm_ex(
        h, g.b_transposed ? rocblas_operation_transpose : rocblas_operation_none,
        rocblas_operation_none, g.N, g.M, g.K, &one, bi, rocblas_datatype_f32_r,
        g.b_transposed ? g.K : g.N, ai, rocblas_datatype_f32_r, g.K, &zero, ci,
        rocblas_datatype_f32_r, g.N, ci, rocblas_datatype_f32_r, g.N, rocblas_datatype_f32_r,
        rocblas_gemm_algo_standard, 0, 0);
    if (st != rocblas_status_success) {
      throw std::runtime_error("rocblas_gemm_ex failed: status " + std::to_string(st));
    }
  }
}

void run_one(rocm::Device& dev, rocm::CommandEncoder& enc, int t, int r, const Gemm& g,
             std::mt19937& rng, Buffer& da, Buffer& db, Buffer& dc, Counts& counts) {
  auto A = ints(rng, static_cast<size_t>(g.batch) * g.M * g.K, -4, 4);
  auto B = ints(rng, static_cast<size_t>(g.batch) * g.K * g.N, -4, 4);
  auto ref = reference(A, B, g.batch, g.M, g.N, g.K, g.b_transposed);
  counts.gemms.fetch_add(1, std::memory_order_relaxed);
  // MLX's matmul routes to rocBLAS only when these say yes.
  if (!dev.is_rocblas_available()) {
    counts.misrouted.fetch_add(1, std::memory_order_relaxed);
    finding("rocblas-misroute", t, r, std::string(g.name) + ": is_rocblas_available() said no");
    return;
  }
  (void)dev.is_rocblas_bf16_available();
  auto ha = encode(A, false), hb = encode(B, false);
  std::vector<uint8_t> hc(ref.size() * 4);
  hipStream_t s = static_cast<hipStream_t>(enc.stream());
  (void)hipMemcpyAsync(da.ptr, ha.data(), ha.size(), hipMemcpyHostToDevice, s);
  (void)hipMemcpyAsync(db.ptr, hb.data(), hb.size(), hipMemcpyHostToDevice, s);
  (void)hipMemsetAsync(dc.ptr, 0, hc.size(), s);
  auto* a = static_cast<const float*>(da.ptr);
  auto* b = static_cast<const float*>(db.ptr);
  auto* c = static_cast<float*>(dc.ptr);
  try {
    if (g.b_transposed) {
      rocblas_handle h = dev.get_rocblas_handle();
      enc.launch_kernel([&](hipStream_t stream) {
        dev.set_rocblas_stream(stream);
        gemm(h, g, a, b, c);
      });
    } else {
      enc.launch_kernel([&](hipStream_t stream) {
        dev.set_rocblas_stream(stream);
        gemm(dev.get_rocblas_handle(), g, a, b, c);
      });
    }
  } catch (const std::exception& e) {
    (void)hipStreamSynchronize(s);
    counts.threw.fetch_add(1, std::memory_order_relaxed);
    finding("rocblas-exception", t, r, std::string(g.name) + ": " + e.what());
    return;
  }
  (void)hipMemcpyAsync(hc.data(), dc.ptr, hc.size(), hipMemcpyDeviceToHost, s);
  (void)hipStreamSynchronize(s);
  std::string bad = mismatch(hc, ref, false);
  if (bad.empty()) {
    counts.exact.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  counts.mismatched.fetch_add(1, std::memory_order_relaxed);
  finding("exact-output-mismatch", t, r, std::string(g.name) + ": " + bad);
}

} // namespace

int main() {
  const int threads = static_cast<int>(racelab::env_int("OVERLAY_RACE_THREADS", 8));
  const int rounds = static_cast<int>(racelab::env_int("OVERLAY_RACE_ROUNDS", 33));
  const long long run = racelab::env_int("OVERLAY_RUN_INDEX", 1);
  std::printf(
      "race-lab: rocblas_race on the host model of HIP and rocBLAS (not a GPU run): %d threads x "
      "%d rounds, handle workspace %lld bytes\n",
      threads, rounds, racelab::env_int("OVERLAY_STUB_ROCBLAS_WORKSPACE", 0));
  std::fflush(stdout);
  Counts counts;
  {
    rocm::Device device(0);
    Barrier barrier(threads);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        bool waited = false;
        try {
          (void)hipSetDevice(0);
          rocm::CommandEncoder enc(device);
          std::vector<std::unique_ptr<Buffer>> da, db, dc;
          for (const Gemm& g : kGemms) {
            da.push_back(std::make_unique<Buffer>(static_cast<size_t>(g.batch) * g.M * g.K * 4));
            db.push_back(std::make_unique<Buffer>(static_cast<size_t>(g.batch) * g.K * g.N * 4));
            dc.push_back(std::make_unique<Buffer>(static_cast<size_t>(g.batch) * g.M * g.N * 4));
          }
          std::mt19937 rng(0x5eed0000u + static_cast<uint32_t>(run) * 977u + static_cast<uint32_t>(t));
          barrier.arrive_and_wait();
          waited = true;
          for (int r = 0; r < rounds; ++r) {
            for (int gi = 0; gi < 3; ++gi) {
              run_one(device, enc, t, r, kGemms[gi], rng, *da[gi], *db[gi], *dc[gi], counts);
            }
          }
          (void)hipStreamSynchronize(static_cast<hipStream_t>(enc.stream()));
        } catch (const std::exception& e) {
          finding("rocblas-exception", t, -1, std::string("thread setup or teardown: ") + e.what());
        }
        if (!waited) {
          barrier.arrive_and_wait();
        }
      });
    }
    for (auto& w : workers) {
      w.join();
    }
  }
  int reports = racelab::report_count();
  std::printf("race-lab: %d GEMMs: %d exact, %d mismatched, %d threw, %d misrouted; %d report(s)\n",
              counts.gemms.load(), counts.exact.load(), counts.mismatched.load(),
              counts.threw.load(), counts.misrouted.load(), reports);
  if (reports != 0) {
    std::fflush(stdout);
    return 1;
  }
  std::printf("overlay-suite: done\n");
  std::fflush(stdout);
  return 0;
}
