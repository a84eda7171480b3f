// pinned_race: the race lab's child for local fix 3 (docs/race-lab.md, "Fix 3").
//
// The exported mlx/backend/rocm/pinned.cu runs on the host model: built as
// Windows HIP (pinned_race: the file's alias guard compiled in, its Win32
// calls from win_stub.cpp) or as on Linux (pinned_race_noguard: the guard
// compiled out, the fix-removed column). The model's hipHostRegister gives
// each slice a device alias (OVERLAY_STUB_ALIAS; hip_stub.cpp) and, as the
// Windows runtime does, takes any host pointer inside a live alias for the
// registered memory. On a thread of its own the child builds a PinnedArena of
// 6 slices of 1 MiB, then runs seed 001's checks:
//   * while the arena lives, every pinned slice's alias is reserved (the
//     model's VirtualQuery says it is not free): else alias-not-reserved;
//   * a 16-byte round trip through stack variables of that thread (host to
//     device and back) is exact: else stack-round-trip-wrong (seed 001's
//     fault: with the alias over the stack, the copies read and write the
//     arena instead);
//   * a 16-byte round trip through every pinned slice's device pointer is
//     exact: else slice-round-trip-wrong.
// Then it prints "race-lab: pinned: ..." lines (what the arena did) and
// "overlay-suite: done" when nothing was reported.

#include "race_driver.h"
#include "racelab.h"
#include "win/windows.h"

#include "mlx/backend/rocm/pinned.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

namespace pinned = mlx::core::rocm::pinned;

namespace {

void check_arena() {
  pinned::PinnedArena arena(6u << 20, 1u << 20);
  size_t aliased = 0;
  for (size_t i = 0; i < arena.pinned_prefix(); ++i) {
    const pinned::Slice& s = arena.slice(i);
    if (s.device == s.host) {
      continue;
    }
    ++aliased;
    MEMORY_BASIC_INFORMATION mbi;
    if (VirtualQuery(s.device, &mbi, sizeof(mbi)) != 0 && mbi.State == MEM_FREE) {
      racelab::report("alias-not-reserved",
                      "slice " + std::to_string(i) + ": its device alias is free address space "
                      "while the arena lives (a stack or heap block may be placed there)");
    }
  }
  // Seed 001's check: a round trip through this thread's stack.
  void* dev = nullptr;
  if (hipMalloc(&dev, 16) != hipSuccess) {
    racelab::report("pinned-exception", "hipMalloc(16) failed");
    return;
  }
  unsigned char src[16], back[16];
  for (int i = 0; i < 16; ++i) {
    src[i] = static_cast<unsigned char>(0xa0 + i);
    back[i] = 0;
  }
  (void)hipMemcpy(dev, src, 16, hipMemcpyHostToDevice);
  (void)hipMemcpy(back, dev, 16, hipMemcpyDeviceToHost);
  if (std::memcmp(src, back, 16) != 0) {
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  "16 bytes from a stack variable came back as %02x %02x %02x .. (want a0 a1 a2 ..)",
                  back[0], back[1], back[2]);
    racelab::report("stack-round-trip-wrong", buf);
  }
  // Each pinned slice through its device pointer.
  size_t exact = 0;
  for (size_t i = 0; i < arena.pinned_prefix(); ++i) {
    const pinned::Slice& s = arena.slice(i);
    std::memset(s.host, static_cast<int>(0x11 * (i + 1)), 16);
    unsigned char got[16] = {};
    (void)hipMemcpy(dev, s.device, 16, hipMemcpyDeviceToDevice);
    (void)hipMemcpy(got, dev, 16, hipMemcpyDeviceToHost);
    if (got[0] == static_cast<unsigned char>(0x11 * (i + 1)) && got[15] == got[0]) {
      ++exact;
    } else {
      racelab::report("slice-round-trip-wrong", "slice " + std::to_string(i));
    }
  }
  (void)hipFree(dev);
  pinned::Counters c = pinned::counters();
  std::fprintf(stderr,
               "race-lab: pinned: alias guard %s; %zu of %zu slices pinned (%zu with a separate "
               "alias, %zu exact round trips); %llu refused, %zu alias(es) reserved\n",
               pinned::alias_guard_compiled() ? "compiled" : "not compiled",
               arena.pinned_prefix(), arena.slice_count(), aliased, exact,
               static_cast<unsigned long long>(c.refusals), arena.alias_reservations());
}

} // namespace

int main() {
  std::printf(
      "race-lab: pinned_race on the host model of HIP (not a GPU run): alias mode %s\n",
      std::getenv("OVERLAY_STUB_ALIAS") ? std::getenv("OVERLAY_STUB_ALIAS") : "identity");
  std::fflush(stdout);
  // The pinning thread: its stack is what an alias may cover.
  std::thread t([] {
    try {
      check_arena();
    } catch (const std::exception& e) {
      racelab::report("pinned-exception", e.what());
    }
  });
  t.join();
  if (racelab::report_count() != 0) {
    return 1;
  }
  std::printf("overlay-suite: done\n");
  std::fflush(stdout);
  return 0;
}
