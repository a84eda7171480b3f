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
// Each GEMM is issued in the order of one MLX call site of the fork at its
// pin (file:function, line numbers at 75915908), and only MLX's calls are made:
//   * f32 [64,128] x [128,64]: matmul.cpp Matmul::eval_gpu -> gemm_and_bias,
//     is_rocblas_available() (:808), then gemm_rocblas, which fetches
//     get_rocblas_handle() (:256) before CommandEncoder::launch_kernel's
//     lambda binds set_rocblas_stream(stream) (:275) and calls rocblas_gemm_ex
//     with the handle it fetched;
//   * f32 [64,64] x transpose([64,64]): gemms/rocblas_gemm.cpp rocblas_gemm,
//     is_rocblas_available() (:93), then in the lambda set_rocblas_stream
//     (:117), get_rocblas_handle() (:118) and rocblas_gemm_ex (:132);
//   * f32 [4,64,64] x [4,64,64]: matmul.cpp gemm_and_bias's per-batch loop
//     (the path of a batch without one uniform stride), is_rocblas_available()
//     (:808) once, then for each of the 4 matrices a launch_kernel whose lambda
//     binds (:914) and fetches (:915). The uniform-stride path
//     (gemm_strided_batched_rocblas, :519 fetch before the :533 bind) has the
//     order of gemm_rocblas and calls rocblas_gemm_strided_batched_ex, which
//     the model does not have.
// Device::is_rocblas_bf16_available() is not called: nothing in the fork at
// its pin calls it (it is declared and defined in device.h/.cpp only).
//
// OVERLAY_RACE_MODE=twostreams: each thread holds two CommandEncoders (two
// streams, as a thread running ops on two MLX streams does: every op's
// eval_gpu takes rocm::get_command_encoder(stream())) and issues each round's
// GEMMs alternately on them without waiting in between, so its handle moves
// to the other stream while the first still has work queued; rocBLAS requires
// the old stream drained first (the handle's device memory is reused).
//
// The run ends with the model's route lines (racelab.h): every handle bound
// and used by one thread, every rebind after the old stream drained; the
// suites expect them.
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
    {"f32 [64,128] x [128,64] (gemm_rocblas: handle fetched before the bind)", 1, 64, 64, 128,
     false},
    {"f32 [64,64] x transpose([64,64]) (rocblas_gemm: bind, then fetch)", 1, 64, 64, 64, true},
    {"f32 [4,64,64] x [4,64,64] (gemm_and_bias per-batch loop: bind, then fetch)", 4, 64, 64, 64,
     false},
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

// One issued GEMM whose output is checked after its stream drained.
struct Issued {
  const Gemm* g{nullptr};
  std::vector<int32_t> ref;
  std::vector<uint8_t> ha, hb, hc; // host sides of the queued copies
  hipStream_t stream{nullptr};
  bool pending{false};
};

// Issues GEMM `g` on `enc` as its MLX call site does (header); on success the
// output copy is queued and `out.pending` is set.
void issue(rocm::Device& dev, rocm::CommandEncoder& enc, int t, int r, int gi, std::mt19937& rng,
           Buffer& da, Buffer& db, Buffer& dc, Counts& counts, Issued& out) {
  const Gemm& g = kGemms[gi];
  auto A = ints(rng, static_cast<size_t>(g.batch) * g.M * g.K, -4, 4);
  auto B = ints(rng, static_cast<size_t>(g.batch) * g.K * g.N, -4, 4);
  out.g = &g;
  out.ref = reference(A, B, g.batch, g.M, g.N, g.K, g.b_transposed);
  out.pending = false;
  counts.gemms.fetch_add(1, std::memory_order_relaxed);
  // gemm_and_bias (:808) and rocblas_gemm (:93) route to rocBLAS only on a yes.
  if (!dev.is_rocblas_available()) {
    counts.misrouted.fetch_add(1, std::memory_order_relaxed);
    finding("rocblas-misroute", t, r, std::string(g.name) + ": is_rocblas_available() said no");
    return;
  }
  out.ha = encode(A, false);
  out.hb = encode(B, false);
  auto& ha = out.ha;
  auto& hb = out.hb;
  out.hc.assign(out.ref.size() * 4, 0);
  hipStream_t s = static_cast<hipStream_t>(enc.stream());
  out.stream = s;
  (void)hipMemcpyAsync(da.ptr, ha.data(), ha.size(), hipMemcpyHostToDevice, s);
  (void)hipMemcpyAsync(db.ptr, hb.data(), hb.size(), hipMemcpyHostToDevice, s);
  (void)hipMemsetAsync(dc.ptr, 0, out.hc.size(), s);
  auto* a = static_cast<const float*>(da.ptr);
  auto* b = static_cast<const float*>(db.ptr);
  auto* c = static_cast<float*>(dc.ptr);
  try {
    if (gi == 0) {
      // matmul.cpp gemm_rocblas: fetch (:256), then bind in the lambda (:275).
      rocblas_handle h = dev.get_rocblas_handle();
      enc.launch_kernel([&](hipStream_t stream) {
        dev.set_rocblas_stream(stream);
        gemm(h, g, a, b, c);
      });
    } else if (gi == 1) {
      // gemms/rocblas_gemm.cpp rocblas_gemm: bind (:117), fetch (:118).
      enc.launch_kernel([&](hipStream_t stream) {
        dev.set_rocblas_stream(stream);
        gemm(dev.get_rocblas_handle(), g, a, b, c);
      });
    } else {
      // matmul.cpp gemm_and_bias's per-batch loop: one launch per matrix,
      // bind (:914) then fetch (:915).
      const Gemm one{g.name, 1, g.M, g.N, g.K, g.b_transposed};
      for (int i = 0; i < g.batch; ++i) {
        enc.launch_kernel([&, i](hipStream_t stream) {
          dev.set_rocblas_stream(stream);
          gemm(dev.get_rocblas_handle(), one, a + static_cast<size_t>(i) * g.M * g.K,
               b + static_cast<size_t>(i) * g.K * g.N, c + static_cast<size_t>(i) * g.M * g.N);
        });
      }
    }
  } catch (const std::exception& e) {
    (void)hipStreamSynchronize(s);
    counts.threw.fetch_add(1, std::memory_order_relaxed);
    finding("rocblas-exception", t, r, std::string(g.name) + ": " + e.what());
    return;
  }
  (void)hipMemcpyAsync(out.hc.data(), dc.ptr, out.hc.size(), hipMemcpyDeviceToHost, s);
  out.pending = true;
}

// Waits for an issued GEMM's stream and compares its output exactly.
void check(int t, int r, Issued& is, Counts& counts) {
  if (!is.pending) {
    return;
  }
  is.pending = false;
  (void)hipStreamSynchronize(is.stream);
  std::string bad = mismatch(is.hc, is.ref, false);
  if (bad.empty()) {
    counts.exact.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  counts.mismatched.fetch_add(1, std::memory_order_relaxed);
  finding("exact-output-mismatch", t, r, std::string(is.g->name) + ": " + bad);
}

} // namespace

int main() {
  const int threads = static_cast<int>(racelab::env_int("OVERLAY_RACE_THREADS", 8));
  const int rounds = static_cast<int>(racelab::env_int("OVERLAY_RACE_ROUNDS", 33));
  const long long run = racelab::env_int("OVERLAY_RUN_INDEX", 1);
  const char* mode_env = std::getenv("OVERLAY_RACE_MODE");
  const std::string mode = mode_env ? mode_env : "";
  if (mode != "" && mode != "twostreams") {
    std::fprintf(stderr, "rocblas_race: unknown OVERLAY_RACE_MODE %s\n", mode.c_str());
    return 2;
  }
  const int nenc = mode == "twostreams" ? 2 : 1;
  std::printf(
      "race-lab: rocblas_race on the host model of HIP and rocBLAS (not a GPU run): %d threads x "
      "%d rounds, handle workspace %lld bytes, mode %s\n",
      threads, rounds, racelab::env_int("OVERLAY_STUB_ROCBLAS_WORKSPACE", 0),
      mode.empty() ? "default" : mode.c_str());
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
          std::vector<std::unique_ptr<rocm::CommandEncoder>> encs;
          for (int e = 0; e < nenc; ++e) {
            encs.push_back(std::make_unique<rocm::CommandEncoder>(device));
          }
          std::vector<std::unique_ptr<Buffer>> da, db, dc;
          for (int e = 0; e < nenc; ++e)
          for (const Gemm& g : kGemms) {
            da.push_back(std::make_unique<Buffer>(static_cast<size_t>(g.batch) * g.M * g.K * 4));
            db.push_back(std::make_unique<Buffer>(static_cast<size_t>(g.batch) * g.K * g.N * 4));
            dc.push_back(std::make_unique<Buffer>(static_cast<size_t>(g.batch) * g.M * g.N * 4));
          }
          std::mt19937 rng(0x5eed0000u + static_cast<uint32_t>(run) * 977u + static_cast<uint32_t>(t));
          barrier.arrive_and_wait();
          waited = true;
          std::vector<Issued> issued(3 * nenc);
          for (int r = 0; r < rounds; ++r) {
            // One encoder: each GEMM is checked before the next is issued.
            // Two: the round's GEMMs alternate between the streams unchecked,
            // then all are checked.
            for (int gi = 0; gi < 3; ++gi) {
              for (int e = 0; e < nenc; ++e) {
                int slot = e * 3 + gi;
                issue(device, *encs[e], t, r, gi, rng, *da[slot], *db[slot], *dc[slot], counts,
                      issued[slot]);
                if (nenc == 1) {
                  check(t, r, issued[slot], counts);
                }
              }
            }
            for (auto& is : issued) {
              check(t, r, is, counts);
            }
          }
          for (auto& enc : encs) {
            (void)hipStreamSynchronize(static_cast<hipStream_t>(enc->stream()));
          }
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
  racelab::rocblas_route_summary();
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
