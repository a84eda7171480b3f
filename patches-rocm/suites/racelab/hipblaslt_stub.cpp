// hipblaslt_stub.cpp: the race lab's model of hipBLASLt (docs/race-lab.md).
//
// Our own code against the real hipblaslt.h. What it models:
//
//   * hipblasLtCreate takes OVERLAY_STUB_CREATE_US microseconds (default 5000),
//     standing in for the real library loading its kernel database; a longer
//     create widens the window in which a second thread can see a half-made
//     handle. The value is an assumption, not a measurement.
//   * hipblasLtMatmulAlgoGetHeuristic returns up to 8 candidates for bf16, f16
//     and f32 GEMMs (none for fp8 or int8, so MLX's capability probe reports
//     bf16 only); each candidate's workspaceSize is OVERLAY_STUB_WORKSPACE
//     bytes (default 0, what every candidate on gfx1151 asked for in seed 000)
//     when that fits the preference's maximum, else 0. An algorithm is valid
//     for the geometry it was chosen for (as a Tensile solution is); another
//     geometry gets HIPBLAS_STATUS_INVALID_VALUE, as does a workspace smaller
//     than the algorithm asks for.
//   * hipblasLtMatmul reads its descriptors on the calling thread for
//     OVERLAY_STUB_ENQUEUE_US microseconds (default 20: argument setup and
//     kernel selection), counting itself as a user of each, then enqueues the
//     GEMM on the stream and returns. alpha and beta are read at the call
//     (host pointer mode).
//   * the enqueued GEMM (gemm_model.cpp) computes exactly in float on the stream's worker
//     thread. With a workspace it is split-K: up to 4 slices of K write their
//     partial sums into the workspace, then the partials are read back and
//     summed into D; two GEMMs running on two streams over one workspace
//     therefore read each other's partials and produce wrong outputs.
//   * descriptors, layouts and preferences are heap objects with a live/dead
//     tag and a count of host threads currently inside a call that uses them.
//     Destroying one that is in use is reported (descriptor-destroyed-in-use);
//     a call that finds one destroyed reports use-of-destroyed-descriptor and
//     fails. Under AddressSanitizer destroyed objects are freed (so a late read
//     is a heap-use-after-free); otherwise they are kept, tagged dead.
//   * OVERLAY_STUB_FAIL_ONCE_AT=N (default 0: off): on every host thread, its
//     N-th hipblasLtMatmul call fails once with HIPBLAS_STATUS_INVALID_VALUE,
//     as a cached algorithm that went stale does; MLX then drops that pipe
//     (the erase path of seed 000).
//   * OVERLAY_STUB_DESC_WRITES=1 (default 0): hipblasLtMatmul also writes into
//     the matmul descriptor it is given. The fix's measurement on gfx1151 says
//     the real library does ("hipBLASLt writes into the descriptors it is
//     given"); this model does not assume it unless asked.
//   * the route (racelab.h, hipblaslt_route_summary): every matmul notes
//     whether its descriptor was created by the calling thread and which
//     stream used which workspace, so the end of a run can say what only the
//     fixed route does (thread-owned descriptors, one workspace per stream,
//     each destroyed stream's workspace freed).

#include "racelab.h"

#include <hipblaslt/hipblaslt.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RACELAB_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(RACELAB_ASAN)
#define RACELAB_ASAN 1
#endif

namespace {

constexpr uint64_t kLive = 0x52414345'4c414231ull; // "RACELAB1"
constexpr uint64_t kDead = 0xdeaddeaddeaddeadull;
constexpr uint32_t kAlgoMagic = 0x424c4152u; // "RALB"
constexpr int kMaxCandidates = 8;

enum class Kind { handle, desc, layout, pref };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::handle:
      return "hipBLASLt handle";
    case Kind::desc:
      return "matmul descriptor";
    case Kind::layout:
      return "matrix layout";
    case Kind::pref:
      return "matmul preference";
  }
  return "object";
}

struct Object {
  uint64_t magic{kLive};
  Kind kind;
  // Host threads currently inside a call that uses this object.
  std::atomic<int> users{0};
  explicit Object(Kind k) : kind(k) {}
};

struct Handle : Object {
  int device{0};
  Handle() : Object(Kind::handle) {}
};

struct Desc : Object {
  hipblasComputeType_t compute{HIPBLAS_COMPUTE_32F};
  hipDataType scale{HIP_R_32F};
  int32_t transa{HIPBLAS_OP_N};
  int32_t transb{HIPBLAS_OP_N};
  int32_t epilogue{HIPBLASLT_EPILOGUE_DEFAULT};
  const void* bias{nullptr};
  int32_t bias_type{0};
  const void* a_scale{nullptr};
  const void* b_scale{nullptr};
  // The thread that created it (route bookkeeping, read under Hidden).
  std::thread::id creator{std::this_thread::get_id()};
  // Written by hipblasLtMatmul when OVERLAY_STUB_DESC_WRITES=1.
  hipStream_t last_stream{nullptr};
  uint64_t calls{0};
  Desc() : Object(Kind::desc) {}
};

struct Layout : Object {
  hipDataType type{HIP_R_32F};
  uint64_t rows{0};
  uint64_t cols{0};
  int64_t ld{0};
  int32_t batch{1};
  int64_t stride{0};
  int32_t order{0};
  Layout() : Object(Kind::layout) {}
};

struct Pref : Object {
  uint64_t max_workspace{0};
  Pref() : Object(Kind::pref) {}
};

long long setting(const char* name, long long fallback) {
  return racelab::env_int(name, fallback);
}

long long workspace_setting() {
  static const long long v = setting("OVERLAY_STUB_WORKSPACE", 0);
  return v < 0 ? 0 : v;
}

// Plain reads of the tag: a destroy on another thread that is not ordered
// before this call is a data race ThreadSanitizer sees, and a destroyed object
// is reported here.
bool alive(const Object* o, Kind k, const char* call) {
  if (o == nullptr) {
    return false;
  }
  if (o->magic != kLive || o->kind != k) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "%s: %s %p is destroyed", call, kind_name(k),
                  static_cast<const void*>(o));
    racelab::report("use-of-destroyed-descriptor", buf);
    return false;
  }
  return true;
}

// Counts the calling thread as a user of each object for the scope.
class Users {
 public:
  void add(Object* o) {
    o->users.fetch_add(1, std::memory_order_relaxed);
    held_.push_back(o);
  }
  ~Users() {
    for (auto* o : held_) {
      o->users.fetch_sub(1, std::memory_order_relaxed);
    }
  }

 private:
  std::vector<Object*> held_;
};

template <typename T>
hipblasStatus_t destroy(T* o, Kind k, const char* call) {
  if (o == nullptr) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  if (!alive(o, k, call)) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  int users = o->users.load(std::memory_order_relaxed);
  if (users > 0) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "%s: %s %p destroyed while %d other call(s) use it", call,
                  kind_name(k), static_cast<const void*>(o), users);
    racelab::report("descriptor-destroyed-in-use", buf);
  }
  o->magic = kDead;
#ifdef RACELAB_ASAN
  delete o;
#endif
  // Otherwise kept, tagged dead, so a later use is reported by alive().
  return HIPBLAS_STATUS_SUCCESS;
}

uint32_t geometry_hash(const racelab::GemmPlan& p) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t v : {p.m, p.n, p.k, static_cast<int64_t>(p.batch), static_cast<int64_t>(p.ta),
                    static_cast<int64_t>(p.tb), static_cast<int64_t>(p.ta_type),
                    static_cast<int64_t>(p.td_type)}) {
    h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
  }
  return static_cast<uint32_t>(h ^ (h >> 32));
}

// Reads the plan from live descriptors (plain reads, on the calling thread).
bool make_plan(const Desc* d, const Layout* a, const Layout* b, const Layout* c, const Layout* dd,
               racelab::GemmPlan* p) {
  p->ta = d->transa != HIPBLAS_OP_N;
  p->tb = d->transb != HIPBLAS_OP_N;
  p->m = static_cast<int64_t>(dd->rows);
  p->n = static_cast<int64_t>(dd->cols);
  p->k = static_cast<int64_t>(p->ta ? a->rows : a->cols);
  int64_t a_m = static_cast<int64_t>(p->ta ? a->cols : a->rows);
  int64_t b_k = static_cast<int64_t>(p->tb ? b->cols : b->rows);
  int64_t b_n = static_cast<int64_t>(p->tb ? b->rows : b->cols);
  if (a_m != p->m || b_k != p->k || b_n != p->n || c->rows != dd->rows || c->cols != dd->cols) {
    return false;
  }
  p->batch = dd->batch;
  if (a->batch != p->batch || b->batch != p->batch || c->batch != p->batch) {
    return false;
  }
  p->ta_type = a->type;
  p->tb_type = b->type;
  p->tc_type = c->type;
  p->td_type = dd->type;
  if (!racelab::type_size(a->type) || !racelab::type_size(b->type) || !racelab::type_size(c->type) ||
      !racelab::type_size(dd->type)) {
    return false;
  }
  p->lda = a->ld;
  p->ldb = b->ld;
  p->ldc = c->ld;
  p->ldd = dd->ld;
  if (p->lda < static_cast<int64_t>(a->rows) || p->ldb < static_cast<int64_t>(b->rows) ||
      p->ldc < static_cast<int64_t>(c->rows) || p->ldd < static_cast<int64_t>(dd->rows)) {
    return false;
  }
  p->sa = a->stride;
  p->sb = b->stride;
  p->sc = c->stride;
  p->sd = dd->stride;
  p->a_cols = a->cols;
  p->b_cols = b->cols;
  p->c_cols = c->cols;
  p->d_cols = dd->cols;
  return p->m > 0 && p->n > 0 && p->k > 0 && p->batch > 0;
}


thread_local long long t_matmul_calls = 0;

// Route bookkeeping, touched only inside a Hidden scope; leaked on purpose
// (stream workers may still run while static destructors do).
struct Route {
  std::mutex m;
  long long matmuls{0};
  long long foreign_desc{0}; // matmuls whose descriptor another thread created
  std::map<void*, std::set<hipStream_t>> ws_streams; // workspace -> streams using it
};
Route& route() {
  static Route* r = new Route();
  return *r;
}

void note_matmul(const Desc* d, void* workspace, size_t need, hipStream_t stream) {
  racelab::Hidden h;
  Route& r = route();
  std::lock_guard<std::mutex> lk(r.m);
  ++r.matmuls;
  if (d->creator != std::this_thread::get_id()) {
    ++r.foreign_desc;
  }
  if (workspace != nullptr && need > 0) {
    r.ws_streams[workspace].insert(stream);
  }
}

} // namespace

// ------------------------------------------------------------------ handle

hipblasStatus_t hipblasLtCreate(hipblasLtHandle_t* handle) {
  if (handle == nullptr) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  static const long long create_us = setting("OVERLAY_STUB_CREATE_US", 5000);
  racelab::busy_wait_us(create_us);
  auto* h = new Handle();
  (void)hipGetDevice(&h->device);
  *handle = h;
  return HIPBLAS_STATUS_SUCCESS;
}

hipblasStatus_t hipblasLtDestroy(const hipblasLtHandle_t handle) {
  return destroy(static_cast<Handle*>(handle), Kind::handle, "hipblasLtDestroy");
}

// ------------------------------------------------------------------ descriptors

hipblasStatus_t hipblasLtMatmulDescCreate(hipblasLtMatmulDesc_t* matmulDesc,
                                          hipblasComputeType_t computeType,
                                          hipDataType scaleType) {
  if (matmulDesc == nullptr) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  auto* d = new Desc();
  d->compute = computeType;
  d->scale = scaleType;
  *matmulDesc = reinterpret_cast<hipblasLtMatmulDesc_t>(d);
  return HIPBLAS_STATUS_SUCCESS;
}

hipblasStatus_t hipblasLtMatmulDescDestroy(const hipblasLtMatmulDesc_t matmulDesc) {
  return destroy(reinterpret_cast<Desc*>(matmulDesc), Kind::desc, "hipblasLtMatmulDescDestroy");
}

namespace {

template <typename T>
hipblasStatus_t put(T* field, const void* buf, size_t size) {
  if (buf == nullptr || size != sizeof(T)) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  std::memcpy(field, buf, sizeof(T));
  return HIPBLAS_STATUS_SUCCESS;
}

template <typename T>
hipblasStatus_t get(const T* field, void* buf, size_t size, size_t* written) {
  if (written) {
    *written = sizeof(T);
  }
  if (buf == nullptr || size < sizeof(T)) {
    return buf == nullptr && size == 0 ? HIPBLAS_STATUS_SUCCESS : HIPBLAS_STATUS_INVALID_VALUE;
  }
  std::memcpy(buf, field, sizeof(T));
  return HIPBLAS_STATUS_SUCCESS;
}

} // namespace

hipblasStatus_t hipblasLtMatmulDescSetAttribute(hipblasLtMatmulDesc_t matmulDesc,
                                                hipblasLtMatmulDescAttributes_t attr,
                                                const void* buf, size_t sizeInBytes) {
  auto* d = reinterpret_cast<Desc*>(matmulDesc);
  if (!alive(d, Kind::desc, "hipblasLtMatmulDescSetAttribute")) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  switch (attr) {
    case HIPBLASLT_MATMUL_DESC_TRANSA:
      return put(&d->transa, buf, sizeInBytes);
    case HIPBLASLT_MATMUL_DESC_TRANSB:
      return put(&d->transb, buf, sizeInBytes);
    case HIPBLASLT_MATMUL_DESC_EPILOGUE:
      return put(&d->epilogue, buf, sizeInBytes);
    case HIPBLASLT_MATMUL_DESC_BIAS_POINTER:
      return put(&d->bias, buf, sizeInBytes);
    case HIPBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return put(&d->bias_type, buf, sizeInBytes);
    case HIPBLASLT_MATMUL_DESC_A_SCALE_POINTER:
      return put(&d->a_scale, buf, sizeInBytes);
    case HIPBLASLT_MATMUL_DESC_B_SCALE_POINTER:
      return put(&d->b_scale, buf, sizeInBytes);
    default:
      return HIPBLAS_STATUS_NOT_SUPPORTED;
  }
}

hipblasStatus_t hipblasLtMatmulDescGetAttribute(hipblasLtMatmulDesc_t matmulDesc,
                                                hipblasLtMatmulDescAttributes_t attr, void* buf,
                                                size_t sizeInBytes, size_t* sizeWritten) {
  auto* d = reinterpret_cast<Desc*>(matmulDesc);
  if (!alive(d, Kind::desc, "hipblasLtMatmulDescGetAttribute")) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  switch (attr) {
    case HIPBLASLT_MATMUL_DESC_TRANSA:
      return get(&d->transa, buf, sizeInBytes, sizeWritten);
    case HIPBLASLT_MATMUL_DESC_TRANSB:
      return get(&d->transb, buf, sizeInBytes, sizeWritten);
    case HIPBLASLT_MATMUL_DESC_EPILOGUE:
      return get(&d->epilogue, buf, sizeInBytes, sizeWritten);
    default:
      return HIPBLAS_STATUS_NOT_SUPPORTED;
  }
}

hipblasStatus_t hipblasLtMatrixLayoutCreate(hipblasLtMatrixLayout_t* matLayout, hipDataType type,
                                            uint64_t rows, uint64_t cols, int64_t ld) {
  if (matLayout == nullptr) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  auto* l = new Layout();
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *matLayout = reinterpret_cast<hipblasLtMatrixLayout_t>(l);
  return HIPBLAS_STATUS_SUCCESS;
}

hipblasStatus_t hipblasLtMatrixLayoutDestroy(const hipblasLtMatrixLayout_t matLayout) {
  return destroy(reinterpret_cast<Layout*>(matLayout), Kind::layout,
                 "hipblasLtMatrixLayoutDestroy");
}

hipblasStatus_t hipblasLtMatrixLayoutSetAttribute(hipblasLtMatrixLayout_t matLayout,
                                                  hipblasLtMatrixLayoutAttribute_t attr,
                                                  const void* buf, size_t sizeInBytes) {
  auto* l = reinterpret_cast<Layout*>(matLayout);
  if (!alive(l, Kind::layout, "hipblasLtMatrixLayoutSetAttribute")) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  switch (attr) {
    case HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return put(&l->batch, buf, sizeInBytes);
    case HIPBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return put(&l->stride, buf, sizeInBytes);
    case HIPBLASLT_MATRIX_LAYOUT_ORDER:
      return put(&l->order, buf, sizeInBytes);
    default:
      return HIPBLAS_STATUS_NOT_SUPPORTED;
  }
}

hipblasStatus_t hipblasLtMatrixLayoutGetAttribute(hipblasLtMatrixLayout_t matLayout,
                                                  hipblasLtMatrixLayoutAttribute_t attr, void* buf,
                                                  size_t sizeInBytes, size_t* sizeWritten) {
  auto* l = reinterpret_cast<Layout*>(matLayout);
  if (!alive(l, Kind::layout, "hipblasLtMatrixLayoutGetAttribute")) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  switch (attr) {
    case HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return get(&l->batch, buf, sizeInBytes, sizeWritten);
    case HIPBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return get(&l->stride, buf, sizeInBytes, sizeWritten);
    default:
      return HIPBLAS_STATUS_NOT_SUPPORTED;
  }
}

hipblasStatus_t hipblasLtMatmulPreferenceCreate(hipblasLtMatmulPreference_t* pref) {
  if (pref == nullptr) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  *pref = reinterpret_cast<hipblasLtMatmulPreference_t>(new Pref());
  return HIPBLAS_STATUS_SUCCESS;
}

hipblasStatus_t hipblasLtMatmulPreferenceDestroy(const hipblasLtMatmulPreference_t pref) {
  return destroy(reinterpret_cast<Pref*>(pref), Kind::pref, "hipblasLtMatmulPreferenceDestroy");
}

hipblasStatus_t hipblasLtMatmulPreferenceSetAttribute(hipblasLtMatmulPreference_t pref,
                                                      hipblasLtMatmulPreferenceAttributes_t attr,
                                                      const void* buf, size_t sizeInBytes) {
  auto* p = reinterpret_cast<Pref*>(pref);
  if (!alive(p, Kind::pref, "hipblasLtMatmulPreferenceSetAttribute")) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  if (attr == HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    return put(&p->max_workspace, buf, sizeInBytes);
  }
  return HIPBLAS_STATUS_NOT_SUPPORTED;
}

// ------------------------------------------------------------------ heuristic

hipblasStatus_t hipblasLtMatmulAlgoGetHeuristic(hipblasLtHandle_t handle,
                                                hipblasLtMatmulDesc_t matmulDesc,
                                                hipblasLtMatrixLayout_t Adesc,
                                                hipblasLtMatrixLayout_t Bdesc,
                                                hipblasLtMatrixLayout_t Cdesc,
                                                hipblasLtMatrixLayout_t Ddesc,
                                                hipblasLtMatmulPreference_t pref,
                                                int requestedAlgoCount,
                                                hipblasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                                int* returnAlgoCount) {
  const char* call = "hipblasLtMatmulAlgoGetHeuristic";
  auto* h = static_cast<Handle*>(handle);
  auto* d = reinterpret_cast<Desc*>(matmulDesc);
  auto* a = reinterpret_cast<Layout*>(Adesc);
  auto* b = reinterpret_cast<Layout*>(Bdesc);
  auto* c = reinterpret_cast<Layout*>(Cdesc);
  auto* dd = reinterpret_cast<Layout*>(Ddesc);
  auto* p = reinterpret_cast<Pref*>(pref);
  if (returnAlgoCount) {
    *returnAlgoCount = 0;
  }
  if (!alive(h, Kind::handle, call) || !alive(d, Kind::desc, call) ||
      !alive(a, Kind::layout, call) || !alive(b, Kind::layout, call) ||
      !alive(c, Kind::layout, call) || !alive(dd, Kind::layout, call) ||
      !alive(p, Kind::pref, call) || returnAlgoCount == nullptr ||
      heuristicResultsArray == nullptr || requestedAlgoCount < 1) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  Users users;
  for (Object* o : std::initializer_list<Object*>{d, a, b, c, dd, p}) {
    users.add(o);
  }
  racelab::GemmPlan plan;
  if (d->epilogue != HIPBLASLT_EPILOGUE_DEFAULT || d->compute != HIPBLAS_COMPUTE_32F ||
      !make_plan(d, a, b, c, dd, &plan)) {
    // Not a GEMM this model computes (fp8, int8, epilogues): no algorithm.
    return HIPBLAS_STATUS_SUCCESS;
  }
  uint64_t ws = static_cast<uint64_t>(workspace_setting());
  if (ws > p->max_workspace) {
    ws = 0; // a candidate that fits the preference: no split-K scratch
  }
  int n = std::min(requestedAlgoCount, kMaxCandidates);
  uint32_t geo = geometry_hash(plan);
  for (int i = 0; i < n; ++i) {
    hipblasLtMatmulHeuristicResult_t r{};
    std::memcpy(r.algo.data, &kAlgoMagic, 4);
    std::memcpy(r.algo.data + 4, &geo, 4);
    uint32_t idx = static_cast<uint32_t>(i);
    std::memcpy(r.algo.data + 8, &idx, 4);
    r.algo.max_workspace_bytes = ws;
    r.workspaceSize = ws;
    r.state = HIPBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    heuristicResultsArray[i] = r;
  }
  *returnAlgoCount = n;
  return HIPBLAS_STATUS_SUCCESS;
}

// ------------------------------------------------------------------ matmul

hipblasStatus_t hipblasLtMatmul(hipblasLtHandle_t handle, hipblasLtMatmulDesc_t matmulDesc,
                                const void* alpha, const void* A, hipblasLtMatrixLayout_t Adesc,
                                const void* B, hipblasLtMatrixLayout_t Bdesc, const void* beta,
                                const void* C, hipblasLtMatrixLayout_t Cdesc, void* D,
                                hipblasLtMatrixLayout_t Ddesc, const hipblasLtMatmulAlgo_t* algo,
                                void* workspace, size_t workspaceSizeInBytes,
                                hipStream_t stream) {
  const char* call = "hipblasLtMatmul";
  static const long long enqueue_us = setting("OVERLAY_STUB_ENQUEUE_US", 20);
  static const long long fail_at = setting("OVERLAY_STUB_FAIL_ONCE_AT", 0);
  static const bool desc_writes = setting("OVERLAY_STUB_DESC_WRITES", 0) != 0;
  auto* h = static_cast<Handle*>(handle);
  auto* d = reinterpret_cast<Desc*>(matmulDesc);
  auto* a = reinterpret_cast<Layout*>(Adesc);
  auto* b = reinterpret_cast<Layout*>(Bdesc);
  auto* c = reinterpret_cast<Layout*>(Cdesc);
  auto* dd = reinterpret_cast<Layout*>(Ddesc);
  ++t_matmul_calls;
  if (!alive(h, Kind::handle, call) || !alive(d, Kind::desc, call) ||
      !alive(a, Kind::layout, call) || !alive(b, Kind::layout, call) ||
      !alive(c, Kind::layout, call) || !alive(dd, Kind::layout, call) || algo == nullptr ||
      alpha == nullptr || beta == nullptr) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  racelab::GemmPlan plan;
  {
    Users users;
    for (Object* o : std::initializer_list<Object*>{d, a, b, c, dd}) {
      users.add(o);
    }
    if (!make_plan(d, a, b, c, dd, &plan)) {
      return HIPBLAS_STATUS_INVALID_VALUE;
    }
    note_matmul(d, workspace, algo ? algo->max_workspace_bytes : 0, stream);
    // Host-side argument setup and kernel selection; the descriptors are in
    // use all along, and are read again at the end.
    racelab::busy_wait_us(enqueue_us);
    if (!alive(d, Kind::desc, call) || !alive(a, Kind::layout, call) ||
        !alive(b, Kind::layout, call) || !alive(c, Kind::layout, call) ||
        !alive(dd, Kind::layout, call)) {
      return HIPBLAS_STATUS_INVALID_VALUE;
    }
    if (desc_writes) {
      d->last_stream = stream;
      ++d->calls;
    }
  }
  // The algorithm: ours, for this geometry, with enough workspace.
  uint32_t magic = 0, geo = 0;
  std::memcpy(&magic, algo->data, 4);
  std::memcpy(&geo, algo->data + 4, 4);
  size_t need = algo->max_workspace_bytes;
  if (magic != kAlgoMagic || geo != geometry_hash(plan)) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  if (need > workspaceSizeInBytes || (need > 0 && workspace == nullptr)) {
    return HIPBLAS_STATUS_INVALID_VALUE;
  }
  if (fail_at > 0 && t_matmul_calls == fail_at) {
    return HIPBLAS_STATUS_INVALID_VALUE; // a cached algorithm that went stale, once
  }
  // Host pointer mode: the scalars are read now.
  float al = *static_cast<const float*>(alpha);
  float be = *static_cast<const float*>(beta);
  bool ok = racelab::enqueue(stream, call, [=] {
    racelab::run_gemm(plan, al, be, A, B, C, D, workspace, need);
  });
  return ok ? HIPBLAS_STATUS_SUCCESS : HIPBLAS_STATUS_INVALID_VALUE;
}

namespace racelab {

void hipblaslt_route_summary() {
  long long matmuls = 0, foreign = 0;
  std::map<void*, std::set<hipStream_t>> ws;
  {
    Hidden h;
    Route& r = route();
    std::lock_guard<std::mutex> lk(r.m);
    matmuls = r.matmuls;
    foreign = r.foreign_desc;
    ws = r.ws_streams;
  }
  if (foreign == 0) {
    std::fprintf(stderr,
                 "race-lab: route: matmul descriptors: %lld matmuls, each with descriptors its "
                 "own thread created\n",
                 matmuls);
  } else {
    std::fprintf(stderr,
                 "race-lab: route: matmul descriptors: %lld of %lld matmuls used a descriptor "
                 "another thread created\n",
                 foreign, matmuls);
  }
  if (ws.empty()) {
    std::fprintf(stderr, "race-lab: route: workspaces: none used\n");
    std::fflush(stderr);
    return;
  }
  size_t widest = 0;
  std::set<hipStream_t> streams;
  for (auto& [p, users] : ws) {
    widest = std::max(widest, users.size());
    streams.insert(users.begin(), users.end());
  }
  if (widest == 1) {
    std::fprintf(stderr,
                 "race-lab: route: workspaces: %zu streams, %zu buffers, each buffer used by one "
                 "stream\n",
                 streams.size(), ws.size());
  } else {
    std::fprintf(stderr,
                 "race-lab: route: workspaces: %zu streams, %zu buffers, a buffer used by %zu "
                 "streams\n",
                 streams.size(), ws.size(), widest);
  }
  // A buffer whose every user is destroyed: the fixed route freed it when the
  // stream's encoder went away. One that served a single, now destroyed,
  // stream and is still live is that stream's leaked workspace.
  // One whose single stream was destroyed while capturing is counted apart:
  // freeing it there is refused, and the captured work names it.
  size_t dead = 0, still_live = 0, abandoned = 0;
  for (auto& [p, users] : ws) {
    bool all_dead = true;
    for (hipStream_t s : users) {
      all_dead = all_dead && !stream_live(s);
    }
    if (!all_dead) {
      continue;
    }
    if (users.size() == 1 && stream_destroyed_capturing(*users.begin())) {
      abandoned += allocation_live(p) ? 1 : 0;
      continue;
    }
    ++dead;
    if (allocation_live(p)) {
      ++still_live;
      if (users.size() == 1) {
        char buf[200];
        std::snprintf(buf, sizeof(buf),
                      "workspace %p of destroyed stream %p was never freed (leaked)", p,
                      static_cast<void*>(*users.begin()));
        report("workspace-of-destroyed-stream", buf);
      }
    }
  }
  if (dead > 0 && still_live == 0) {
    std::fprintf(stderr,
                 "race-lab: route: workspaces released: every destroyed stream's buffer was freed "
                 "(%zu)\n",
                 dead);
  } else {
    std::fprintf(stderr,
                 "race-lab: route: workspaces released: %zu of %zu buffers of destroyed streams "
                 "still live\n",
                 still_live, dead);
  }
  if (abandoned > 0) {
    std::fprintf(stderr,
                 "race-lab: route: workspaces left allocated with an abandoned capture: %zu "
                 "(each of a stream destroyed while capturing)\n",
                 abandoned);
  }
  std::fflush(stderr);
}

} // namespace racelab
