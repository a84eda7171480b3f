// racelab_selftest: checks the host model itself, without MLX (docs/race-lab.md).
//
//   racelab_selftest                  the model's promises hold: a GEMM is exact,
//                                     stream order and waits hold, two streams with
//                                     their own workspaces stay exact, capture
//                                     begins, reports and ends per stream and
//                                     records its work; exit 0 and
//                                     "overlay-suite: done"
//   racelab_selftest shared-workspace two streams share one workspace: the model
//                                     must produce exact-output-mismatch reports
//   racelab_selftest destroy-in-use   a layout is destroyed while another thread is
//                                     inside hipblasLtMatmul with it: the model must
//                                     report descriptor-destroyed-in-use
//   racelab_selftest use-after-free   a stream copies from freed device memory: the
//                                     model must report device-use-after-free
//   racelab_selftest capture-malloc   hipMalloc during a capture, and
//   racelab_selftest capture-sync     hipStreamSynchronize of the capturing stream:
//                                     reported (capture-violation), refused, and
//                                     the capture invalidated
//
// Each detection mode exits 1 after its reports (a child that found something),
// and 3 when the model failed to detect what it should.

#include "racelab.h"

#include <hipblaslt/hipblaslt.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kN = 64;

struct Gemm {
  hipblasLtHandle_t handle{};
  hipblasLtMatmulDesc_t desc{};
  hipblasLtMatrixLayout_t la{}, lb{}, lc{};
  hipblasLtMatmulHeuristicResult_t algo{};
};

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "racelab_selftest: FAIL: %s\n", what);
    std::exit(2);
  }
}

Gemm make_gemm() {
  Gemm g;
  check(hipblasLtCreate(&g.handle) == HIPBLAS_STATUS_SUCCESS, "hipblasLtCreate");
  check(hipblasLtMatmulDescCreate(&g.desc, HIPBLAS_COMPUTE_32F, HIP_R_32F) ==
            HIPBLAS_STATUS_SUCCESS,
        "desc");
  check(hipblasLtMatrixLayoutCreate(&g.la, HIP_R_16BF, kN, kN, kN) == HIPBLAS_STATUS_SUCCESS, "la");
  check(hipblasLtMatrixLayoutCreate(&g.lb, HIP_R_16BF, kN, kN, kN) == HIPBLAS_STATUS_SUCCESS, "lb");
  check(hipblasLtMatrixLayoutCreate(&g.lc, HIP_R_16BF, kN, kN, kN) == HIPBLAS_STATUS_SUCCESS, "lc");
  hipblasLtMatmulPreference_t pref{};
  check(hipblasLtMatmulPreferenceCreate(&pref) == HIPBLAS_STATUS_SUCCESS, "pref");
  uint64_t max_ws = 32u << 20;
  hipblasLtMatmulPreferenceSetAttribute(pref, HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                        sizeof(max_ws));
  int count = 0;
  check(hipblasLtMatmulAlgoGetHeuristic(g.handle, g.desc, g.la, g.lb, g.lc, g.lc, pref, 1, &g.algo,
                                        &count) == HIPBLAS_STATUS_SUCCESS &&
            count == 1,
        "heuristic");
  hipblasLtMatmulPreferenceDestroy(pref);
  return g;
}

struct Operands {
  void *a{}, *b{}, *d{};
  std::vector<uint16_t> ha, hb;
  std::vector<float> ref;
};

Operands make_operands(unsigned seed) {
  Operands o;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-1, 1);
  std::vector<int> A(kN * kN), B(kN * kN);
  for (auto& x : A) x = dist(rng);
  for (auto& x : B) x = dist(rng);
  o.ha.resize(kN * kN);
  o.hb.resize(kN * kN);
  for (int i = 0; i < kN * kN; ++i) {
    o.ha[i] = racelab::float_to_bf16(static_cast<float>(A[i]));
    o.hb[i] = racelab::float_to_bf16(static_cast<float>(B[i]));
  }
  // Column-major D = A * B.
  o.ref.assign(kN * kN, 0.0f);
  for (int j = 0; j < kN; ++j)
    for (int i = 0; i < kN; ++i) {
      int acc = 0;
      for (int k = 0; k < kN; ++k) acc += A[i + k * kN] * B[k + j * kN];
      o.ref[i + j * kN] = static_cast<float>(acc);
    }
  check(hipMalloc(&o.a, kN * kN * 2) == hipSuccess, "hipMalloc a");
  check(hipMalloc(&o.b, kN * kN * 2) == hipSuccess, "hipMalloc b");
  check(hipMalloc(&o.d, kN * kN * 2) == hipSuccess, "hipMalloc d");
  return o;
}

// Enqueue copies in, the GEMM, and the copy out on `s`; returns at once.
void enqueue(const Gemm& g, Operands& o, std::vector<uint16_t>& out, void* ws, hipStream_t s) {
  static const float one = 1.0f, zero = 0.0f;
  (void)hipMemcpyAsync(o.a, o.ha.data(), kN * kN * 2, hipMemcpyHostToDevice, s);
  (void)hipMemcpyAsync(o.b, o.hb.data(), kN * kN * 2, hipMemcpyHostToDevice, s);
  check(hipblasLtMatmul(g.handle, g.desc, &one, o.a, g.la, o.b, g.lb, &zero, o.d, g.lc, o.d, g.lc,
                        &g.algo.algo, ws, g.algo.workspaceSize, s) == HIPBLAS_STATUS_SUCCESS,
        "hipblasLtMatmul");
  out.assign(kN * kN, 0);
  (void)hipMemcpyAsync(out.data(), o.d, kN * kN * 2, hipMemcpyDeviceToHost, s);
}

int mismatches(const Operands& o, const std::vector<uint16_t>& out) {
  int bad = 0;
  for (int i = 0; i < kN * kN; ++i) {
    bad += racelab::bf16_to_float(out[i]) != o.ref[i];
  }
  return bad;
}

// Two streams, each round a GEMM on both at once; `shared` gives both one workspace.
int two_streams(const Gemm& g, bool shared, int rounds) {
  hipStream_t s1{}, s2{};
  (void)hipStreamCreate(&s1);
  (void)hipStreamCreate(&s2);
  void *w1{}, *w2{};
  check(hipMalloc(&w1, g.algo.workspaceSize) == hipSuccess, "hipMalloc w1");
  check(hipMalloc(&w2, g.algo.workspaceSize) == hipSuccess, "hipMalloc w2");
  Operands o1 = make_operands(1), o2 = make_operands(2);
  int wrong = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<uint16_t> out1, out2;
    // Hold both streams at a gate until both GEMMs are queued, so they run at
    // the same time as GPU streams would.
    std::atomic<int> gate{0};
    auto wait_gate = [](void* p) {
      while (static_cast<std::atomic<int>*>(p)->load() == 0) {
        std::this_thread::yield();
      }
    };
    (void)hipLaunchHostFunc(s1, wait_gate, &gate);
    (void)hipLaunchHostFunc(s2, wait_gate, &gate);
    enqueue(g, o1, out1, w1, s1);
    enqueue(g, o2, out2, shared ? w1 : w2, s2);
    gate.store(1);
    (void)hipStreamSynchronize(s1);
    (void)hipStreamSynchronize(s2);
    int bad = mismatches(o1, out1) + mismatches(o2, out2);
    if (bad) {
      ++wrong;
      racelab::report("exact-output-mismatch",
                      "round " + std::to_string(r) + ": " + std::to_string(bad) +
                          " elements differ with a " + (shared ? "shared" : "private") +
                          " workspace");
    }
  }
  return wrong;
}

} // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  // A split-K workspace, so the GEMM really uses it.
  setenv("OVERLAY_STUB_WORKSPACE", "65536", 1);
  if (mode == "destroy-in-use") {
    setenv("OVERLAY_STUB_ENQUEUE_US", "200000", 1);
  }
  if (mode == "shared-workspace") {
    // Keep the partials in the workspace for 2 ms, so the two gated GEMMs
    // overlap there whatever the machine's load (the check is about the
    // model, not about how often the overlap happens by itself).
    setenv("OVERLAY_STUB_KERNEL_US", "2000", 1);
  }
  Gemm g = make_gemm();
  check(g.algo.workspaceSize == 65536, "the heuristic asks for OVERLAY_STUB_WORKSPACE bytes");

  if (mode.empty()) {
    // One GEMM, then stream order: the copy out sees the GEMM.
    hipStream_t s{};
    (void)hipStreamCreate(&s);
    void* w{};
    (void)hipMalloc(&w, g.algo.workspaceSize);
    Operands o = make_operands(7);
    std::vector<uint16_t> out;
    enqueue(g, o, out, w, s);
    hipEvent_t ev{};
    (void)hipEventCreate(&ev);
    (void)hipEventRecord(ev, s);
    (void)hipEventSynchronize(ev);
    check(mismatches(o, out) == 0, "a GEMM on one stream is exact");
    check(two_streams(g, false, 20) == 0, "two streams with their own workspaces stay exact");
    // Capture: begin/end per stream, the status queries, work recorded, not run.
    hipStreamCaptureStatus st = hipStreamCaptureStatusActive;
    check(hipStreamIsCapturing(s, &st) == hipSuccess && st == hipStreamCaptureStatusNone,
          "a stream is not capturing before hipStreamBeginCapture");
    check(hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal) == hipSuccess,
          "hipStreamBeginCapture");
    check(hipStreamIsCapturing(s, &st) == hipSuccess && st == hipStreamCaptureStatusActive,
          "hipStreamIsCapturing says active during capture");
    check(hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal) != hipSuccess,
          "a second begin on a capturing stream is refused");
    std::vector<uint16_t> recorded(out.size(), 0x5555);
    (void)hipMemcpyAsync(recorded.data(), o.d, recorded.size() * 2, hipMemcpyDeviceToHost, s);
    hipGraph_t graph = nullptr;
    check(hipStreamEndCapture(s, &graph) == hipSuccess && graph != nullptr,
          "hipStreamEndCapture returns a graph");
    (void)hipStreamSynchronize(s);
    check(recorded[0] == 0x5555, "work enqueued during capture is recorded, not run");
    check(hipStreamIsCapturing(s, &st) == hipSuccess && st == hipStreamCaptureStatusNone,
          "not capturing after hipStreamEndCapture");
    check(racelab::report_count() == 0, "no model report in the positive checks");
    std::printf("racelab_selftest: model checks passed\noverlay-suite: done\n");
    return 0;
  }
  if (mode == "shared-workspace") {
    int wrong = two_streams(g, true, 40);
    std::printf("racelab_selftest: %d of 40 rounds wrong with a shared workspace\n", wrong);
    return wrong > 0 ? 1 : 3;
  }
  if (mode == "destroy-in-use") {
    hipStream_t s{};
    (void)hipStreamCreate(&s);
    void* w{};
    (void)hipMalloc(&w, g.algo.workspaceSize);
    Operands o = make_operands(3);
    std::thread user([&] {
      static const float one = 1.0f, zero = 0.0f;
      (void)hipblasLtMatmul(g.handle, g.desc, &one, o.a, g.la, o.b, g.lb, &zero, o.d, g.lc, o.d,
                            g.lc, &g.algo.algo, w, g.algo.workspaceSize, s);
    });
    racelab::busy_wait_us(50000); // the user is inside hipblasLtMatmul now
    hipblasLtMatrixLayoutDestroy(g.lb);
    user.join();
    return racelab::report_count() > 0 ? 1 : 3;
  }
  if (mode == "capture-malloc" || mode == "capture-sync") {
    // What the runtime forbids during capture: reported, refused, and the
    // capture invalidated (hipStreamEndCapture then fails).
    hipStream_t s{};
    (void)hipStreamCreate(&s);
    (void)hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal);
    void* p{};
    hipError_t e = mode == "capture-malloc" ? hipMalloc(&p, 4096) : hipStreamSynchronize(s);
    hipGraph_t graph = nullptr;
    bool invalidated = hipStreamEndCapture(s, &graph) == hipErrorStreamCaptureInvalidated;
    return e != hipSuccess && invalidated && racelab::report_count() > 0 ? 1 : 3;
  }
  if (mode == "use-after-free") {
    hipStream_t s{};
    (void)hipStreamCreate(&s);
    void* p{};
    (void)hipMalloc(&p, 4096);
    (void)hipFree(p);
    std::vector<char> host(4096);
    (void)hipMemcpyAsync(host.data(), p, 4096, hipMemcpyDeviceToHost, s);
    (void)hipStreamSynchronize(s);
    return racelab::report_count() > 0 ? 1 : 3;
  }
  std::fprintf(stderr, "racelab_selftest: unknown mode %s\n", mode.c_str());
  return 2;
}
