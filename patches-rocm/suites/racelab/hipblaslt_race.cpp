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
// OVERLAY_RACE_MODE picks the workload (default: the one above):
//   * late: the weak-ordering stress. The threads meet at the barrier, then
//     thread 0 alone asks the route question (is_hipblaslt_available(), as
//     MLX's matmul does before every GEMM), which creates the handle; it
//     announces that on a relaxed atomic, which gives ThreadSanitizer no
//     happens-before edge, and then sleeps (polling another relaxed atomic)
//     until every other thread has run its first GEMM. Those start with the
//     f32 GEMM, whose entry point (hipblaslt_gemm_rowmajor_on_stream) reads
//     the handle through get_handle() before taking any lock thread 0
//     released. So the only edge from the handle's creation to those reads is
//     the init flag's release/acquire pair: weaken it and the race is there
//     on every schedule. Thread 0 does next to nothing between the handle's
//     creation and those reads on purpose. An earlier version let it run its
//     whole first GEMM (and start the next one's host reference, some 500,000
//     instrumented reads) before the others started, and ThreadSanitizer
//     reported no race at all, not even on a probe global thread 0 wrote
//     before that GEMM and the others read after the flag, while a probe it
//     wrote just before the flag was reported: consistent with ThreadSanitizer
//     v3 dropping a race whose earlier access has left that thread's trace
//     (its stack can no longer be restored; history_size=7 did not help), and
//     the relaxed flag went uncaught in 0 of 20 runs.
//   * teardown: release of a stream's GEMM state while other threads run
//     GEMMs. Each round a thread makes a new CommandEncoder (a new stream),
//     runs the bf16 TN GEMM on it, queues a host callback on that stream that
//     runs the f32 GEMM through hipblaslt_gemm_rowmajor_on_stream on the same
//     stream (the async MoE path: matmul.cpp moe_async_host_cb, on the HIP
//     host-callback thread), and destroys the encoder at once, so
//     ~CommandEncoder's hipblaslt_release_stream_workspace runs while the
//     callback is still queued; both outputs are then checked. A release
//     that erases the stream's entry before draining the stream lets the
//     callback allocate a new workspace for the dying stream, which the model
//     reports as workspace-of-destroyed-stream at the end.
//
//     OVERLAY_RACE_CALLBACK_FIRST=1 leaves the TN GEMM out, so the callback
//     makes the stream's first workspace request: it allocates the 32 MB buffer
//     on the host-callback thread, under g_ws_mutex (fix 2's open item 1).
//   * capture: fix 2's open items 3 and 4. After a first round of the default
//     workload (the handle and the thread's first stream set up outside
//     capture), each thread makes a new encoder (a stream with no workspace
//     yet), begins a thread-local capture on it as decode_capture_begin does
//     (device.cpp), and runs the TN GEMM through hipblaslt_gemm; then ends the
//     capture; then runs the TN GEMM outside capture and captures it again.
//     Then it leaves a pending HIP error (hipSetDevice(99)) and runs the f32
//     GEMM. Per thread the outcome is counted, and one line each says what the
//     code did: "race-lab: capture: ..." and "race-lab: last error: ...".
//   * release-capture: fix 2's open item 2, release while the stream
//     captures. After a first round of the default workload, each thread
//     makes a new encoder, runs the TN GEMM on it outside capture (the stream
//     gets its workspace), begins a thread-local capture on it as
//     decode_capture_begin does, runs the TN GEMM (recorded), and destroys the
//     encoder with the capture still open, as Device::clear_encoders or exit
//     would after a capture an exception left open: ~CommandEncoder's
//     hipblaslt_release_stream_workspace runs on a capturing stream, on the
//     thread that began the capture. Then it makes another encoder and runs
//     the TN GEMM on it (its first workspace allocation). One line says what
//     happened: "race-lab: release under capture: ...".
//
// Every mode ends with the model's route lines (racelab.h): what the code
// under test did that only the fixed route does; the suites expect them.
//
// Settings (environment): OVERLAY_RACE_THREADS (8), OVERLAY_RACE_ROUNDS (33),
// OVERLAY_RACE_MODE, and the model's OVERLAY_STUB_* (hipblaslt_stub.cpp).

#include "race_driver.h"
#include "racelab.h"

#include "mlx/array.h"
#include "mlx/backend/rocm/allocator.h"
#include "mlx/backend/rocm/device.h"
#include "mlx/backend/rocm/gemms/hipblaslt_gemm.h"

#include <hipblaslt/hipblaslt.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
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
  std::unique_ptr<rocm::CommandEncoder> owned;
  hipStream_t stream;
  // One set of buffers per GEMM kind, allocated before the barrier.
  DeviceBuffer a[4] = {DeviceBuffer(64 * 64 * 2), DeviceBuffer(4 * 64 * 64 * 2),
                       DeviceBuffer(64 * 128 * 4), DeviceBuffer(64 * 64 * 2)};
  DeviceBuffer b[4] = {DeviceBuffer(64 * 64 * 2), DeviceBuffer(4 * 64 * 64 * 2),
                       DeviceBuffer(128 * 64 * 4), DeviceBuffer(64 * 64 * 2)};
  DeviceBuffer c[4] = {DeviceBuffer(64 * 64 * 2), DeviceBuffer(4 * 64 * 64 * 2),
                       DeviceBuffer(64 * 64 * 4), DeviceBuffer(64 * 64 * 2)};

  ThreadState(int t_, rocm::Device& dev) : t(t_) {
    renew(dev);
  }
  rocm::CommandEncoder& encoder() {
    return *owned;
  }
  // A new CommandEncoder, so a new stream (teardown mode); the old one's
  // destructor releases its stream's GEMM state first.
  void renew(rocm::Device& dev) {
    owned.reset();
    owned = std::make_unique<rocm::CommandEncoder>(dev);
    stream = static_cast<hipStream_t>(owned->stream());
  }
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
      rocm::hipblaslt_gemm(st.encoder(), false, true, 64, 64, 64, 1.0f, a, 64, b, 64, 0.0f, c, 64,
                           mx::bfloat16);
    } else if (&g == &kBatched) {
      auto a = da.as_array({4, 64, 64}, mx::bfloat16);
      auto b = db.as_array({4, 64, 64}, mx::bfloat16);
      auto c = dc.as_array({4, 64, 64}, mx::bfloat16);
      rocm::hipblaslt_gemm_batched(st.encoder(), false, false, 64, 64, 64, 1.0f, a, 64, 64 * 64, b,
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

// The async MoE path's shape (matmul.cpp moe_async_host_cb): a host callback
// queued on the stream runs a GEMM on that same stream from the HIP
// host-callback thread.
struct CallbackGemm {
  hipStream_t stream;
  void *a, *b, *c;
  bool threw{false};
  std::string what;
};

void callback_gemm(void* user) {
  auto* cb = static_cast<CallbackGemm*>(user);
  try {
    rocm::hipblaslt_gemm_rowmajor_on_stream(cb->stream, 0, false, false, 64, 64, 128, 1.0f, cb->a,
                                            128, cb->b, 64, 0.0f, cb->c, 64, mx::float32);
  } catch (const std::exception& e) {
    cb->threw = true;
    cb->what = e.what();
  }
}

// One teardown round of thread `st.t` (see the header): a fresh encoder, the
// TN GEMM on it, the callback GEMM queued behind it, the encoder destroyed.
void teardown_round(ThreadState& st, rocm::Device& dev, int r, std::mt19937& rng, Counts& counts) {
  st.renew(dev);
  hipStream_t s = st.stream;
  auto A = ints(rng, 64 * 128, -4, 4);
  auto B = ints(rng, 128 * 64, -4, 4);
  auto ref = reference(A, B, 1, 64, 64, 128, false);
  auto ha = encode(A, false), hb = encode(B, false);
  (void)hipMemcpyAsync(st.a[2].ptr, ha.data(), ha.size(), hipMemcpyHostToDevice, s);
  (void)hipMemcpyAsync(st.b[2].ptr, hb.data(), hb.size(), hipMemcpyHostToDevice, s);
  (void)hipMemsetAsync(st.c[2].ptr, 0, 64 * 64 * 4, s);
  // The TN GEMM first, so the stream has its workspace and work queued
  // (unless the callback is to make the first workspace request).
  static const bool callback_first = racelab::env_int("OVERLAY_RACE_CALLBACK_FIRST", 0) != 0;
  if (!callback_first) {
    run_gemm(st, 0, kTN, r, rng, counts);
  }
  CallbackGemm cb{s, st.a[2].ptr, st.b[2].ptr, st.c[2].ptr};
  counts.gemms.fetch_add(1, std::memory_order_relaxed);
  // A long kernel ahead of the callback (20 ms; a sleep, so no
  // synchronization): the encoder is destroyed while the stream still has
  // work queued, as when a thread drops an encoder whose last commands run.
  auto slow = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
  if (hipLaunchHostFunc(s, slow, nullptr) != hipSuccess ||
      hipLaunchHostFunc(s, callback_gemm, &cb) != hipSuccess) {
    finding("hipblaslt-exception", st.t, r, "hipLaunchHostFunc failed");
    return;
  }
  // ~CommandEncoder: hipblaslt_release_stream_workspace while the callback
  // is queued; the stream is gone afterwards, so the next round renews it.
  st.owned.reset();
  if (cb.threw) {
    counts.threw.fetch_add(1, std::memory_order_relaxed);
    finding("hipblaslt-exception", st.t, r, "callback GEMM: " + cb.what);
    return;
  }
  std::vector<uint8_t> hc(64 * 64 * 4);
  (void)hipMemcpy(hc.data(), st.c[2].ptr, hc.size(), hipMemcpyDeviceToHost);
  std::string bad = mismatch(hc, ref, false);
  if (bad.empty()) {
    counts.exact.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  counts.mismatched.fetch_add(1, std::memory_order_relaxed);
  finding("exact-output-mismatch", st.t, r, std::string("callback f32 GEMM: ") + bad);
}

// What the capture mode saw, over all threads.
struct CaptureCounts {
  std::atomic<int> threads{0};
  std::atomic<int> first_refused{0};  // threw the capture error, allocated nothing
  std::atomic<int> first_recorded{0}; // the GEMM was recorded into the capture
  std::atomic<int> first_other{0};    // threw something else
  std::atomic<int> intact{0};         // hipStreamEndCapture succeeded
  std::atomic<int> later_recorded{0}; // the later capture recorded its GEMM
  // A pending error after a GEMM on a stream that has its workspace ([0]) and
  // on a new stream, whose first workspace request allocates ([1]).
  std::atomic<int> error_cleared[2]{{0}, {0}};
  std::atomic<int> error_kept[2]{{0}, {0}};
  // release-capture mode: encoders destroyed while their stream captured.
  std::atomic<int> released_capturing{0};
};

// One TN GEMM under a thread-local capture of the thread's stream; returns
// 1 recorded, 0 refused with the capture error, -1 another exception; `intact`
// says whether the capture ended cleanly.
int captured_tn(ThreadState& st, bool* intact, std::string* what) {
  hipStream_t s = st.stream;
  if (hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal) != hipSuccess) {
    *intact = false;
    return -1;
  }
  int outcome = 1;
  try {
    auto a = st.a[0].as_array({64, 64}, mx::bfloat16);
    auto b = st.b[0].as_array({64, 64}, mx::bfloat16);
    auto c = st.c[0].as_array({64, 64}, mx::bfloat16);
    rocm::hipblaslt_gemm(st.encoder(), false, true, 64, 64, 64, 1.0f, a, 64, b, 64, 0.0f, c, 64,
                         mx::bfloat16);
  } catch (const std::exception& e) {
    *what = e.what();
    outcome = what->find("on a capturing stream with none allocated") != std::string::npos ? 0 : -1;
  }
  hipGraph_t g = nullptr;
  *intact = hipStreamEndCapture(s, &g) == hipSuccess && g != nullptr;
  if (g) {
    (void)hipGraphDestroy(g);
  }
  return outcome;
}

void capture_round(ThreadState& st, rocm::Device& dev, std::mt19937& rng, Counts& counts,
                   CaptureCounts& cc) {
  cc.threads.fetch_add(1, std::memory_order_relaxed);
  st.renew(dev); // a stream with no workspace yet
  bool intact = false;
  std::string what;
  int first = captured_tn(st, &intact, &what);
  (first == 1 ? cc.first_recorded : first == 0 ? cc.first_refused : cc.first_other)
      .fetch_add(1, std::memory_order_relaxed);
  if (first < 0) {
    finding("hipblaslt-exception", st.t, 1, "GEMM under capture: " + what);
  }
  if (intact) {
    cc.intact.fetch_add(1, std::memory_order_relaxed);
  }
  // Outside capture the stream gets its workspace; a later capture uses it.
  run_gemm(st, 0, kTN, 1, rng, counts);
  what.clear();
  if (captured_tn(st, &intact, &what) == 1 && intact) {
    cc.later_recorded.fetch_add(1, std::memory_order_relaxed);
  } else {
    finding("hipblaslt-exception", st.t, 1, "GEMM under a later capture: " + what);
  }
  // Fix 2's open item 3: a HIP error pending on this thread before a GEMM.
  for (int fresh = 0; fresh < 2; ++fresh) {
    if (fresh) {
      st.renew(dev);
    }
    (void)hipGetLastError();
    (void)hipSetDevice(99); // fails: hipErrorInvalidDevice is now the last error
    (void)hipSetDevice(0);
    run_gemm(st, 2, kF32, 2 + fresh, rng, counts);
    (hipPeekAtLastError() == hipSuccess ? cc.error_cleared[fresh] : cc.error_kept[fresh])
        .fetch_add(1, std::memory_order_relaxed);
    (void)hipGetLastError();
  }
}

// One release-capture round of thread `st.t` (see the header).
void release_capture_round(ThreadState& st, rocm::Device& dev, std::mt19937& rng, Counts& counts,
                           CaptureCounts& cc) {
  cc.threads.fetch_add(1, std::memory_order_relaxed);
  st.renew(dev);
  run_gemm(st, 0, kTN, 1, rng, counts); // the stream gets its workspace outside capture
  hipStream_t s = st.stream;
  if (hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal) != hipSuccess) {
    finding("hipblaslt-exception", st.t, 1, "hipStreamBeginCapture failed");
    return;
  }
  try {
    auto a = st.a[0].as_array({64, 64}, mx::bfloat16);
    auto b = st.b[0].as_array({64, 64}, mx::bfloat16);
    auto c = st.c[0].as_array({64, 64}, mx::bfloat16);
    rocm::hipblaslt_gemm(st.encoder(), false, true, 64, 64, 64, 1.0f, a, 64, b, 64, 0.0f, c, 64,
                         mx::bfloat16);
  } catch (const std::exception& e) {
    finding("hipblaslt-exception", st.t, 1, std::string("GEMM under capture: ") + e.what());
  }
  hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
  if (hipStreamIsCapturing(s, &status) == hipSuccess &&
      status == hipStreamCaptureStatusActive) {
    cc.released_capturing.fetch_add(1, std::memory_order_relaxed);
  }
  // ~CommandEncoder with the capture open: the release runs on a capturing
  // stream, then the stream (and its capture) is destroyed.
  st.owned.reset();
  st.renew(dev);
  run_gemm(st, 0, kTN, 2, rng, counts);
}

void print_release_capture(const CaptureCounts& cc) {
  std::fprintf(stderr,
               "race-lab: release under capture: %d of %d encoders destroyed while their stream "
               "captured\n",
               cc.released_capturing.load(), cc.threads.load());
}

void print_capture(const CaptureCounts& cc) {
  int n = cc.threads.load();
  std::fprintf(stderr,
               "race-lab: capture: first workspace GEMM on a capturing stream: %d of %d refused "
               "with the capture error, %d recorded, %d other; capture intact after it: %d of "
               "%d; a later capture recorded its GEMM: %d of %d\n",
               cc.first_refused.load(), n, cc.first_recorded.load(), cc.first_other.load(),
               cc.intact.load(), n, cc.later_recorded.load(), n);
  for (int fresh = 0; fresh < 2; ++fresh) {
    std::fprintf(stderr,
                 "race-lab: last error: a HIP error pending before a GEMM on %s: cleared %d, "
                 "kept %d of %d\n",
                 fresh ? "a new stream (its first workspace allocation)"
                       : "a stream with its workspace",
                 cc.error_cleared[fresh].load(), cc.error_kept[fresh].load(), n);
  }
}

// late mode, before round 0 (see the header): thread 0 creates the handle
// through the route question and then sleeps until the others have run their
// first GEMM (at most 60 s, so a thread that died cannot hang the run); the
// others wait until the handle exists. Only relaxed atomics and sleeps: no
// happens-before edge between thread 0 and the others.
void late_start(int t, int threads, std::atomic<int>& first_done,
                std::atomic<int>& late_started) {
  if (t == 0) {
    (void)rocm::is_hipblaslt_available();
    first_done.store(1, std::memory_order_relaxed);
    for (int ms = 0; ms < 60000 && late_started.load(std::memory_order_relaxed) < threads - 1;
         ++ms) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return;
  }
  while (first_done.load(std::memory_order_relaxed) == 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

} // namespace

int main() {
  const int threads = static_cast<int>(racelab::env_int("OVERLAY_RACE_THREADS", 8));
  const int rounds = static_cast<int>(racelab::env_int("OVERLAY_RACE_ROUNDS", 33));
  const long long run = racelab::env_int("OVERLAY_RUN_INDEX", 1);
  const char* mode_env = std::getenv("OVERLAY_RACE_MODE");
  const std::string mode = mode_env ? mode_env : "";
  if (mode != "" && mode != "late" && mode != "teardown" && mode != "capture" &&
      mode != "release-capture") {
    std::fprintf(stderr, "hipblaslt_race: unknown OVERLAY_RACE_MODE %s\n", mode.c_str());
    return 2;
  }
  std::printf(
      "race-lab: hipblaslt_race on the host model of HIP and hipBLASLt (not a GPU run): %d threads x "
      "%d rounds, workspace %lld bytes, fail-once at call %lld, mode %s\n",
      threads, rounds, racelab::env_int("OVERLAY_STUB_WORKSPACE", 0),
      racelab::env_int("OVERLAY_STUB_FAIL_ONCE_AT", 0), mode.empty() ? "default" : mode.c_str());
  std::fflush(stdout);

  rocm::Device device(0);
  Barrier barrier(threads);
  Counts counts;
  // late mode: thread 0 has created the handle (first_done), and how many
  // other threads have run their first GEMM (late_started). Relaxed on
  // purpose: no happens-before edge for ThreadSanitizer (see the header).
  std::atomic<int> first_done{0};
  std::atomic<int> late_started{0};
  CaptureCounts capture_counts;
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
        // late mode starts with the f32 GEMM (see the header).
        const int order[2][4] = {{0, 1, 2, 3}, {2, 0, 1, 3}};
        const int* ord = order[mode == "late" ? 1 : 0];
        for (int r = 0; r < rounds; ++r) {
          if (mode == "teardown") {
            teardown_round(st, device, r, rng, counts);
            continue;
          }
          if (mode == "capture" && r == 1) {
            capture_round(st, device, rng, counts, capture_counts);
            break;
          }
          if (mode == "release-capture" && r == 1) {
            release_capture_round(st, device, rng, counts, capture_counts);
            break;
          }
          if (mode == "late" && r == 0) {
            late_start(t, threads, first_done, late_started);
          }
          for (int i = 0; i < 4; ++i) {
            run_gemm(st, ord[i], *gemms[ord[i]], r, rng, counts);
            if (mode == "late" && r == 0 && i == 0 && t != 0) {
              late_started.fetch_add(1, std::memory_order_relaxed);
            }
          }
        }
        if (st.owned) {
          (void)hipStreamSynchronize(st.stream);
        }
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
  if (mode == "capture") {
    print_capture(capture_counts);
  }
  if (mode == "release-capture") {
    print_release_capture(capture_counts);
  }
  racelab::hipblaslt_route_summary();
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
