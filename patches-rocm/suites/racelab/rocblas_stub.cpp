// rocblas_stub.cpp: the race lab's model of rocBLAS (docs/race-lab.md).
//
// Our own code against the real rocblas.h, for the calls MLX's Device makes
// (create, destroy, set_stream, gemm_ex) plus sgemm. What it models:
//
//   * rocblas_create_handle takes OVERLAY_STUB_ROCBLAS_CREATE_US microseconds
//     (default 5000; an assumption standing in for the library's start-up),
//     binds the null stream, and gives the handle OVERLAY_STUB_ROCBLAS_WORKSPACE
//     bytes of its own device memory (default 0), which its GEMMs use as
//     split-K scratch: one handle used on two streams at once mixes their
//     partial sums, as rocBLAS documents a handle must not be shared so.
//   * rocblas_set_stream writes the handle's stream; a GEMM reads it when it
//     launches, at the end of the call (after OVERLAY_STUB_ENQUEUE_US of host
//     work), so a rebind by another thread in between sends the GEMM to the
//     other thread's stream.
//   * the handle counts the host threads inside a call with it; destroying it
//     in use is reported (descriptor-destroyed-in-use), a call on a destroyed
//     handle is reported (use-of-destroyed-descriptor) and fails.
//   * the GEMM itself is gemm_model.cpp's (exact, range-checked).
//   * the route (racelab.h, rocblas_route_summary): which threads bound or
//     used each handle, and how often a handle was moved to another stream
//     while its old stream still had work queued (rocBLAS requires the old
//     stream drained first: the handle's device memory is reused); and how
//     many handles were destroyed never bound nor used: the ones an
//     availability check creates only to prove the library loads (fix 1's
//     check, run once under its mutex, makes exactly one).

#include "racelab.h"

#include <rocblas/rocblas.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RACELAB_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(RACELAB_ASAN)
#define RACELAB_ASAN 1
#endif

struct _rocblas_handle {
  uint64_t magic;
  int device{0};
  // Plain fields, as in a library that expects one thread per handle.
  hipStream_t stream{nullptr};
  void* workspace{nullptr};
  size_t workspace_bytes{0};
  std::atomic<int> users{0};
};

namespace {

constexpr uint64_t kLive = 0x524f43424c41534cull; // "ROCBLASL"
constexpr uint64_t kDead = 0xdeaddeaddeaddeadull;

long long setting(const char* name, long long fallback) {
  return racelab::env_int(name, fallback);
}

bool alive(const _rocblas_handle* h, const char* call) {
  if (h == nullptr) {
    return false;
  }
  if (h->magic != kLive) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s: rocBLAS handle %p is destroyed", call,
                  static_cast<const void*>(h));
    racelab::report("use-of-destroyed-descriptor", buf);
    return false;
  }
  return true;
}

// Route bookkeeping, touched only inside a Hidden scope; leaked on purpose.
struct Route {
  std::mutex m;
  std::map<const void*, std::set<std::thread::id>> users; // handle -> threads
  long long rebinds{0};
  long long rebinds_pending{0}; // moved while the old stream had work queued
  long long destroyed_unused{0}; // destroyed never bound nor used
};
Route& route() {
  static Route* r = new Route();
  return *r;
}

void note_use(const _rocblas_handle* h) {
  racelab::Hidden hidden;
  Route& r = route();
  std::lock_guard<std::mutex> lk(r.m);
  r.users[h].insert(std::this_thread::get_id());
}

// A bind of `h` from `old` to `stream`: pending when `old` is live and not drained.
void note_bind(const _rocblas_handle* h, hipStream_t old, hipStream_t stream) {
  racelab::Hidden hidden;
  bool pending = false;
  if (old != stream && old != nullptr && racelab::stream_live(old)) {
    pending = hipStreamQuery(old) == hipErrorNotReady;
  }
  Route& r = route();
  std::lock_guard<std::mutex> lk(r.m);
  r.users[h].insert(std::this_thread::get_id());
  if (old != stream && old != nullptr) {
    ++r.rebinds;
    r.rebinds_pending += pending ? 1 : 0;
  }
}

bool to_hip(rocblas_datatype t, hipDataType* out) {
  switch (t) {
    case rocblas_datatype_f32_r:
      *out = HIP_R_32F;
      return true;
    case rocblas_datatype_f16_r:
      *out = HIP_R_16F;
      return true;
    case rocblas_datatype_bf16_r:
      *out = HIP_R_16BF;
      return true;
    default:
      return false;
  }
}

rocblas_status gemm(const char* call, rocblas_handle h, rocblas_operation ta, rocblas_operation tb,
                    rocblas_int m, rocblas_int n, rocblas_int k, float alpha, const void* A,
                    hipDataType at, rocblas_int lda, const void* B, hipDataType bt,
                    rocblas_int ldb, float beta, const void* C, hipDataType ct, rocblas_int ldc,
                    void* D, hipDataType dt, rocblas_int ldd) {
  static const long long enqueue_us = setting("OVERLAY_STUB_ENQUEUE_US", 20);
  if (!alive(h, call)) {
    return rocblas_status_invalid_handle;
  }
  if (m < 0 || n < 0 || k < 0) {
    return rocblas_status_invalid_size;
  }
  if (m == 0 || n == 0) {
    return rocblas_status_success;
  }
  racelab::GemmPlan p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.ta = ta != rocblas_operation_none;
  p.tb = tb != rocblas_operation_none;
  p.ta_type = at;
  p.tb_type = bt;
  p.tc_type = ct;
  p.td_type = dt;
  p.lda = lda;
  p.ldb = ldb;
  p.ldc = ldc;
  p.ldd = ldd;
  p.a_cols = static_cast<uint64_t>(p.ta ? m : k);
  p.b_cols = static_cast<uint64_t>(p.tb ? k : n);
  p.c_cols = p.d_cols = static_cast<uint64_t>(n);
  if (lda < (p.ta ? k : m) || ldb < (p.tb ? n : k) || ldc < m || ldd < m) {
    return rocblas_status_invalid_size;
  }
  h->users.fetch_add(1, std::memory_order_relaxed);
  note_use(h);
  racelab::busy_wait_us(enqueue_us);
  bool still = alive(h, call);
  // The launch: the stream and the workspace are read from the handle now.
  hipStream_t stream = still ? h->stream : nullptr;
  void* ws = still ? h->workspace : nullptr;
  size_t ws_bytes = still ? h->workspace_bytes : 0;
  h->users.fetch_sub(1, std::memory_order_relaxed);
  if (!still) {
    return rocblas_status_invalid_handle;
  }
  bool ok = racelab::enqueue(stream, call, [=] {
    racelab::run_gemm(p, alpha, beta, A, B, C, D, ws, ws_bytes);
  });
  return ok ? rocblas_status_success : rocblas_status_invalid_value;
}

} // namespace

rocblas_status rocblas_create_handle(rocblas_handle* handle) {
  if (handle == nullptr) {
    return rocblas_status_invalid_pointer;
  }
  static const long long create_us = setting("OVERLAY_STUB_ROCBLAS_CREATE_US", 5000);
  static const long long ws = setting("OVERLAY_STUB_ROCBLAS_WORKSPACE", 0);
  racelab::busy_wait_us(create_us);
  auto* h = new _rocblas_handle();
  h->magic = kLive;
  (void)hipGetDevice(&h->device);
  if (ws > 0) {
    if (hipMalloc(&h->workspace, static_cast<size_t>(ws)) != hipSuccess) {
      delete h;
      return rocblas_status_memory_error;
    }
    h->workspace_bytes = static_cast<size_t>(ws);
  }
  *handle = h;
  // Printed once per process: the rocBLAS path of the code under test ran.
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    std::fprintf(stderr, "race-lab: rocblas_create_handle on the host model\n");
  }
  return rocblas_status_success;
}

rocblas_status rocblas_destroy_handle(rocblas_handle handle) {
  if (!alive(handle, "rocblas_destroy_handle")) {
    return rocblas_status_invalid_handle;
  }
  int users = handle->users.load(std::memory_order_relaxed);
  if (users > 0) {
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  "rocblas_destroy_handle: handle %p destroyed while %d other call(s) use it",
                  static_cast<void*>(handle), users);
    racelab::report("descriptor-destroyed-in-use", buf);
  }
  {
    racelab::Hidden hidden;
    Route& r = route();
    std::lock_guard<std::mutex> lk(r.m);
    r.destroyed_unused += r.users.count(handle) == 0 ? 1 : 0;
  }
  handle->magic = kDead;
  if (handle->workspace) {
    (void)hipFree(handle->workspace);
  }
#ifdef RACELAB_ASAN
  delete handle;
#endif
  return rocblas_status_success;
}

rocblas_status rocblas_set_stream(rocblas_handle handle, hipStream_t stream) {
  if (!alive(handle, "rocblas_set_stream")) {
    return rocblas_status_invalid_handle;
  }
  note_bind(handle, handle->stream, stream);
  handle->stream = stream;
  return rocblas_status_success;
}

rocblas_status rocblas_get_stream(rocblas_handle handle, hipStream_t* stream) {
  if (!alive(handle, "rocblas_get_stream") || stream == nullptr) {
    return rocblas_status_invalid_handle;
  }
  *stream = handle->stream;
  return rocblas_status_success;
}

rocblas_status rocblas_gemm_ex(rocblas_handle handle, rocblas_operation transA,
                               rocblas_operation transB, rocblas_int m, rocblas_int n,
                               rocblas_int k, const void* alpha, const void* a,
                               rocblas_datatype a_type, rocblas_int lda, const void* b,
                               rocblas_datatype b_type, rocblas_int ldb, const void* beta,
                               const void* c, rocblas_datatype c_type, rocblas_int ldc, void* d,
                               rocblas_datatype d_type, rocblas_int ldd,
                               rocblas_datatype compute_type, rocblas_gemm_algo, int32_t,
                               uint32_t) {
  hipDataType at, bt, ct, dt;
  if (!to_hip(a_type, &at) || !to_hip(b_type, &bt) || !to_hip(c_type, &ct) ||
      !to_hip(d_type, &dt) || compute_type != rocblas_datatype_f32_r) {
    return rocblas_status_not_implemented;
  }
  if (alpha == nullptr || beta == nullptr) {
    return rocblas_status_invalid_pointer;
  }
  // Host pointer mode: the scalars are read at the call.
  return gemm("rocblas_gemm_ex", handle, transA, transB, m, n, k,
              *static_cast<const float*>(alpha), a, at, lda, b, bt, ldb,
              *static_cast<const float*>(beta), c, ct, ldc, d, dt, ldd);
}

rocblas_status rocblas_sgemm(rocblas_handle handle, rocblas_operation transA,
                             rocblas_operation transB, rocblas_int m, rocblas_int n, rocblas_int k,
                             const float* alpha, const float* A, rocblas_int lda, const float* B,
                             rocblas_int ldb, const float* beta, float* C, rocblas_int ldc) {
  if (alpha == nullptr || beta == nullptr) {
    return rocblas_status_invalid_pointer;
  }
  return gemm("rocblas_sgemm", handle, transA, transB, m, n, k, *alpha, A, HIP_R_32F, lda, B,
              HIP_R_32F, ldb, *beta, C, HIP_R_32F, ldc, C, HIP_R_32F, ldc);
}

namespace racelab {

void rocblas_route_summary() {
  size_t handles = 0, widest = 0;
  long long rebinds = 0, pending = 0, unused = 0;
  {
    Hidden h;
    Route& r = route();
    std::lock_guard<std::mutex> lk(r.m);
    handles = r.users.size();
    for (auto& [hd, threads] : r.users) {
      widest = std::max(widest, threads.size());
    }
    rebinds = r.rebinds;
    pending = r.rebinds_pending;
    unused = r.destroyed_unused;
  }
  if (handles > 0 && widest == 1) {
    std::fprintf(stderr,
                 "race-lab: route: rocBLAS handles: %zu handles, each bound and used by one "
                 "thread\n",
                 handles);
  } else {
    std::fprintf(stderr, "race-lab: route: rocBLAS handles: %zu handles, one used by %zu threads\n",
                 handles, widest);
  }
  if (unused == 1) {
    std::fprintf(stderr,
                 "race-lab: route: rocBLAS availability: checked once (1 handle created to "
                 "prove the library, destroyed unused)\n");
  } else {
    std::fprintf(stderr,
                 "race-lab: route: rocBLAS availability: %lld handles created to prove the "
                 "library and destroyed unused\n",
                 unused);
  }
  if (pending == 0) {
    std::fprintf(stderr,
                 "race-lab: route: rocBLAS rebinds: %lld, each after the old stream drained\n",
                 rebinds);
  } else {
    std::fprintf(stderr,
                 "race-lab: route: rocBLAS rebinds: %lld of %lld with work queued on the old "
                 "stream\n",
                 pending, rebinds);
  }
  std::fflush(stderr);
}

} // namespace racelab
