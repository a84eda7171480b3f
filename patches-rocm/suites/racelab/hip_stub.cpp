// hip_stub.cpp: the race lab's model of the HIP runtime (docs/race-lab.md).
//
// Our own code: the real ROCm headers give the types and the signatures, the
// bodies below model the part of the runtime that MLX's host code relies on.
// Streams are worker threads with FIFO queues, "device memory" is host memory,
// and the API's synchronization promises (stream order, stream and event waits,
// hipFree's implicit device synchronize) are the only happens-before edges the
// model creates for ThreadSanitizer. Stream capture is modelled as far as the
// host sees it: hipStreamBeginCapture/EndCapture per stream (with its mode),
// hipStreamIsCapturing/GetCaptureInfo, work enqueued meanwhile recorded rather
// than run, and what the runtime forbids during capture (hipMalloc, hipFree's
// implicit synchronize, hipDeviceSynchronize, synchronizing the capturing
// stream): a `capture-violation` report, an error, and the capture
// invalidated. Launching a graph is not modelled.

#include "racelab.h"

#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RACELAB_TSAN 1
#endif
#if __has_feature(address_sanitizer)
#define RACELAB_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(RACELAB_TSAN)
#define RACELAB_TSAN 1
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(RACELAB_ASAN)
#define RACELAB_ASAN 1
#endif

#ifdef RACELAB_ASAN
#include <sanitizer/asan_interface.h>
#endif

#ifdef RACELAB_TSAN
extern "C" {
void AnnotateIgnoreSyncBegin(const char* file, int line);
void AnnotateIgnoreSyncEnd(const char* file, int line);
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#endif

// The HIP headers only declare these; the model defines them.
struct ihipStream_t {
  uint64_t magic;
  int device;
  // The queue's lock is the stream order: it is visible to ThreadSanitizer on
  // purpose (work enqueued after a host write sees that write; a host wait
  // sees everything the stream did).
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  uint64_t enqueued{0};
  uint64_t completed{0};
  bool stop{false};
  std::thread worker;
  // Capture (hipStreamBeginCapture .. EndCapture): 0 none, 1 active, 2
  // invalidated by a call the runtime forbids during capture. Work enqueued
  // while it is nonzero is recorded into the graph, not run. Model
  // bookkeeping: read and written inside Hidden scopes only.
  int capture{0};
  int capture_mode{0};          // hipStreamCaptureMode
  std::thread::id capture_thread; // the thread that began it
  uint64_t recorded{0};
  // Destroyed while capturing: the capture was abandoned with the stream
  // (hipStreamDestroy ends it; its graph is never made).
  bool capture_abandoned{false};
};

struct ihipEvent_t {
  uint64_t magic;
  std::mutex m;
  std::condition_variable cv;
  uint64_t recorded{0}; // records issued
  uint64_t reached{0}; // records the stream has passed
  std::chrono::steady_clock::time_point when{};
};

#ifdef RACELAB_ASAN
// The model keeps destroyed streams and freed device ranges on purpose, and the
// fork's GEMM code leaks its rare alpha/beta pairs: leak reports would only
// hide the findings. ASAN_OPTIONS still overrides this.
extern "C" const char* __asan_default_options() {
  return "detect_leaks=0";
}
#endif

namespace racelab {
namespace {

constexpr uint64_t kStreamLive = 0x53545245414d4c56ull; // "STREAMLV"
constexpr uint64_t kStreamDead = 0xdeadbeefdeadbeefull;
constexpr uint64_t kEventLive = 0x4556454e544c4956ull;
constexpr uint8_t kPoison = 0xdb;
// hipFree poisons at most this many bytes: the workloads touch the start of
// their buffers only, and filling a 32 MB workspace would cost more than the
// GEMMs (freed ranges stay known for good, so late uses are caught by range).
constexpr size_t kPoisonLimit = 4u << 20;

std::atomic<int> g_reports{0};
// Streams with an active (or invalidated, not yet ended) capture.
std::atomic<int> g_capturing{0};

int device_count() {
  static const int n = static_cast<int>(env_int("OVERLAY_STUB_DEVICES", 1));
  return n < 1 ? 1 : (n > 16 ? 16 : n);
}

thread_local int t_device = 0;
thread_local hipError_t t_last_error = hipSuccess;

hipError_t ret(hipError_t e) {
  if (e != hipSuccess) {
    t_last_error = e;
  }
  return e;
}

// Bookkeeping, always touched inside a Hidden scope. Leaked on purpose: stream
// workers may still run while static destructors do.
struct Allocation {
  size_t size;
  bool live;
};
struct Registry {
  std::mutex m;
  std::map<uintptr_t, Allocation> allocations;
  std::unordered_set<ihipStream_t*> streams; // live streams
  std::vector<ihipStream_t*> all_streams; // never freed (see hipStreamDestroy)
  ihipStream_t* default_stream[16]{};
};
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

void worker_loop(ihipStream_t* s) {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lk(s->m);
      s->cv.wait(lk, [&] { return s->stop || !s->queue.empty(); });
      if (s->queue.empty()) {
        return;
      }
      task = std::move(s->queue.front());
      s->queue.pop_front();
    }
    // Device work is done against the stream's device.
    t_device = s->device;
    task();
    {
      std::lock_guard<std::mutex> lk(s->m);
      ++s->completed;
    }
    s->cv.notify_all();
  }
}

ihipStream_t* new_stream(int device) {
  ihipStream_t* s = nullptr;
  {
    // The object's construction (its queue lock's initialization included)
    // is the model's bookkeeping: another thread that finds the stream in the
    // hidden registry and locks its queue must not race with it.
    Hidden h;
    s = new ihipStream_t();
    s->magic = kStreamLive;
    s->device = device;
  }
  s->worker = std::thread(worker_loop, s);
  Hidden h;
  std::lock_guard<std::mutex> lk(registry().m);
  registry().streams.insert(s);
  registry().all_streams.push_back(s);
  return s;
}

// The stream a call means: nullptr is the current device's default stream.
// Returns nullptr (and reports) for a destroyed or unknown stream.
ihipStream_t* resolve(hipStream_t stream, const char* what) {
  if (stream == nullptr) {
    int d = t_device;
    ihipStream_t* s = nullptr;
    {
      Hidden h;
      std::lock_guard<std::mutex> lk(registry().m);
      s = registry().default_stream[d];
    }
    if (s == nullptr) {
      ihipStream_t* made = new_stream(d);
      Hidden h;
      std::lock_guard<std::mutex> lk(registry().m);
      if (registry().default_stream[d] == nullptr) {
        registry().default_stream[d] = made;
      }
      s = registry().default_stream[d];
    }
    return s;
  }
  bool live = false;
  {
    Hidden h;
    std::lock_guard<std::mutex> lk(registry().m);
    live = registry().streams.count(stream) != 0;
  }
  if (!live) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s on stream %p, which is destroyed or unknown", what,
                  static_cast<void*>(stream));
    report("use-of-destroyed-stream", buf);
    return nullptr;
  }
  return stream;
}

void sync_stream(ihipStream_t* s) {
  std::unique_lock<std::mutex> lk(s->m);
  uint64_t target = s->enqueued;
  s->cv.wait(lk, [&] { return s->completed >= target; });
}

std::vector<ihipStream_t*> live_streams() {
  Hidden h;
  std::lock_guard<std::mutex> lk(registry().m);
  std::vector<ihipStream_t*> out(registry().streams.begin(), registry().streams.end());
  for (auto* s : registry().default_stream) {
    if (s) {
      out.push_back(s);
    }
  }
  return out;
}

// Where a pointer lies: 0 = in no known allocation, 1 = live, 2 = freed.
int classify(const void* p, size_t n, size_t* base_out, size_t* size_out) {
  Hidden h;
  std::lock_guard<std::mutex> lk(registry().m);
  auto& a = registry().allocations;
  auto u = reinterpret_cast<uintptr_t>(p);
  auto it = a.upper_bound(u);
  if (it == a.begin()) {
    return 0;
  }
  --it;
  if (u < it->first || u + n > it->first + it->second.size) {
    if (u < it->first + it->second.size) {
      *base_out = it->first;
      *size_out = it->second.size;
      return it->second.live ? 3 : 2; // 3: starts inside, runs past the end
    }
    return 0;
  }
  *base_out = it->first;
  *size_out = it->second.size;
  return it->second.live ? 1 : 2;
}

bool in_any_allocation(const void* p) {
  size_t b = 0, s = 0;
  return classify(p, 1, &b, &s) != 0;
}

} // namespace

Hidden::Hidden() {
#ifdef RACELAB_TSAN
  AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
}

Hidden::~Hidden() {
#ifdef RACELAB_TSAN
  AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
#endif
}

void report(const char* kind, const std::string& message) {
  g_reports.fetch_add(1, std::memory_order_relaxed);
  std::fprintf(stderr, "overlay-suite: report %s: %s\n", kind, message.c_str());
  std::fflush(stderr);
}

int report_count() {
  return g_reports.load(std::memory_order_relaxed);
}

long long env_int(const char* name, long long fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    return fallback;
  }
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 0);
  return (end && *end == '\0') ? x : fallback;
}

int capture_state(ihipStream_t* s) {
  if (s == nullptr) {
    return 0;
  }
  Hidden h;
  std::lock_guard<std::mutex> lk(registry().m);
  return s->capture;
}

// Whether a capture forbids this thread's unsafe calls (hipMalloc, hipFree,
// a device synchronize): a global-mode capture forbids them on every thread,
// a thread-local one on the thread that began it, a relaxed one nowhere (the
// capture modes of HIP, as of CUDA).
bool capture_forbids_here(const ihipStream_t* st) {
  return st->capture == 1 &&
         (st->capture_mode == hipStreamCaptureModeGlobal ||
          (st->capture_mode == hipStreamCaptureModeThreadLocal &&
           st->capture_thread == std::this_thread::get_id()));
}

bool any_capturing() {
  if (g_capturing.load(std::memory_order_relaxed) == 0) {
    return false;
  }
  Hidden h;
  std::lock_guard<std::mutex> lk(registry().m);
  for (auto* st : registry().all_streams) {
    if (capture_forbids_here(st)) {
      return true;
    }
  }
  return false;
}

// A call the runtime forbids during capture: reported, and the captures that
// forbid it (of `only`, or when null every capture that forbids this thread's
// unsafe calls) are invalidated, as HIP and CUDA invalidate a capture an
// unsafe call interrupts.
hipError_t capture_violation(const char* call, ihipStream_t* only) {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "%s while %s is capturing (forbidden during stream capture)",
                call, only ? "its stream" : "a stream");
  report("capture-violation", buf);
  {
    Hidden h;
    std::lock_guard<std::mutex> lk(registry().m);
    for (auto* st : registry().all_streams) {
      if (only ? (st == only && st->capture == 1) : capture_forbids_here(st)) {
        st->capture = 2;
      }
    }
  }
  t_last_error = hipErrorStreamCaptureUnsupported;
  return hipErrorStreamCaptureUnsupported;
}

bool stream_live(hipStream_t stream) {
  if (stream == nullptr) {
    return true; // a device's default stream is never destroyed
  }
  Hidden h;
  std::lock_guard<std::mutex> lk(registry().m);
  return registry().streams.count(stream) != 0;
}

bool stream_destroyed_capturing(hipStream_t stream) {
  if (stream == nullptr) {
    return false;
  }
  Hidden h;
  std::lock_guard<std::mutex> lk(registry().m);
  return registry().streams.count(stream) == 0 && stream->capture_abandoned;
}

bool allocation_live(const void* p) {
  size_t b = 0, s = 0;
  return classify(p, 1, &b, &s) == 1;
}

bool enqueue(hipStream_t stream, const char* what, std::function<void()> task) {
  ihipStream_t* s = resolve(stream, what);
  if (s != nullptr && capture_state(s) != 0) {
    // Recorded into the capture's graph; graphs are not launched here.
    Hidden h;
    std::lock_guard<std::mutex> lk(registry().m);
    ++s->recorded;
    return true;
  }
  if (s == nullptr) {
    return false;
  }
  {
    std::lock_guard<std::mutex> lk(s->m);
    if (s->stop) {
      return false;
    }
    s->queue.push_back(std::move(task));
    ++s->enqueued;
  }
  s->cv.notify_all();
  return true;
}

bool check_device_range(const void* p, size_t n, const char* what) {
  size_t base = 0, size = 0;
  int where = classify(p, n == 0 ? 1 : n, &base, &size);
  if (where == 1) {
    return true;
  }
  char buf[256];
  if (where == 2) {
    std::snprintf(buf, sizeof(buf),
                  "%s touches [%p, +%zu) inside freed allocation [%p, +%zu)", what, p, n,
                  reinterpret_cast<void*>(base), size);
    report("device-use-after-free", buf);
  } else if (where == 3) {
    std::snprintf(buf, sizeof(buf), "%s touches [%p, +%zu), past the end of allocation [%p, +%zu)",
                  what, p, n, reinterpret_cast<void*>(base), size);
    report("invalid-device-access", buf);
  } else {
    std::snprintf(buf, sizeof(buf), "%s touches [%p, +%zu), which is no device allocation", what, p,
                  n);
    report("invalid-device-access", buf);
  }
  return false;
}

void synchronize_all() {
  for (auto* s : live_streams()) {
    sync_stream(s);
  }
}

void busy_wait_us(long long us) {
  if (us <= 0) {
    return;
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
}

float bf16_to_float(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  // Round to nearest even (exact for the integers the suites produce).
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float f16_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        --exp;
      }
      man &= 0x3ffu;
      u = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint16_t float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  uint32_t sign = (u >> 16) & 0x8000u;
  int exp = static_cast<int>((u >> 23) & 0xffu) - 127 + 15;
  uint32_t man = u & 0x7fffffu;
  if (exp <= 0) {
    return static_cast<uint16_t>(sign); // the suites never produce subnormals
  }
  if (exp >= 31) {
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  if ((man & 0x1fffu) > 0x1000u || ((man & 0x1fffu) == 0x1000u && (h & 1u))) {
    ++h;
  }
  return static_cast<uint16_t>(h);
}

} // namespace racelab

using racelab::Hidden;
using racelab::ret;

// ------------------------------------------------------------------ devices

hipError_t hipGetDevice(int* device) {
  if (device == nullptr) {
    return ret(hipErrorInvalidValue);
  }
  *device = racelab::t_device;
  return hipSuccess;
}

hipError_t hipSetDevice(int device) {
  if (device < 0 || device >= racelab::device_count()) {
    return ret(hipErrorInvalidDevice);
  }
  racelab::t_device = device;
  return hipSuccess;
}

hipError_t hipGetDeviceCount(int* count) {
  if (count == nullptr) {
    return ret(hipErrorInvalidValue);
  }
  *count = racelab::device_count();
  return hipSuccess;
}

hipError_t hipGetDevicePropertiesR0600(hipDeviceProp_tR0600* prop, int device) {
  if (prop == nullptr || device < 0 || device >= racelab::device_count()) {
    return ret(hipErrorInvalidValue);
  }
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "race-lab host model");
  // Says plainly in every caps line that this is the host model, not a GPU.
  // OVERLAY_STUB_ARCH replaces it where code gates on an architecture list
  // (the rocBLAS allowlist): "gfx1030:host-model" passes as gfx1030, whose
  // ":..." suffix MLX strips as it strips ":sramecc+:xnack-".
  const char* arch = std::getenv("OVERLAY_STUB_ARCH");
  std::snprintf(prop->gcnArchName, sizeof(prop->gcnArchName), "%s",
                arch && *arch ? arch : "host-model");
  prop->warpSize = 64;
  prop->multiProcessorCount = 8;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlock = 65536;
  prop->totalGlobalMem = size_t(16) << 30;
  return hipSuccess;
}

hipError_t hipDeviceSynchronize() {
  if (racelab::any_capturing()) {
    return racelab::capture_violation("hipDeviceSynchronize", nullptr);
  }
  racelab::synchronize_all();
  return hipSuccess;
}

hipError_t hipGetLastError() {
  hipError_t e = racelab::t_last_error;
  racelab::t_last_error = hipSuccess;
  return e;
}

hipError_t hipPeekAtLastError() {
  return racelab::t_last_error;
}

const char* hipGetErrorString(hipError_t e) {
  switch (e) {
    case hipSuccess:
      return "hipSuccess";
    case hipErrorInvalidValue:
      return "hipErrorInvalidValue";
    case hipErrorInvalidDevice:
      return "hipErrorInvalidDevice";
    case hipErrorOutOfMemory:
      return "hipErrorOutOfMemory";
    case hipErrorNotSupported:
      return "hipErrorNotSupported";
    case hipErrorNotReady:
      return "hipErrorNotReady";
    case hipErrorInvalidHandle:
      return "hipErrorInvalidHandle";
    default:
      return "hipError (race-lab host model)";
  }
}

// ------------------------------------------------------------------ memory

hipError_t hipMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) {
    return ret(hipErrorInvalidValue);
  }
  if (racelab::any_capturing()) {
    // hipMalloc is not capturable: it is refused while a capture is active.
    return racelab::capture_violation("hipMalloc", nullptr);
  }
  if (size == 0) {
    *ptr = nullptr;
    return hipSuccess;
  }
  size_t rounded = (size + 255) & ~size_t(255);
  // Left uninitialized like device memory; large blocks come from mmap and
  // cost nothing until touched.
  void* p = std::aligned_alloc(256, rounded);
  if (p == nullptr) {
    return ret(hipErrorOutOfMemory);
  }
  {
    Hidden h;
    auto& r = racelab::registry();
    std::lock_guard<std::mutex> lk(r.m);
    r.allocations[reinterpret_cast<uintptr_t>(p)] = {size, true};
  }
  *ptr = p;
  return hipSuccess;
}

hipError_t hipFree(void* ptr) {
  if (ptr == nullptr) {
    return hipSuccess;
  }
  // Documented: hipFree performs an implicit hipDeviceSynchronize().
  if (racelab::any_capturing()) {
    return racelab::capture_violation("hipFree (an implicit device synchronize)", nullptr);
  }
  racelab::synchronize_all();
  size_t size = 0;
  bool ok = false;
  {
    Hidden h;
    auto& r = racelab::registry();
    std::lock_guard<std::mutex> lk(r.m);
    auto it = r.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it != r.allocations.end() && it->second.live) {
      it->second.live = false;
      size = it->second.size;
      ok = true;
    }
  }
  if (!ok) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "hipFree(%p): not a live hipMalloc allocation", ptr);
    racelab::report("invalid-free", buf);
    return ret(hipErrorInvalidValue);
  }
  std::memset(ptr, racelab::kPoison, std::min(size, racelab::kPoisonLimit));
  // Never handed back to the host allocator: a freed device range must not
  // come back as a host buffer (the range check would then misreport it), and
  // a late device access is caught by range. Under AddressSanitizer the range
  // is poisoned, so a host access to it is reported too.
#ifdef RACELAB_ASAN
  ASAN_POISON_MEMORY_REGION(ptr, size);
#endif
  return hipSuccess;
}

namespace {

// One side of a copy: device memory is checked by range, host memory is not.
bool check_side(const void* p, size_t n, const char* what) {
  if (!racelab::in_any_allocation(p)) {
    return true;
  }
  return racelab::check_device_range(p, n, what);
}

} // namespace

// ------------------------------------------------------------------ host registration
//
// hipHostRegister / hipHostGetDevicePointer / hipHostUnregister, with the
// device alias chosen by OVERLAY_STUB_ALIAS (docs/race-lab.md, "Fix 3"):
//   identity (default): the device pointer is the host address (Linux HIP, CUDA);
//   free: a separate alias in address space that is free when registered and
//     that the runtime does not reserve (what seed 001 measured on Windows HIP);
//   stack: as free, but slice OVERLAY_STUB_ALIAS_SLICE's (default 0) alias
//     covers the registering thread's stack, as in seed 001's bad starts.
// As the Windows runtime does, a host pointer inside a live alias is taken for
// the registered memory: the copies below read and write the registered range
// instead (the fault the alias guard exists for).

namespace {

struct HostRegistration {
  uintptr_t host;
  size_t bytes;
  uintptr_t alias;
};
std::mutex g_host_m;
std::vector<HostRegistration>& host_regs() {
  static auto* v = new std::vector<HostRegistration>();
  return *v;
}
long long g_host_registered = 0;

uintptr_t pick_alias(size_t bytes, int index) {
  static const char* mode_env = std::getenv("OVERLAY_STUB_ALIAS");
  static const std::string mode = mode_env ? mode_env : "identity";
  static const long long stack_slice = racelab::env_int("OVERLAY_STUB_ALIAS_SLICE", 0);
  const size_t gran = 65536;
  if (mode == "stack" && index == stack_slice) {
    pthread_attr_t attr;
    void* base = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      pthread_attr_getstack(&attr, &base, &size);
      pthread_attr_destroy(&attr);
    }
    volatile char here = 0;
    uintptr_t sp = reinterpret_cast<uintptr_t>(&here);
    uintptr_t lo = sp > bytes / 2 ? sp - bytes / 2 : 0;
    return lo - lo % gran;
  }
  // A range free now: mapped and unmapped again, never reserved for the alias.
  void* p = mmap(nullptr, bytes + gran, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    return 0;
  }
  munmap(p, bytes + gran);
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  return (u + gran - 1) / gran * gran;
}

// The registered memory a host pointer means (the alias redirect), else `p`.
const void* redirect(const void* p, size_t n) {
  Hidden h;
  std::lock_guard<std::mutex> lk(g_host_m);
  auto u = reinterpret_cast<uintptr_t>(p);
  for (const auto& r : host_regs()) {
    if (r.alias != r.host && u >= r.alias && u + n <= r.alias + r.bytes) {
      return reinterpret_cast<const void*>(r.host + (u - r.alias));
    }
  }
  return p;
}

} // namespace

hipError_t hipHostRegister(void* host, size_t bytes, unsigned int) {
  if (host == nullptr || bytes == 0) {
    return ret(hipErrorInvalidValue);
  }
  Hidden h;
  std::lock_guard<std::mutex> lk(g_host_m);
  for (const auto& r : host_regs()) {
    if (r.host == reinterpret_cast<uintptr_t>(host)) {
      return ret(hipErrorHostMemoryAlreadyRegistered);
    }
  }
  uintptr_t alias = reinterpret_cast<uintptr_t>(host);
  const char* mode = std::getenv("OVERLAY_STUB_ALIAS");
  if (mode && std::string(mode) != "identity") {
    alias = pick_alias(bytes, static_cast<int>(g_host_registered));
  }
  ++g_host_registered;
  host_regs().push_back({reinterpret_cast<uintptr_t>(host), bytes, alias});
  return hipSuccess;
}

hipError_t hipHostGetDevicePointer(void** dev, void* host, unsigned int) {
  if (dev == nullptr) {
    return ret(hipErrorInvalidValue);
  }
  Hidden h;
  std::lock_guard<std::mutex> lk(g_host_m);
  auto u = reinterpret_cast<uintptr_t>(host);
  for (const auto& r : host_regs()) {
    if (u >= r.host && u < r.host + r.bytes) {
      *dev = reinterpret_cast<void*>(r.alias + (u - r.host));
      return hipSuccess;
    }
  }
  *dev = nullptr;
  return ret(hipErrorInvalidValue);
}

hipError_t hipHostUnregister(void* host) {
  Hidden h;
  std::lock_guard<std::mutex> lk(g_host_m);
  auto& v = host_regs();
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it->host == reinterpret_cast<uintptr_t>(host)) {
      v.erase(it);
      return hipSuccess;
    }
  }
  return ret(hipErrorHostMemoryNotRegistered);
}

hipError_t hipMemcpyAsync(void* dst_in, const void* src_in, size_t sizeBytes, hipMemcpyKind,
                          hipStream_t stream) {
  if (sizeBytes == 0) {
    return hipSuccess;
  }
  void* dst = const_cast<void*>(redirect(dst_in, sizeBytes));
  const void* src = redirect(src_in, sizeBytes);
  bool ok = racelab::enqueue(stream, "hipMemcpyAsync", [=] {
    if (check_side(src, sizeBytes, "hipMemcpyAsync source") &&
        check_side(dst, sizeBytes, "hipMemcpyAsync destination")) {
      std::memcpy(dst, src, sizeBytes);
    }
  });
  return ok ? hipSuccess : ret(hipErrorInvalidHandle);
}

hipError_t hipMemcpy(void* dst, const void* src, size_t sizeBytes, hipMemcpyKind kind) {
  hipError_t e = hipMemcpyAsync(dst, src, sizeBytes, kind, nullptr);
  if (e != hipSuccess) {
    return e;
  }
  racelab::sync_stream(racelab::resolve(nullptr, "hipMemcpy"));
  return hipSuccess;
}

hipError_t hipMemsetAsync(void* dst, int value, size_t sizeBytes, hipStream_t stream) {
  if (sizeBytes == 0) {
    return hipSuccess;
  }
  bool ok = racelab::enqueue(stream, "hipMemsetAsync", [=] {
    if (racelab::check_device_range(dst, sizeBytes, "hipMemsetAsync")) {
      std::memset(dst, value, sizeBytes);
    }
  });
  return ok ? hipSuccess : ret(hipErrorInvalidHandle);
}

// ------------------------------------------------------------------ streams

hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int) {
  if (stream == nullptr) {
    return ret(hipErrorInvalidValue);
  }
  *stream = racelab::new_stream(racelab::t_device);
  return hipSuccess;
}

hipError_t hipStreamCreate(hipStream_t* stream) {
  return hipStreamCreateWithFlags(stream, 0);
}

hipError_t hipStreamDestroy(hipStream_t stream) {
  if (stream == nullptr) {
    return ret(hipErrorInvalidHandle);
  }
  bool known;
  {
    Hidden h;
    auto& r = racelab::registry();
    std::lock_guard<std::mutex> lk(r.m);
    known = r.streams.erase(stream) != 0;
    if (known && stream->capture != 0) {
      // A capture left open dies with its stream; it no longer forbids the
      // thread that began it anything.
      stream->capture = 0;
      stream->capture_abandoned = true;
      racelab::g_capturing.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  if (!known) {
    racelab::report("use-of-destroyed-stream", "hipStreamDestroy of a destroyed or unknown stream");
    return ret(hipErrorInvalidHandle);
  }
  // Work already enqueued completes (as HIP does), then the worker stops. The
  // object is kept (poisoned) rather than freed, so a late use is reported as
  // use-of-destroyed-stream instead of reading freed memory.
  {
    std::lock_guard<std::mutex> lk(stream->m);
    stream->stop = true;
  }
  stream->cv.notify_all();
  if (stream->worker.joinable()) {
    stream->worker.join();
  }
  stream->magic = racelab::kStreamDead;
  return hipSuccess;
}

hipError_t hipStreamSynchronize(hipStream_t stream) {
  ihipStream_t* s = racelab::resolve(stream, "hipStreamSynchronize");
  if (s == nullptr) {
    return ret(hipErrorInvalidHandle);
  }
  if (racelab::capture_state(s) != 0) {
    return racelab::capture_violation("hipStreamSynchronize", s);
  }
  racelab::sync_stream(s);
  return hipSuccess;
}

hipError_t hipStreamQuery(hipStream_t stream) {
  ihipStream_t* s = racelab::resolve(stream, "hipStreamQuery");
  if (s == nullptr) {
    return ret(hipErrorInvalidHandle);
  }
  std::lock_guard<std::mutex> lk(s->m);
  return s->completed >= s->enqueued ? hipSuccess : hipErrorNotReady;
}

hipError_t hipLaunchHostFunc(hipStream_t stream, hipHostFn_t fn, void* userData) {
  bool ok = racelab::enqueue(stream, "hipLaunchHostFunc", [=] { fn(userData); });
  return ok ? hipSuccess : ret(hipErrorInvalidHandle);
}

// Capture: per stream, begin/end, status queries; work enqueued meanwhile is
// recorded, not run; hipMalloc, hipFree and synchronizing a capturing stream
// are refused and invalidate the capture (capture_violation). The graph End
// returns is an opaque object; launching graphs is not modelled.
hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode) {
  ihipStream_t* s = stream ? racelab::resolve(stream, "hipStreamBeginCapture") : nullptr;
  if (s == nullptr) {
    return ret(hipErrorInvalidValue); // the legacy null stream cannot capture
  }
  Hidden h;
  std::lock_guard<std::mutex> lk(racelab::registry().m);
  if (s->capture != 0) {
    return ret(hipErrorIllegalState);
  }
  s->capture = 1;
  s->capture_mode = static_cast<int>(mode);
  s->capture_thread = std::this_thread::get_id();
  racelab::g_capturing.fetch_add(1, std::memory_order_relaxed);
  return hipSuccess;
}

hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t* graph) {
  if (graph) {
    *graph = nullptr;
  }
  ihipStream_t* s = stream ? racelab::resolve(stream, "hipStreamEndCapture") : nullptr;
  if (s == nullptr) {
    return ret(hipErrorInvalidValue);
  }
  int was = 0;
  {
    Hidden h;
    std::lock_guard<std::mutex> lk(racelab::registry().m);
    was = s->capture;
    if (was != 0) {
      s->capture = 0;
      racelab::g_capturing.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  if (was == 0) {
    return ret(hipErrorIllegalState);
  }
  if (was == 2) {
    return ret(hipErrorStreamCaptureInvalidated);
  }
  if (graph) {
    static char graph_token[1];
    *graph = reinterpret_cast<hipGraph_t>(graph_token);
  }
  return hipSuccess;
}

hipError_t hipStreamGetCaptureInfo(hipStream_t stream, hipStreamCaptureStatus* status,
                                   unsigned long long* id) {
  ihipStream_t* s = nullptr;
  if (stream != nullptr) {
    s = racelab::resolve(stream, "hipStreamGetCaptureInfo");
    if (s == nullptr) {
      return ret(hipErrorInvalidHandle);
    }
  }
  int c = racelab::capture_state(s);
  if (status) {
    *status = c == 0 ? hipStreamCaptureStatusNone
                     : (c == 1 ? hipStreamCaptureStatusActive : hipStreamCaptureStatusInvalidated);
  }
  if (id) {
    *id = c ? reinterpret_cast<uintptr_t>(s) : 0;
  }
  return hipSuccess;
}

hipError_t hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus* status) {
  return hipStreamGetCaptureInfo(stream, status, nullptr);
}

hipError_t hipGraphGetNodes(hipGraph_t, hipGraphNode_t*, size_t* numNodes) {
  if (numNodes) {
    *numNodes = 0;
  }
  return ret(hipErrorNotSupported);
}

hipError_t hipGraphDestroy(hipGraph_t graph) {
  if (graph != nullptr) {
    return hipSuccess; // the token hipStreamEndCapture returned
  }
  return graph == nullptr ? hipSuccess : ret(hipErrorNotSupported);
}

hipError_t hipGraphExecDestroy(hipGraphExec_t exec) {
  return exec == nullptr ? hipSuccess : ret(hipErrorNotSupported);
}

// ------------------------------------------------------------------ events

hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned int) {
  if (event == nullptr) {
    return ret(hipErrorInvalidValue);
  }
  auto* e = new ihipEvent_t();
  e->magic = racelab::kEventLive;
  *event = e;
  return hipSuccess;
}

hipError_t hipEventCreate(hipEvent_t* event) {
  return hipEventCreateWithFlags(event, 0);
}

hipError_t hipEventDestroy(hipEvent_t event) {
  if (event == nullptr || event->magic != racelab::kEventLive) {
    racelab::report("invalid-event", "hipEventDestroy of an unknown or destroyed event");
    return ret(hipErrorInvalidHandle);
  }
  // A pending record still refers to the event: wait for it, then free.
  {
    std::unique_lock<std::mutex> lk(event->m);
    event->cv.wait(lk, [&] { return event->reached >= event->recorded; });
  }
  event->magic = 0;
  delete event;
  return hipSuccess;
}

hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
  if (event == nullptr || event->magic != racelab::kEventLive) {
    return ret(hipErrorInvalidHandle);
  }
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lk(event->m);
    gen = ++event->recorded;
  }
  bool ok = racelab::enqueue(stream, "hipEventRecord", [event, gen] {
    {
      std::lock_guard<std::mutex> lk(event->m);
      if (event->reached < gen) {
        event->reached = gen;
        event->when = std::chrono::steady_clock::now();
      }
    }
    event->cv.notify_all();
  });
  if (!ok) {
    std::lock_guard<std::mutex> lk(event->m);
    --event->recorded;
    return ret(hipErrorInvalidHandle);
  }
  return hipSuccess;
}

hipError_t hipEventSynchronize(hipEvent_t event) {
  if (event == nullptr || event->magic != racelab::kEventLive) {
    return ret(hipErrorInvalidHandle);
  }
  std::unique_lock<std::mutex> lk(event->m);
  uint64_t target = event->recorded;
  event->cv.wait(lk, [&] { return event->reached >= target; });
  return hipSuccess;
}

hipError_t hipEventQuery(hipEvent_t event) {
  if (event == nullptr || event->magic != racelab::kEventLive) {
    return ret(hipErrorInvalidHandle);
  }
  std::lock_guard<std::mutex> lk(event->m);
  return event->reached >= event->recorded ? hipSuccess : hipErrorNotReady;
}

hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop) {
  if (ms == nullptr || start == nullptr || stop == nullptr) {
    return ret(hipErrorInvalidValue);
  }
  std::chrono::steady_clock::time_point a, b;
  {
    std::lock_guard<std::mutex> lk(start->m);
    if (start->recorded == 0 || start->reached < start->recorded) {
      return ret(hipErrorNotReady);
    }
    a = start->when;
  }
  {
    std::lock_guard<std::mutex> lk(stop->m);
    if (stop->recorded == 0 || stop->reached < stop->recorded) {
      return ret(hipErrorNotReady);
    }
    b = stop->when;
  }
  *ms = std::chrono::duration<float, std::milli>(b - a).count();
  return hipSuccess;
}

hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int) {
  if (event == nullptr || event->magic != racelab::kEventLive) {
    return ret(hipErrorInvalidHandle);
  }
  uint64_t target;
  {
    std::lock_guard<std::mutex> lk(event->m);
    target = event->recorded;
  }
  bool ok = racelab::enqueue(stream, "hipStreamWaitEvent", [event, target] {
    std::unique_lock<std::mutex> lk(event->m);
    event->cv.wait(lk, [&] { return event->reached >= target; });
  });
  return ok ? hipSuccess : ret(hipErrorInvalidHandle);
}

// ------------------------------------------------------------------ not modelled
//
// Referenced by the exported device.cpp but not reached by the drivers: kernels
// are not modelled (only library GEMMs and copies run), graphs are off.

hipError_t hipLaunchKernel(const void*, dim3, dim3, void**, size_t, hipStream_t) {
  racelab::report("not-modelled", "hipLaunchKernel: device kernels are not modelled");
  return ret(hipErrorNotSupported);
}

hipError_t hipModuleLaunchKernel(hipFunction_t, unsigned int, unsigned int, unsigned int,
                                 unsigned int, unsigned int, unsigned int, unsigned int,
                                 hipStream_t, void**, void**) {
  racelab::report("not-modelled", "hipModuleLaunchKernel: device kernels are not modelled");
  return ret(hipErrorNotSupported);
}

hipError_t hipGraphCreate(hipGraph_t* graph, unsigned int) {
  if (graph) {
    *graph = nullptr;
  }
  return ret(hipErrorNotSupported);
}

hipError_t hipGraphNodeGetType(hipGraphNode_t, hipGraphNodeType*) {
  return ret(hipErrorNotSupported);
}

hipError_t hipGraphLaunch(hipGraphExec_t, hipStream_t) {
  return ret(hipErrorNotSupported);
}

hipError_t hipGraphGetEdges(hipGraph_t, hipGraphNode_t*, hipGraphNode_t*, size_t* numEdges) {
  if (numEdges) {
    *numEdges = 0;
  }
  return ret(hipErrorNotSupported);
}

hipError_t hipGraphKernelNodeGetParams(hipGraphNode_t, hipKernelNodeParams*) {
  return ret(hipErrorNotSupported);
}

hipError_t hipGraphInstantiate(hipGraphExec_t* exec, hipGraph_t, hipGraphNode_t*, char*, size_t) {
  if (exec) {
    *exec = nullptr;
  }
  return ret(hipErrorNotSupported);
}

hipError_t hipGraphAddKernelNode(hipGraphNode_t*, hipGraph_t, const hipGraphNode_t*, size_t,
                                 const hipKernelNodeParams*) {
  return ret(hipErrorNotSupported);
}

hipError_t hipGraphAddChildGraphNode(hipGraphNode_t*, hipGraph_t, const hipGraphNode_t*, size_t,
                                     hipGraph_t) {
  return ret(hipErrorNotSupported);
}

hipError_t hipGraphExecUpdate(hipGraphExec_t, hipGraph_t, hipGraphNode_t*, hipGraphExecUpdateResult*) {
  return ret(hipErrorNotSupported);
}

hipError_t hipGraphExecKernelNodeSetParams(hipGraphExec_t, hipGraphNode_t,
                                           const hipKernelNodeParams*) {
  return ret(hipErrorNotSupported);
}

hipError_t hipGraphKernelNodeSetParams(hipGraphNode_t, const hipKernelNodeParams*) {
  return ret(hipErrorNotSupported);
}

// ------------------------------------------------------------------ device state

hipError_t hipSetDeviceFlags(unsigned) {
  return hipSuccess;
}

hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t, int device) {
  if (value == nullptr || device < 0 || device >= racelab::device_count()) {
    return ret(hipErrorInvalidValue);
  }
  *value = 0;
  return hipSuccess;
}

// A real reset destroys every stream and allocation of the device, under any
// other thread that holds them. The model keeps them (so the run goes on) and
// reports the reset when another stream than the caller's default one is live.
hipError_t hipDeviceReset() {
  racelab::synchronize_all();
  size_t live = racelab::live_streams().size();
  if (live > 1) {
    racelab::report("device-reset-under-other-threads",
                    "hipDeviceReset with " + std::to_string(live) + " live streams");
  }
  return hipSuccess;
}

hipError_t hipMemset(void* dst, int value, size_t sizeBytes) {
  hipError_t e = hipMemsetAsync(dst, value, sizeBytes, nullptr);
  if (e != hipSuccess) {
    return e;
  }
  racelab::sync_stream(racelab::resolve(nullptr, "hipMemset"));
  return hipSuccess;
}
