// win_stub.cpp: the race lab's model of the Win32 memory calls pinned.cu's
// alias guard makes (win/windows.h; docs/race-lab.md, "Fix 3"), on Linux:
// reservations are PROT_NONE mappings placed with MAP_FIXED_NOREPLACE,
// queries read /proc/self/maps. Ours.

#include "win/windows.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

namespace {

std::mutex g_m;
std::map<uintptr_t, size_t> g_maps;     // our mappings: base -> bytes
std::map<uintptr_t, bool> g_reserved;   // base -> a MEM_RESERVE (PROT_NONE)
thread_local DWORD t_error = 0;

} // namespace

void GetSystemInfo(SYSTEM_INFO* info) {
  info->dwPageSize = static_cast<DWORD>(sysconf(_SC_PAGESIZE));
  info->dwAllocationGranularity = 65536; // as on Windows
}

void* VirtualAlloc(void* addr, SIZE_T bytes, DWORD type, DWORD protect) {
  int prot = protect == PAGE_NOACCESS ? PROT_NONE : PROT_READ | PROT_WRITE;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | (addr ? MAP_FIXED_NOREPLACE : 0);
  if (type == MEM_RESERVE) {
    flags |= MAP_NORESERVE;
  }
  void* p = mmap(addr, bytes, prot, flags, -1, 0);
  if (p == MAP_FAILED || (addr && p != addr)) {
    if (p != MAP_FAILED) {
      munmap(p, bytes);
    }
    t_error = 487; // ERROR_INVALID_ADDRESS
    return nullptr;
  }
  std::lock_guard<std::mutex> lk(g_m);
  g_maps[reinterpret_cast<uintptr_t>(p)] = bytes;
  g_reserved[reinterpret_cast<uintptr_t>(p)] = type == MEM_RESERVE;
  return p;
}

BOOL VirtualFree(void* addr, SIZE_T, DWORD) {
  std::lock_guard<std::mutex> lk(g_m);
  auto it = g_maps.find(reinterpret_cast<uintptr_t>(addr));
  if (it == g_maps.end()) {
    t_error = 487;
    return 0;
  }
  munmap(addr, it->second);
  g_reserved.erase(it->first);
  g_maps.erase(it);
  return 1;
}

SIZE_T VirtualQuery(const void* addr, MEMORY_BASIC_INFORMATION* info, SIZE_T size) {
  if (size < sizeof(*info)) {
    return 0;
  }
  auto a = reinterpret_cast<uintptr_t>(addr);
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) {
    return 0;
  }
  uintptr_t prev_end = 0, lo = 0, hi = 0;
  bool found = false;
  char line[512];
  while (std::fgets(line, sizeof(line), f)) {
    unsigned long long l = 0, h = 0;
    if (std::sscanf(line, "%llx-%llx", &l, &h) != 2) {
      continue;
    }
    lo = l;
    hi = h;
    if (a < lo) {
      // A hole [prev_end, lo).
      info->BaseAddress = reinterpret_cast<void*>(prev_end);
      info->AllocationBase = nullptr;
      info->RegionSize = lo - prev_end;
      info->State = MEM_FREE;
      found = true;
      break;
    }
    if (a < hi) {
      std::lock_guard<std::mutex> lk(g_m);
      auto it = g_reserved.upper_bound(a);
      bool reserved = false;
      if (it != g_reserved.begin()) {
        --it;
        reserved = it->second && a < it->first + g_maps[it->first];
      }
      info->BaseAddress = reinterpret_cast<void*>(lo);
      info->AllocationBase = reinterpret_cast<void*>(lo);
      info->RegionSize = hi - lo;
      info->State = reserved ? MEM_RESERVE : MEM_COMMIT;
      found = true;
      break;
    }
    prev_end = hi;
  }
  std::fclose(f);
  if (!found) {
    info->BaseAddress = reinterpret_cast<void*>(prev_end);
    info->AllocationBase = nullptr;
    info->RegionSize = ~uintptr_t(0) - prev_end;
    info->State = MEM_FREE;
  }
  return sizeof(*info);
}

DWORD GetLastError() {
  return t_error;
}

void GetCurrentThreadStackLimits(ULONG_PTR* low, ULONG_PTR* high) {
  pthread_attr_t attr;
  void* base = nullptr;
  size_t bytes = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &base, &bytes);
    pthread_attr_destroy(&attr);
  }
  *low = reinterpret_cast<ULONG_PTR>(base);
  *high = reinterpret_cast<ULONG_PTR>(base) + bytes;
}
