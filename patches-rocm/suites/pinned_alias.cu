// pinned_alias: suite child for local fix 3 (pinned host arena, seed 001).
//
// Everywhere (CUDA or HIP):
//   * a round trip through every registered slice: host write -> kernel that
//     reads and rewrites the slice through its device pointer -> host read;
//     then host -> device buffer -> host through the slice's device pointer
//     with memcpy;
//   * registration / unregistration accounting, per arena and process-wide;
//   * expected-prefix semantics, forced with ArenaOptions::refuse_slice: the
//     refused slice and every slice after it stay resident and unpinned.
// Windows HIP only (_WIN32 && __HIP_PLATFORM_AMD__), seed 001's regression:
//   * while an arena lives, the GPU alias of each slice is reserved;
//   * a buffer placed at an alias address stops the next arena from pinning
//     that range (the runtime hands out the same alias again);
//   * a 16-byte round trip through that buffer is correct.
//
// Build standalone:
//   nvcc  -std=c++17 -I<dir of pinned.h> pinned_alias.cu pinned.cu -o pinned_alias
//   hipcc -std=c++17 -I<dir of pinned.h> pinned_alias.cu pinned.cu -o pinned_alias
// (hipcc needs -x hip before .cu sources when its clang would take them as CUDA.)
//
// Exit 0 and "overlay-suite: done" on stdout when every check passed; exit 1
// with a FAIL line on stderr otherwise; exit 77 with a SKIPPED line (and no
// done marker) when no GPU is present.

#include "pinned.h"

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define GPU(name) hip##name
#else
#include <cuda_runtime.h>
#define GPU(name) cuda##name
#endif

#if defined(_WIN32) && defined(__HIP_PLATFORM_AMD__)
#define PINNED_ALIAS_WINDOWS_HIP 1
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#define PINNED_ALIAS_WINDOWS_HIP 0
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace pa = mlx::core::rocm::pinned;

namespace {

int g_failures = 0;

void fail(const std::string& what) {
  std::fprintf(stderr, "pinned_alias: FAIL: %s\n", what.c_str());
  ++g_failures;
}

#define GPU_CHECK(call)                                               \
  do {                                                                \
    auto _e = (call);                                                 \
    if (_e != GPU(Success)) {                                         \
      std::fprintf(                                                   \
          stderr,                                                     \
          "pinned_alias: FAIL: %s: %s (%s:%d)\n",                     \
          #call,                                                      \
          GPU(GetErrorString)(_e),                                    \
          __FILE__,                                                   \
          __LINE__);                                                  \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

__global__ void rewrite(uint32_t* p, size_t n, uint32_t add) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n;
       i += stride) {
    p[i] = p[i] * 3u + add;
  }
}

uint32_t pattern(size_t slice, size_t j) {
  return static_cast<uint32_t>(slice * 2654435761u) ^
      static_cast<uint32_t>(j * 40503u + 17u);
}

// Round trip through one pinned slice. Returns false (after reporting) on a
// mismatch.
bool round_trip(const pa::PinnedArena& arena, size_t i, void* scratch) {
  const pa::Slice& s = arena.slice(i);
  auto* h = static_cast<uint32_t*>(s.host);
  auto* d = static_cast<uint32_t*>(s.device);
  const size_t n = s.bytes / sizeof(uint32_t);
  const uint32_t add = static_cast<uint32_t>(i) + 7u;

  // 1. host write -> kernel through the device pointer -> host read.
  for (size_t j = 0; j < n; ++j) {
    h[j] = pattern(i, j);
  }
  rewrite<<<256, 256>>>(d, n, add);
  GPU_CHECK(GPU(GetLastError)());
  GPU_CHECK(GPU(DeviceSynchronize)());
  for (size_t j = 0; j < n; ++j) {
    uint32_t want = pattern(i, j) * 3u + add;
    if (h[j] != want) {
      fail(
          "slice " + std::to_string(i) + " kernel round trip: word " +
          std::to_string(j) + " is " + std::to_string(h[j]) + ", want " +
          std::to_string(want));
      return false;
    }
  }

  // 2. host -> device buffer -> host, both copies through the device pointer.
  GPU_CHECK(GPU(Memcpy)(scratch, d, s.bytes, GPU(MemcpyDeviceToDevice)));
  std::memset(h, 0, s.bytes);
  GPU_CHECK(GPU(Memcpy)(d, scratch, s.bytes, GPU(MemcpyDeviceToDevice)));
  GPU_CHECK(GPU(DeviceSynchronize)());
  for (size_t j = 0; j < n; ++j) {
    uint32_t want = pattern(i, j) * 3u + add;
    if (h[j] != want) {
      fail(
          "slice " + std::to_string(i) + " memcpy round trip: word " +
          std::to_string(j) + " is " + std::to_string(h[j]) + ", want " +
          std::to_string(want));
      return false;
    }
  }
  return true;
}

void check_counts(
    const char* what,
    uint64_t got,
    uint64_t want) {
  if (got != want) {
    fail(
        std::string(what) + " is " + std::to_string(got) + ", want " +
        std::to_string(want));
  }
}

// Every slice of a fully pinned arena; accounting before and after.
void portable_full_arena() {
  const size_t slice = 8u << 20;
  const size_t bytes = 5 * slice + 12288; // 6 slices, the last one short
  const pa::Counters before = pa::counters();
  void* scratch = nullptr;
  GPU_CHECK(GPU(Malloc)(&scratch, slice));
  size_t slices = 0;
  {
    pa::PinnedArena arena(bytes, slice);
    slices = arena.slice_count();
    check_counts("slice count", arena.slice_count(), 6);
    check_counts("last slice bytes", arena.slice(5).bytes, 12288);
    if (arena.pinned_prefix() != arena.slice_count()) {
      fail(
          "only " + std::to_string(arena.pinned_prefix()) + " of " +
          std::to_string(arena.slice_count()) +
          " slices pinned: " + arena.stop_reason());
    }
    check_counts("arena registrations", arena.registrations(), 6);
    check_counts("arena unregistrations while alive", arena.unregistrations(), 0);
    size_t ok = 0;
    for (size_t i = 0; i < arena.pinned_prefix(); ++i) {
      if (arena.device_pointer(i) == nullptr) {
        fail("pinned slice " + std::to_string(i) + " has no device pointer");
        continue;
      }
      if (arena.device_pointer_for(
              static_cast<char*>(arena.slice(i).host) + 100) !=
          static_cast<char*>(arena.device_pointer(i)) + 100) {
        fail("device_pointer_for disagrees for slice " + std::to_string(i));
      }
      if (round_trip(arena, i, scratch)) {
        ++ok;
      }
    }
    const pa::Slice& s0 = arena.slice(0);
    std::printf(
        "pinned_alias: arena %zu bytes, %zu slices, %zu pinned, %zu round trips ok "
        "(slice 0 host %p device %p%s)\n",
        bytes,
        arena.slice_count(),
        arena.pinned_prefix(),
        ok,
        s0.host,
        s0.device,
        s0.host == s0.device ? ", identical" : ", separate alias");
  }
  GPU_CHECK(GPU(Free)(scratch));
  const pa::Counters after = pa::counters();
  check_counts(
      "process registrations delta",
      after.registrations - before.registrations,
      slices);
  check_counts(
      "process unregistrations delta",
      after.unregistrations - before.unregistrations,
      slices);
  check_counts("process refusals delta", after.refusals - before.refusals, 0);
  std::printf(
      "pinned_alias: full arena accounting: registered %llu, unregistered %llu\n",
      static_cast<unsigned long long>(after.registrations - before.registrations),
      static_cast<unsigned long long>(
          after.unregistrations - before.unregistrations));
}

// A refused slice stops pinning of the slices after it.
void portable_expected_prefix() {
  const size_t slice = 4u << 20;
  const size_t bytes = 5 * slice;
  const pa::Counters before = pa::counters();
  void* scratch = nullptr;
  GPU_CHECK(GPU(Malloc)(&scratch, slice));
  {
    pa::ArenaOptions opt;
    opt.refuse_slice = 2;
    pa::PinnedArena arena(bytes, slice, opt);
    check_counts("prefix arena pinned_prefix", arena.pinned_prefix(), 2);
    check_counts("prefix arena registrations", arena.registrations(), 3);
    check_counts(
        "prefix arena unregistrations (the refused slice)",
        arena.unregistrations(),
        1);
    if (arena.stop_reason().empty()) {
      fail("prefix arena has no stop reason");
    }
    for (size_t i = 0; i < arena.slice_count(); ++i) {
      const pa::Slice& s = arena.slice(i);
      bool want_pinned = i < 2;
      if (s.pinned != want_pinned ||
          (arena.device_pointer(i) != nullptr) != want_pinned) {
        fail("prefix arena slice " + std::to_string(i) + " pinned state wrong");
      }
      if (!want_pinned) {
        // Resident and usable from the host.
        auto* h = static_cast<volatile uint32_t*>(s.host);
        h[0] = 0xabcdef01u;
        h[s.bytes / 4 - 1] = 0x12345678u;
        if (h[0] != 0xabcdef01u || h[s.bytes / 4 - 1] != 0x12345678u) {
          fail("unpinned slice " + std::to_string(i) + " not usable");
        }
      } else {
        round_trip(arena, i, scratch);
      }
    }
    std::printf(
        "pinned_alias: refused slice 2 of %zu: %zu pinned, registered %llu, "
        "unregistered %llu while alive\n",
        arena.slice_count(),
        arena.pinned_prefix(),
        static_cast<unsigned long long>(arena.registrations()),
        static_cast<unsigned long long>(arena.unregistrations()));
  }
  GPU_CHECK(GPU(Free)(scratch));
  const pa::Counters after = pa::counters();
  check_counts(
      "prefix registrations delta",
      after.registrations - before.registrations,
      3);
  check_counts(
      "prefix unregistrations delta",
      after.unregistrations - before.unregistrations,
      3);
  check_counts("prefix refusals delta", after.refusals - before.refusals, 1);
}

#if PINNED_ALIAS_WINDOWS_HIP
DWORD state_at(const void* p) {
  MEMORY_BASIC_INFORMATION mbi;
  if (VirtualQuery(p, &mbi, sizeof(mbi)) == 0) {
    return 0;
  }
  return mbi.State;
}

// Seed 001's regression test.
void windows_hip_alias() {
  const size_t slice = 16u << 20;
  void* alias = nullptr;
  {
    pa::PinnedArena arena(2 * slice, slice);
    if (arena.pinned_prefix() == 0) {
      fail("windows alias: first arena pinned nothing: " + arena.stop_reason());
      return;
    }
    for (size_t i = 0; i < arena.pinned_prefix(); ++i) {
      const pa::Slice& s = arena.slice(i);
      if (s.device == s.host) {
        continue;
      }
      if (state_at(s.device) != MEM_RESERVE) {
        fail(
            "windows alias: alias of slice " + std::to_string(i) +
            " is not reserved while the arena lives");
      }
    }
    alias = arena.slice(0).device;
    if (alias == arena.slice(0).host) {
      std::printf(
          "pinned_alias: windows alias: the runtime maps slice 0 at its host "
          "address; placement check not applicable\n");
      return;
    }
  }
  if (state_at(alias) != MEM_FREE) {
    fail("windows alias: alias range still reserved after the arena is gone");
  }
  // Place a 1 MiB buffer at the alias address.
  SYSTEM_INFO si;
  GetSystemInfo(&si);
  uintptr_t at = reinterpret_cast<uintptr_t>(alias);
  at -= at % si.dwAllocationGranularity;
  auto* buf = static_cast<unsigned char*>(VirtualAlloc(
      reinterpret_cast<void*>(at),
      1u << 20,
      MEM_RESERVE | MEM_COMMIT,
      PAGE_READWRITE));
  if (!buf) {
    std::printf(
        "pinned_alias: windows alias: could not place a buffer at %p; "
        "placement check not run\n",
        alias);
    return;
  }
  {
    pa::PinnedArena arena(2 * slice, slice);
    const pa::Slice& s0 = arena.slice(0);
    auto lo = reinterpret_cast<uintptr_t>(buf);
    auto hi = lo + (1u << 20);
    auto a = reinterpret_cast<uintptr_t>(alias);
    bool same_alias_range = a < hi && a + slice > lo;
    if (s0.pinned) {
      auto d = reinterpret_cast<uintptr_t>(s0.device);
      if (d < hi && d + s0.bytes > lo) {
        fail("windows alias: slice 0 pinned with its alias over the buffer");
      } else {
        std::printf(
            "pinned_alias: windows alias: the runtime gave a new alias %p; "
            "refusal not exercised\n",
            s0.device);
      }
    } else if (same_alias_range) {
      std::printf(
          "pinned_alias: windows alias: slice 0 refused as expected: %s\n",
          arena.stop_reason().c_str());
    }
    // 16-byte round trip through the buffer.
    void* dmem = nullptr;
    GPU_CHECK(GPU(Malloc)(&dmem, 16));
    for (int k = 0; k < 16; ++k) {
      buf[k] = static_cast<unsigned char>(0xa0 + k);
    }
    std::memset(buf + 64, 0, 16);
    GPU_CHECK(GPU(Memcpy)(dmem, buf, 16, GPU(MemcpyHostToDevice)));
    GPU_CHECK(GPU(Memcpy)(buf + 64, dmem, 16, GPU(MemcpyDeviceToHost)));
    GPU_CHECK(GPU(Free)(dmem));
    if (std::memcmp(buf, buf + 64, 16) != 0) {
      fail("windows alias: 16-byte round trip through the buffer is wrong");
    } else {
      std::printf("pinned_alias: windows alias: 16-byte round trip ok\n");
    }
  }
  VirtualFree(buf, 0, MEM_RELEASE);
}
#endif

} // namespace

int main() {
  int count = 0;
  if (GPU(GetDeviceCount)(&count) != GPU(Success) || count == 0) {
    (void)GPU(GetLastError)();
    std::printf("pinned_alias: SKIPPED: no GPU device\n");
    return 77;
  }
  GPU_CHECK(GPU(SetDevice)(0));
  portable_full_arena();
  portable_expected_prefix();
#if PINNED_ALIAS_WINDOWS_HIP
  windows_hip_alias();
#else
  std::printf(
      "pinned_alias: alias guard %s in this build; the Windows HIP alias "
      "checks do not apply here\n",
      pa::alias_guard_compiled() ? "compiled" : "not compiled");
#endif
  if (g_failures != 0) {
    std::fprintf(stderr, "pinned_alias: %d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("overlay-suite: done\n");
  return 0;
}
