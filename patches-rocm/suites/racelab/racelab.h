// racelab.h: the host model's internal interface (docs/race-lab.md).
//
// The race lab runs MLX's ROCm host code (the exported
// mlx/backend/rocm/gemms/hipblaslt_gemm.cpp, device.cpp and worker.cpp) on any
// Linux box, against our own small model of the HIP runtime, hipBLASLt and
// rocBLAS (hip_stub.cpp, hipblaslt_stub.cpp, rocblas_stub.cpp, gemm_model.cpp),
// under ThreadSanitizer or AddressSanitizer. The types and signatures come
// from the real ROCm headers; the behaviour is ours:
//
//   * a stream is a worker thread with a FIFO queue; hipMemcpyAsync,
//     hipMemsetAsync and hipblasLtMatmul enqueue and return at once;
//     hipStreamSynchronize, events and hipFree (an implicit device
//     synchronize, as documented for HIP) wait;
//   * "device memory" is host memory handed out by hipMalloc; every stream
//     task checks that the ranges it touches lie in live allocations, and
//     hipFree poisons what it frees;
//   * hipBLASLt's heuristic offers algorithms whose workspaceSize comes from
//     OVERLAY_STUB_WORKSPACE (0, as on gfx1151, or a split-K style scratch
//     size), and the enqueued GEMM computes exactly on the CPU, writing its
//     split-K partial sums into the workspace and reading them back, so two
//     streams sharing one workspace produce wrong outputs;
//   * descriptors and layouts are heap objects that count the host threads
//     inside a call that uses them, so destroying one in use is caught.
//
// The model's own bookkeeping locks are hidden from ThreadSanitizer (see
// Hidden below): only the synchronization the HIP API promises (stream order,
// stream and event waits, the implicit synchronize of hipFree) creates
// happens-before edges, so a race in the code under test is not masked by a
// lock the model happens to take.
//
// Every finding of the model is one line on stderr,
//   overlay-suite: report <kind>: <what>
// which the suite runner counts per kind (docs/suites.md). The driver exits 1
// when any was printed.

#pragma once

#include <hip/hip_runtime.h>
#include <hip/library_types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace racelab {

// Print "overlay-suite: report <kind>: <message>" on stderr and count it.
void report(const char* kind, const std::string& message);

// Number of reports printed so far by this process.
int report_count();

// Integer environment setting, or `fallback` when unset or not a number.
long long env_int(const char* name, long long fallback);

// Enqueue `task` on `stream` (nullptr: the device's default stream); the task
// runs on the stream's worker thread after everything enqueued before it.
// Returns false when `stream` is not a live stream (a report is printed).
bool enqueue(hipStream_t stream, const char* what, std::function<void()> task);

// True when [p, p + n) lies inside one live hipMalloc allocation. Otherwise
// prints a report of kind `device-use-after-free` (the range is in a freed
// allocation) or `invalid-device-access` (in none) naming `what`, and returns
// false. Called by stream tasks before they touch memory.
bool check_device_range(const void* p, size_t n, const char* what);

// True while `stream` is a live stream (nullptr, a default stream, always is).
bool stream_live(hipStream_t stream);

// True when `p` lies inside a live hipMalloc allocation (no report).
bool allocation_live(const void* p);
// Whether `stream` was destroyed while it was capturing (the capture abandoned).
bool stream_destroyed_capturing(hipStream_t stream);

// The fix-route lines (docs/race-lab.md, "Fix-route markers"): what the model
// saw the code under test do, printed on stderr as "race-lab: route: ..." at
// the end of a run. The hipBLASLt model says whether every matmul used
// descriptors its own thread created, whether each workspace was used by one
// stream only, and whether the workspace of every destroyed stream was freed
// (a workspace left live for a destroyed stream it alone served is a
// `workspace-of-destroyed-stream` report). The rocBLAS model says whether
// every handle was bound and used by one thread only.
void hipblaslt_route_summary();
void rocblas_route_summary();

// Wait for every stream of every device (hipDeviceSynchronize).
void synchronize_all();

// Spin for about `us` microseconds without any synchronization (models host
// time spent inside a library call; yields so other threads run).
void busy_wait_us(long long us);

// Scope in which the model's own bookkeeping (registries, locks) is invisible
// to ThreadSanitizer: no happens-before edge is created by its locks and its
// memory accesses are not checked. A no-op in other builds.
class Hidden {
 public:
  Hidden();
  ~Hidden();
  Hidden(const Hidden&) = delete;
  Hidden& operator=(const Hidden&) = delete;
};

// A column-major GEMM, D = alpha op(A) op(B) + beta C, as both library models
// describe it when they enqueue one (gemm_model.cpp).
struct GemmPlan {
  int64_t m{0}, n{0}, k{0};
  int32_t batch{1};
  bool ta{false}, tb{false};
  hipDataType ta_type{HIP_R_32F}, tb_type{HIP_R_32F}, tc_type{HIP_R_32F}, td_type{HIP_R_32F};
  int64_t lda{0}, ldb{0}, ldc{0}, ldd{0};
  int64_t sa{0}, sb{0}, sc{0}, sd{0}; // batch strides, in elements
  // Columns as stored (rows follow from m, n, k and the transposes).
  uint64_t a_cols{0}, b_cols{0}, c_cols{0}, d_cols{0};
};

// Bytes per element of a type the GEMM model computes (f32, f16, bf16), else 0.
size_t type_size(hipDataType t);

// The enqueued GEMM, run on a stream's worker thread: range checks (reported),
// then an exact float GEMM; with ws_bytes > 0 it is split-K through `ws`.
void run_gemm(const GemmPlan& p, float alpha, float beta, const void* A, const void* B,
              const void* C, void* D, void* ws, size_t ws_bytes);

// bf16 <-> float, exact for the small integers the suites use.
float bf16_to_float(uint16_t v);
uint16_t float_to_bf16(float f);
// IEEE half <-> float.
float f16_to_float(uint16_t v);
uint16_t float_to_f16(float f);

} // namespace racelab
